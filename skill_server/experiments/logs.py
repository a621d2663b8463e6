"""Reading experiment logs incrementally: only appended bytes, bounded output, metric-line parsing; the scan state.

Two independent positions are kept per log file:

* the *cursor* of ``experiment_status`` (which lines the caller has already seen), and
* the *scan offset* (how far error signatures, step lines, progress and the first step were scanned).

Both only move forward over appended bytes, so the cost of a status call depends on how much was
written since the previous call, never on the size of the log.

Who scans: the run monitor on the run's host reads every byte of every log as it is written
(``hosts.agent.monitor``), and the scan state here is a *mirror* of its findings (``mirror``: its
per-process findings kept as they came, the run's fields derived from them). Only runs launched before
monitors existed are scanned here, by the same rules (``scan_text``); there, when a backlog exceeds the
budget, the most recent bytes win and the skipped byte count is reported.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from skill_server.core.text import shorten
from skill_server.experiments.progress import ProgressState, StepLine
from skill_server.experiments.signatures import monitor_rows
from skill_server.hosts import localfiles as host_files
from skill_server.hosts.agent import findings, scanner
from skill_server.hosts.agent.findings import (
    MAX_EXACT_INT,
    MAX_METRICS_PER_LINE,
    parse_metric_pairs,
    parse_number,
    step_lines,
)
from skill_server.hosts.agent.scanner import ANSI_RE, strip_ansi

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import MonitorReport, RoleFindings, RunReport

__all__ = ["ANSI_RE", "MAX_EXACT_INT", "MAX_METRICS_PER_LINE", "Chunk", "ScanState",
           "count_matching_lines", "parse_metric_line", "parse_metric_pairs", "parse_number", "read_appended",
           "scan_text", "signature_table", "split_lines", "step_lines", "strip_ansi"]

MAX_LINES = 200
MAX_BYTES = 16 * 1024
MAX_LINE_CHARS = 2000
#: Most bytes one status call scans per log file (newest bytes win when more were appended).
SCAN_BUDGET = 1024 * 1024
#: Longest kept error line.
MAX_ERROR_LINE = scanner.MAX_LINE
#: What runs launched before "steps are steps" stored as their first-step pattern (a printed kl_loss value);
#: such a stored pattern is not an override: those runs use the step-line rule too.
LEGACY_FIRST_STEP_PATTERN = r"\bkl_loss:\s*[-+]?(?:\d|\.\d|nan|inf)"


@functools.cache
def signature_table() -> scanner.Table:
    """The signature table compiled for scanning (``signatures.SIGNATURES``, built once per process)."""
    return scanner.Table(monitor_rows())


# --------------------------------------------------------------------------------------------------
# Byte-range reading (the reading itself happens on the log's host: ``hosts.agent.files.read_appended``)


@dataclass
class Chunk:
    """Appended bytes of one log, decoded; ``end`` is where the next read starts."""

    text: str
    end: int
    skipped: int
    reset: bool = False  # the file shrank (rotated or truncated): reading restarted at 0


def read_appended(path: str, offset: int, budget: int, *, final: bool) -> Chunk:
    """Bytes appended after ``offset`` to a log on this machine, at most ``budget`` of the newest ones, cut
    at a line end; ``final`` (the process has exited) also hands out an unterminated last line."""
    raw = host_files.read_appended(path, offset, budget, final)
    return Chunk(strip_ansi(raw["text"]), raw["end"], raw["skipped"], raw["reset"])


def split_lines(text: str) -> list[str]:
    return [shorten(line, MAX_LINE_CHARS) for line in text.splitlines()]


# --------------------------------------------------------------------------------------------------
# Incremental scanning


@dataclass
class ScanState:
    """What the scanner has learnt so far; stored as JSON in the registry."""

    offsets: list[int]
    unscanned_bytes: int = 0
    first_step_seen: bool = False
    first_step_at: float | None = None
    #: The step number of the first training step seen (None when a custom first-step pattern proved it).
    first_step: int | None = None
    #: The first step was printed after this time: the previous scan, which had not seen it yet.
    first_step_not_before: float | None = None
    #: When bytes of this run's logs were last scanned.
    scanned_at: float | None = None
    global_step: int | None = None
    metrics_step: int | None = None
    last_metrics: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Sequence number the next step line gets in the metric history (``experiments.history``).
    points_seq: int = 0
    progress: ProgressState = field(default_factory=ProgressState)
    #: Per role, what the run's monitor last reported (its times on the run clock); empty: no monitor.
    monitor: dict[str, RoleFindings] = field(default_factory=dict)
    #: Per role, the cursor in the monitor's metric points copied so far (``[seq, offset, generation]``).
    mirrored: dict[str, list[int]] = field(default_factory=dict)
    #: Per role, what its host's monitor said of the whole run there: its stall verdict, the policies' actions,
    #: the notify command's tally, a resume it waits for (``hosts.agent.policy``).
    watchdog: dict[str, RunReport] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "offsets": self.offsets,
            "unscanned_bytes": self.unscanned_bytes,
            "first_step_seen": self.first_step_seen,
            "first_step_at": self.first_step_at,
            "first_step": self.first_step,
            "first_step_not_before": self.first_step_not_before,
            "scanned_at": self.scanned_at,
            "global_step": self.global_step,
            "metrics_step": self.metrics_step,
            "last_metrics": self.last_metrics,
            "errors": self.errors,
            "points_seq": self.points_seq,
            "progress": self.progress.to_json(),
            "monitor": self.monitor,
            "mirrored": self.mirrored,
            "watchdog": self.watchdog,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], n_logs: int) -> ScanState:
        """The stored state; anything malformed in it is dropped (the scan then starts over), never raised."""
        try:
            offsets = [int(x) for x in data.get("offsets", []) if isinstance(x, int) and 0 <= x < 2**63]
            offsets = (offsets + [0] * n_logs)[:n_logs]
            state = cls(
                offsets=offsets,
                unscanned_bytes=int(data.get("unscanned_bytes", 0)),
                first_step_seen=bool(data.get("first_step_seen", False)),
                first_step_at=_finite_or_none(data.get("first_step_at")),
                first_step=_step_or_none(data.get("first_step")),
                first_step_not_before=_finite_or_none(data.get("first_step_not_before")),
                scanned_at=_finite_or_none(data.get("scanned_at")),
                global_step=_step_or_none(data.get("global_step")),
                metrics_step=_step_or_none(data.get("metrics_step")),
                last_metrics={str(k): v for k, v in dict(data.get("last_metrics", {})).items()
                              if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))},
                errors={str(k): dict(v) for k, v in dict(data.get("errors", {})).items() if isinstance(v, dict)},
                points_seq=_step_or_none(data.get("points_seq")) or 0,
                progress=ProgressState.from_json(data.get("progress")),
                monitor={str(k): cast("RoleFindings", dict(v)) for k, v in dict(data.get("monitor", {})).items()
                         if isinstance(v, dict)},
                mirrored={str(k): [int(x) for x in v][:3] for k, v in dict(data.get("mirrored", {})).items()
                          if isinstance(v, list) and all(isinstance(x, int) for x in v)},
                watchdog={str(k): cast("RunReport", dict(v)) for k, v in dict(data.get("watchdog", {})).items()
                          if isinstance(v, dict)},
            )
        except (TypeError, ValueError, AttributeError):
            return cls(offsets=[0] * n_logs)
        return state

    def error_counts(self) -> dict[str, int]:
        return {name: int(hit.get("count", 0)) for name, hit in self.errors.items()}


def _finite_or_none(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _step_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_EXACT_INT else None


def count_matching_lines(regex: re.Pattern[str], text: str) -> tuple[int, int | None]:
    """(lines with at least one match, position of the last match): a line matching twice counts once."""
    count, last, pos = 0, None, 0
    while pos <= len(text):
        match = regex.search(text, pos)
        if match is None:
            break
        count += 1
        last = match.start()
        line_end = text.find("\n", max(match.start(), match.end() - 1))
        if line_end < 0:
            break
        pos = line_end + 1
    return count, last


def parse_metric_line(line: str) -> tuple[int, dict[str, float | int]] | None:
    """One log line as ``step_lines`` reads it: ``(TaskRunner pid=1) step:3 - critic/real_reward:0.25 - ...``
    into (3, {...}); None when it is not a step line."""
    found = step_lines(strip_ansi(line).rstrip("\r\n"), "")
    return (found[0].step, found[0].metrics) if found else None


def scan_text(text: str, state: ScanState, first_step_re: re.Pattern[str] | None, *, role: str,
              now: float) -> list[StepLine]:
    """Fold one chunk of newly appended log text into ``state``; returns its step lines (for the history).

    The rules are the run monitor's (``hosts.agent.findings.fold``): the first training step is the first
    ``step:N`` line with N >= 1, whatever metrics it carries (a ``step:0`` line is validation before
    training); ``first_step_re`` (a run's ``first_step_pattern``) replaces that rule when given. Error
    signatures count lines, not matches.
    """
    return findings.fold(state, text, signature_table(), first_step_re, role=role, now=now)


# --------------------------------------------------------------------------------------------------
# The mirror of the run monitor's findings


#: What a monitor says of the whole run on its host that the registry keeps (``ScanState.watchdog``).
WATCHDOG_KEYS = ("stall", "actions", "notify", "pending_resume")


def mirror(state: ScanState, reports: dict[str, MonitorReport], roles: list[str], created: float) -> None:
    """Take up the monitor's latest findings per role (``reports``; a role whose host was not asked keeps what
    it had) and derive the run's fields from all roles. The monitor's times are on the run clock (seconds
    since the run started); they become this machine's clock as ``created`` plus those seconds."""
    for role, found in reports.items():
        state.monitor[role] = cast("RoleFindings", {k: v for k, v in found.items() if k != "run"})
        run = found.get("run")
        if isinstance(run, dict):
            state.watchdog[role] = cast("RunReport", {k: v for k, v in run.items() if k in WATCHDOG_KEYS})
    known = [(role, state.monitor[role]) for role in roles if role in state.monitor]
    for i, role in enumerate(roles):
        if role in state.monitor:
            state.offsets[i] = _int(state.monitor[role].get("offset"))
    state.unscanned_bytes = sum(_int(f.get("start_offset")) + _int(f.get("unscannable")) for _, f in known)
    state.errors = _merged_errors(known)
    _mirror_first_step(state, [f for _, f in known], created)
    stepping = _newest(known, "stepped_at")
    if stepping is not None:
        newest = stepping[1]
        state.global_step = _step_or_none(newest.get("global_step"))
        state.metrics_step = _step_or_none(newest.get("metrics_step"))
        state.last_metrics = dict(newest.get("last_metrics") or {})
    looked = [t for _, f in known if (t := _finite_or_none(f.get("looked_at"))) is not None]
    state.scanned_at = created + max(looked) if looked else state.scanned_at
    state.progress = _merged_progress(known, stepping, created)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _newest(known: Sequence[tuple[str, Mapping[str, Any]]], key: str) -> tuple[str, Mapping[str, Any]] | None:
    """The role whose ``key`` time is the latest (None when no role has one)."""
    timed = [(t, role, f) for role, f in known if (t := _finite_or_none(f.get(key))) is not None]
    if not timed:
        return None
    _, role, found = max(timed, key=lambda x: x[0])
    return role, found


def _merged_errors(known: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """One hit per signature over every role: the counts summed, the latest line and its role, the first line."""
    out: dict[str, dict[str, Any]] = {}
    for role, found in known:
        for name, hit in dict(found.get("errors") or {}).items():
            if not isinstance(hit, dict):
                continue
            last_at = _finite_or_none(hit.get("last_at")) or 0.0
            first_at = _finite_or_none(hit.get("first_at")) or 0.0
            have = out.get(name)
            if have is None:
                out[name] = {"count": _int(hit.get("count")), "line": str(hit.get("line", "")), "role": role,
                             "first_line": str(hit.get("first_line", "")), "first_at": first_at, "last_at": last_at}
                continue
            have["count"] += _int(hit.get("count"))
            if last_at >= have["last_at"]:
                have.update(line=str(hit.get("line", "")), role=role, last_at=last_at)
            if first_at < have["first_at"]:
                have.update(first_line=str(hit.get("first_line", "")), first_at=first_at)
    return out


def _mirror_first_step(state: ScanState, known: Sequence[Mapping[str, Any]], created: float) -> None:
    seen = [f for f in known if f.get("first_step_seen") and _finite_or_none(f.get("first_step_at")) is not None]
    if not seen:
        return
    first = min(seen, key=lambda f: float(f["first_step_at"]))
    state.first_step_seen = True
    state.first_step = _step_or_none(first.get("first_step"))
    state.first_step_at = created + float(first["first_step_at"])
    before = _finite_or_none(first.get("first_step_not_before"))
    state.first_step_not_before = created + before if before is not None else None


def _merged_progress(known: Sequence[tuple[str, Mapping[str, Any]]],
                     stepping: tuple[str, Mapping[str, Any]] | None, created: float) -> ProgressState:
    """Every role's step counter and restarts; the step times and observed batches of the role that steps;
    the newest tqdm bar."""
    parts = {role: dict(f.get("progress") or {}) for role, f in known}
    merged: dict[str, Any] = {"last_step_by_role": {}, "restarts": []}
    for part in parts.values():
        merged["last_step_by_role"].update(dict(part.get("last_step_by_role") or {}))
        merged["restarts"] += [dict(r, seen_at=created + float(r.get("seen_at", 0.0)))
                               for r in part.get("restarts") or [] if isinstance(r, dict)]
    merged["restarts"].sort(key=lambda r: r["seen_at"])
    if stepping is not None:
        part = parts[stepping[0]]
        merged["step_times"] = part.get("step_times") or []
        merged["batches"] = [[created + float(b[0]), b[1]] for b in part.get("batches") or []
                             if isinstance(b, list) and len(b) == 2 and _finite_or_none(b[0]) is not None]
    bar = _newest([(role, f) for role, f in known if parts[role].get("tqdm_total") is not None], "grew_at")
    if bar is not None:
        merged.update({k: parts[bar[0]].get(k) for k in ("tqdm_total", "tqdm_step", "tqdm_rate_s")})
    return ProgressState.from_json(merged)
