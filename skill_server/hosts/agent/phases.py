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

Events (``EVENTS``) are what happened, numbered and kept (the newest ``KEEP_EVENTS``), each with the phase it
happened in: the policies act on them, observations report them. Four of them are a move's: they are recorded by
``Lifecycle.move`` only, together with the move (``MOVE_EVENTS``): ``stalled``, ``progressed``, ``timed_out`` and
``ended`` (the processes' end, on leaving the live phases). The others happen within a phase
(``Lifecycle.emit``): the monitor's first look (``started``), a first step, a first step overdue, an error
signature's first line, a process's end, a policy's action, and the run's end for good here (``finished``,
after its ``on_end`` action). Both go through this one place.

Happenings (``HAPPENINGS``) are what the user is told (the notify file and command, ``notifier``): a small set in
a fixed order, each made from one event by ``happening`` alone, one human line each. Many events are no
happening (a resume's intermediate steps, a warning, a process's end, an attempt's end that a relaunch follows),
so one resume is one ``restart``, and a warning is never a ``failure``. Stdlib only, Python 3.8.
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
EMITTED = ("started", "first_step", "first_step_overdue", "error", "process_ended", "action", "finished")
EVENTS = EMITTED + tuple(MOVE_EVENTS)
KEEP_EVENTS = 200

#: What the user is told, in the order they can happen to one attempt (a ``restart`` starts the next attempt,
#: whose happenings follow from ``first_step`` on): the processes are up; the first training step; an error
#: signature of severity error while the run is live; no progress (a stall, or no first step by its deadline); a
#: resume policy relaunched the run (which attempt, from which checkpoint); the run was stopped and will not be
#: relaunched (why); the run's end for good (its state, where its results are).
HAPPENINGS = ("started", "first_step", "failure", "stall", "restart", "stopped", "end")


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
        event: MonitorEvent = {"at": round(self.clock(), 3), "kind": kind, "seq": self.seq, "phase": self.phase}
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


# ---- happenings: what the user is told, from the events


def duration(seconds: object) -> str:
    """``2h05m``, ``3m41s``, ``12 s``: a duration as a person reads it."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return "?"
    s = int(round(max(0.0, float(seconds))))
    if s < 60:
        return "%d s" % s
    if s < 3600:
        return "%d min" % (s // 60) if s % 60 == 0 else "%dm%02ds" % (s // 60, s % 60)
    return "%d h" % (s // 3600) if s % 3600 == 0 else "%dh%02dm" % (s // 3600, (s % 3600) // 60)


def _clip(text: object, limit: int = 300) -> str:
    one = " ".join(str(text or "").split())
    return one if len(one) <= limit else one[:limit - 3] + "..."


def checkpoint_words(found: object) -> str:
    """``continuing from global_step_10 (/ckpt/global_step_10)``, or that it starts over."""
    if isinstance(found, dict) and isinstance(found.get("step"), int):
        return "continuing from global_step_%d (%s)" % (found["step"], found.get("path"))
    return "starting over (no global_step_N checkpoint found)"


#: A policy's trigger in words (``error:<signature>`` is said by its signature).
_TRIGGERS = {"stall": "it stalled (on_stall)", "first_step_overdue": "no first step by its deadline "
             "(on_first_step_overdue)", "max_time": "its max time was reached"}


def trigger_words(trigger: object) -> str:
    text = str(trigger or "")
    if text.startswith("error:"):
        return "%s (on_error)" % text[6:]
    return _TRIGGERS.get(text, text)


def _happening(kind: str, text: str, **fields: Any) -> dict[str, Any]:
    out = {"kind": kind, "text": _clip(text, 600)}
    out.update(fields)
    return out


def _started(event: Mapping[str, Any], attempt: int) -> list[dict[str, Any]]:
    if event.get("requeued"):  # its scheduler started the processes again: the same attempt, a restart
        text = "its %s job %s was requeued: the processes started again (attempt %d, start %s), %s" % (
            event.get("scheduler") or "scheduler's", event.get("job") or "", attempt, int(event["requeued"]) + 1,
            checkpoint_words(event.get("checkpoint")))
        return [_happening("restart", " ".join(text.split()), attempt=attempt, next_id=None, requeued=True,
                           checkpoint=event.get("checkpoint"), trigger="requeue")]
    if attempt > 1:
        return []  # the attempt before it told its ``restart``
    roles = [str(r) for r in event.get("roles") or []]
    due = event.get("first_step_s")
    text = "%d process%s up (%s)" % (len(roles), "" if len(roles) == 1 else "es", ", ".join(roles))
    if isinstance(due, (int, float)):
        text += "; first training step due within %s" % duration(due)
    return [_happening("started", text, roles=roles, first_step_s=due)]


def _first_step(event: Mapping[str, Any], policy: Mapping[str, Any], attempt: int) -> list[dict[str, Any]]:
    step = event.get("step")
    if attempt > 1:
        text = "attempt %d: first training step (step %s), %s after its start; %s" % (
            attempt, step, duration(event.get("at")), checkpoint_words(policy.get("resumed_from")))
    else:
        text = "first training step (step %s), %s after the start" % (step, duration(event.get("at")))
    return [_happening("first_step", text, step=step, role=event.get("role"))]


def _failure(event: Mapping[str, Any], policy: Mapping[str, Any]) -> list[dict[str, Any]]:
    if event.get("severity", "error") != "error" or event.get("phase", RUNNING) not in LIVE:
        return []  # a warning is never a failure; what a stop makes a process print is no failure either
    signature = event.get("signature")
    reaction = policy.get("on_error") if signature in (policy.get("errors") or []) else None
    text = "%s (error) in %s: %s" % (signature, event.get("role"), _clip(event.get("line")))
    if reaction:
        text += " -> on_error: %s" % reaction
    return [_happening("failure", text, signature=signature, severity="error", role=event.get("role"),
                       line=_clip(event.get("line"), 2000), policy=reaction)]


def _stall(event: Mapping[str, Any]) -> list[dict[str, Any]]:
    if event.get("kind") == "first_step_overdue":
        text = "no first training step within its deadline of %s (its output last grew %s ago)" % (
            duration(event.get("deadline_s")), duration(event.get("quiet_s")))
        return [_happening("stall", text, since="start", deadline_s=event.get("deadline_s"),
                           quiet_s=event.get("quiet_s"), last_step=None)]
    since = "the last step line" if event.get("since") == "step" else "the last output"
    text = "no progress for %s since %s (bound %s), at step %s" % (
        duration(event.get("quiet_s")), since, duration(event.get("bound_s")), event.get("last_step"))
    return [_happening("stall", text, since=event.get("since"), quiet_s=event.get("quiet_s"),
                       bound_s=event.get("bound_s"), last_step=event.get("last_step"))]


def _action(event: Mapping[str, Any], policy: Mapping[str, Any]) -> list[dict[str, Any]]:
    action, result, trigger = event.get("action"), str(event.get("result") or ""), event.get("trigger")
    if action == "stop":
        if result.startswith("stop failed"):
            text = "its policy's stop on %s failed: %s" % (trigger_words(trigger), result)
        else:
            text = "stopped for good: %s; %s" % (trigger_words(trigger), result)
        return [_happening("stopped", text, trigger=trigger, why=result)]
    if action != "resume":
        return []
    if event.get("next_id"):  # said as it starts the relaunch: before the new attempt can say anything
        attempt = event.get("attempt")
        most = int(policy.get("max_resumes") or 0) + 1
        text = "attempt %s of at most %d relaunched as %s after %s, %s" % (
            attempt, most, event.get("next_id"), trigger_words(trigger), checkpoint_words(event.get("checkpoint")))
        return [_happening("restart", text, attempt=attempt, next_id=event.get("next_id"),
                           checkpoint=event.get("checkpoint"), trigger=trigger)]
    if result.startswith("relaunch failed"):  # tried again (``resume.Resume``): a failure of the relaunch, not the end
        return [_happening("failure", "its relaunch after %s failed: %s" % (trigger_words(trigger), result[17:]),
                           signature="relaunch_failed", severity="error", role=None, line=_clip(result, 2000),
                           policy="resume")]
    if result.startswith(("cancelled", "given up")):
        return [_happening("stopped", "stopped for good, not relaunched: %s" % result, trigger=trigger, why=result)]
    if ", then stopped: " in result:  # relaunched, and stopped at once: a stop_experiment came while it started
        return [_happening("stopped", "stopped for good: stop_experiment was called as it was %s" % result,
                           trigger="stop_experiment", why=result)]
    return []  # the stop before the backoff, and the relaunch under way: the ``restart`` says both


def _end(event: Mapping[str, Any], attempt: int) -> list[dict[str, Any]]:
    out = []
    if event.get("stopped_by"):
        out.append(_happening("stopped", "stopped for good: %s was called" % event["stopped_by"],
                              trigger=event["stopped_by"], why="%s was called" % event["stopped_by"]))
    state, codes = event.get("state"), event.get("exit_codes") or {}
    text = "ended %s%s at step %s" % (state, " (attempt %d)" % attempt if attempt > 1 else "",
                                      event.get("last_step"))
    if codes:
        text += ", exit code%s %s" % ("" if len(codes) == 1 else "s", ", ".join(
            "%s" % c if len(codes) == 1 else "%s=%s" % (r, c) for r, c in sorted(codes.items())))
    if event.get("results"):
        text += "; results: %s" % event["results"]
        text += "; finish.flag written" if event.get("finish_flag") else "; no finish.flag (it did not finish)"
    elif event.get("collect_error"):
        text += "; results not written: %s" % event["collect_error"]
    out.append(_happening("end", text, state=state, exit_codes=codes, last_step=event.get("last_step"),
                          results=event.get("results"), finish_flag=event.get("finish_flag")))
    return out


def happenings(event: Mapping[str, Any], policy: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the user is told of one event (``HAPPENINGS``; most events tell nothing): each a ``kind``, a ``text``
    (one human line) and the kind's own fields. ``policy``: the run's (its attempt, what it acts on, where a
    resumed attempt continued from)."""
    kind = event.get("kind")
    attempt = int(policy.get("attempt") or 1)
    if kind == "started":
        return _started(event, attempt)
    if kind == "first_step":
        return _first_step(event, policy, attempt)
    if kind == "error":
        return _failure(event, policy)
    if kind in ("stalled", "first_step_overdue"):
        return _stall(event)
    if kind == "timed_out":
        return [_happening("stopped", "stopped for good: its max time of %s was reached" % duration(
            event.get("max_time_s")), trigger="max_time", why="max time reached")]
    if kind == "action":
        return _action(event, policy)
    if kind == "finished":
        return _end(event, attempt)
    return []
