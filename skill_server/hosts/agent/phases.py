"""A run's life on one host as its monitor sees it: a closed set of phases, and the events it records.

Phases (``PHASES``), each entered only from those ``MOVES`` allows:

* ``starting``: the processes were started, no training step was seen yet (the first-step deadline governs);
* ``running``: the first step was seen;
* ``stalled``: no progress for longer than the run's bound (``stall.StallWatch``); moving on returns it to
  ``running`` (or ``starting``, before any step);
* ``stopping``: a stop is under way (the max time was reached, or a policy stops it);
* ``backoff``: the processes ended here and a resume policy relaunches the run once its backoff is over;
* ``ended``: nothing more happens here (the processes ended and were read to the end; a resume relaunched the
  run as its next attempt, or was cancelled).

Events (``EVENTS``) are what happened, numbered and kept (the newest ``KEEP_EVENTS``): the policies act on
them, the notify command is told about them, observations report them. Four of them are a move's: they are
recorded by ``Lifecycle.move`` only, together with the move (``MOVE_EVENTS``): ``stalled``, ``progressed``,
``timed_out`` and ``ended`` (the processes' end, on leaving the live phases). The others happen within a
phase (``Lifecycle.emit``): a first step, an error signature's first line, a process's end, a policy's
action. Both go through this one place. Stdlib only, Python 3.8.
"""

from __future__ import annotations

from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from .protocol import MonitorDocument, MonitorEvent

STARTING, RUNNING, STALLED, STOPPING, BACKOFF, ENDED = "starting", "running", "stalled", "stopping", "backoff", "ended"
PHASES = (STARTING, RUNNING, STALLED, STOPPING, BACKOFF, ENDED)
#: The phases in which the run's processes may still be making progress (a stall can be judged).
LIVE = (STARTING, RUNNING, STALLED)
#: Phase -> the phases it may move to (a move to the phase it is in only records its event).
MOVES = {
    STARTING: (RUNNING, STALLED, STOPPING, BACKOFF, ENDED),
    RUNNING: (STALLED, STOPPING, BACKOFF, ENDED),
    STALLED: (STARTING, RUNNING, STOPPING, BACKOFF, ENDED),
    STOPPING: (BACKOFF, ENDED),
    BACKOFF: (ENDED,),
    ENDED: (),
}
#: A move's event -> the phases a move recording it may go to.
MOVE_EVENTS = {"stalled": (STALLED,), "progressed": (STARTING, RUNNING), "timed_out": (STOPPING,),
               "ended": (BACKOFF, ENDED)}
#: Events within a phase.
EMITTED = ("first_step", "error", "process_ended", "action")
EVENTS = EMITTED + tuple(MOVE_EVENTS)
KEEP_EVENTS = 200


class Lifecycle:
    """The run's phase and its events (what ``monitor.json`` keeps of them: ``phase``, ``events``, ``event_seq``)."""

    def __init__(self, clock: Callable[[], float], previous: Mapping[str, Any], phase: str) -> None:
        self.clock = clock
        self.phase = phase
        self.events: list[MonitorEvent] = list(previous.get("events") or [])
        self.seq = int(previous.get("event_seq") or 0)

    def emit(self, kind: str, **fields: Any) -> MonitorEvent:
        """Record an event that happens within the phase (``EMITTED``)."""
        if kind not in EMITTED:
            raise ValueError("%s is a move's event (Lifecycle.move)" % kind)
        return self._record(kind, fields)

    def move(self, phase: str, event: str | None = None, **fields: Any) -> MonitorEvent | None:
        """Enter ``phase`` (one ``MOVES`` allows, or the one the run is in) and record the move's ``event``."""
        if phase != self.phase and phase not in MOVES[self.phase]:
            raise ValueError("no move from %s to %s" % (self.phase, phase))
        if event is not None and phase not in MOVE_EVENTS[event]:
            raise ValueError("%s is not recorded by a move to %s" % (event, phase))
        self.phase = phase
        return self._record(event, fields) if event is not None else None

    def _record(self, kind: str, fields: Mapping[str, Any]) -> MonitorEvent:
        self.seq += 1
        event: MonitorEvent = {"at": round(self.clock(), 3), "kind": kind, "seq": self.seq}
        event.update(fields)  # type: ignore[typeddict-item]  # each kind's own keys (protocol.MonitorEvent)
        self.events = (self.events + [event])[-KEEP_EVENTS:]
        return event

    def since(self, seq: int) -> list[MonitorEvent]:
        """The events after number ``seq``, in order."""
        return [e for e in self.events if int(e.get("seq") or 0) > seq]

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "events": self.events, "event_seq": self.seq}


def resumed_phase(previous: MonitorDocument | Mapping[str, Any], first_step_seen: bool, all_ended: bool) -> str:
    """The phase a monitor takes up from its predecessor's document (a document from before phases has none: it
    is worked out from what that document says)."""
    phase = previous.get("phase")
    if phase in PHASES:
        return str(phase)
    if previous.get("ended"):
        return ENDED
    if previous.get("pending_resume") and all_ended:
        return BACKOFF
    if previous.get("timed_out"):
        return STOPPING
    if (previous.get("stall") or {}).get("stalled") is True:
        return STALLED
    return RUNNING if first_step_seen else STARTING
