"""Ending the processes that hold GPU memory on a host (``ray_cluster stop`` with ``kill_gpu_processes``).

The work is the host agent's ``reclaim_gpus`` operation (``hosts.agent.reclaim``: only live processes
the ssh user owns that hold an ``nvidia*`` device there; SIGTERM, grace, SIGKILL, a last look), so a
reclaim is one op in a host's round trip. Here: the op, and reading its answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skill_server.hosts import HostUnreachable, Reply, client
from skill_server.hosts.agent.protocol import KILL_WAIT_S

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import ReclaimReply

__all__ = ["KILL_WAIT_S", "read_result", "reclaim_op"]


def reclaim_op(pids: list[int], grace_s: float) -> client.Op[ReclaimReply]:
    """The op that ends the GPU processes ``pids`` on its host (see the module docstring)."""
    return client.reclaim_gpus(sorted(set(pids)), grace_s)


def read_result(reply: Reply, index: int = 0) -> tuple[ReclaimReply | None, str | None]:
    """(report, None) from a host's reply to ``reclaim_op``, or (None, why nothing is known)."""
    if isinstance(reply, HostUnreachable):
        return None, f"unreachable: {reply.reason}"
    result = client.answer(reply[index], client.reclaim_gpus)
    if not result["ok"]:
        return None, result["error"] or "the host could not end them"
    return result, None
