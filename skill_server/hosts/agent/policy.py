"""When nobody is watching: what the launch asked the run's monitor to do, carried out on the run's host.

``Policy`` acts on the run's events (``phases``) with no tool call, server or ssh link: ``on_error`` (an error
signature of ``errors``), ``on_stall`` (the ``stalled`` event), ``on_first_step_overdue`` (no first step by the
first-step deadline) and ``on_end`` (the processes' end):

* ``notify``: tell only (the notify file and command, ``notifier``, are told every happening anyway);
* ``stop``: the complete stop of ``stop_experiment``, done by the run's backend (a monitor running inside a
  scheduler's job records and tells first, then cancels the job it runs in, and ends with it);
* ``resume``: stop, then once the processes ended the run waits in the ``backoff`` phase for ``backoff_s``
  (``resume.Resume``) and is relaunched as its next attempt ``<lineage>.r2``, ``.r3``... (``actions.relaunch_here``), at
  most ``max_resumes`` times and only after a failure classified transient (a signature of ``transient``, or a
  stall); the newest ``global_step_N`` checkpoint the logs name is said first (the trainer resumes from it by
  itself). The attempt it relaunched leaves the new attempt's record (``AttemptRecord``) for the controller;
  a ``stop_experiment`` during the backoff cancels the relaunch;
* ``collect`` (at the end): the results document and, once the experiment finished, ``finish.flag``
  (``results``).

Each action is recorded (``actions`` in ``monitor.json``: what triggered it and when) and is itself an event; the
run's end for good here is the ``finished`` event, after its ``on_end`` action. Every event goes through
``phases.happenings`` to the notifier: one line per happening. A policy acts only on the recorded identities of
its own run on this host. Everything the policies did and still owe is their own state (``PolicyState``). Stdlib
only, Python 3.8.
"""

from __future__ import annotations

import os
import time

from . import files, phases, results
from .notifier import FLUSH_S, NOTIFY_QUEUE, Notifier
from .protocol import TYPE_CHECKING
from .resume import checkpoint_dirs, newest_checkpoint
from .rundir import STOP_REQUESTED
from .stall import number
from .watchers import Watcher

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .protocol import ActionRecord, MonitorEvent, NotifyTally, PendingResume
    from .runstate import Run

#: Longest time the monitor delivers the last notifications before it ends (what is left then is recorded lost).
FINAL_NOTIFY_WAIT_S = FLUSH_S
KEEP_ACTIONS = 50
#: How long the wrap-up (``results.collect``) may keep the monitor from beating.
COLLECT_BUSY_S = 120.0
#: How often a notification under way is looked after.
BUSY_S = 0.25


class PolicyState:
    """What the policies did (``actions``), the notify tally and the happenings the notify command is still owed
    (``notify_queue``: a monitor that replaces this one sends them), the events handled so far (numbered up to
    ``policy_seq``), whether a policy stopped the run, and the resume it waits for (``pending_resume``)."""

    def __init__(self, previous: Mapping[str, Any]) -> None:
        self.actions: list[ActionRecord] = list(previous.get("actions") or [])
        self.notify: NotifyTally = dict(previous.get("notify") or {})  # type: ignore[assignment]
        self.policy_seq = int(previous.get("policy_seq") or 0)
        self.stopped_by_policy = any(a.get("action") in ("stop", "resume") for a in self.actions)
        self.pending_resume: PendingResume | None = previous.get("pending_resume") or None
        #: The happenings handled but not yet given to the notify command (the notifier's queue, itself).
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
        path = self.spec.get("notify_file")
        told = Notifier(self.spec.get("notify_command"), os.path.expanduser(path) if isinstance(path, str) and path
                        else None, self.state.notify, self.state.notify_queue)
        self.notifier = told if told.command or told.file_path else None
        #: How the run ended here (known once its processes have ended).
        self.ended_as: str | None = None
        if not previous.get("event_seq") or run.requeued:  # the processes are up (again, after a requeue)
            fields: dict[str, Any] = {}
            if run.requeued:
                fields = {"requeued": run.generation, "scheduler": run.backend.scheduler,
                          "job": run.backend.own_job(run.handle, run.dir), "checkpoint": newest_checkpoint(run)}
            run.emit("started", roles=[r.name for r in run.roles], first_step_s=run.spec.get("first_step_s"),
                     **fields)

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
        if self.notifier is not None:
            for happening in phases.happenings(event, self.spec):
                self.notifier.tell(run, dict(event), happening)
        if kind == "error" and event.get("signature") in (self.spec.get("errors") or []):
            self.act(run, self.spec.get("on_error"), "error:%s" % event.get("signature"))
        elif kind == "stalled":
            self.act(run, self.spec.get("on_stall"), "stall")
        elif kind == "first_step_overdue":
            self.act(run, self.spec.get("on_first_step_overdue"), "first_step_overdue")

    def act(self, run: Run, action: object, trigger: str) -> None:
        if action not in ("notify", "stop", "resume") or self.state.stopped_by_policy:
            return
        result = "told" if self.notifier is not None else "no notify_command or notify_file"
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

    def record(self, run: Run, trigger: str, action: str, result: str, **fields: Any) -> None:
        """One action: kept in ``actions`` and emitted as an ``action`` event (with ``fields``: a relaunch's
        attempt, its id and the checkpoint it continues from)."""
        entry: ActionRecord = {"at": round(run.clock(), 3), "wall": time.time(), "trigger": trigger, "action": action,
                               "result": result}
        self.state.actions = (self.state.actions + [entry])[-KEEP_ACTIONS:]
        run.emit("action", trigger=trigger, action=action, result=result, **fields)

    def processes_ended(self, run: Run, codes: dict[str, int | None]) -> None:
        """Every process ended here and its log was read: what happened up to now is handled first (an error in
        the last lines may ask for a resume); then the run waits for its resume (``backoff``), or it has ended
        and its ``on_end`` action is carried out; unless its scheduler requeued its job (the processes start again
        in a new life of the run: nothing ended for good, nothing is collected or told)."""
        self.tick(run, run.clock())
        self.ended_as = state = run.end_state()
        if run.backend.monitor_in_job and run.backend.requeued(run.dir, codes):  # started again: no end for good
            run.move(phases.ENDED, "ended", state=state, exit_codes=codes, requeued=True)
            return
        if self.state.pending_resume:
            run.move(phases.BACKOFF, "ended", state=state, exit_codes=codes)
            run.persist()  # status sees the pending resume through the whole backoff
            return
        run.move(phases.ENDED, "ended", state=state, exit_codes=codes)
        self.at_end(run, state)

    def at_end(self, run: Run, state: str) -> None:
        """The run ended here for good: its ``on_end`` action, then the ``finished`` event (what the ``end``
        happening says: the state, the last step, where the results are)."""
        written: dict[str, Any] = {}
        if self.spec.get("on_end") == "collect" and self.spec.get("collect"):
            run.beat(busy_s=COLLECT_BUSY_S)  # reading every attempt's points and writing the pages
            written = results.collect(run, state, self.state.actions, sorted(checkpoint_dirs(run)))
            self.record(run, "end:" + state, "collect", written["result"])
        elif self.spec.get("on_end") == "notify":
            self.record(run, "end:" + state, "notify", "told" if self.notifier is not None else
                        "no notify_command or notify_file")
        steps = [r.found.global_step for r in run.roles if isinstance(r.found.global_step, int)]
        stopped_by = ("stop_experiment" if state == "stopped" and run.files.has(STOP_REQUESTED)
                      and not self.state.stopped_by_policy else None)
        run.emit("finished", state=state, exit_codes={r.name: run.files.exit_code(r.name) for r in run.roles},
                 last_step=max(steps) if steps else None, results=written.get("results"),
                 finish_flag=written.get("finish_flag"), collect_error=written.get("error"), stopped_by=stopped_by)

    def flush(self, run: Run) -> None:
        """Tell what is still to be told before the monitor ends (``Notifier.flush``: the end first when time
        is short)."""
        self.tick(run, run.clock())
        if self.notifier is not None:
            self.notifier.flush(run, FINAL_NOTIFY_WAIT_S)
