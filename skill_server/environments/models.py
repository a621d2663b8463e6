"""What preflight reports: one check per thing looked at, and per host which roles it is ready for."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from skill_server.core.models import ToolOutput

#: ok and warn pass; fail blocks a role; skip: not applicable here or not asked for (said why); unknown: it
#: should have been looked at and was not (no answer in time, an unreadable file), never taken for ok.
Status = Literal["ok", "warn", "fail", "skip", "unknown"]
ROLES = ("client", "swarm_server", "classic")
Role = Literal["client", "swarm_server", "classic"]


class Evidence(ToolOutput):
    """How the value was found: the command that shows it again, and what it said."""

    command: str = Field(description="A command to see it yourself (on that host).")
    excerpt: str = Field(description="What it said, shortened.")


class Check(ToolOutput):
    id: str = Field(description="Stable check id, e.g. 'flash_attn', 'port_10086', 'gpu_free_memory'.")
    status: Status = Field(description="ok | warn | fail | skip | unknown (never ok for what was not checked).")
    value: str | None = Field(description="What was found (null when nothing was).")
    expected: str | None = Field(description="What is needed and why, naming the AgentJet release it comes from.")
    evidence: Evidence | None = Field(description="How it was found.")
    fix: str | None = Field(description="What to do when it is not ok (root steps as instructions only).")
    node: str | None = Field(default=None, description="The Slurm node it was checked on (allocation checks).")


class HostReport(ToolOutput):
    host: str = Field(description="'local', an ssh destination, or '<login> (Slurm job N)'.")
    summary: str = Field(description="One line, like sky check: per role ready or not, and what blocks it.")
    reachable: bool
    reason: str | None = Field(description="Why the host could not be asked (null when it answered).")
    ready_for: dict[str, bool | None] = Field(
        description="Per role asked: true (every check it needs passed), false (one failed), null (one could not be "
        "checked: see blocked_by).")
    blocked_by: dict[str, list[str]] = Field(
        description="Per role not ready: the check ids that failed or are unknown.")
    checks: list[Check]
    elapsed_s: float
