"""When nobody is watching: the run monitor's stall detection, its policies and the user's notify command.

Three more watchers of the run monitor (``monitor.run_loop``), reading the findings the log tails keep:

* ``StallWatch``: a run whose progress stopped while its processes live. The bound comes from the run's own pace:
  ``max(stall_floor_s, stall_k x median step time)`` (``timing_s/step`` of its step lines, else the pace the
  monitor saw the steps arrive at). The clock counts from the newest step line; a run that never printed a
  step line counts from the last growth of its logs, only when its policy has ``on_stall`` and once its
  first-step deadline has passed (before that the deadline governs; a silent Ray head is no stall).
  It emits ``stalled`` (the last step, for how long, the bound) once per quiet spell, and ``progressed``
  when the run moves again.
* ``Policy``: what the launch asked for (``on_error``, ``on_stall``, ``on_end``), carried out here with no
  tool call, server or ssh link: ``notify`` (tell only), ``stop`` (the complete stop of ``stop_experiment``,
  through ``actions.stop_here``), ``resume`` (stop, wait ``backoff_s``, then relaunch the same processes as
  the next attempt ``<id>.r2``, ``.r3``... through ``actions.relaunch_here``, at most ``max_resumes`` times and
  only after a failure classified transient: a signature of ``transient``, or a stall; the newest
  ``global_step_N`` checkpoint the logs name is said first, the trainer resumes from it by itself), and at
  the end ``collect`` (``results.md`` and ``finish.flag``). Each action is recorded (``actions`` in
  ``monitor.json``: what triggered it and when) and is itself an event. A policy acts only on the recorded
  identities of its own run on this host.
* ``Notifier`` (driven by ``Policy``): the user's ``notify_command``, run by ``/bin/sh -c`` with one event as
  a JSON object on stdin, in a process group of its own, at most ``NOTIFY_TIMEOUT_S`` (then killed), one at
  a time in the events' order, reaped by later ticks so it never blocks another watcher. Failures are
  recorded (``notify``), never retried.

Stdlib only, Python 3.8.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

from . import files
from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

    from .monitor import Run

STALL_K = 5.0
STALL_FLOOR_S = 900.0
NOTIFY_TIMEOUT_S = 10.0
#: One at a time, so the user's channel gets the events in their order.
NOTIFY_AT_ONCE = 1
NOTIFY_QUEUE = 50
#: The events the notify command is told about.
TOLD = ("first_step", "error", "stalled", "action", "timed_out", "ended")
#: Longest time ``finish`` waits for the last notifications to be delivered.
FINAL_NOTIFY_WAIT_S = NOTIFY_TIMEOUT_S + 1.0
KEEP_ACTIONS = 50


def _median(values: list[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def _number(value: object, default: float) -> float:
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
    floor = _number(policy.get("stall_floor_s"), STALL_FLOOR_S)
    pace = pace_s(run)
    return max(floor, _number(policy.get("stall_k"), STALL_K) * pace) if pace else floor


def quiet_from(run: Run, now: float) -> tuple[str, float, int | None] | None:
    """(what the stall clock counts from, its start on the run clock, the last step), or None while a stall
    cannot be: the run ended here, reached its max time, or has not passed its first-step deadline silently."""
    if run.timed_out or all(r.ended for r in run.roles):
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


class StallWatch:
    """Decides, once a second, whether the run is stalled (the scheduler calls ``tick``)."""

    pace_s = 1.0

    def __init__(self) -> None:
        self.due = 0.0

    def tick(self, run: Run, now: float) -> float | None:
        found = quiet_from(run, now)
        was = run.stall.get("stalled") is True
        if found is None:
            if run.stall:
                run.stall = {}
                run.urgent = True
            return None
        since, start, step = found
        bound = round(stall_bound_s(run), 1)
        stalled = now - start >= bound
        if was and not stalled:
            run.emit("progressed", since=since, last_step=step, stalled_s=round(now - float(
                run.stall.get("stalled_at") or now), 1))
        state = {"stalled": stalled, "since": since, "from": round(start, 3), "bound_s": bound, "last_step": step,
                 "stalled_at": run.stall.get("stalled_at") if was and stalled else (round(now, 3) if stalled else None)}
        if state != run.stall:
            run.stall = state
        if stalled and not was:
            run.emit("stalled", since=since, last_step=step, quiet_s=round(now - start, 1), bound_s=bound)
        return None


# --------------------------------------------------------------------------------------------------
# telling the user


class Notifier:
    """Runs the notify command once per event, bounded in time, without waiting for it."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.queue: list[dict[str, Any]] = []
        self.children: list[tuple[Any, float, str]] = []  # (Popen, started on the monotonic clock, event kind)

    def send(self, run: Run, event: dict[str, Any]) -> None:
        if len(self.queue) >= NOTIFY_QUEUE:
            run.notify["dropped"] = int(run.notify.get("dropped") or 0) + 1
            return
        payload = {"exp_id": run.exp_id, "host": os.uname()[1], "time": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": event.get("kind")}
        payload.update({k: v for k, v in event.items() if k != "kind"})
        self.queue.append(payload)

    def pump(self, run: Run) -> None:
        """Reap what ended, kill what ran too long, start what waits (at most ``NOTIFY_AT_ONCE`` at a time)."""
        still = []
        for child, started, kind in self.children:
            code = child.poll()
            if code is None and time.monotonic() - started >= NOTIFY_TIMEOUT_S:
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except OSError:
                    pass
                child.wait()
                run.notify["killed"] = int(run.notify.get("killed") or 0) + 1
                self.failed(run, kind, "killed after %d s" % NOTIFY_TIMEOUT_S)
            elif code is None:
                still.append((child, started, kind))
            elif code != 0:
                self.failed(run, kind, "exit code %d" % code)
            else:
                run.notify["sent"] = int(run.notify.get("sent") or 0) + 1
        self.children = still
        while self.queue and len(self.children) < NOTIFY_AT_ONCE:
            self.start(run, self.queue.pop(0))

    def start(self, run: Run, payload: dict[str, Any]) -> None:
        import subprocess

        kind = str(payload.get("event"))
        path = run.path("notify.%d.json" % os.getpid())
        try:
            files.write_atomic(path, (json.dumps(payload) + "\n").encode("utf-8"), replace=True, mode=0o600)
            with open(path, "rb") as stdin, open(run.path("notify.log"), "ab") as log:
                os.unlink(path)  # the child reads the open file; nothing is left behind
                env = dict(os.environ, AJS_EVENT=kind, AJS_EXP_ID=run.exp_id)
                child = subprocess.Popen(["/bin/sh", "-c", self.command], stdin=stdin, stdout=log, stderr=log,
                                         cwd=run.dir, env=env, start_new_session=True, close_fds=True)
        except (OSError, files.AgentError) as exc:
            self.failed(run, kind, "cannot start: %s" % (getattr(exc, "strerror", None) or exc))
            return
        self.children.append((child, time.monotonic(), kind))

    def failed(self, run: Run, kind: str, why: str) -> None:
        run.notify["failed"] = int(run.notify.get("failed") or 0) + 1
        run.notify["last_failure"] = {"at": round(run.clock(), 3), "event": kind, "error": why}
        run.urgent = True

    def idle(self) -> bool:
        return not self.queue and not self.children


# --------------------------------------------------------------------------------------------------
# the policies


def end_state(run: Run) -> str:
    """How the run ended on this host, from its exit codes and markers (as ``experiments.states`` derives it)."""
    codes = [files.read_int(run.path(r.name + ".exit")) for r in run.roles]
    marked = [m for r in run.roles for m in ("timedout", "stopped") if files.exists(run.path(r.name + "." + m))]
    if "timedout" in marked:
        return "timed_out"
    if "stopped" in marked:
        return "stopped"
    if any(c is None for c in codes):
        return "lost"
    return "succeeded" if all(c == 0 for c in codes) else "failed"


class Policy:
    """Acts on the run's events as its launch asked; tells the notify command about them."""

    pace_s = 0.25

    def __init__(self, run: Run) -> None:
        self.due = 0.0
        self.spec: dict[str, Any] = dict(run.spec.get("policy") or {})
        command = self.spec.get("notify_command")
        self.notifier = Notifier(command) if isinstance(command, str) and command.strip() else None

    def tick(self, run: Run, now: float) -> float | None:
        fresh = [e for e in run.events if int(e.get("seq") or 0) > run.policy_seq]
        for event in fresh:
            run.policy_seq = max(run.policy_seq, int(event.get("seq") or 0))
            self.handle(run, event)
        if self.notifier is not None:
            self.notifier.pump(run)
        return None

    def handle(self, run: Run, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        if self.notifier is not None and kind in TOLD:
            self.notifier.send(run, event)
        if kind == "error" and event.get("signature") in (self.spec.get("errors") or []):
            self.act(run, self.spec.get("on_error"), "error:%s" % event.get("signature"))
        elif kind == "stalled":
            self.act(run, self.spec.get("on_stall"), "stall")

    def act(self, run: Run, action: object, trigger: str) -> None:
        if action not in ("notify", "stop", "resume") or run.stopped_by_policy:
            return
        result = "told" if self.notifier is not None else "no notify_command"
        if action == "resume":
            refused = self.not_resumable(run, trigger)
            run.stopped_by_policy = True
            backoff = _number(self.spec.get("backoff_s"), 0.0)
            if not refused:  # written before the processes end: no look may see an ended run with nothing pending
                run.pending_resume = {"trigger": trigger, "due": round(run.clock() + backoff, 3)}
                run.persist()
            result = self.stop(run, trigger)
            if refused:
                action, result = "stop", "%s; not resumed: %s" % (result, refused)
            else:
                result = "%s; relaunching in %d s" % (result, backoff)
        elif action == "stop":
            run.stopped_by_policy = True
            if run.spec.get("slurm"):
                self.cancel_job(run, trigger)
                return
            result = self.stop(run, trigger)
        self.record(run, trigger, str(action), result)

    def cancel_job(self, run: Run, trigger: str) -> None:
        """``stop`` for a Slurm run, from its monitor inside the job: the roles marked stopped, the action recorded,
        told and written to ``monitor.json`` first (the monitor ends with the job), then the job cancels itself."""
        from . import actions

        for role in run.roles:
            if not role.ended:
                run.note(role, "policy: %s, cancelling the run's Slurm job" % trigger)
        actions.mark_stopped(run.dir, [r.name for r in run.roles])
        self.record(run, trigger, "stop", "cancelling its Slurm job %s" % (
            os.environ.get("SLURM_JOB_ID") or "(id unknown)"))
        self.tick(run, run.clock())
        end = time.monotonic() + FINAL_NOTIFY_WAIT_S
        while self.notifier is not None and not self.notifier.idle() and time.monotonic() < end:
            time.sleep(0.05)
            self.notifier.pump(run)
        run.persist()
        try:
            actions.cancel_own_job(run.dir)
        except files.AgentError as exc:
            self.record(run, trigger, "stop", "stop failed: %s" % exc.message)

    def not_resumable(self, run: Run, trigger: str) -> str | None:
        """Why this failure is not resumed (None: it is): not transient, or no resumes left."""
        if trigger.startswith("error:") and trigger[6:] not in (self.spec.get("transient") or []):
            return "%s is not classified transient" % trigger[6:]
        attempt = int(self.spec.get("attempt") or 1)
        most = int(self.spec.get("max_resumes") or 0)
        if attempt - 1 >= most:
            return "gave up after %d resume%s" % (most, "" if most == 1 else "s")
        return None

    def stop(self, run: Run, trigger: str) -> str:
        from . import actions

        for role in run.roles:
            if not role.ended:
                run.note(role, "policy: %s, stopping the run" % trigger)
        roles = [{"role": r["role"], "pid": r.get("pid"), "start": r.get("start"), "pane_id": r.get("pane_id")}
                 for r in run.spec["roles"]]
        try:
            report = actions.stop_here(run.exp_id, run.dir, roles, _number(run.spec.get("grace_s"), 5.0),
                                       str(run.spec.get("socket_path") or ""), None)
        except (OSError, files.AgentError) as exc:
            return "stop failed: %s" % exc
        if report["survivors"]:
            return "stopped; %d process(es) survived SIGKILL" % len(report["survivors"])
        return "stopped"

    def record(self, run: Run, trigger: str, action: str, result: str) -> None:
        entry = {"at": round(run.clock(), 3), "wall": time.time(), "trigger": trigger, "action": action,
                 "result": result}
        run.actions = (run.actions + [entry])[-KEEP_ACTIONS:]
        run.emit("action", trigger=trigger, action=action, result=result)

    def at_end(self, run: Run) -> None:
        """The run ended here: the resume it waits for, else its ``on_end`` action; then the notifications still
        due (bounded in time)."""
        state = end_state(run)
        self.tick(run, run.clock())  # what happened up to the end is told first (a resume then waits its backoff)
        if run.pending_resume and self.resume(run):
            pass  # the chain goes on: the last attempt collects
        elif self.spec.get("on_end") == "collect" and self.spec.get("collect"):
            self.record(run, "end:" + state, "collect", collect(run, state))
        elif self.spec.get("on_end") == "notify":
            self.record(run, "end:" + state, "notify", "told" if self.notifier is not None else "no notify_command")
        self.tick(run, run.clock())  # the ``ended`` event and the action, told
        end = time.monotonic() + FINAL_NOTIFY_WAIT_S
        while self.notifier is not None and not self.notifier.idle() and time.monotonic() < end:
            time.sleep(0.05)
            self.notifier.pump(run)

    def resume(self, run: Run) -> bool:
        """After the backoff, relaunch the run as its next attempt (the checkpoint it continues from said first)
        and leave the record the controller imports (``NEXT_ATTEMPT``); whether it started."""
        from . import actions

        pending = dict(run.pending_resume or {})
        trigger = str(pending.get("trigger") or "resume")
        run.persist()  # a run that ended by itself: status sees the pending resume through the whole backoff
        while run.clock() < float(pending.get("due") or 0):
            time.sleep(min(0.25, max(0.0, float(pending["due"]) - run.clock())))
            self.tick(run, run.clock())
        if files.exists(run.path(actions.STOP_REQUESTED)):
            run.pending_resume = None
            self.record(run, trigger, "resume", "cancelled: stop_experiment was called")
            return False
        attempt = int(self.spec.get("attempt") or 1) + 1
        new_id = "%s.r%d" % (first_attempt(run.exp_id), attempt)
        found = newest_checkpoint(run)
        where = ("continuing from global_step_%d (%s)" % (found["step"], found["path"]) if found
                 else "starting over: no global_step_N checkpoint found")
        self.record(run, trigger, "resume", "relaunching as %s, %s" % (new_id, where))
        self.tick(run, run.clock())  # told before it starts
        policy = dict(self.spec, attempt=attempt, previous=run.exp_id)
        try:
            started = actions.relaunch_here(run.dir, new_id, policy)
        except files.AgentError as exc:
            run.pending_resume = None
            self.record(run, trigger, "resume", "relaunch failed: %s" % exc.message)
            return False
        record = {"id": new_id, "attempt": attempt, "previous": run.exp_id, "trigger": trigger, "wall": time.time(),
                  "checkpoint": found, "launch": started}
        try:
            files.write_atomic(run.path(NEXT_ATTEMPT), json.dumps(record).encode("utf-8"), replace=False, mode=0o600)
        except files.AgentError:
            pass
        run.pending_resume = None  # the next attempt's record is on disk: the chain goes on there
        self.record(run, trigger, "resume", "relaunched as %s" % new_id)
        return True


def first_attempt(exp_id: str) -> str:
    """The id of a chain's first run (``x.r3`` -> ``x``)."""
    head, _, tail = exp_id.rpartition(".r")
    return head if head and tail.isdigit() else exp_id


#: Where a resumed run's monitor leaves its next attempt's record (``experiments.attempts`` imports it).
NEXT_ATTEMPT = "next_attempt.json"
#: A path naming a verl checkpoint folder in a log line (verl prints ``local_global_step_folder: <path>``).
_CHECKPOINT_RE = re.compile(r"([^\s'\"=,()\[\]]*)global_step_(\d{1,15})\b")
CHECKPOINT_TAIL_BYTES = 8 * 1024 * 1024


def newest_checkpoint(run: Run) -> dict[str, Any] | None:
    """The newest ``global_step_N`` folder that exists, in the directories the run's logs name (the last
    ``CHECKPOINT_TAIL_BYTES`` of each), found by the agent's checkpoint listing; None: the run starts over."""
    from .checkpoints import op_checkpoints

    folders = set()
    for role in run.roles:
        size = files.file_size(role.log_path) or 0
        try:
            _, data = files.read_range(role.log_path, max(0, size - CHECKPOINT_TAIL_BYTES), CHECKPOINT_TAIL_BYTES)
        except (OSError, files.AgentError):
            continue
        workdir = str(role.spec.get("workdir") or "")
        for match in _CHECKPOINT_RE.finditer(data.decode("utf-8", "replace")):
            parent = match.group(1).rstrip("/") or "."
            folders.add(os.path.normpath(os.path.join(workdir, parent)))
    best: dict[str, Any] | None = None
    for folder in sorted(folders):
        if not os.path.isabs(folder) or not os.path.isdir(folder):
            continue
        try:
            listing = op_checkpoints({"path": folder, "max_depth": 0, "limit": 1})
        except files.AgentError:
            continue
        for c in listing["checkpoints"]:
            if best is None or c["step"] > best["step"]:
                best = {"step": c["step"], "path": c["path"]}
    return best


# --------------------------------------------------------------------------------------------------
# collecting the results at the end


def _results_text(run: Run, state: str) -> str:
    """A results.md from what the monitor knows (the last step and metrics, errors, actions); a later
    ``collect_results`` call replaces it with the full one (tables from the registry's history, a plot)."""
    lines = ["# Results of %s" % run.exp_id, "",
             "Written by the run's monitor on this host when the run ended (nobody was asked); "
             "`collect_results` rewrites it with the full tables and a plot.", "",
             "- state: %s" % state]
    for role in run.roles:
        f = role.found
        lines.append("- %s: exit code %s, last step %s" % (role.name, files.read_int(run.path(role.name + ".exit")),
                                                           f.global_step))
    metrics = {}
    for role in run.roles:
        metrics.update(role.found.last_metrics or {})
    if metrics:
        lines += ["", "## Last metrics", "", "| metric | value |", "| --- | --- |"]
        lines += ["| %s | %s |" % (k, v) for k, v in sorted(metrics.items())]
    errors = [(role.name, name, hit) for role in run.roles for name, hit in sorted(role.found.errors.items())]
    if errors:
        lines += ["", "## Errors", "", "| process | signature | count | first line |", "| --- | --- | --- | --- |"]
        lines += ["| %s | %s | %s | `%s` |" % (r, n, h.get("count"), str(h.get("first_line", ""))[:200].replace(
            "|", "\\|")) for r, n, h in errors]
    if run.actions:
        lines += ["", "## Policy actions", ""]
        lines += ["- %s: %s -> %s (%s)" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(a["wall"]))),
                                            a["trigger"], a["action"], a["result"]) for a in run.actions]
    return "\n".join(lines) + "\n"


def collect(run: Run, state: str) -> str:
    """Write ``<result_dir>/<id>/results.md`` and ``<result_dir>/finish.flag``; what was written."""
    result_dir = run.spec.get("result_dir")
    if not isinstance(result_dir, str) or not result_dir:
        return "no result_dir"
    folder = os.path.join(result_dir, run.exp_id)
    try:
        os.makedirs(folder, exist_ok=True)
        files.write_atomic(os.path.join(folder, "results.md"), _results_text(run, state).encode("utf-8"),
                           replace=True)
        files.write_atomic(os.path.join(result_dir, "finish.flag"), b"", replace=True)
    except (OSError, files.AgentError) as exc:
        return "collect failed: %s" % (getattr(exc, "strerror", None) or exc)
    return "results.md and finish.flag written in %s" % result_dir


__all__ = ["Notifier", "Policy", "StallWatch", "collect", "pace_s", "stall_bound_s"]
