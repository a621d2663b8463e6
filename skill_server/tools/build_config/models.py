"""Input and output models of ``build_config``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictStr

from skill_server.agentjet.identity import AgentJetRef, AgentJetRootArg, AgentJetVersionArg
from skill_server.core.models import JsonValue, ToolInput, ToolOutput

Path4096 = Annotated[StrictStr, Field(max_length=4096)]

class BuildConfigInput(ToolInput):
    script: Path4096 | None = Field(
        default=None, description="A swarm client script to build from. Its AgentJetJob as check_config resolves it "
        "(kwargs and set given here are applied over the script's; base_yaml replaces its base).")
    kwargs: dict[StrictStr, JsonValue] = Field(
        default_factory=dict, max_length=200,
        description="AgentJetJob constructor kwargs, e.g. {\"num_repeat\": 6, \"max_env_worker\": 126}. null keeps "
        "the YAML value, as in AgentJetJob. Values pass through untouched (AgentJet does not convert types).",
    )
    base_yaml: Path4096 | None = Field(
        default=None, description="Base YAML (AgentJetJob's base_yaml_config). Default: the selected AgentJet's "
        "ajet/default_config/ajet_swarm_default.yaml. Relative paths resolve against cwd.",
    )
    set: dict[StrictStr, JsonValue] | None = Field(
        default=None, max_length=500,
        description="Writes after construction, dotted key -> value, in order. For example "
        "{\"ajet.rollout.temperature\": 0.7} for job.config.ajet.rollout.temperature = 0.7. Not checked by AgentJet.",
    )
    agentjet_version: AgentJetVersionArg = None
    agentjet_root: AgentJetRootArg = None
    cwd: Path4096 | None = Field(
        default=None, description="Directory that relative base_yaml, output_path and agentjet_root resolve against "
        "(default: the server's working directory).",
    )
    output_path: Path4096 | None = Field(
        default=None, description="Also write the YAML to this NEW file (created atomically; an existing path is "
        "never replaced). Without it the tool only reads.",
    )
    provenance: Literal["changed", "ajet", "all"] = Field(
        default="changed", description="Which values provenance lists. Only values set by kwargs, writes or "
        "AgentJet itself (default), every ajet.* value, or every value including the verl sections.",
    )


class BaseInfo(ToolOutput):
    kind: Literal["file", "default"] = Field(description="file: base_yaml; default: the AgentJet's swarm default.")
    path: str = Field(description="The base composed: an absolute path, or bundled:<file> for a bundled default.")


class ProvenanceEntry(ToolOutput):
    key: str
    value: JsonValue
    source: Literal["base", "kwarg", "set", "agentjet"] = Field(
        description="base: composed YAML or dataclass default; kwarg; set: a post-construction write; agentjet: set by "
        "AgentJetJob itself (the tcp switch).")
    base_value: JsonValue = Field(description="The value before kwargs and writes (null when the key is new).")
    layer: str | None = Field(description="Which config set the base value ('schema' = a dataclass default).")
    note: str | None = None


class UnknownInput(ToolOutput):
    key: str = Field(description="The config key (or **splat) whose value the script sets only at run time.")
    reason: str


class BuildConfigResult(ToolOutput):
    """What comes first is what to read first: the summary, then what to know about it, then the YAML itself."""

    summary: str = Field(description="One line to quote: what was built, for which AgentJet, and what is unknown.")
    warnings: list[str]
    unknown: list[UnknownInput] = Field(
        default_factory=list, description="With script: inputs known only at run time; the YAML holds the base "
        "value at these keys, not the script's.")
    written: str | None = Field(description="The file created from output_path, else null.")
    agentjet: AgentJetRef
    base: BaseInfo
    layers: list[str] = Field(description="Composed configs in merge order (later wins), where each was read.")
    provenance: list[ProvenanceEntry]
    yaml: str = Field(description="Exactly what AgentJetJob(...).dump_job_as_yaml() writes for these inputs.")
