"""The tmux backend: one tmux session per host, a window per process, the run's monitor beside it."""

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
        StopProc,
        StopReply,
    )


class Tmux:
    name = "tmux"

    def launch(self, exp_id: str, session: str, socket: str, *, replace_pids: Sequence[int], python: str | None,
               workdir: str, result_dir: str, max_time_s: int, deadline_grace_s: int, procs: Sequence[LaunchProc],
               monitor: MonitorConfig | None) -> client.Launch:
        return client.launch(exp_id, session, socket, replace_pids=replace_pids, python=python, workdir=workdir,
                             result_dir=result_dir, max_time_s=max_time_s, deadline_grace_s=deadline_grace_s,
                             procs=procs, monitor=monitor)

    def observe(self, p: RunProcess, request: ObserveProc) -> ObserveProc:
        return request

    def stop(self, exp_id: str, session: str, p: RunProcess, *, grace_s: float, procs: Sequence[StopProc]
             ) -> client.Op[StopReply]:
        return client.stop(exp_id, p.run_dir, p.socket_path, session, grace_s=grace_s, procs=procs,
                           session_id=p.session_id)

    def discard(self, exp_id: str, session: str, where: HostRecord) -> client.Op[DiscardReply]:
        return client.discard(exp_id, where.socket_path, session, session_id=where.session_id,
                              run_dir=where.run_dir or None)


TMUX = Tmux()
