"""When nobody is watching: what the launch asked the run's monitor to do, carried out on the run's host.

``Policy`` acts on the run's events (``phases``) with no tool call, server or ssh link: ``on_error`` (an error
signature of ``errors``), ``on_stall`` (the ``stalled`` event) and ``on_end`` (the processes' end):

* ``notify``: tell only (the notify command, ``notifier``, is told about every event of ``TOLD`` anyway);
* ``stop``: the complete stop of ``stop_experiment``, done by the run's backend (a monitor running inside a
  scheduler's job records and tells first, then cancels the job it runs in, and ends with it);
* ``resume``: stop, then once the processes ended the run waits in the ``backoff`` phase for ``backoff_s``
  (``resume.Resume``) and is relaunched as its next attempt ``<lineage>.r2``, ``.r3``... (``actions.relaunch_here``), at
  most ``max_resumes`` times and only after a failure classified transient (a signature of ``transient``, or a
  stall); the newest ``global_step_N`` checkpoint the logs name is said first (the trainer resumes from it by
  itself). The attempt it relaunched leaves the new attempt's record (``AttemptRecord``) for the controller;
  a ``stop_experiment`` during the backoff cancels the relaunch;
* ``collect`` (at the end): ``results.md`` and ``finish.flag`` (``results``).

Each action is recorded (``actions`` in ``monitor.json``: what triggered it and when) and is itself an event.
A policy acts only on the recorded identities of its own run on this host. Everything the policies did and
still owe is their own state (``PolicyState``). Stdlib only, Python 3.8.
"""

from __future__ import annotations

import time

from . import files, phases, results
from .notifier import FLUSH_S, NOTIFY_QUEUE, Notifier
from .protocol import TYPE_CHECKING
from .stall import number
from .watchers import Watcher

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .protocol import ActionRecord, MonitorEvent, NotifyTally, PendingResume
    from .runstate import Run

#: The events the notify command is told about.
TOLD = ("first_step", "error", "stalled", "action", "timed_out", "ended")
#: Longest time the monitor delivers the last notifications before it ends (what is left then is recorded lost).
FINAL_NOTIFY_WAIT_S = FLUSH_S
KEEP_ACTIONS = 50
#: How often a notification under way is looked after, and how often a backoff looks for a stop request.
BUSY_S = 0.25


class PolicyState:
    """What the policies did (``actions``), the notify command's tally and the notifications it still owes, the
    events handled so far (numbered up to ``policy_seq``), whether a policy stopped the run, and the resume it waits
    for (``pending_resume``)."""

    def __init__(self, previous: Mapping[str, Any]) -> None:
        self.actions: list[ActionRecord] = list(previous.get("actions") or [])
        self.notify: NotifyTally = dict(previous.get("notify") or {})  # type: ignore[assignment]
        self.policy_seq = int(previous.get("policy_seq") or 0)
        self.stopped_by_policy = any(a.get("action") in ("stop", "resume") for a in self.actions)
        self.pending_resume: PendingResume | None = previous.get("pending_resume") or None
        #: The notifications handled but not yet given to the notify command (the notifier's queue, itself).
        self.notify_queue: list[dict[str, Any]] = [p for p in previous.get("notify_queue") or []
                                                   if isinstance(p, dict)][:NOTIFY_QUEUE]

    def to_json(self) -> dict[str, Any]:
        return {"policy_seq": self.policy_seq, "actions": self.actions, "notify": self.notify,
                "pending_resume": self.pending_resume, "notify_queue": self.notify_queue}


class Policy(Watcher):
    """Acts on the run's events as its launch asked; tells the notify command about them."""

    wakes_on = ("events",)
    pace_s = 3600.0  # new events wake it

    def __init__(self, run: Run, previous: Mapping[str, Any]) -> None:
        super().__init__()
        self.spec: dict[str, Any] = dict(run.spec.get("policy") or {})
        self.state = PolicyState(previous)
        run.parts.append(self.state)
        command = self.spec.get("notify_command")
        self.notifier = (Notifier(command, self.state.notify, self.state.notify_queue)
                         if isinstance(command, str) and command.strip() else None)
        #: How the run ended here (known once its processes have ended).
        self.ended_as: str | None = None

    def tick(self, run: Run, now: float) -> float | None:
        for event in run.life.since(self.state.policy_seq):
            self.state.policy_seq = max(self.state.policy_seq, int(event.get("seq") or 0))
            self.handle(run, event)
            run.changed()
        if self.notifier is None:
            return None
        if self.notifier.pump(run):
            run.changed()
        return None if self.notifier.idle() else BUSY_S

    def handle(self, run: Run, event: MonitorEvent) -> None:
        kind = event.get("kind")
        if self.notifier is not None and kind in TOLD:
            self.notifier.send(run, event)
        if kind == "error" and event.get("signature") in (self.spec.get("errors") or []):
            self.act(run, self.spec.get("on_error"), "error:%s" % event.get("signature"))
        elif kind == "stalled":
            self.act(run, self.spec.get("on_stall"), "stall")

    def act(self, run: Run, action: object, trigger: str) -> None:
        if action not in ("notify", "stop", "resume") or self.state.stopped_by_policy:
            return
        result = "told" if self.notifier is not None else "no notify_command"
        if action == "resume":
            refused = self.not_resumable(run, trigger)
            self.state.stopped_by_policy = True
            backoff = number(self.spec.get("backoff_s"), 0.0)
            if not refused:  # written before the processes end: no look may see an ended run with nothing pending
                self.state.pending_resume = {"trigger": trigger, "due": round(run.clock() + backoff, 3)}
                run.persist()
            result = self.stop(run, trigger)
            if refused:
                action, result = "stop", "%s; not resumed: %s" % (result, refused)
            else:
                result = "%s; relaunching in %d s" % (result, backoff)
        elif action == "stop":
            self.state.stopped_by_policy = True
            if run.backend.monitor_in_job:
                self.cancel_job(run, trigger)
                return
            result = self.stop(run, trigger)
        self.record(run, trigger, str(action), result)

    def cancel_job(self, run: Run, trigger: str) -> None:
        """``stop`` from a monitor inside the run's job: the roles marked stopped, the action recorded, told and
        written to ``monitor.json`` first (the monitor ends with the job), then the job cancels itself."""
        backend = run.backend
        run.beat(busy_s=FINAL_NOTIFY_WAIT_S + 60)  # told first, then scancel
        for role in run.roles:
            if not role.ended:
                run.note(role, "policy: %s, cancelling the run's %s job" % (trigger, backend.scheduler))
        run.files.mark_stopped([r.name for r in run.roles])
        self.stopping(run)
        self.record(run, trigger, "stop", "cancelling its %s job %s" % (
            backend.scheduler, backend.own_job(run.handle, run.dir) or "(id unknown)"))
        self.tick(run, run.clock())
        self.flush(run)
        run.persist()
        try:
            backend.cancel_own_job(run.handle, run.dir)
        except files.AgentError as exc:
            self.record(run, trigger, "stop", "stop failed: %s" % exc.message)

    def not_resumable(self, run: Run, trigger: str) -> str | None:
        """Why this failure is not resumed (None: it is): not transient, or no resumes left."""
        if not run.backend.can_resume:
            return "a %s run is not relaunched here" % run.backend.kind
        if trigger.startswith("error:") and trigger[6:] not in (self.spec.get("transient") or []):
            return "%s is not classified transient" % trigger[6:]
        attempt = int(self.spec.get("attempt") or 1)
        most = int(self.spec.get("max_resumes") or 0)
        if attempt - 1 >= most:
            return "gave up after %d resume%s" % (most, "" if most == 1 else "s")
        return None

    @staticmethod
    def stopping(run: Run) -> None:
        if run.phase in phases.LIVE:
            run.move(phases.STOPPING)

    def stop(self, run: Run, trigger: str) -> str:
        self.stopping(run)
        for role in run.roles:
            if not role.ended:
                run.note(role, "policy: %s, stopping the run" % trigger)
        roles: list[dict[str, object]] = [
            {"role": r["role"], "pid": r.get("pid"), "start": r.get("start"), "pane_id": r.get("pane_id")}
            for r in run.spec["roles"]]
        grace = number(run.spec.get("grace_s"), 5.0)
        run.beat(busy_s=grace + 30)  # a stop takes its grace and the waits after SIGTERM and SIGKILL
        try:
            report = run.backend.stop(run.handle, run.exp_id, run.dir, roles, grace)
        except (OSError, files.AgentError) as exc:
            return "stop failed: %s" % exc
        if report["survivors"]:
            return "stopped; %d process(es) survived SIGKILL" % len(report["survivors"])
        return "stopped"

    def record(self, run: Run, trigger: str, action: str, result: str) -> None:
        entry: ActionRecord = {"at": round(run.clock(), 3), "wall": time.time(), "trigger": trigger, "action": action,
                               "result": result}
        self.state.actions = (self.state.actions + [entry])[-KEEP_ACTIONS:]
        run.emit("action", trigger=trigger, action=action, result=result)

    def processes_ended(self, run: Run, codes: dict[str, int | None]) -> None:
        """Every process ended here and its log was read: what happened up to now is handled first (an error in
        the last lines may ask for a resume); then the run waits for its resume (``backoff``), or it has ended
        and its ``on_end`` action is carried out."""
        self.tick(run, run.clock())
        self.ended_as = state = run.end_state()
        if self.state.pending_resume:
            run.move(phases.BACKOFF, "ended", state=state, exit_codes=codes)
            run.persist()  # status sees the pending resume through the whole backoff
            return
        run.move(phases.ENDED, "ended", state=state, exit_codes=codes)
        self.at_end(run, state)

    def at_end(self, run: Run, state: str) -> None:
        """The run ended here for good: its ``on_end`` action."""
        if self.spec.get("on_end") == "collect" and self.spec.get("collect"):
            self.record(run, "end:" + state, "collect", results.collect(run, state, self.state.actions))
        elif self.spec.get("on_end") == "notify":
            self.record(run, "end:" + state, "notify", "told" if self.notifier is not None else "no notify_command")

    def flush(self, run: Run) -> None:
        """Tell what is still to be told (the end first when time is short) before the monitor ends."""
        self.tick(run, run.clock())
        if self.notifier is not None:
            self.notifier.flush(run, FINAL_NOTIFY_WAIT_S)
