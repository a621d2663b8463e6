"""The ``backoff`` phase of a run whose resume policy stopped it (``policy.Policy``): once the backoff is over the
run is relaunched here as its next attempt ``<lineage>.r2``, ``.r3``... (``actions.relaunch_here``), the
checkpoint it continues from said first, and the record the controller takes up is left
(``rundir.NEXT_ATTEMPT``).

A relaunch that cannot be carried out (a full disk, the launch refused) is recorded as failed with its cause and
tried again (after ``RETRY_S``, growing) until it succeeds or ``GIVE_UP_S`` have passed since the first failure:
the pending resume says so meanwhile (``failed``, ``tries``), so that nobody promises a relaunch that is not
coming. What a failed try left of the new attempt's run directory (nothing of it ran) never blocks the next try.
A ``stop_experiment`` cancels a relaunch still to come, and ends one it overlapped at once. Stdlib only,
Python 3.8.
"""

from __future__ import annotations

import os
import re
import time

from . import files, phases
from .notifier import NOTIFY_TIMEOUT_S
from .protocol import TYPE_CHECKING
from .rundir import DISCARDED, NEXT_ATTEMPT, SPEC, STOP_REQUESTED, RunDir
from .watchers import Watcher

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .policy import Policy
    from .protocol import AttemptRecord, CheckpointRef, PendingResume
    from .runstate import Run

#: How often a backoff looks for a stop request.
LOOK_S = 0.5
#: The waits before each try again of a relaunch that failed, and how long it is tried.
RETRY_S = (30, 60, 120, 300, 600)
GIVE_UP_S = 24 * 3600.0
#: Longest a relaunch waits for this attempt's happenings to be told first.
SETTLE_S = NOTIFY_TIMEOUT_S + 1.0


class Resume(Watcher):
    """The ``backoff`` phase (see the module's doc). Once the run is relaunched, or the relaunch is cancelled or
    given up, the run has ended here."""

    wakes_on = ("events",)
    pace_s = 3600.0

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy

    def tick(self, run: Run, now: float) -> float | None:
        if run.phase != phases.BACKOFF:
            return None
        state = self.policy.state
        pending: PendingResume = state.pending_resume or {"trigger": "resume", "due": 0.0}
        trigger = pending["trigger"]
        if run.files.has(STOP_REQUESTED):
            state.pending_resume = None
            self.policy.record(run, trigger, "resume", "cancelled: stop_experiment was called")
            self.end(run)
            return None
        due = float(pending["due"])
        if now < due:
            return min(LOOK_S, due - now)
        failure = self.relaunch(run, trigger, pending)
        if failure is None:
            run.move(phases.ENDED)
            return None
        return self.failed(run, pending, failure)

    def end(self, run: Run) -> None:
        """Not relaunched: the run has ended here, with its ``on_end`` action."""
        run.move(phases.ENDED)
        self.policy.at_end(run, self.policy.ended_as or run.end_state())

    def failed(self, run: Run, pending: PendingResume, cause: str) -> float | None:
        """A try that failed: tried again later (said once per cause), or given up after ``GIVE_UP_S``."""
        state, now = self.policy.state, run.clock()
        tries = int(pending.get("tries") or 0) + 1
        since = float(pending.get("failed_since", now))
        if now - since >= GIVE_UP_S:
            state.pending_resume = None
            self.policy.record(run, pending["trigger"], "resume", "given up after %d tries: %s" % (tries, cause))
            self.end(run)
            return None
        wait = RETRY_S[min(tries - 1, len(RETRY_S) - 1)]
        state.pending_resume = {"trigger": pending["trigger"], "due": round(now + wait, 3), "tries": tries,
                                "failed": cause, "failed_since": round(since, 3)}
        if cause != pending.get("failed"):
            self.policy.record(run, pending["trigger"], "resume", "relaunch failed: %s; trying again in %d s"
                               % (cause, wait))
        short = cause if len(cause) <= 200 else cause[:80] + "..." + cause[-117:]  # the record's size is fixed
        run.heart.update(resume_failed=short, resume_tries=tries)  # said even where the document cannot be
        run.changed(urgent=True)
        run.persist()
        return min(LOOK_S, float(wait))

    def relaunch(self, run: Run, trigger: str, pending: Mapping[str, Any]) -> str | None:
        """Start the next attempt; None once it runs, else why it did not start."""
        from . import actions

        policy, state = self.policy, self.policy.state
        attempt = int(policy.spec.get("attempt") or 1) + 1
        lineage = str(policy.spec.get("lineage") or first_attempt(run.exp_id))
        new_id = "%s.r%d" % (lineage, attempt)
        found = newest_checkpoint(run)
        if not pending.get("tries"):
            where = ("continuing from global_step_%d (%s)" % (found["step"], found["path"]) if found
                     else "starting over: no global_step_N checkpoint found")
            policy.record(run, trigger, "resume", "relaunching as %s, %s" % (new_id, where), attempt=attempt,
                          next_id=new_id, checkpoint=found)
            policy.tick(run, run.clock())
            if policy.notifier is not None:  # told before it starts: the new attempt's happenings come after these
                run.beat(busy_s=SETTLE_S + 30)
                policy.notifier.settle(run, SETTLE_S)
        run.beat(busy_s=actions.RELAUNCH_TIMEOUT_S + 30)
        _clear_leftover(files.run_dir(new_id))
        try:
            started = actions.relaunch_here(run.dir, new_id, dict(
                policy.spec, attempt=attempt, previous=run.exp_id, lineage=lineage, resumed_from=found,
                checkpoint_dirs=sorted(checkpoint_dirs(run))))
        except files.AgentError as exc:
            return exc.message
        record: AttemptRecord = {"id": new_id, "attempt": attempt, "lineage": lineage, "previous": run.exp_id,
                                 "trigger": trigger, "wall": time.time(), "checkpoint": found, "launch": started}
        try:
            run.files.write_json(NEXT_ATTEMPT, record, replace=False)
        except files.AgentError:
            pass
        state.pending_resume = None  # the next attempt's record is on disk: the chain goes on there
        run.heart.update(resume_failed=None)
        if run.files.has(STOP_REQUESTED):  # stop_experiment came while it started: that stop covers it too
            policy.record(run, trigger, "resume", "relaunched as %s, then stopped: %s" % (
                new_id, actions.stop_started(started, new_id)))
        else:
            policy.record(run, trigger, "resume", "relaunched as %s" % new_id)
        return None


def _clear_leftover(path: str) -> None:
    """Remove what a failed relaunch left of the new attempt's run directory: nothing of it ran (it was rolled
    back, or holds no spec, pid or exit file), so it must not make the next try refuse."""
    import shutil

    if not os.path.isdir(path):
        return
    here = RunDir(path)
    try:
        names = os.listdir(path)
    except OSError:
        return
    ran = here.has(SPEC) or any(n.endswith((".pid", ".exit")) for n in names)
    if here.has(DISCARDED) or not ran:
        shutil.rmtree(path, ignore_errors=True)


def first_attempt(exp_id: str) -> str:
    """The id of a chain's first run (``x.r3`` -> ``x``), for a run launched before attempts knew their lineage."""
    head, _, tail = exp_id.rpartition(".r")
    return head if head and tail.isdigit() else exp_id


#: A path naming a verl checkpoint folder in a log line (verl prints ``local_global_step_folder: <path>``).
_CHECKPOINT_RE = re.compile(r"([^\s'\"=,()\[\]]*)global_step_(\d{1,15})\b")
CHECKPOINT_TAIL_BYTES = 8 * 1024 * 1024


def checkpoint_dirs(run: Run) -> set[str]:
    """The directories holding ``global_step_N`` folders that the run's logs name (the last ``CHECKPOINT_TAIL_BYTES``
    of each), and those the attempts before it named (a resumed attempt may fail before it names any)."""
    folders = {str(f) for f in run.spec.get("policy", {}).get("checkpoint_dirs") or [] if isinstance(f, str)}
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
    return folders


def newest_checkpoint(run: Run) -> CheckpointRef | None:
    """The newest ``global_step_N`` folder that exists in ``checkpoint_dirs``, found by the agent's checkpoint
    listing; None: the run starts over."""
    from .checkpoints import op_checkpoints

    best: CheckpointRef | None = None
    for folder in sorted(checkpoint_dirs(run)):
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
