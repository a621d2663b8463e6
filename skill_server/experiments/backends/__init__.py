"""Where a run's processes execute, behind one small interface (the launch, observe, stop and rollback code
calls it; the host agent does the work on each host).

* ``tmux`` (the default): one tmux session per host, a window per process, the run's monitor beside it.
* ``slurm``: one batch job submitted from the login node (``host``: this machine or an ssh destination);
  the processes run inside the allocation, and Slurm plus the job's own ``job.json`` on the shared
  filesystem are the truth about it.

A run's backend is recorded per host in its spec (``HostRecord.backend``, with the job id for Slurm), so a
row read later is observed, stopped and rolled back the way it was launched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skill_server.experiments.spec import HostRecord, RunProcess
    from skill_server.hosts import client
    from skill_server.hosts.agent.protocol import (
        DiscardReply,
        LaunchProc,
        MonitorConfig,
        ObserveProc,
        StopProc,
        StopReply,
    )


class Backend(Protocol):
    """What launching, observing, stopping and rolling back need to know of where a run executes."""

    name: str

    def launch(self, exp_id: str, session: str, socket: str, *, replace_pids: Sequence[int], python: str | None,
               workdir: str, result_dir: str, max_time_s: int, deadline_grace_s: int, procs: Sequence[LaunchProc],
               monitor: MonitorConfig | None) -> client.Launch:
        """One host's part of a launch (dry run, then start)."""

    def observe(self, p: RunProcess, request: ObserveProc) -> ObserveProc:
        """``request`` (the process's observe entry) with what this backend needs added."""

    def stop(self, exp_id: str, session: str, p: RunProcess, *, grace_s: float, procs: Sequence[StopProc]
             ) -> client.Op[StopReply]:
        """The stop of the run's processes on ``p``'s host (``p``: its first process there)."""

    def discard(self, exp_id: str, session: str, where: HostRecord) -> client.Op[DiscardReply]:
        """Undo a launch on a host (it failed, or was interrupted)."""


def of(where: HostRecord | None) -> Backend:
    """The backend a run was launched with on one host (tmux for every run recorded without one)."""
    if where is not None and where.backend == "slurm":
        from skill_server.experiments.backends.slurm import SLURM

        return SLURM
    from skill_server.experiments.backends.tmux import TMUX

    return TMUX
