"""``gpu_status`` (read-only): the GPUs of every host asked, in parallel."""

from __future__ import annotations

from skill_server.gpus.query import query
from skill_server.hosts import LOCAL, normalise
from skill_server.tools.gpu_status.models import GpuStatusInput, GpuStatusOutput


def gpu_status(inp: GpuStatusInput) -> GpuStatusOutput:
    names = [normalise(h, field=f"hosts.{i}") for i, h in enumerate(inp.hosts or [LOCAL])]
    return GpuStatusOutput(hosts=query(list(dict.fromkeys(names))))


