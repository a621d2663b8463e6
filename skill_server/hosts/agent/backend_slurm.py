"""The Slurm backend: a run is one batch job submitted from this host, its login node (``slurm``'s commands).

The run directory is on the filesystem the nodes share: the batch script (``job.sh``) runs each process's
wrapper inside the allocation (pid, exit and log files as under tmux) and starts the run's monitor on the job's
first node, so the monitor never runs here. Its handle is the job's id (None until sbatch answered: a rollback
then cancels the job by its name, the run's id). A process's liveness comes from Slurm and the job's own record
(``job.json``), not from a pid. Slurm enforces the time limit, so the monitor's own max time is off; a resume
is not done here (a relaunch would be a new sbatch). Stdlib only, Python 3.8.
"""

from __future__ import annotations

import os

from . import files, slurm
from .backend import Backend, Launch, Liveness
from .files import AgentError
from .protocol import TYPE_CHECKING
from .rundir import DISCARDED, RunDir

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from .protocol import DiscardReply, Handle, JobFacts, StartedProc, StopReply


class Slurm(Backend):
    kind = "slurm"
    monitor_in_job = True
    can_resume = False
    scheduler = "Slurm"

    def check(self, launch: Launch) -> None:
        slurm.check_clients()

    def prepare(self, launch: Launch) -> None:
        launch.handle = {"kind": self.kind, "job_id": None}
        max_time_s = int(launch.req["max_time_s"])  # type: ignore[call-overload]  # checked by ``runs``
        slurm.options(launch.options, launch.exp_id, launch.rdir, max_time_s)  # extra_args refused here
        launch.options["ray"] = slurm.ray_for(launch.options, launch.plan["path_prepend"])

    def attach(self, handle: Mapping[str, Any], procs: Sequence[Mapping[str, Any]]) -> list[str]:
        """Its first process's log, followed (the job's processes run on its nodes, in no terminal)."""
        return ["tail", "-F", str(procs[0]["log_path"])] if procs else []

    def start(self, launch: Launch, monitor_spec: dict[str, Any]) -> list[StartedProc]:
        """The monitor's spec and the batch script in the run directory, then sbatch; the monitor and the processes
        start when the job does, on its first node."""
        from . import monitor

        started: list[StartedProc] = [
            {"window_id": "", "pane_id": "", "pid": None, "start": None, "role": p["role"], "workdir": p["workdir"],
             "log_path": p["log_path"]} for p in launch.plan["procs"]]
        spec = monitor.spec_for(launch.exp_id, launch.handle, started, dict(monitor_spec, max_time_s=0))
        options = {k: v for k, v in launch.options.items() if k != "ray"}
        launch.handle["job_id"] = slurm.submit(
            options, launch.exp_id, launch.rdir, {p["role"]: p["log_path"] for p in launch.plan["procs"]},
            int(monitor_spec["max_time_s"]), ray=launch.options.get("ray"),
            monitor=monitor.shell_line(launch.rdir, spec))
        return started

    def discard(self, handle: Mapping[str, Any], exp_id: str, rdir: str) -> DiscardReply:
        """Mark the run discarded first (a job that starts later exits at once), then cancel its job (by id, or by
        name when sbatch's answer was lost) and verify. Nothing to cancel when sbatch refused the job (it said so:
        nothing was submitted, whether or not Slurm answers now). A job that already ran to its end is no launch
        to undo: the mark is taken back and the reply says it ran (``ran``: its handle), so that it stays."""
        run = RunDir(rdir)
        run.touch(DISCARDED)
        job_id = handle.get("job_id") or slurm.job_of(rdir)
        if not job_id and run.has(slurm.REFUSED):
            return {"interrupted": [], "terminated": [], "killed": [], "survivors": [], "session_removed": True,
                    "confirmed": True}
        try:
            ids, _ = slurm.cancel(job_id, exp_id, 5.0)
            confirmed = True
        except AgentError:
            ids, confirmed = [], False
        out: DiscardReply = {"interrupted": ["job " + i for i in ids], "terminated": [], "killed": [],
                             "survivors": [], "session_removed": True, "confirmed": confirmed}
        ran = slurm.ran_to_its_end(rdir) if confirmed and not ids else None
        if ran is not None:
            try:
                os.unlink(run.file(DISCARDED))
            except OSError:
                pass
            out["ran"] = {"kind": self.kind, "job_id": ran}  # type: ignore[typeddict-unknown-key]  # its own key
        return out

    def prefetch(self, asked: list[tuple[Mapping[str, Any], str]], cache: dict[str, Any]) -> None:
        """One squeue for every job asked about (``slurm.query_all``)."""
        jobs = {str(h["job_id"]): rdir for h, rdir in asked if h.get("job_id")}
        if jobs:
            cache.update({"slurm:" + job: facts for job, facts in slurm.query_all(jobs).items()})

    def observe(self, p: Mapping[str, object], handle: Mapping[str, Any], cache: dict[str, Any]) -> Liveness:
        """Queued: alive, marked ``queued``. Running: alive until its wrapper's exit file exists. Ended: the exit
        file's code, else Slurm's (a process killed with its job wrote none); cancelled and timed-out jobs mark
        their processes ``stopped`` and ``timedout``. Slurm's word decides: while it queues the job, or runs it
        again after a requeue (its ``Restarts`` past the record's), what an earlier run of the job left (an exit
        file, a record of its end) is not this run's. Slurm cannot be asked and the record is not final: liveness
        unknown (None). A job never submitted (its launch did not finish) is unknown too."""
        rdir, role = str(p["run_dir"]), str(p["role"])
        job_id = handle.get("job_id")
        if not job_id:
            return Liveness(None)
        key = "slurm:" + str(job_id)
        if key not in cache:  # one scontrol per job and observation, whatever its number of processes
            cache[key] = slurm.query(str(job_id), rdir)
        facts, code = self._this_start(cache[key], RunDir(rdir), role)
        source = "file" if code is not None else None
        state = facts["state"]
        if facts["queued"]:
            return Liveness(True, 0.0, None, None, ["queued"], facts)
        if not facts["final"]:
            if facts["error"] is not None and state == "UNKNOWN":
                return Liveness(None, None, code, source, [], facts)
            alive = code is None and state != "UNKNOWN"
            return Liveness(alive, self._age(rdir) if alive else None, code, source, [], facts)
        markers = {"CANCELLED": ["stopped"], "TIMEOUT": ["timedout"]}.get(state, [])
        if code is None:  # killed with its job: Slurm's code, unless it says 0 for a job that did not complete
            code = slurm.exit_status(facts["exit_code"])
            if code == 0 and state != "COMPLETED":
                code = None
            source = "slurm" if code is not None else None
        return Liveness(False, None, code, source, markers, facts)

    @staticmethod
    def _this_start(facts: JobFacts, run: RunDir, role: str) -> tuple[JobFacts, int | None]:
        """(the job's facts, the process's exit code) as of the job's current start: an exit code an earlier start
        left (the job is queued again, or Slurm's ``Restarts`` is past its record's) is not this start's; and the
        job's own record of its end (its SIGTERM trap: TIMEOUT or CANCELLED) decides while Slurm still winds the
        job down (the batch script waits for the monitor), not the process's 143 alone."""
        mine = slurm.record(run.path)
        earlier = facts["queued"] or (mine is not None and facts["source"] == "slurm" and not facts["final"]
                                      and int(mine.get("restarts") or 0) < int(facts.get("restarts") or 0))
        code = None if earlier else run.exit_code(role)
        if code is not None and not facts["final"] and mine is not None and mine.get("source") == "job" \
                and mine.get("state") in slurm.FINAL:
            facts = slurm.facts_of(facts["job_id"], str(mine["state"]), str(mine.get("reason") or facts["reason"]),
                                   str(mine.get("exit_code") or facts["exit_code"]),
                                   str(mine.get("nodes") or facts["nodes"]), facts["source"],  # all it got
                                   error=facts["error"], restarts=int(facts.get("restarts") or 0))
        return facts, code

    @staticmethod
    def _age(rdir: str) -> float | None:
        """How long the job has run, by the start it recorded: a run's clock (its max time, its first-step deadline)
        starts when its job does, not when it was queued."""
        mine = slurm.record(rdir)
        at = mine.get("at") if mine is not None and mine.get("source") == "job" else None
        if isinstance(at, (int, float)) and not isinstance(at, bool):
            import time

            return max(0.0, time.time() - float(at))
        return None

    def release(self, handle: Mapping[str, Any], exp_id: str) -> bool | None:
        return None  # nothing holds an ended job here (and no observation marks one released)

    def stop(self, handle: Mapping[str, Any], exp_id: str, rdir: str, procs: list[dict[str, object]],
             grace_s: float, keep_session: bool = False) -> StopReply:
        """The roles marked stopped first, then the job cancelled and verified: Slurm no longer queues or runs it
        (raises otherwise: the caller records nothing). Its processes get SIGTERM from Slurm, SIGKILL after
        KillWait."""
        run = RunDir(rdir)
        roles = [str(p["role"]) for p in procs]
        unmarked = run.mark_stopped(roles)
        job_id = handle.get("job_id") or ""
        try:
            ids, _ = slurm.cancel(job_id or None, exp_id, grace_s)
        except AgentError as exc:  # Slurm does not answer: the run's monitor stops them where they run
            return self._stop_here(run, roles, exc.message, grace_s)
        if job_id:
            slurm.query(str(job_id), rdir)  # Slurm's final word into job.json while it still remembers the job
        return {"interrupted": roles if ids else [], "terminated": [], "killed": [], "survivors": [],
                "exit_codes": {role: run.exit_code(role) for role in roles}, "session_removed": True,
                "unmarked": unmarked}

    @staticmethod
    def _stop_here(run: RunDir, roles: list[str], why: str, grace_s: float) -> StopReply:
        """Slurm cannot be asked to end the job: ask the run's monitor, inside the job, to stop the processes on
        its node (``watchers.StopAsked``) and wait (bounded) for what it did. Never confirmed: the job is Slurm's
        to end, once it answers."""
        import time

        from . import deadline
        from .rundir import STOP_HERE

        try:
            files.write_atomic(run.file(STOP_HERE), b"%.1f\n" % grace_s, replace=True, mode=0o600)  # its grace
        except AgentError:
            run.touch(STOP_HERE)
        end = time.monotonic() + deadline.left(grace_s + 15.0)
        done = None
        while done is None and time.monotonic() < end:
            acted = [a for a in (run.findings() or {}).get("actions") or [] if a.get("trigger") == "stop_experiment"]
            done = acted[-1]["result"] if acted else None
            if done is None:
                time.sleep(0.25)
        said = ("the run's monitor in the job stopped its processes %s" % done if done is not None else
                "asked the run's monitor in the job to stop its processes where they run; it has not answered yet")
        return {"interrupted": roles if done is not None and "SIGINT" in done else [], "terminated": [],
                "killed": [], "survivors": [], "exit_codes": {role: run.exit_code(role) for role in roles},
                "session_removed": False, "unconfirmed": "%s (Slurm did not answer: %s); Slurm ends the job once it "
                "answers" % (said, why)}

    def own_job(self, handle: Mapping[str, Any], rdir: str) -> str | None:
        """``SLURM_JOB_ID``, else the run's recorded id."""
        found = os.environ.get("SLURM_JOB_ID") or handle.get("job_id") or slurm.job_of(rdir)
        return str(found) if found else None

    def requeued(self, rdir: str, codes: Mapping[str, int | None]) -> bool:
        """The batch script's SIGTERM trap records ``REQUEUED`` (Slurm's word); processes that ended by a signal
        give it ``RECORD_WAIT_S`` to write it (a requeue signals the script and the processes at once)."""
        import time

        end = time.monotonic() + (slurm.RECORD_WAIT_S if any(c is None or c >= 128 for c in codes.values()) else 0)
        while True:
            state = (slurm.record(rdir) or {}).get("state")
            if state != "RUNNING" or time.monotonic() >= end:
                return state == "REQUEUED"
            time.sleep(0.1)

    def cancel_own_job(self, handle: Mapping[str, Any], rdir: str) -> str:
        """Cancel the job this process runs in (``own_job``); its id. Raises ``AgentError`` with scancel's word when
        it refused (its exit code says nothing of a job it does not know, but this one runs)."""
        job_id = self.own_job(handle, rdir)
        if not job_id:
            raise AgentError("no Slurm job id here (SLURM_JOB_ID unset, no job.id)")
        code, _, err = slurm.client(["scancel", str(job_id)])
        if code != 0:
            raise AgentError("scancel %s: %s" % (job_id, (err.strip().splitlines() or ["exit %d" % code])[-1]))
        return str(job_id)

    def started(self, rdir: str, role: str) -> bool:
        """Not before its wrapper wrote its pid, unless the job ended without starting it."""
        mine = slurm.record(rdir)
        return mine is not None and mine.get("state") in slurm.FINAL

    def legacy_handle(self, spec: Mapping[str, Any]) -> Handle | None:
        if not spec.get("slurm"):
            return None
        handle: dict[str, Any] = {"kind": self.kind, "job_id": None}
        return handle  # type: ignore[return-value]  # Slurm's own key besides kind


BACKEND = Slurm()
