"""GPUs as the tools report them (``gpu_status``, ``ray_cluster``, the free-GPU check of a launch)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict

from skill_server.core.models import ToolOutput

MAX_HOSTS = 64
#: What a host's nvidia-smi said, in one word (``GpuHost.status``).
GpuState = Literal["ok", "no_gpu", "no_nvidia_smi", "nvidia_smi_failed", "unreachable"]
#: A fraction of a GPU's memory that must be free (AgentJet's launcher wants 0.95).
FreeFraction = Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)]


class GpuProcess(ToolOutput):
    pid: int = Field(description="Process id as nvidia-smi reports it (the host's PID namespace; inside a "
                     "container it may be another namespace's pid).")
    used_memory_mib: int | None = Field(description="GPU memory it holds, MiB; null when nvidia-smi has no value.")
    name: str = Field(description="Process name as nvidia-smi reports it.")


class Gpu(ToolOutput):
    index: int
    uuid: str
    name: str
    memory_used_mib: int | None = Field(description="null when nvidia-smi has no value ([N/A], [Not Supported]).")
    memory_total_mib: int | None
    utilization_pct: int | None
    free_fraction: float | None = Field(description="(total - used) / total, as AgentJet's launcher computes it; "
                                        "null when either is unknown.")
    processes: list[GpuProcess] | None = Field(description="Compute processes on this GPU; null when the process "
                                               "query failed (the host's reason says why).")


class GpuHost(ToolOutput):
    host: str = Field(description="'local' or the ssh destination.")
    status: GpuState = Field(description="ok: GPUs listed; no_gpu: nvidia-smi lists none; no_nvidia_smi: it is not "
                             "on the host's PATH (a CPU machine, a login node, a container without the driver "
                             "tools), so its GPUs cannot be checked there; nvidia_smi_failed: it failed or hung (a "
                             "driver not loaded, a wedged GPU); unreachable: ssh failed.")
    reachable: bool = Field(description="False when the host could not be asked (ssh failed).")
    reason: str | None = Field(description="Why gpus (or their processes) are unknown: unreachable, no nvidia-smi, "
                               "nvidia-smi failed or timed out.")
    gpus: list[Gpu] | None = Field(description="null when unknown (see reason); [] when nvidia-smi listed no GPU.")
    notes: list[str] = Field(default_factory=list, description="Lines of nvidia-smi output that could not be read, "
                             "truncated output, processes on a GPU that was not listed.")


