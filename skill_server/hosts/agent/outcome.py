"""How a process and a run ended (or stand), from what is known of them: one derivation for everyone.

The run monitor says how a run ended on its host with it (the ``ended`` event, results.md, a policy's ``end:``
trigger), and the server derives every state it reports with it (``experiments.states``), so both always agree.
A process's truth is whether it lives, its exit code and its markers (``rundir.MARKERS``, plus ``survivors``:
something of it outlived a stop's SIGKILL and still lives; ``queued``: its scheduler has not started it yet).
Stdlib only, Python 3.8.
"""

from __future__ import annotations

from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

#: The states of a process or a run that never change again.
TERMINAL = ("succeeded", "failed", "stopped", "timed_out", "lost")


def process_state(exit_code: int | None, markers: Collection[str], alive: bool) -> str:
    """One process's state once its host answered: ``running``, ``waiting`` (for a URL, or in its scheduler's
    queue), or one of ``TERMINAL``."""
    if "survivors" in markers:
        return "running"  # something of it outlived SIGKILL: never called stopped while it lives
    if exit_code is not None:
        if "timedout" in markers:
            return "timed_out"
        if "stopped" in markers:
            return "stopped"
        return "succeeded" if exit_code == 0 else "failed"
    if alive:
        if "queued" in markers:
            return "waiting"
        return "waiting" if "gate" in markers and "started" not in markers else "running"
    if "timedout" in markers:
        return "timed_out"
    if "stopped" in markers:
        return "stopped"
    return "lost"


def run_state(states: Sequence[str], codes: Sequence[int | None]) -> tuple[str, int | None, str | None]:
    """(state, exit code, note) of a run from its processes' states (``unreachable`` for one whose host could not
    be asked) and exit codes."""
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
        return "lost", None, ("a process vanished without an exit code while others still run; stop_experiment "
                              "ends them")
    return "running", None, None


def ended_as(codes: Sequence[int | None], markers: Sequence[Collection[str]]) -> str:
    """How a run whose processes have all ended came out (each process's exit code and markers)."""
    states = [process_state(code, marks, alive=False) for code, marks in zip(codes, markers)]
    return run_state(states, list(codes))[0]
