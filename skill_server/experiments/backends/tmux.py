"""The tmux backend: one tmux session per host, a window per process, the run's monitor beside it (the host
agent's ``backend_tmux``). A launch of a name whose earlier run left a finished session on a host replaces
that session (the panes that run recorded), never another one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from skill_server.core.errors import ToolInputError
from skill_server.experiments.checks import socket_name
from skill_server.hosts import client, get_host

if TYPE_CHECKING:
    from skill_server.experiments.backends import JobNodes, LaunchContext
    from skill_server.experiments.spec import HostRecord
    from skill_server.gpus.models import GpuHost
    from skill_server.hosts.agent.protocol import BackendChoice, LaunchPlan


class Tmux:
    name = "tmux"

    def configure(self, options: Any, context: LaunchContext) -> Tmux:
        return self

    def choice(self, replace_pids: Sequence[int]) -> BackendChoice:
        return {"kind": self.name, "options": {"socket_name": socket_name(), "replace_pids": list(replace_pids)}}

    def attach(self, host: str, plan: LaunchPlan) -> str:
        """``tmux -S <socket> attach -t <session>`` on the host (over ssh -t for a remote one)."""
        return get_host(host).terminal_command(plan["attach"])

    scheduler = None

    def allocation_gpus(self, host: str, where: HostRecord) -> list[GpuHost] | None:
        return None

    def job_nodes_op(self, job_id: str) -> client.Op[Any]:
        raise ToolInputError("tmux runs no scheduler's jobs", field="job")

    def job_nodes(self, reply: Any, job_id: str) -> JobNodes:
        raise ToolInputError("tmux runs no scheduler's jobs", field="job")

    def on_node(self, job_id: str, node: str) -> list[str]:
        raise ToolInputError("tmux runs no scheduler's jobs", field="job")


BACKEND = Tmux()
