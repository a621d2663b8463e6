"""How states are derived from what a host reports (pure functions, no I/O).

The truth about a process is whether it lives (its backend says: the wrapper's pid plus start time, its pane for
the oldest runs, or its scheduler for a job), its exit code and its markers (``stopped``: a stop was requested;
``timedout``: the run's monitor ended it at the max time; ``gate``/``started``: waiting for a URL, then started;
``queued``: its scheduler has not started it yet; ``survivors``: a process of it outlived a stop's SIGKILL and
still lives). The host agent checks liveness before reading the exit file, so "dead without an exit code" really
means the wrapper died without recording one. The rules are the host agent's own (``hosts.agent.outcome``), so
what a run's monitor says of its end and what status says always agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from skill_server.hosts.agent import outcome


@dataclass
class ProcFacts:
    """What one host said about one process in one observation."""

    alive: bool | None
    exit_code: int | None
    markers: frozenset[str] = field(default_factory=frozenset)
    final: bool = False
    size: int | None = None


def process_state(facts: ProcFacts | None) -> str:
    """The state of one process; ``facts`` is None when its host could not be asked."""
    if facts is None:
        return "unreachable"
    return outcome.process_state(facts.exit_code, facts.markers, bool(facts.alive))


def run_state(states: list[str], codes: list[int | None]) -> tuple[str, int | None, str | None]:
    """(state, exit code, note) of a run from its processes' states and exit codes."""
    return outcome.run_state(states, codes)
