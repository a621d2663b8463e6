"""``gpu_status`` (read-only): the GPUs of every host asked, in parallel."""

from __future__ import annotations

from skill_server.gpus.models import GpuHost
from skill_server.gpus.query import query
from skill_server.hosts import LOCAL, normalise
from skill_server.tools.gpu_status.models import GpuStatusInput, GpuStatusOutput


def gpu_status(inp: GpuStatusInput) -> GpuStatusOutput:
    names = [normalise(h, field=f"hosts.{i}") for i, h in enumerate(inp.hosts or [LOCAL])]
    hosts = query(list(dict.fromkeys(names)))
    return GpuStatusOutput(summary=summary(hosts), hosts=hosts)


#: What "free" means in the summary: AgentJet's launcher wants this share of a GPU's memory free.
FREE_FRACTION = 0.95


def summary(hosts: list[GpuHost]) -> str:
    """One line: per host, the GPUs free as AgentJet's launcher counts them (at least 95% of memory free)."""
    parts = []
    for host in hosts:
        if host.gpus is None:
            parts.append(f"{host.host}: GPUs unknown ({host.reason or 'no answer'})")
            continue
        free = sum(1 for g in host.gpus if g.free_fraction is not None and g.free_fraction >= FREE_FRACTION)
        parts.append(f"{host.host}: {free} of {len(host.gpus)} GPUs free (95% of memory)" if host.gpus
                     else f"{host.host}: no GPU")
    return ("; ".join(parts) + ".")[:1000]


