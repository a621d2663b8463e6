"""Training progress from the log: step counter restarts, seconds per step, total steps, steps per hour, ETA.

Folded incrementally, like the rest of the scan: ``fold`` (the host agent's ``findings.fold_progress``, the
one implementation the run monitor uses too) takes the step lines (and the text) of newly appended bytes
and updates a small ``ProgressState`` stored with the scan state, so the cost follows the appended bytes,
never the log size. ``estimate`` turns that state (plus the run's config) into numbers,
each with its source, or null with the reason it is unknown.

Seconds per step, in order of preference:

1. ``timing_s/step`` printed in the step lines (verl's wall time of the whole step): median of the
   last few steps;
2. the rate of the trainer's ``Training Progress`` tqdm bar (``13.70s/it`` or ``1.2it/s``);
3. observed: the times at which this tool first saw new step lines, between observations. This is
   as precise as the polling interval and needs at least two observations that brought new steps.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeGuard

from skill_server.hosts.agent.findings import (
    KEEP_BATCHES,
    KEEP_RESTARTS,
    KEEP_STEP_TIMES,
    MAX_STEPS,
    STEP_TIME_KEY,
    TQDM_RE,
    StepLine,
)
from skill_server.hosts.agent.findings import fold_progress as fold

__all__ = ["KEEP_BATCHES", "KEEP_RESTARTS", "KEEP_STEP_TIMES", "MAX_STEPS", "STEP_TIME_KEY", "TQDM_RE",
           "Estimate", "ProgressState", "StepLine", "estimate", "fold", "iso"]

#: Median of this many most recent ``timing_s/step`` values.
STEP_TIME_WINDOW = 5


@dataclass
class ProgressState:
    """What progress estimates need, kept between calls (JSON in the scan state)."""

    last_step_by_role: dict[str, int] = field(default_factory=dict)
    step_times: list[float] = field(default_factory=list)
    tqdm_total: int | None = None
    tqdm_step: int | None = None
    tqdm_rate_s: float | None = None
    #: ``[seen_at, highest step seen then]`` per observation that brought new step lines (since the last restart).
    batches: list[list[float]] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"last_step_by_role": self.last_step_by_role, "step_times": self.step_times,
                "tqdm_total": self.tqdm_total, "tqdm_step": self.tqdm_step, "tqdm_rate_s": self.tqdm_rate_s,
                "batches": self.batches, "restarts": self.restarts}

    @classmethod
    def from_json(cls, data: Any) -> ProgressState:
        """The stored state; malformed parts are dropped, never raised."""
        if not isinstance(data, dict):
            return cls()
        roles = data.get("last_step_by_role")
        batches = data.get("batches")
        restarts = data.get("restarts")
        return cls(
            last_step_by_role={str(k): v for k, v in roles.items() if _is_step(v)} if isinstance(roles, dict) else {},
            step_times=[float(x) for x in _list(data.get("step_times")) if _positive(x)][-KEEP_STEP_TIMES:],
            tqdm_total=data.get("tqdm_total") if _is_step(data.get("tqdm_total")) else None,
            tqdm_step=data.get("tqdm_step") if _is_step(data.get("tqdm_step")) else None,
            tqdm_rate_s=float(data["tqdm_rate_s"]) if _positive(data.get("tqdm_rate_s")) else None,
            batches=[[float(b[0]), int(b[1])] for b in _list(batches)
                     if isinstance(b, list) and len(b) == 2 and _finite(b[0]) and _is_step(b[1])][-KEEP_BATCHES:],
            restarts=[dict(r) for r in _list(restarts) if isinstance(r, dict)][-KEEP_RESTARTS:],
        )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> TypeGuard[float]:
    return _finite(value) and value > 0


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_STEPS


@dataclass
class Estimate:
    """Progress numbers for one run; ``unknown`` maps each null field to why it is unknown."""

    global_step: int | None
    total_steps: int | None
    total_steps_source: str | None
    seconds_per_step: float | None
    seconds_per_step_source: str | None
    steps_per_hour: float | None
    eta_s: float | None
    unknown: dict[str, str]
    restarts: list[dict[str, Any]]


def estimate(state: ProgressState, global_step: int | None, config_total: int | None, config_source: str | None,
             *, finished: bool) -> Estimate:
    """Progress of a run from its folded state; nothing is guessed: unknown values come with a reason."""
    unknown: dict[str, str] = {}
    if global_step is None:
        unknown["global_step"] = "no step:N line seen in the log yet"
    total, total_source = None, None
    if state.tqdm_total is not None:
        total, total_source = state.tqdm_total, "log: the trainer's 'Training Progress' bar"
    elif config_total is not None:
        total, total_source = config_total, config_source or "the run's config"
    else:
        unknown["total_steps"] = ("neither a 'Training Progress' bar in the log nor total_training_steps in the run's "
                                  "config (when it is null, verl derives it from the dataset size and total_epochs)")
    per_step, per_step_source = None, None
    if state.step_times:
        recent = state.step_times[-STEP_TIME_WINDOW:]
        per_step = float(statistics.median(recent))
        per_step_source = f"timing_s/step printed in the step lines (median of the last {len(recent)})"
    elif state.tqdm_rate_s is not None:
        per_step, per_step_source = state.tqdm_rate_s, "rate of the trainer's 'Training Progress' bar"
    else:
        per_step = _observed_rate(state.batches)
        if per_step is not None:
            per_step_source = ("observed: when this tool first saw each step line, over "
                               f"{len(state.batches)} observations (as precise as the polling interval)")
        else:
            unknown["seconds_per_step"] = ("no timing_s/step in the step lines, no tqdm rate, and fewer than two "
                                           "observations that brought new steps")
    steps_per_hour = 3600.0 / per_step if per_step else None
    if steps_per_hour is None:
        unknown["steps_per_hour"] = unknown.get("seconds_per_step", "seconds per step unknown")
    eta = None
    if finished:
        unknown["eta_s"] = "the run has ended"
    elif total is None or per_step is None or global_step is None:
        unknown["eta_s"] = "needs " + " and ".join(
            name for name, value in (("global_step", global_step), ("total_steps", total),
                                     ("seconds_per_step", per_step)) if value is None)
    elif global_step > total:
        unknown["eta_s"] = f"global step {global_step} is past total_steps {total}"
    else:
        eta = (total - global_step) * per_step
    return Estimate(global_step=global_step, total_steps=total, total_steps_source=total_source,
                    seconds_per_step=_round(per_step), seconds_per_step_source=per_step_source,
                    steps_per_hour=_round(steps_per_hour), eta_s=_round(eta), unknown=unknown,
                    restarts=list(state.restarts))


def _observed_rate(batches: list[list[float]]) -> float | None:
    """Seconds per step between the oldest and newest observation that brought new steps."""
    if len(batches) < 2:
        return None
    (t0, s0), (t1, s1) = batches[0], batches[-1]
    if s1 <= s0 or t1 <= t0:
        return None
    return (t1 - t0) / (s1 - s0)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def iso(ts: float) -> str:
    """A UTC time as ISO 8601 to the second."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")
