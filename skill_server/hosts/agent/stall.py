"""The stall watch: a run whose progress stopped while its processes live (the monitor's ``stalled`` phase).

The bound comes from the run's own pace: ``max(stall_floor_s, stall_k x median step time)`` (``timing_s/step``
of its step lines, else the pace the monitor saw the steps arrive at). The clock counts from the newest step
line; a run that never printed a step line counts from the last growth of its logs, only when its policy has
``on_stall`` and once its first-step deadline has passed (before that the deadline governs; a silent Ray head
is no stall). Entering ``stalled`` records the ``stalled`` event (the last step, for how long, the bound) once
per quiet spell; moving on records ``progressed``. A run still without a first step when its first-step deadline
passes records ``first_step_overdue`` once (what ``on_first_step_overdue`` acts on). The verdict is the watch's own
state (``stall`` and ``first_step_overdue_at`` in ``monitor.json``). Stdlib only, Python 3.8.
"""

from __future__ import annotations

from . import phases
from .protocol import TYPE_CHECKING
from .watchers import Watcher

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .protocol import StallVerdict
    from .runstate import Run

STALL_K = 5.0
STALL_FLOOR_S = 900.0
#: While no stall can be judged yet, or once the run is stalled, how often the verdict is looked at again
#: (every change of the logs wakes it too).
RECHECK_S = 60.0
STALLED_RECHECK_S = 1.0


def _median(values: list[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def number(value: object, default: float) -> float:
    """A positive number given in a policy, else ``default``."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else default


def pace_s(run: Run) -> float | None:
    """The run's seconds per step: the median ``timing_s/step`` of its step lines, else the pace its steps
    arrived at since the first one (None: fewer than two steps seen)."""
    times = [float(t) for r in run.roles for t in r.found.progress.step_times
             if isinstance(t, (int, float)) and t > 0]
    if times:
        return _median(times)
    rates = []
    for role in run.roles:
        f = role.found
        if (isinstance(f.first_step_at, (int, float)) and isinstance(f.stepped_at, (int, float))
                and isinstance(f.first_step, int) and isinstance(f.global_step, int) and f.global_step > f.first_step):
            rates.append((f.stepped_at - f.first_step_at) / (f.global_step - f.first_step))
    return _median(rates)


def stall_bound_s(run: Run) -> float:
    policy = run.spec.get("policy") or {}
    floor = number(policy.get("stall_floor_s"), STALL_FLOOR_S)
    pace = pace_s(run)
    return max(floor, number(policy.get("stall_k"), STALL_K) * pace) if pace else floor


def quiet_from(run: Run, now: float) -> tuple[str, float, int | None] | None:
    """(what the stall clock counts from, its start on the run clock, the last step), or None while a stall
    cannot be: the run is not live here (stopping, ended), or has not passed its first-step deadline silently."""
    if run.timed_out or run.phase not in phases.LIVE or all(r.ended for r in run.roles):
        return None
    stepped = [r.found.stepped_at for r in run.roles if r.found.first_step_seen and r.found.stepped_at is not None]
    steps = [r.found.global_step for r in run.roles if isinstance(r.found.global_step, int)]
    if stepped:
        return "step", max(stepped), max(steps) if steps else None
    deadline = run.spec.get("first_step_s")
    if not (run.spec.get("policy") or {}).get("on_stall") or not isinstance(deadline, (int, float)) or now < deadline:
        return None  # a run without step lines (a Ray head, a server) may be silent for hours unless told otherwise
    grew = [r.found.grew_at for r in run.roles if r.found.grew_at is not None]
    return "output", max(grew) if grew else 0.0, None


class StallWatch(Watcher):
    """Decides whether the run is stalled when its logs change, and when the bound would run out."""

    wakes_on = ("changes",)

    def __init__(self, run: Run, previous: Mapping[str, Any]) -> None:
        super().__init__()
        #: The verdict (empty: no stall can be judged now).
        self.verdict: StallVerdict = dict(previous.get("stall") or {})  # type: ignore[assignment]
        #: When (run clock) the first step was found overdue (None: not so far).
        self.overdue_at: float | None = previous.get("first_step_overdue_at")
        run.parts.append(self)

    def to_json(self) -> dict[str, Any]:
        return {"stall": self.verdict, "first_step_overdue_at": self.overdue_at}

    def overdue(self, run: Run, now: float) -> None:
        """Record ``first_step_overdue`` once, when the deadline passed with no first step and a process lives."""
        deadline = run.spec.get("first_step_s")
        if (self.overdue_at is not None or not isinstance(deadline, (int, float)) or now < deadline
                or run.phase not in (phases.STARTING, phases.STALLED) or all(r.ended for r in run.roles)
                or any(r.found.first_step_seen for r in run.roles)):
            return
        self.overdue_at = round(now, 3)
        grew = [r.found.grew_at for r in run.roles if r.found.grew_at is not None]
        run.emit("first_step_overdue", deadline_s=deadline, quiet_s=round(now - (max(grew) if grew else 0.0), 1))

    def clear(self, run: Run) -> None:
        if self.verdict:
            self.verdict = {}
            run.changed()

    def tick(self, run: Run, now: float) -> float | None:
        self.overdue(run, now)
        found = quiet_from(run, now)
        was = self.verdict.get("stalled") is True
        if found is None:
            self.clear(run)
            deadline = run.spec.get("first_step_s")
            if isinstance(deadline, (int, float)) and now < deadline and run.phase in phases.LIVE:
                return max(0.05, min(RECHECK_S, float(deadline) - now))
            return RECHECK_S
        since, start, step = found
        bound = round(stall_bound_s(run), 1)
        stalled = now - start >= bound
        if was and not stalled:
            seen = any(r.found.first_step_seen for r in run.roles)
            run.move(phases.RUNNING if seen else phases.STARTING, "progressed", since=since, last_step=step,
                     stalled_s=round(now - (self.verdict.get("stalled_at") or now), 1))
        state: StallVerdict = {
            "stalled": stalled, "since": since, "from": round(start, 3), "bound_s": bound, "last_step": step,
            "stalled_at": self.verdict.get("stalled_at") if was and stalled else (round(now, 3) if stalled else None)}
        if state != self.verdict:
            self.verdict = state
            run.changed()
        if stalled and not was:
            run.move(phases.STALLED, "stalled", since=since, last_step=step, quiet_s=round(now - start, 1),
                     bound_s=bound)
        return STALLED_RECHECK_S if stalled else max(0.05, min(RECHECK_S, start + bound - now))
