"""The Slurm backend: the run is one batch job submitted from its host (the login node); its processes run
inside the allocation, and the host agent asks Slurm (and reads the job's ``job.json``) for their state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skill_server.hosts import client

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skill_server.experiments.spec import HostRecord, RunProcess
    from skill_server.hosts.agent.protocol import (
        DiscardReply,
        LaunchProc,
        MonitorConfig,
        ObserveProc,
        SlurmOptions,
        StopProc,
        StopReply,
    )


class Slurm:
    name = "slurm"

    def __init__(self, options: SlurmOptions | None = None) -> None:
        self.options: SlurmOptions = options or {}

    def launch(self, exp_id: str, session: str, socket: str, *, replace_pids: Sequence[int], python: str | None,
               workdir: str, result_dir: str, max_time_s: int, deadline_grace_s: int, procs: Sequence[LaunchProc],
               monitor: MonitorConfig | None) -> client.Launch:
        """The time limit is the run's max time (Slurm enforces it); the run's monitor runs inside the job."""
        del replace_pids  # no tmux session to replace
        return client.launch(exp_id, session, socket, replace_pids=[], python=python, workdir=workdir,
                             result_dir=result_dir, max_time_s=max_time_s, deadline_grace_s=deadline_grace_s,
                             procs=procs, monitor=monitor, slurm=self.options)

    def observe(self, p: RunProcess, request: ObserveProc) -> ObserveProc:
        if p.job_id:
            request["job_id"] = p.job_id
        return request

    def stop(self, exp_id: str, session: str, p: RunProcess, *, grace_s: float, procs: Sequence[StopProc]
             ) -> client.Op[StopReply]:
        return client.stop(exp_id, p.run_dir, "", session, grace_s=grace_s, procs=procs, kill_session=False,
                           job_id=p.job_id or "")

    def discard(self, exp_id: str, session: str, where: HostRecord) -> client.Op[DiscardReply]:
        return client.discard(exp_id, "", session, run_dir=where.run_dir or None, slurm=True)


SLURM = Slurm()
