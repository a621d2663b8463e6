"""Metric history: every step line's metrics, kept per run in the registry as the log is scanned.

Two tables (created with the registry, ``store._SCHEMA``): ``metric_series`` (one id per run and metric
name) and ``metric_points`` (series, seq, step, value). ``seq`` numbers step lines in the order they were
scanned (or copied from the run monitor's points, ``experiments.observe``), so a step counter that
restarts (a resumed or relaunched trainer) never overwrites anything; reading merges by step, newest line
wins. Points are written in the same transaction as the scan state that produced them (compare-and-set
on ``scan_version``): two status calls racing over the same bytes store them once. Writing costs what the
new step lines cost, never the size of the log.

Retention: a metric keeps every point up to ``MAX_POINTS_PER_SERIES``; beyond it, its older points (all
but the first and the newest ``KEEP_RECENT_POINTS``) are thinned by the rule the run monitor applies on
the host (``hosts.agent.points.keep``: per bucket of 16 consecutive points the first, last, smallest,
largest and first null value), so the registry stays bounded and plots, first/last values, spikes and
the best value with its step survive. It is applied after every ``RETAIN_EVERY`` step lines of a run.

An experiment a resume policy relaunched is several runs (its attempts, ``experiments.lineage``): read over its
attempts (``read_lineage``, ``history_view`` with every attempt's id), a metric is merged by step as the host's
rule says (``points.merge_attempts``): a later attempt's points replace the earlier ones' from its first step on.

Reading returns chosen metrics (``fnmatch`` globs such as ``critic/score/*``) in a step range,
downsampled to a caller's bound by buckets: consecutive points split into at most ``max_points``
groups of equal size; each group gives its last step and value plus its minimum and maximum, so a
spike survives downsampling. NaN and inf are stored as NULL and returned as null.
"""

from __future__ import annotations

import fnmatch
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from skill_server.core.errors import ToolFailure
from skill_server.core.jsonsafe import json_number
from skill_server.experiments.models import MetricSeries, MetricsHistory
from skill_server.experiments.progress import StepLine
from skill_server.experiments.store import Registry
from skill_server.hosts.agent import points as host_points

#: Longest metric name kept (verl's are under 60 characters).
MAX_NAME = 200
#: Most distinct metric names one run may have (a hostile log cannot grow the table without bound).
MAX_SERIES_PER_RUN = 2000
#: Most series one read returns.
MAX_SERIES_PER_READ = 50
#: A metric keeps every point up to this many; beyond it the retention rule thins its older points ...
MAX_POINTS_PER_SERIES = 20_000
#: ... but never its newest this many.
KEEP_RECENT_POINTS = 5_000
#: The retention rule runs after every this many step lines of a run.
RETAIN_EVERY = 2_000
DOWNSAMPLE_METHOD = ("buckets: consecutive points split into at most max_points groups of equal size; each "
                     "point is a group's last step and last value, with the group's min and max")


@dataclass
class Series:
    """One metric of one run, merged by step (newest line wins), oldest step first."""

    name: str
    steps: list[int]
    values: list[float | None]


@dataclass
class Downsampled:
    name: str
    points: int  # points in range before downsampling
    steps: list[int] = field(default_factory=list)
    last: list[float | None] = field(default_factory=list)
    min: list[float | None] = field(default_factory=list)
    max: list[float | None] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# writing


def save_scan_and_points(reg: Registry, exp_id: str, scan: dict[str, Any], expected_version: int,
                         lines: list[StepLine], first_seq: int) -> bool:
    """Store the scan state and its step lines' metrics at once; False (nothing stored) when another caller
    scanned these bytes first."""
    conn = reg.conn
    try:
        conn.execute("BEGIN IMMEDIATE")
        cur = conn.execute("UPDATE experiments SET scan = ?, scan_version = scan_version + 1 "
                           "WHERE id = ? AND scan_version = ?", (json.dumps(scan), exp_id, expected_version))
        if cur.rowcount != 1:
            conn.execute("ROLLBACK")
            return False
        if lines:
            _insert_points(conn, exp_id, lines, first_seq)
            if first_seq // RETAIN_EVERY != (first_seq + len(lines)) // RETAIN_EVERY:
                retain(conn, exp_id)
        conn.execute("COMMIT")
        return True
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _insert_points(conn: sqlite3.Connection, exp_id: str, lines: list[StepLine], first_seq: int) -> None:
    ids = dict(conn.execute("SELECT name, id FROM metric_series WHERE exp_id = ?", (exp_id,)).fetchall())
    wanted = {name for line in lines for name in line.metrics if len(name) <= MAX_NAME and name not in ids}
    room = MAX_SERIES_PER_RUN - len(ids)
    if wanted and room > 0:
        conn.executemany("INSERT OR IGNORE INTO metric_series (exp_id, name) VALUES (?, ?)",
                         [(exp_id, name) for name in sorted(wanted)[:room]])
        ids = dict(conn.execute("SELECT name, id FROM metric_series WHERE exp_id = ?", (exp_id,)).fetchall())
    rows = []
    for offset, line in enumerate(lines):
        seq = first_seq + offset
        for name, value in line.metrics.items():
            series = ids.get(name)
            if series is not None:
                rows.append((series, seq, line.step, json_number(float(value))))
    conn.executemany("INSERT OR REPLACE INTO metric_points (series, seq, step, value) VALUES (?, ?, ?, ?)", rows)


def retain(conn: sqlite3.Connection, exp_id: str) -> int:
    """Apply the retention rule to every metric of the run above ``MAX_POINTS_PER_SERIES``; how many points went."""
    removed = 0
    over = conn.execute("SELECT p.series, COUNT(*) FROM metric_points p JOIN metric_series s ON s.id = p.series "
                        "WHERE s.exp_id = ? GROUP BY p.series HAVING COUNT(*) > ?",
                        (exp_id, MAX_POINTS_PER_SERIES)).fetchall()
    for series, count in over:
        rows = conn.execute("SELECT seq, value FROM metric_points WHERE series = ? ORDER BY seq", (series,)).fetchall()
        middle = rows[1: count - KEEP_RECENT_POINTS]
        kept = host_points.keep([value for _, value in middle])
        gone = [(series, seq) for i, (seq, _) in enumerate(middle) if i not in kept]
        conn.executemany("DELETE FROM metric_points WHERE series = ? AND seq = ?", gone)
        removed += len(gone)
    return removed


# --------------------------------------------------------------------------------------------------
# reading


def metric_names(reg: Registry, exp_id: str) -> list[str]:
    """Every metric name the run's step lines have carried, sorted."""
    return [r[0] for r in reg.conn.execute("SELECT name FROM metric_series WHERE exp_id = ? ORDER BY name",
                                           (exp_id,))]


def names_of(reg: Registry, ids: Sequence[str]) -> list[str]:
    """Every metric name any of these runs' step lines carried, sorted."""
    found: set[str] = set()
    for exp_id in ids:
        found.update(metric_names(reg, exp_id))
    return sorted(found)


def first_steps(reg: Registry, ids: Sequence[str]) -> dict[str, int | None]:
    """Each run's first step in its history (None: it has no point)."""
    out: dict[str, int | None] = {}
    for exp_id in ids:
        row = reg.conn.execute("SELECT MIN(p.step) FROM metric_points p JOIN metric_series s ON s.id = p.series "
                               "WHERE s.exp_id = ?", (exp_id,)).fetchone()
        out[exp_id] = row[0] if row else None
    return out


def read_lineage(reg: Registry, ids: Sequence[str], name: str, from_step: int | None = None,
                 to_step: int | None = None, starts: dict[str, int | None] | None = None) -> Series:
    """One metric over an experiment's attempts (``ids``, first first), merged by step; ``starts``: each attempt's
    first step when known (``first_steps``)."""
    if len(ids) == 1:
        return read_series(reg, ids[0], name, from_step, to_step)
    firsts = starts if starts is not None else first_steps(reg, ids)
    parts = []
    for exp_id in ids:
        series = read_series(reg, exp_id, name)
        parts.append((firsts.get(exp_id), {name: dict(zip(series.steps, series.values))}))
    merged = host_points.merge_attempts(parts).get(name, {})
    steps = [s for s in merged if (from_step is None or s >= from_step) and (to_step is None or s <= to_step)]
    return Series(name, steps, [merged[s] for s in steps])


def match_names(names: list[str], patterns: list[str]) -> tuple[list[str], list[str]]:
    """(names matching any pattern, in pattern order then name order; patterns that matched nothing)."""
    chosen: list[str] = []
    unmatched: list[str] = []
    for pattern in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            unmatched.append(pattern)
        chosen.extend(n for n in hits if n not in chosen)
    return chosen, unmatched


def read_series(reg: Registry, exp_id: str, name: str, from_step: int | None = None,
                to_step: int | None = None) -> Series:
    """One metric merged by step (newest line wins) within the step range, oldest step first."""
    sql = ("SELECT p.step, p.value FROM metric_points p JOIN metric_series s ON s.id = p.series "
           "WHERE s.exp_id = ? AND s.name = ?")
    args: list[Any] = [exp_id, name]
    if from_step is not None:
        sql += " AND p.step >= ?"
        args.append(from_step)
    if to_step is not None:
        sql += " AND p.step <= ?"
        args.append(to_step)
    try:
        by_step = dict(reg.conn.execute(sql + " ORDER BY p.seq", args).fetchall())
    except sqlite3.Error as exc:
        raise ToolFailure(f"cannot read the metric history of {exp_id}: {exc}") from None
    steps = sorted(by_step)
    return Series(name, steps, [by_step[s] for s in steps])


def downsample(series: Series, max_points: int) -> Downsampled:
    """At most ``max_points`` buckets of consecutive points: last step, last value, min and max of each."""
    n = len(series.steps)
    out = Downsampled(series.name, n)
    if n == 0:
        return out
    buckets = min(max(1, max_points), n)
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        values = [v for v in series.values[lo:hi] if v is not None]
        out.steps.append(series.steps[hi - 1])
        out.last.append(series.values[hi - 1])
        out.min.append(min(values) if values else None)
        out.max.append(max(values) if values else None)
    return out


def history_view(reg: Registry, ids: Sequence[str], patterns: list[str], from_step: int | None,
                 to_step: int | None, max_points: int, restarts: int = 0) -> MetricsHistory:
    """The ``metrics_history`` answer of ``experiment_status``: matched series of a run (or of an experiment's
    attempts, merged by step: ``read_lineage``), downsampled."""
    names = names_of(reg, ids)
    starts = first_steps(reg, ids) if len(ids) > 1 else None
    chosen, unmatched = match_names(names, patterns)
    notes = []
    if len(chosen) > MAX_SERIES_PER_READ:
        notes.append(f"{len(chosen)} metrics matched; the first {MAX_SERIES_PER_READ} are returned")
        chosen = chosen[:MAX_SERIES_PER_READ]
    if len(ids) > 1:
        notes.append(f"over the {len(ids)} attempts of {ids[0]}: a later attempt's points replace the earlier's "
                     "from its first step on")
    if restarts:
        notes.append(f"the step counter went back {restarts} time(s) (resume or relaunch): for a step seen more "
                     "than once the newest line's value is kept")
    series = []
    for name in chosen:
        d = downsample(read_lineage(reg, ids, name, from_step, to_step, starts), max_points)
        series.append(MetricSeries(name=d.name, points=d.points, steps=d.steps, last=d.last, min=d.min, max=d.max))
    if not names:
        notes.append("no step line has been scanned for this run yet")
    return MetricsHistory(series=series, method=DOWNSAMPLE_METHOD, max_points=max_points, from_step=from_step,
                          to_step=to_step, unmatched=unmatched, available=names[:300] if unmatched else [],
                          note="; ".join(notes) or None)
