"""``gpu_status`` (read-only): the GPUs of every host asked, in parallel."""

from __future__ import annotations

from skill_server.core.errors import ToolInputError
from skill_server.gpus.models import GpuHost
from skill_server.gpus.query import NO_SMI_ADVICE, query
from skill_server.hosts import LOCAL, normalise
from skill_server.tools.gpu_status.models import GpuStatusInput, GpuStatusOutput


def gpu_status(inp: GpuStatusInput) -> GpuStatusOutput:
    if inp.experiment is not None:
        hosts = _job_nodes(inp)
        return GpuStatusOutput(summary=summary(hosts), hosts=hosts)
    names = [normalise(h, field=f"hosts.{i}") for i, h in enumerate(inp.hosts or [LOCAL])]
    hosts = query(list(dict.fromkeys(names)))
    return GpuStatusOutput(summary=summary(hosts), hosts=hosts)


def _job_nodes(inp: GpuStatusInput) -> list[GpuHost]:
    """The GPUs of the nodes a scheduled run's job holds, asked through the host that submitted it (its backend
    knows how: ``experiments.backends``)."""
    from skill_server.experiments import backends
    from skill_server.experiments.store import open_registry

    if inp.hosts is not None:
        raise ToolInputError("give hosts or experiment, not both", field="hosts")
    assert inp.experiment is not None
    with open_registry(create=False) as reg:
        row = reg.find(inp.experiment)
    if row is None:
        raise ToolInputError(f"no experiment {inp.experiment!r} in this server's registry", field="experiment")
    where = row.spec.hosts.get(row.host)
    try:
        found = backends.of(where).allocation_gpus(row.host, where) if where is not None else None
    except ToolInputError as exc:
        raise ToolInputError(f"{row.id} {exc.message}", field=exc.field) from None
    if found is None:
        raise ToolInputError(f"{row.id} runs in no scheduler's job: ask its hosts instead", field="experiment")
    return found


#: What "free" means in the summary: AgentJet's launcher wants this share of a GPU's memory free.
FREE_FRACTION = 0.95


def summary(hosts: list[GpuHost]) -> str:
    """One line: per host, the GPUs free as AgentJet's launcher counts them (at least 95% of memory free)."""
    parts = []
    for host in hosts:
        if host.status == "no_nvidia_smi":
            parts.append(f"{host.host}: no nvidia-smi, GPUs cannot be checked there (a CPU machine, a login node or a "
                         f"container without the driver tools): {NO_SMI_ADVICE}")
            continue
        if host.gpus is None:
            parts.append(f"{host.host}: GPUs unknown ({host.reason or 'no answer'})")
            continue
        free = sum(1 for g in host.gpus if g.free_fraction is not None and g.free_fraction >= FREE_FRACTION)
        parts.append(f"{host.host}: {free} of {len(host.gpus)} GPUs free (95% of memory)" if host.gpus
                     else f"{host.host}: no GPU")
    return ("; ".join(parts) + ".")[:1000]


