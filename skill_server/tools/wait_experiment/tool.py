"""wait_experiment: block (bounded) until a run exits, shows its first step, prints a pattern or an error.

It observes (one round trip per host every half second, healing as a status call does: ``experiments.upkeep``)
and never acts on the run; the max time is enforced by the run's monitor on its host. It answers within
``timeout_s`` plus ``WAIT_MARGIN_S`` whatever its hosts do (a partition, a hung tmux): the looks stop at
``timeout_s``, the closing status gets what is left. A host that could not be asked is asked again at every
look, the pattern search too; the pattern counts only output appended while waiting, from the first look that
reached every host. ``next_wait_s`` follows the blueprint skills' back-off (30 s, 1, 2, 4, 8, then 16 min),
advancing with each wait that ends in ``timeout``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from skill_server.core.deadline import ANSWER_MARGIN_S, WAIT_MARGIN_S, Deadline, shutdown_requested
from skill_server.core.errors import ToolInputError
from skill_server.core.models import Progress
from skill_server.experiments import lineage, logs, sentences, upkeep
from skill_server.experiments.checks import compile_pattern
from skill_server.experiments.models import TERMINAL, WAIT_DEFAULT_S, WAIT_MAX_S
from skill_server.experiments.observe import View, observe
from skill_server.experiments.queries import (
    find_any,
    observe_with_lines,
    parse_cursor,
    quiet,
    relaunch_pending,
    stalled,
)
from skill_server.experiments.signatures import SIGNATURES_BY_NAME
from skill_server.experiments.store import Registry, Row, open_registry
from skill_server.tools.wait_experiment.models import WaitInput, WaitOutput, WaitReason

WAIT_SCHEDULE_S = (30, 60, 120, 240, 480, 960)
POLL_S = 0.5
#: The first look at the run gets at least this long, even with a ``timeout_s`` of 0.
FIRST_LOOK_S = 3.0


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


def _check_arguments(inp: WaitInput) -> tuple[int, str, re.Pattern[str] | None]:
    """(timeout, what ends the wait, the compiled pattern when it is one)."""
    timeout = WAIT_DEFAULT_S if inp.timeout_s is None else min(inp.timeout_s, WAIT_MAX_S)
    until = inp.until or "exit"
    pattern = None
    if until == "pattern":
        if not inp.pattern:
            raise ToolInputError("required when until='pattern'", field="pattern")
        pattern = compile_pattern(inp.pattern, "pattern")
    elif inp.pattern is not None:
        raise ToolInputError("only used with until='pattern'", field="pattern")
    if inp.since is not None and pattern is None:  # the status cursor goes to experiment_status, not here
        raise ToolInputError("is for until='pattern'; to read new log lines use experiment_status(id, since=...)",
                             field="since")
    return timeout, until, pattern


@dataclass
class _Wait:
    """What ends this wait, what it has seen so far, and its deadlines."""

    until: str
    pattern: re.Pattern[str] | None
    #: Error counts when the wait began: only a new error ends it.
    baseline: dict[str, int]
    #: When polling stops (``timeout_s`` after the start) and when the answer is due (a few seconds later).
    polling: Deadline
    answer: Deadline
    #: Per process, where the pattern search goes on; None until a look at the run's host succeeded (only
    #: output appended while waiting counts, so the start is the logs' size at the first reachable look).
    offsets: list[int] | None = None
    matched: str | None = None
    #: End once the run has been quiet this long (``queries.quiet``), when given.
    stall_s: int | None = None

    def look(self, reg: Registry, row: Row) -> View:
        """Observe the run again by the polling deadline (a first look gets at least ``FIRST_LOOK_S``), with
        the pattern reads in the same round trip; search what came back."""
        bound = self.polling if not self.polling.expired() else self.answer.within(FIRST_LOOK_S)
        if self.pattern is None or self.offsets is None:
            view = observe(reg, [row], deadline=bound, upkeep=upkeep.HEAL)[0]
            if self.pattern is not None and all(p.state != "unreachable" for p in view.procs):
                self.offsets = [p.size or 0 for p in view.procs]
            return view
        reads = [[(o, logs.SCAN_BUDGET)] for o in self.offsets]
        view = observe(reg, [row], extra_reads=lambda r: reads, deadline=bound, upkeep=upkeep.HEAL)[0]
        self.matched, self.offsets = _match(view, self.offsets, self.pattern)
        return view

    def reason(self, view: View) -> WaitReason | None:
        """Why the wait ends with this view, or None; the run's exit comes first."""
        if view.state in TERMINAL:
            return "exited"
        if self.matched is not None:
            return "pattern"
        if self.until == "first_step" and view.scan.first_step_seen:
            return "first_step"
        if self.until == "started" and view.state == "running" and not any(p.state == "waiting" for p in view.procs):
            return "started"
        if any(c > self.baseline.get(name, 0) for name, c in _error_counts(view.scan).items()):
            return "error"
        if self.stall_s is not None and (quiet_s := quiet(view)[0]) is not None and quiet_s >= self.stall_s:
            return "stalled"
        if self.until == "stall" and stalled(view):
            return "stalled"
        return None


def _elsewhere(view: View) -> bool:
    """Every process of the run is another machine's (host ``local`` of the machine that launched it): no
    look from here can see it, so waiting here cannot help."""
    return bool(view.procs) and all(p.elsewhere for p in view.procs)


def _newest_attempt(reg: Registry, wait: _Wait, row: Row, view: View) -> tuple[Row, View]:
    """Follow a resumed run to its newest attempt (each look takes up the attempts its host recorded), so
    that a wait on the id the user knows waits on the attempt that runs now."""
    for _ in range(lineage.MAX_ATTEMPTS):
        later = lineage.of(reg, reg.get(row.id) or row).after(row.id)
        if not later:
            break
        row = later[0]
        view = wait.look(reg, row)
    return row, view


def _pending(reg: Registry, view: View) -> bool:
    """The ended attempt's resume policy is still to relaunch it (``queries.relaunch_pending``)."""
    row = reg.get(view.row.id) or view.row
    return relaunch_pending(view, lineage.of(reg, row).next(row.id))


def _poll(reg: Registry, view: View, wait: _Wait, timeout: int, started: float,
          progress: Progress | None) -> tuple[View, WaitReason]:
    """Observe every POLL_S until a reason to stop, the timeout or a shutdown; the last view and the reason.
    A host that cannot be asked is asked again at the next look (the pattern search too)."""
    last_progress = -1.0
    while True:
        reason = wait.reason(view)
        if reason == "exited" and _pending(reg, view):
            reason = None  # the next attempt comes after the backoff: wait on it
        if reason == "exited":
            row, newer = _newest_attempt(reg, wait, view.row, view)
            if row.id != view.row.id:
                view = newer
                continue
        waited = time.monotonic() - started
        if reason is None and (waited >= timeout or shutdown_requested()):
            reason = "timeout"
        if reason is None and _elsewhere(view):
            reason = "unreachable"
        if reason is not None:
            return view, reason
        if progress is not None and waited - last_progress >= 1.0:
            last_progress = waited
            step = view.scan.global_step
            progress(round(waited, 1), float(timeout),
                     f"{view.row.session}: {view.state}" + (f", step {step}" if step is not None else ""))
        time.sleep(min(POLL_S, max(0.05, timeout - waited)))
        view = wait.look(reg, reg.get(view.row.id) or view.row)


def _settle(reg: Registry, exp_id: str, state: str, reason: WaitReason, elsewhere: bool = False,
            pending: bool = False) -> tuple[WaitReason, int]:
    """The final reason (an ended run has exited, unless the wait ended on its pattern or first step, or its
    resume policy relaunches it after a backoff: ``pending``, a timeout) and ``next_wait_s``: 0 once ended or
    another machine's, the schedule's first after an error or during a backoff, else the next step of the
    back-off, which each wait that ends in a timeout advances."""
    if elsewhere:
        return "unreachable", 0
    if pending:
        return "timeout", WAIT_SCHEDULE_S[0]
    if state in TERMINAL:
        return (reason if reason in ("pattern", "first_step") else "exited"), 0
    if reason in ("timeout", "unreachable"):
        done = reg.bump_timeouts(exp_id)
        return reason, WAIT_SCHEDULE_S[min(done - 1, len(WAIT_SCHEDULE_S) - 1)]
    if reason in ("error", "stalled"):
        return reason, WAIT_SCHEDULE_S[0]
    row = reg.get(exp_id)
    done = row.timeouts if row else 0
    return reason, WAIT_SCHEDULE_S[min(done, len(WAIT_SCHEDULE_S) - 1)]


def wait_experiment(inp: WaitInput, progress: Progress | None = None) -> WaitOutput:
    """Wait for the run; the answer comes within ``timeout_s`` plus ``WAIT_MARGIN_S`` whatever its hosts do:
    the looks stop at ``timeout_s``, the closing status gets what is left."""
    timeout, until, pattern = _check_arguments(inp)
    started = time.monotonic()
    answer = Deadline(timeout + WAIT_MARGIN_S - ANSWER_MARGIN_S)
    with open_registry(create=False) as reg:
        upkeep.finish_interrupted_launches(reg)
        asked = row = find_any(reg, inp.id, answer)
        wait = _Wait(until, pattern, {}, Deadline(float(timeout)), answer, stall_s=inp.stall_s)
        if pattern is not None and inp.since is not None:
            wait.offsets = parse_cursor(inp.since, len(row.processes), "since")
        view = wait.look(reg, row)
        row, view = _newest_attempt(reg, wait, row, view)
        wait.baseline = _error_counts(view.scan)
        view, reason = _poll(reg, view, wait, timeout, started, progress)
        row = view.row
        status = observe_with_lines(reg, [reg.get(row.id) or view.row], None, logs.MAX_LINES, checkpoints=True,
                                    deadline=answer, upkeep=upkeep.HEAL)[0]
        if reason == "timeout" and status.state == "unreachable":  # the closing look decides, not a cut one
            reason = "unreachable"
        pending = _pending(reg, view)
        reason, next_wait = _settle(reg, row.id, status.state, reason, _elsewhere(view), pending)
    if progress is not None:
        progress(float(timeout), float(timeout), f"{view.row.session}: {reason}")
    out = WaitOutput(**dict(status), reason=reason, next_wait_s=next_wait,
                     waited_s=round(time.monotonic() - started, 2), timeout_s=timeout, matched_line=wait.matched)
    out.summary = sentences.waited(out, reason, next_wait, followed=asked.id if asked.id != row.id else None)
    return out
