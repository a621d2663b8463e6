"""wait_experiment: block (bounded) until a run exits, shows its first step, prints a pattern or an error.

Read-only: it observes (one round trip per host every half second) and never acts on the run; the max
time is enforced by the watchdog on the run's host. ``next_wait_s`` follows the blueprint skills'
back-off (30 s, 1, 2, 4, 8, then 16 min), advancing with each wait that ends in ``timeout``.
"""

from __future__ import annotations

import re
import time

from skill_server.core.errors import ToolInputError
from skill_server.core.models import Progress
from skill_server.experiments import logs
from skill_server.experiments.checks import compile_pattern
from skill_server.experiments.models import TERMINAL, WAIT_DEFAULT_S, WAIT_MAX_S
from skill_server.experiments.observe import View, observe
from skill_server.experiments.queries import find, observe_with_lines, parse_cursor
from skill_server.experiments.signatures import SIGNATURES_BY_NAME
from skill_server.experiments.store import open_registry
from skill_server.tools.wait_experiment.models import WaitInput, WaitOutput

WAIT_SCHEDULE_S = (30, 60, 120, 240, 480, 960)
POLL_S = 0.5


def _error_counts(scan: logs.ScanState) -> dict[str, int]:
    return {name: count for name, count in scan.error_counts().items()
            if (sig := SIGNATURES_BY_NAME.get(name)) is not None and sig.severity == "error"}


def _match(view: View, offsets: list[int], pattern: re.Pattern[str]) -> tuple[str | None, list[int]]:
    """Search the pattern reads that came back with ``view``; the offsets move past what was searched."""
    new = list(offsets)
    for i, p in enumerate(view.procs):
        if not p.reads:
            continue
        chunk = p.reads[0]
        new[i] = chunk.end
        match = pattern.search(chunk.text)
        if match:
            start = chunk.text.rfind("\n", 0, match.start()) + 1
            end = chunk.text.find("\n", match.end())
            return chunk.text[start: end if end >= 0 else len(chunk.text)][:logs.MAX_LINE_CHARS], new
    return None, new


def wait_experiment(inp: WaitInput, progress: Progress | None = None) -> WaitOutput:
    timeout = WAIT_DEFAULT_S if inp.timeout_s is None else min(inp.timeout_s, WAIT_MAX_S)
    until = inp.until or "exit"
    pattern = None
    if until == "pattern":
        if not inp.pattern:
            raise ToolInputError("required when until='pattern'", field="pattern")
        pattern = compile_pattern(inp.pattern, "pattern")
    elif inp.pattern is not None:
        raise ToolInputError("only used with until='pattern'", field="pattern")
    if inp.since is not None and pattern is None:
        raise ToolInputError("only used with until='pattern'", field="since")
    started = time.monotonic()
    with open_registry(create=False) as reg:
        row = find(reg, inp.id)
        view = observe(reg, [row])[0]
        baseline = _error_counts(view.scan)
        offsets: list[int] = []
        if pattern is not None:
            if inp.since is not None:
                offsets = parse_cursor(inp.since, len(view.procs), "since")
            else:
                offsets = [p.size or 0 for p in view.procs]
        reason: str | None = None
        matched: str | None = None
        last_progress = -1.0
        while True:
            if pattern is not None and view.state != "unreachable":
                view = observe(reg, [view.row],
                               extra_reads=lambda r: [[(o, logs.SCAN_BUDGET)] for o in offsets])[0]
                matched, offsets = _match(view, offsets, pattern)
            if view.state in TERMINAL:
                reason = "exited"
            elif matched is not None:
                reason = "pattern"
            elif until == "first_step" and view.scan.first_step_seen:
                reason = "first_step"
            elif any(c > baseline.get(name, 0) for name, c in _error_counts(view.scan).items()):
                reason = "error"
            waited = time.monotonic() - started
            if reason is None and waited >= timeout:
                reason = "unreachable" if view.state == "unreachable" else "timeout"
            if reason is not None:
                break
            if progress is not None and waited - last_progress >= 1.0:
                last_progress = waited
                step = view.scan.global_step
                progress(round(waited, 1), float(timeout),
                         f"{view.row.session}: {view.state}" + (f", step {step}" if step is not None else ""))
            time.sleep(min(POLL_S, max(0.05, timeout - waited)))
            fresh = reg.get(row.id) or view.row
            if pattern is None:
                view = observe(reg, [fresh])[0]
            else:
                view.row = fresh
        status = observe_with_lines(reg, [reg.get(row.id) or view.row], None, logs.MAX_LINES, checkpoints=True)[0]
        if status["state"] in TERMINAL:
            next_wait = 0
            if reason not in ("pattern", "first_step"):
                reason = "exited"
        elif reason in ("timeout", "unreachable"):
            done = reg.bump_timeouts(row.id)
            next_wait = WAIT_SCHEDULE_S[min(done - 1, len(WAIT_SCHEDULE_S) - 1)]
        elif reason == "error":
            next_wait = WAIT_SCHEDULE_S[0]
        else:
            fresh = reg.get(row.id)
            done = fresh.timeouts if fresh else 0
            next_wait = WAIT_SCHEDULE_S[min(done, len(WAIT_SCHEDULE_S) - 1)]
    if progress is not None:
        progress(float(timeout), float(timeout), f"{view.row.session}: {reason}")
    return WaitOutput(**status, reason=reason, next_wait_s=next_wait,  # type: ignore[arg-type]
                      waited_s=round(time.monotonic() - started, 2), timeout_s=timeout, matched_line=matched)
