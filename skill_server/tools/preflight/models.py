"""Input and output models of ``preflight``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, StrictInt, StrictStr

from skill_server.core.models import ToolInput, ToolOutput
from skill_server.environments.models import HostReport, Role

MAX_HOSTS = 16


class PreflightInput(ToolInput):
    hosts: list[Annotated[StrictStr, Field(max_length=255)]] | None = Field(
        default=None, min_length=1, max_length=MAX_HOSTS,
        description="'local' or ssh destinations, asked in parallel. Default: ['local'].")
    role: Role | None = Field(default=None, description="Only this role. Default: all three.")
    python: StrictStr | None = Field(
        default=None, max_length=4096,
        description="The environment's interpreter on the hosts. Without it the environment checks are skipped.")
    agentjet_root: StrictStr | None = Field(
        default=None, max_length=4096,
        description="The AgentJet checkout on the hosts. The env must import ajet from it; saved_experiments' "
        "disk is measured there.")
    config: StrictStr | None = Field(
        default=None, max_length=4096,
        description="A client script or YAML on this machine. Read statically for the port, logger, model path and "
        "GPU count the checks compare with.")
    network: StrictBool = Field(default=False, description="Also test the network from each host. GitHub, the "
                                "package index, Hugging Face and ModelScope.")
    index_url: StrictStr | None = Field(default=None, max_length=2000, description="The index the network check tests.")
    gpu_probe: StrictBool = Field(
        default=False, description="Also run GPU probes. A matmul, a flash-attn forward and an NCCL all-reduce.")
    slurm_job: Annotated[StrictStr, Field(pattern=r"^[0-9]{1,12}$")] | None = Field(
        default=None, description="A running Slurm job whose nodes to check, through the login node hosts[0].")
    timeout_s: StrictInt = Field(default=45, ge=5, le=600, description="Bound of the whole call, in seconds.")


class PreflightOutput(ToolOutput):
    summary: str = Field(description="One line per host, like sky check: each role ready, not ready or unknown, and "
                         "the checks that block it.")
    agentjet: str = Field(description="The AgentJet release whose requirements the checks apply.")
    hosts: list[HostReport]
