"""compare_experiments: runs side by side (or one run on its own: its statistics per metric). Read-only.

Per run: state, steps per hour, and for each chosen metric its final value, best value (and step) and
the mean of its last k values, from the metric history (step lines merged by step, newest wins). The
leader is the run with the best last-k mean of the primary metric; higher is better unless the metric
is loss-like (``summaries.lower_is_better``) or the caller says otherwise, and the answer says which
was assumed. The configuration difference compares the runs' YAMLs (``runconfig``: the blueprint's or
a ``--conf`` file, one round trip per host) key by key and lists only keys whose values differ. An
optional plot overlays the runs (returned as an image; no file of the runs is written, only the copy kept in
the server's state for clients that show no image blocks, ``plots.keep``).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from skill_server.core.errors import ToolInputError
from skill_server.core.models import ImageAttachment
from skill_server.experiments import history, plots, runconfig, sentences
from skill_server.experiments.checks import host_path
from skill_server.experiments.models import ExperimentStatus, MetricsHistory
from skill_server.experiments.queries import find, observe_with_lines
from skill_server.experiments.store import Registry, Row, open_registry
from skill_server.experiments.summaries import lower_is_better
from skill_server.hosts import call_hosts, client, result_of
from skill_server.tools.compare_experiments.models import (
    MAX_METRICS,
    CompareInput,
    CompareOutput,
    ConfigDifference,
    Leader,
    MetricStats,
    RunSummary,
)

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import ReadReply

DEFAULT_LAST_K = 10
DEFAULT_CONFIG_KEYS = 40
ABSENT = "(absent)"


# --------------------------------------------------------------------------------------------------
# metrics


def stats(series: history.Series, last_k: int, lower: bool) -> MetricStats:
    pairs = [(s, v) for s, v in zip(series.steps, series.values) if v is not None and math.isfinite(v)]
    if not pairs:
        return MetricStats(metric=series.name, n=0, final=None, final_step=None, best=None, best_step=None,
                           last_k_mean=None)
    best_step, best = (min if lower else max)(pairs, key=lambda p: p[1])
    tail = [v for _, v in pairs[-last_k:]]
    return MetricStats(metric=series.name, n=len(pairs), final=pairs[-1][1], final_step=pairs[-1][0], best=best,
                       best_step=best_step, last_k_mean=sum(tail) / len(tail))


def _choose_metrics(per_run: list[list[str]], patterns: list[str] | None, notes: list[str]) -> list[str]:
    """Names to compare: matches of the patterns in any run, or the defaults every run has."""
    union = sorted({n for names in per_run for n in names})
    if patterns:
        chosen, unmatched = history.match_names(union, patterns)
        if unmatched:
            notes.append(f"no run has a metric matching: {', '.join(unmatched)}")
        return chosen[:MAX_METRICS * 3]
    common = [n for n in union if all(n in names for names in per_run)]
    chosen = plots.default_metrics(common, limit=MAX_METRICS)
    if not chosen:
        notes.append("the runs share no metric yet; name metrics to compare")
    return chosen


def _leader(rows: list[Row], metric: str, table: dict[str, MetricStats], higher: bool | None,
            last_k: int) -> Leader | None:
    lower = lower_is_better(metric) if higher is None else not higher
    source = "given (higher_is_better)" if higher is not None else (
        "assumed from the name: lower is better for loss-, error- and time-like metrics" if lower
        else "assumed from the name: higher is better (not a loss-, error- or time-like metric)")
    scored = [(r.id, mean) for r in rows if (mean := table[r.id].last_k_mean) is not None]
    if not scored:
        return None
    scored.sort(key=lambda item: item[1], reverse=not lower)
    (lead, value), rest = scored[0], scored[1:]
    runner = rest[0][0] if rest else None
    runner_value = rest[0][1] if rest else None
    margin = abs(value - runner_value) if runner_value is not None else None
    relative = margin / abs(runner_value) if margin is not None and runner_value else None
    return Leader(metric=metric, statistic=f"mean of the last {last_k} values",
                  direction="lower" if lower else "higher",
                  direction_source=source, leader=lead, value=value, runner_up=runner,
                  runner_up_value=runner_value, margin=margin, relative_margin=relative,
                  ranking=[r for r, _ in scored])


# --------------------------------------------------------------------------------------------------
# configuration


def _config_files(rows: list[Row], given: list[str | None], notes: list[str]
                  ) -> list[tuple[str | None, dict[str, Any] | None]]:
    """Per run: ('host:path' or path, flattened YAML) of its first readable YAML candidate (the given path, else
    its own candidates); one call per host."""
    cands = {r.id: ([runconfig.Candidate(r.host, path, path.rsplit("/", 1)[0] or "/")] if path is not None
                    else runconfig.candidates(r)) for r, path in zip(rows, given)}
    requests: dict[str, list[client.Op[ReadReply]]] = {}
    where: dict[tuple[str, int], tuple[str, int]] = {}
    for r in rows:
        for i, c in enumerate(cands[r.id]):
            ops = requests.setdefault(c.host, [])
            where[(r.id, i)] = (c.host, len(ops))
            ops.append(runconfig.read_op(c.path))
    replies = call_hosts(requests, timeout_s=30.0) if requests else {}
    out: list[tuple[str | None, dict[str, Any] | None]] = []
    for r in rows:
        found: tuple[str | None, dict[str, Any] | None] = (None, None)
        problems = []
        for i, c in enumerate(cands[r.id]):
            host, index = where[(r.id, i)]
            data, problem = runconfig.parse_answer(c, result_of(replies.get(host), index))
            if problem:
                problems.append(problem)
                continue
            label = c.path if c.host == "local" else f"{c.host}:{c.path}"
            found = (label, runconfig.flatten(data))
            break
        if found[1] is None:
            why = "; ".join(problems) if problems else "no YAML known (blueprint exp_yaml_path or a --conf argument)"
            notes.append(f"{r.id}: config not compared ({why})")
        out.append(found)
    return out


def config_differences(flats: list[dict[str, Any] | None], limit: int) -> tuple[list[ConfigDifference], int]:
    """Keys whose values differ between the runs that have a config (a key one YAML lacks differs); a run
    without a config shows null."""
    present = [f for f in flats if f is not None]
    if len(present) < 2:
        return [], 0
    differing = []
    for key in sorted({k for f in present for k in f}):
        known = [f.get(key, ABSENT) for f in present]
        if any(v != known[0] for v in known[1:]):
            values = [None if f is None else runconfig.shown(f.get(key, ABSENT)) for f in flats]
            differing.append(ConfigDifference(key=key, values=values))
    return differing[:limit], len(differing)


# --------------------------------------------------------------------------------------------------
# the tool


def _find_all(reg: Registry, keys: list[str]) -> list[Row]:
    rows: list[Row] = []
    for i, key in enumerate(keys):
        row = find(reg, key, f"ids.{i}")
        if any(r.id == row.id for r in rows):
            raise ToolInputError(f"names experiment {row.id} twice", field=f"ids.{i}")
        rows.append(row)
    return rows


def _given_yaml_paths(inp: CompareInput) -> list[str | None]:
    if inp.yaml_paths is None:
        return [None] * len(inp.ids)
    if len(inp.yaml_paths) != len(inp.ids):
        raise ToolInputError(f"needs one entry per id ({len(inp.ids)}; null for a run's own YAML)", field="yaml_paths")
    return [None if p is None else host_path(p, f"yaml_paths.{i}") for i, p in enumerate(inp.yaml_paths)]


def _with_primary(names: list[list[str]], metrics: list[str], given: str | None) -> tuple[list[str], str | None]:
    """(metrics, the deciding one): the given primary's first match, moved to the front, else the first metric."""
    if given is None:
        return metrics, metrics[0] if metrics else None
    matched, _ = history.match_names(sorted({n for ns in names for n in ns}), [given])
    if not matched:
        raise ToolInputError("no run has a metric matching it", field="primary")
    primary = matched[0]
    return [primary] + [m for m in metrics if m != primary], primary  # the deciding metric comes first


def _stats_table(reg: Registry, rows: list[Row], metrics: list[str], primary: str | None, higher: bool | None,
                 last_k: int) -> dict[str, dict[str, MetricStats]]:
    """Per run id and metric: its statistics (the caller's direction applies to the primary metric only)."""
    table: dict[str, dict[str, MetricStats]] = {}
    for r in rows:
        table[r.id] = {}
        for m in metrics:
            lower = lower_is_better(m) if (m != primary or higher is None) else not higher
            table[r.id][m] = stats(history.read_series(reg, r.id, m), last_k, lower)
    return table


def _unlike_runs(rows: list[Row], table: dict[str, dict[str, MetricStats]], primary: str | None) -> list[str]:
    """What makes the runs' numbers unlike each other beyond their configs: runs that reached very different
    steps (their last-k means describe different stages of training), and commands that differ."""
    notes = []
    reached = {r.id: table[r.id][primary].final_step for r in rows} if primary is not None else {}
    known = {k: v for k, v in reached.items() if v is not None}
    if len(known) > 1 and min(known.values()) < 0.5 * max(known.values()):
        steps = ", ".join(f"{k} step {v}" for k, v in known.items())
        notes.append(f"the runs reached different steps ({steps}): compare values at the same step "
                     "(metrics_history) rather than their finals or last-k means")
    commands = {r.id: [p.command for p in r.spec.processes] for r in rows}
    if len({json.dumps(c) for c in commands.values()}) > 1:
        notes.append("the runs' commands differ (config_differences compares their YAML only): "
                     + "; ".join(f"{k}: {' | '.join(c)[:200]}" for k, c in commands.items()))
    return notes


def _run_summary(row: Row, status: ExperimentStatus, config_file: str | None, metrics: list[MetricStats]
                 ) -> RunSummary:
    progress = status.progress
    assert progress is not None  # every observation's status has it
    return RunSummary(id=row.id, session=row.session, host=row.host, state=status.state,
                      global_step=status.global_step, total_steps=progress.total_steps,
                      steps_per_hour=progress.steps_per_hour, steps_per_hour_source=progress.seconds_per_step_source,
                      elapsed_s=status.elapsed_s, config_file=config_file, metrics=metrics)


def _image(rows: list[Row], curves: list[plots.Curve], with_data: bool, notes: list[str]) -> ImageAttachment | None:
    """The overlay plot, returned (and kept in the server's own state for clients that drop image blocks; no
    file of the runs is written); a note when there is none."""
    if not curves:
        notes.append("no plot: none of the compared metrics has a scanned step line yet")
        return None
    title = ("compare: " + ", ".join(plots.run_labels(rows)))[:120]
    picture = plots.draw(curves, title, notes)
    if picture is None:
        return None
    return picture.attachment(title, with_data, keep_as=plots.kept_name("compare", [r.id for r in rows]), notes=notes)


def compare_experiments(inp: CompareInput) -> CompareOutput:
    notes: list[str] = []
    last_k = inp.last_k or DEFAULT_LAST_K
    given = _given_yaml_paths(inp)
    plot_data: dict[str, MetricsHistory] | None = None
    with open_registry(create=False) as reg:
        rows = _find_all(reg, list(inp.ids))
        fields = observe_with_lines(reg, rows, None, 0)
        rows = [reg.get(r.id) or r for r in rows]
        names = [history.metric_names(reg, r.id) for r in rows]
        metrics = _choose_metrics(names, list(inp.metrics) if inp.metrics else None, notes)
        metrics, primary = _with_primary(names, metrics, inp.primary)
        table = _stats_table(reg, rows, metrics, primary, inp.higher_is_better, last_k)
        curves = []
        if inp.plot:
            shown = metrics[:plots.MAX_PANELS]
            curves = plots.curves_from_history(reg, rows, shown)
            if curves and not plots.available():
                plot_data = {r.id: plots.plot_data(reg, [r.id], shown) for r in rows}
    leader = None
    if primary is not None:
        leader = _leader(rows, primary, {r.id: table[r.id][primary] for r in rows}, inp.higher_is_better, last_k)
        if leader is None:
            notes.append(f"no run has a finite value of {primary} yet: no leader")
        notes += _unlike_runs(rows, table, primary)
    configs = _config_files(rows, given, notes)
    differences, differing = config_differences([flat for _, flat in configs],
                                                inp.max_config_keys or DEFAULT_CONFIG_KEYS)
    runs = [_run_summary(r, f, config_file, [table[r.id][m] for m in metrics])
            for r, f, (config_file, _) in zip(rows, fields, configs)]
    image = _image(rows, curves, bool(inp.image_data), notes) if inp.plot else None
    summary = sentences.compared(leader.leader if leader else None, leader.metric if leader else None,
                                 leader.value if leader else None, leader.runner_up if leader else None,
                                 len(runs), differing)
    return CompareOutput(summary=summary, runs=runs, metrics=metrics, leader=leader, config_differences=differences,
                         config_keys_differing=differing, plot=image, plot_data=plot_data, notes=notes)
