"""Input and output models of ``install_agentjet``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictStr

from skill_server.core.models import PositiveInt, ToolInput, ToolOutput
from skill_server.environments.models import Check
from skill_server.experiments.backends.slurm import SlurmSpec


class InstallInput(ToolInput):
    action: Literal["plan", "run", "status"] = Field(
        description="plan changes nothing, run starts the install, status reads its stages.")
    env_path: StrictStr = Field(
        max_length=4096, description="A NEW folder on the host for the environment (absolute or ~/...). A folder this "
        "tool did not create is refused; nothing is ever deleted.")
    host: StrictStr | None = Field(default=None, max_length=255, description="'local' (default) or an ssh "
                                   "destination.")
    manager: Literal["conda", "uv", "venv"] | None = Field(
        default=None, description="How to make the env. Default: uv if the host has it, else conda, else venv.")
    python_version: Literal["3.10", "3.11", "3.12"] = Field(
        default="3.10", description="The env's Python (AgentJet's guides use 3.10).")
    role: Literal["swarm_server", "client"] = Field(
        default="swarm_server", description="swarm_server (also classic): AgentJet's [verl] extra and flash-attn. "
        "client: AgentJet alone.")
    agentjet_root: StrictStr | None = Field(
        default=None, max_length=4096, description="An AgentJet checkout on the host, used as it is. Never changed; a "
        "path that does not exist is cloned into. Default: a clone inside env_path.")
    agentjet_ref: StrictStr | None = Field(default=None, max_length=200, description="Commit, tag or branch to clone. "
                                           "Default: the bundled release's commit.")
    repo_url: StrictStr | None = Field(default=None, max_length=2000, description="Where to clone from. Default: "
                                       "GitHub; a mirror or a local repository works.")
    index_url: StrictStr | None = Field(default=None, max_length=2000, description="A PyPI mirror, e.g. "
                                        "https://mirrors.aliyun.com/pypi/simple/.")
    flash_attn: Literal["auto", "wheel", "source", "skip"] = Field(
        default="auto", description="auto: the prebuilt wheel matching the env, else a source build.")
    flash_attn_wheels: StrictStr | None = Field(
        default=None, max_length=2000,
        description="A mirror URL or host folder of prebuilt flash-attn wheels. Default: flash-attention's GitHub "
        "releases.")
    max_jobs: PositiveInt | None = Field(default=None, le=1024, description="MAX_JOBS of a flash-attn source build. "
                                         "Default: min(CPUs, available RAM / 8 GiB).")
    slurm: SlurmSpec | None = Field(default=None, description="run: as a Slurm job from host, its login node.")


class InstallStage(ToolOutput):
    name: str = Field(description="checkout, env, network, agentjet, flash_attn, lock or verify.")
    status: Literal["planned", "done", "running", "failed", "pending"]
    commands: list[str] = Field(description="Exactly what runs (quoted for a shell; the installer runs argv lists).")
    verify: str = Field(description="How the stage is checked, when done and again on every resume.")
    note: str | None


class InstallOutput(ToolOutput):
    summary: str
    env_path: str = Field(description="The env's folder as the host sees it.")
    manager: str
    python: str = Field(description="The env's interpreter (pass it as preflight's and launch_experiment's python).")
    agentjet: str = Field(description="The AgentJet release whose requirements the install follows.")
    stages: list[InstallStage]
    root_steps: list[str] = Field(description="Steps that need root, as instructions: never run by this tool.")
    blockers: list[str] = Field(description="Why run refuses (plan and status say it in advance).")
    checks: list[Check] = Field(description="status: the env's verification judged as preflight judges an "
                                "environment (from the last run's verify stage).")
    id: str | None = Field(description="The install's experiment id: wait_experiment, experiment_status, watch, "
                           "stop_experiment take it.")
    log_path: str | None
