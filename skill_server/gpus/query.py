"""GPU queries shared by the tools: every host's GPUs in one round trip each, and the free-memory check
``launch_experiment`` and ``ray_cluster`` apply before starting anything."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skill_server.gpus import nvidia_smi
from skill_server.gpus.models import GpuHost
from skill_server.hosts import HostUnreachable, Reply, call_hosts, client

if TYPE_CHECKING:
    pass

#: What to do where nvidia-smi is missing (a refusal, gpu_status's summary).
NO_SMI_ADVICE = ("leave out require_free_gpus (nothing checks the GPUs then), or on a Slurm login node ask Slurm "
                 "for GPUs (slurm.gpus_per_node)")
#: The host call's bound: both queries' own bounds plus the connection.
CALL_TIMEOUT_S = 2 * nvidia_smi.QUERY_TIMEOUT_S + 30


def from_reply(host: str, reply: Reply, first: int = 0) -> GpuHost:
    """A host's GPUs from a call whose ops ``first`` and ``first + 1`` are ``nvidia_smi.query_ops()``."""
    if isinstance(reply, HostUnreachable):
        return nvidia_smi.unreachable(host, reply.reason)
    results = [client.answer(r, client.run) for r in reply[first:first + 2]]
    return nvidia_smi.host_gpus(host, results[0] if results else None, results[1] if len(results) > 1 else None)


def query(hosts: list[str]) -> list[GpuHost]:
    """GPUs of every host, one round trip each, all in parallel; order as given."""
    replies = call_hosts({h: nvidia_smi.query_ops() for h in hosts}, timeout_s=CALL_TIMEOUT_S)
    return [from_reply(h, replies[h]) for h in hosts]


def _holders(processes: list[Any] | None) -> str:
    if processes is None:
        return "its processes are unknown"
    if not processes:
        return "no process listed (memory held outside this host's view, e.g. another container)"
    shown = sorted(processes, key=lambda p: -(p.used_memory_mib or 0))
    parts = [f"pid {p.pid} ({p.name}" + (f", {p.used_memory_mib} MiB)" if p.used_memory_mib is not None else ")")
             for p in shown[:8]]
    if len(shown) > 8:
        parts.append(f"{len(shown) - 8} more")
    return "held by " + ", ".join(parts)


def free_problems(host: GpuHost, required: float) -> list[str]:
    """Why ``host`` does not have every GPU at least ``required`` free (empty when it does).

    Unknown is not free: an unreachable host, no nvidia-smi, a GPU without memory figures or no GPU at
    all (AgentJet's launcher wants at least one) are problems too."""
    where = f"host {host.host}"
    if not host.reachable:
        return [f"{where} is unreachable: {host.reason}"]
    if host.status == "no_nvidia_smi":
        return [f"{where} has no nvidia-smi (a machine without NVIDIA GPUs, a login node, or a container without the "
                f"driver tools), so its GPUs cannot be checked: {NO_SMI_ADVICE}"]
    if host.gpus is None:
        return [f"{where}: GPUs unknown: {host.reason}"]
    if not host.gpus:
        return [f"{where}: nvidia-smi lists no GPU"]
    problems = []
    for gpu in host.gpus:
        if gpu.free_fraction is None:
            problems.append(f"{where} GPU {gpu.index} ({gpu.name}): free memory unknown (used "
                            f"{gpu.memory_used_mib}, total {gpu.memory_total_mib} MiB)")
        elif gpu.free_fraction < required:
            problems.append(f"{where} GPU {gpu.index} ({gpu.name}) is {gpu.free_fraction:.1%} free "
                            f"({gpu.memory_used_mib} of {gpu.memory_total_mib} MiB used), below {required * 100:g}%: "
                            + _holders(gpu.processes))
    return problems
