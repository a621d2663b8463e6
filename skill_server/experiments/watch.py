"""watch: one line per event of a run until it ends (``python -m skill_server watch ID``).

Made for Claude Code's Monitor tool and for shell loops: every line is one event, written and flushed at
once; the command ends by itself when the run does and its exit code says how the run ended. Events:

* ``started``: the first line, whatever state the run is in when watching begins;
* ``first_step``: the first training step was seen;
* ``step``: every K-th global step (``--every``), with key metrics, seconds per step and the ETA;
* ``error``: each error signature the first time it appears (with its fix);
* ``restart``: the step counter went back (a resumed or relaunched trainer);
* ``stalled``: with ``--stall S``, the run has been quiet S seconds (no new step line, or before the first
  one no new output: ``queries.quiet``); said once per quiet spell;
* ``state``: the run's state or one of its processes' states changed (``unreachable`` included);
* ``finished``: the final state and exit code; the last line. An attempt its resume policy relaunches is not
  the end: a ``state`` line says so (``resumed as <id>.r2: following it``) and watching goes on with the
  next attempt, from its ``started`` line.

It only observes (one round trip per host per poll, like ``experiment_status`` without lines, healing as that
does: ``upkeep``), so it never moves the status cursor and never acts on the run. Exit codes: 0 succeeded, 10 failed, 11
stopped, 12 timed out, 13 lost; with ``--until``, watching also ends at the first of the named events:
20 first step, 21 an error signature of severity error, 22 stalled; 1 a tool error (an unknown id), 2 a usage
error, 124 ``--max-time`` passed first, 130 interrupted (Ctrl-C or SIGTERM); a closed output pipe ends it
quietly with 141.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from skill_server.experiments import fixes, history, lineage, plots, upkeep
from skill_server.experiments.models import TERMINAL, ProgressInfo
from skill_server.experiments.observe import View, observe
from skill_server.experiments.progress import iso
from skill_server.experiments.queries import (
    ExtraPlan,
    absorb_config,
    actions,
    extra_ops,
    find_any,
    plan_extras,
    progress_info,
    queued,
    quiet,
    relaunch_pending,
    stall,
    stalled,
)
from skill_server.experiments.signatures import SIGNATURES_BY_NAME
from skill_server.experiments.store import Row, open_registry

EXIT_BY_STATE = {"succeeded": 0, "failed": 10, "stopped": 11, "timed_out": 12, "lost": 13}
#: ``--until`` names -> the event that ends watching and its exit code (the run's end always does).
#: ``end`` is accepted for symmetry with wait_experiment: the run's end ends watching anyway (its exit code).
UNTIL: dict[str, tuple[str, int | None]] = {"first_step": ("first_step", 20), "error": ("error", 21),
                                            "stall": ("stalled", 22), "end": ("finished", None)}
EXIT_TOOL_ERROR, EXIT_USAGE, EXIT_MAX_TIME, EXIT_INTERRUPTED, EXIT_PIPE_CLOSED = 1, 2, 124, 130, 141
DEFAULT_EVERY = 10
DEFAULT_INTERVAL_S = 5.0
#: Metrics shown on a step line when none are chosen: the first of plots.DEFAULT_METRICS the run prints.
DEFAULT_METRIC_COUNT = 4


@dataclass
class Event:
    kind: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "null" if value is None else str(value)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Watcher:
    """Turns successive views of one run into events (pure: no I/O)."""

    def __init__(self, every: int = DEFAULT_EVERY, metrics: list[str] | None = None,
                 stall_s: float | None = None) -> None:
        self.every = max(1, every)
        self.stall_s = stall_s
        self.stalled = False
        self.patterns = metrics
        self.started = False
        self.state: str | None = None
        self.proc_states: dict[str, str] = {}
        self.first_step = False
        self.reported_step: int | None = None
        self.errors: set[str] = set()
        self.actions: set[tuple[str, str, str]] = set()
        self.restarts = 0

    def _metrics(self, last: dict[str, Any]) -> dict[str, Any]:
        names = list(last)
        if self.patterns:
            chosen, _ = history.match_names(names, self.patterns)
        else:
            chosen = plots.default_metrics(names, DEFAULT_METRIC_COUNT)
        return {name: last[name] for name in chosen[:8]}

    def events(self, view: View, progress: ProgressInfo) -> list[Event]:
        """The events this view brings, always in this order: started (or the run's state), process states,
        first step, restarts, step, errors, finished."""
        out = self._state_events(view)
        out += self._first_step_events(view)
        out += self._restart_events(progress)
        out += self._step_events(view, progress)
        out += self._error_events(view)
        out += self._stall_events(view)
        out += self._action_events(view)
        if view.state in TERMINAL:
            out.append(self._finished_event(view))
        return out

    def _state_events(self, view: View) -> list[Event]:
        out: list[Event] = []
        row, step = view.row, view.scan.global_step
        state = "queued" if queued(view) else view.state  # a job in its scheduler's queue, then running
        if not self.started:
            self.started = True
            out.append(Event("started", f"{row.id} state={state} host={row.host} "
                             f"elapsed={_duration(view.elapsed_s)}" + (f" step={step}" if step is not None else ""),
                             {"state": state, "host": row.host, "elapsed_s": round(view.elapsed_s, 1),
                              "global_step": step}))
        elif state != self.state and state not in TERMINAL:  # a final state is the finished line
            out.append(Event("state", f"{self.state} -> {state}" + (f" ({view.note})" if view.note else ""),
                             {"from": self.state, "to": state, "note": view.note}))
        self.state = state
        for p in view.procs:
            before = self.proc_states.get(p.role)
            if before is not None and before != p.state and p.state != view.state and len(view.procs) > 1:
                out.append(Event("state", f"process {p.role}: {before} -> {p.state}",
                                 {"role": p.role, "from": before, "to": p.state}))
            self.proc_states[p.role] = p.state
        return out

    def _first_step_events(self, view: View) -> list[Event]:
        scan = view.scan
        if not scan.first_step_seen or self.first_step:
            return []
        self.first_step = True
        step = scan.first_step or scan.global_step
        after = f" {_duration(scan.first_step_at - view.row.created)} after launch" if scan.first_step_at else ""
        return [Event("first_step", f"first training step seen (step {step}){after}", {"step": step})]

    def _restart_events(self, progress: ProgressInfo) -> list[Event]:
        out = []
        for restart in progress.restarts[self.restarts:]:
            out.append(Event("restart", f"step counter went back from {restart.from_step} to {restart.to_step} "
                             f"({restart.role}): resumed or relaunched", restart.model_dump()))
            self.reported_step = None
        self.restarts = len(progress.restarts)
        return out

    def _step_events(self, view: View, progress: ProgressInfo) -> list[Event]:
        step = view.scan.global_step
        if step is None or (self.reported_step is not None and step // self.every <= self.reported_step // self.every):
            return []
        self.reported_step = step  # the first step seen, then each time a multiple of K is passed
        return [self._step_event(step, view.scan.last_metrics, progress)]

    def _error_events(self, view: View) -> list[Event]:
        """Each known error signature, the first time it is seen."""
        out = []
        for name, hit in view.scan.errors.items():
            sig = SIGNATURES_BY_NAME.get(name)
            if sig is None or name in self.errors:
                continue
            self.errors.add(name)
            role = f" [{hit.get('role')}]" if hit.get("role") else ""
            hint = fixes.hint_for(name, str(hit.get("line", "")))
            out.append(Event("error", f"{name} ({sig.severity}){role}: {hit.get('line', '')} | fix: {hint}",
                             {"signature": name, "severity": sig.severity, "role": hit.get("role"),
                              "line": hit.get("line"), "count": hit.get("count"), "hint": hint}))
        return out

    def _action_events(self, view: View) -> list[Event]:
        """``action``: each thing the run's policies did (on its hosts, with nobody calling), once."""
        out = []
        for a in actions(view):
            key = (a.at, a.trigger, a.action)
            if key not in self.actions:
                self.actions.add(key)
                out.append(Event("action", f"{a.trigger} -> {a.action}: {a.result}", dataclasses.asdict(a)))
        return out

    def _stall_events(self, view: View) -> list[Event]:
        """``stalled`` once the run has been quiet ``stall_s`` seconds or its monitor says it stalled (its bound
        from the run's pace); again only after it moved on."""
        quiet_s, since = quiet(view)
        verdict = stall(view)
        if stalled(view) and verdict is not None:
            if self.stalled:
                return []
            self.stalled = True
            step, bound = verdict.get("last_step"), verdict.get("bound_s")
            return [Event("stalled", f"no progress for {_duration(quiet_s or 0)}, over its bound of "
                          f"{_duration(float(bound or 0))}" + (f" (at step {step})" if step else ""),
                          {"quiet_s": quiet_s, "quiet_since": since, "global_step": step, "bound_s": bound})]
        if self.stall_s is None or quiet_s is None or quiet_s < self.stall_s:
            self.stalled = False
            return []
        if self.stalled:
            return []
        self.stalled = True
        step = view.scan.global_step
        what = "step line" if since == "step" else "output"
        return [Event("stalled", f"no new {what} for {_duration(quiet_s)}" + (f" (at step {step})" if step else ""),
                      {"quiet_s": quiet_s, "quiet_since": since, "global_step": step})]

    def _finished_event(self, view: View) -> Event:
        step = view.scan.global_step
        return Event("finished", f"{view.state} exit_code={_fmt(view.exit_code)} after "
                     f"{_duration(view.elapsed_s)}" + (f" at step {step}" if step is not None else ""),
                     {"state": view.state, "exit_code": view.exit_code, "elapsed_s": round(view.elapsed_s, 1),
                      "global_step": step})

    def _step_event(self, step: int, last: dict[str, Any], progress: ProgressInfo) -> Event:
        metrics = self._metrics(last)
        total = f"/{progress.total_steps}" if progress.total_steps else ""
        parts = [f"{step}{total}"] + [f"{k}={_fmt(v)}" for k, v in metrics.items()]
        if progress.seconds_per_step is not None:
            parts.append(f"| {progress.seconds_per_step:.3g} s/step")
        if progress.eta_s is not None:
            parts.append(f"eta {_duration(progress.eta_s)}")
        return Event("step", " ".join(parts), {"step": step, "total_steps": progress.total_steps, "metrics": metrics,
                                               "seconds_per_step": progress.seconds_per_step,
                                               "eta_s": progress.eta_s})


def format_line(event: Event, session: str, as_json: bool, now: float) -> str:
    if as_json:
        return json.dumps({"time": iso(now), "session": session, "event": event.kind, "text": event.text,
                           **event.data}, ensure_ascii=False, default=str)
    return f"{iso(now)} {session} {event.kind} {event.text}"


class _Stop(Exception):
    pass


def watch(key: str, write: Callable[[str], None], *, every: int = DEFAULT_EVERY,
          interval_s: float = DEFAULT_INTERVAL_S, metrics: list[str] | None = None, as_json: bool = False,
          max_time_s: float | None = None, until: tuple[str, ...] = (), stall_s: float | None = None) -> int:
    """Hand each event line of the run ``key`` (id or session) to ``write`` (which must deliver it at once)
    until the run ends; returns the exit code (see module doc).

    ``ToolInputError`` (unknown id) propagates to the caller, which prints it as any tool error."""
    watcher = Watcher(every, metrics, stall_s)
    ends = {kind: code for kind, code in (UNTIL[name] for name in until) if code is not None}
    started = time.monotonic()

    def on_term(signum: int, frame: Any) -> None:
        raise _Stop()

    previous = signal.signal(signal.SIGTERM, on_term) if _main_thread() else None
    try:
        with open_registry(create=False) as reg:
            upkeep.finish_interrupted_launches(reg)
            row = find_any(reg, key)
        told_pending = False
        while True:
            now = time.time()
            row, view, plan = _look(row, now)
            events = watcher.events(view, progress_info(view, plan.config, now))
            nxt, pending = _resumed(row, view) if view.state in TERMINAL else (None, False)
            if nxt is not None or pending:  # not the end: the run goes on as its next attempt
                events = _not_the_end(events, view, nxt, told_pending)
                told_pending = nxt is None
            for event in events:
                write(format_line(event, row.session, as_json, now))
            if nxt is not None:
                row, watcher = nxt, Watcher(every, metrics, stall_s)  # its own lines, from "started" on
                continue
            if view.state in TERMINAL and not pending:
                return EXIT_BY_STATE[view.state]
            hit = [ends[e.kind] for e in events if e.kind in ends and (e.kind != "error" or e.data.get("severity")
                                                                         == "error")]
            if hit:
                return hit[0]
            if max_time_s is not None and time.monotonic() - started >= max_time_s:
                return EXIT_MAX_TIME
            time.sleep(interval_s)
    except (KeyboardInterrupt, _Stop):
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_PIPE_CLOSED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _resumed(row: Row, view: View) -> tuple[Row | None, bool]:
    """For an ended run: its next attempt when the registry has taken it up, and whether its policy is still
    to relaunch it (after the backoff)."""
    with open_registry() as reg:
        later = lineage.of(reg, reg.get(row.id) or row).after(row.id)
    nxt = later[0] if later else None
    return nxt, nxt is None and relaunch_pending(view, None)


def _not_the_end(events: list[Event], view: View, nxt: Row | None, told_pending: bool) -> list[Event]:
    """An ended attempt's events without its ``finished`` line, and the line that says watching follows its
    next attempt (the one that waits for the backoff only once)."""
    events = [e for e in events if e.kind != "finished"]
    if nxt is None and told_pending:
        return events
    what = f"resumed as {nxt.id}: following it" if nxt is not None else "its policy relaunches it after the backoff"
    return events + [Event("state", f"{view.state} -> {what}", {"from": view.state, "to": "resumed",
                                                                 "next_attempt": nxt.id if nxt is not None else None})]


def _look(row: Row, now: float) -> tuple[Row, View, ExtraPlan]:
    """One observation of the run (its row as the registry has it now), with its YAML read in the same round trip
    while its total steps are unknown."""
    with open_registry() as reg:
        row = reg.get(row.id) or row
        plan = plan_extras(reg, row, False, now)
        view = observe(reg, [row], extra_ops=lambda r: extra_ops(plan), upkeep=upkeep.HEAL)[0]
        absorb_config(reg, view, plan, now)
    return row, view, plan


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()

