"""How states are derived from what a host reports (pure functions, no I/O).

The truth about a process is its wrapper's liveness (pid plus start time), its exit-code file and its
marker files (``stopped``: a stop was requested; ``timedout``: the run's monitor ended it at the max time;
``gate``/``started``: waiting for a URL, then started; ``queued``: its Slurm job waits in the queue;
``survivors``: a process of it outlived a stop's
SIGKILL and still lives). The tmux pane is only consulted for runs
recorded without a pid. The host agent checks liveness before reading the exit file, so "dead without
an exit code" really means the wrapper died without recording one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from skill_server.experiments.models import TERMINAL


@dataclass
class ProcFacts:
    """What one host said about one process in one observation."""

    alive: bool | None
    exit_code: int | None
    markers: frozenset[str] = field(default_factory=frozenset)
    final: bool = False
    size: int | None = None


def process_state(facts: ProcFacts | None, pane_alive: bool | None = None) -> str:
    """The state of one process; ``facts`` is None when its host could not be asked."""
    if facts is None:
        return "unreachable"
    if "survivors" in facts.markers:
        return "running"  # something of it outlived SIGKILL: never called stopped while it lives
    if facts.exit_code is not None:
        if "timedout" in facts.markers:
            return "timed_out"
        if "stopped" in facts.markers:
            return "stopped"
        return "succeeded" if facts.exit_code == 0 else "failed"
    alive = facts.alive if facts.alive is not None else bool(pane_alive)
    if alive:
        if "queued" in facts.markers:  # a Slurm job waiting in the queue
            return "waiting"
        return "waiting" if "gate" in facts.markers and "started" not in facts.markers else "running"
    if "timedout" in facts.markers:
        return "timed_out"
    if "stopped" in facts.markers:
        return "stopped"
    return "lost"


def run_state(states: list[str], codes: list[int | None]) -> tuple[str, int | None, str | None]:
    """(state, exit code, note) of a run from its processes' states and exit codes."""
    if any(s == "unreachable" for s in states):
        return "unreachable", None, None
    failed = [c for s, c in zip(states, codes) if s == "failed"]
    if failed:
        note = None
        if any(s in ("running", "waiting") for s in states):
            note = "a process failed while others still run; stop_experiment ends them"
        return "failed", failed[0], note
    if all(s in TERMINAL for s in states):
        nonzero = next((c for c in codes if c not in (None, 0)), None)
        for final in ("timed_out", "stopped"):
            if final in states:
                return final, nonzero, None
        if "lost" in states:
            return "lost", None, None
        return "succeeded", 0, None
    if "lost" in states:
        return "lost", None, "a process vanished without an exit code while others still run; stop_experiment " \
                             "ends them"
    return "running", None, None
