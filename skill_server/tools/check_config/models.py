"""Input and output models of ``check_config`` (the MCP schemas are generated from these)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictStr, model_validator

from skill_server.agentjet.identity import AgentJetRef, AgentJetRootArg, AgentJetVersionArg
from skill_server.core.models import JsonValue, SparseOutput, ToolInput, ToolOutput

Severity = Literal["error", "warning", "info"]
Source = Literal["default", "yaml", "kwarg", "write", "tcp-switch", "env-default", "cli-default", "computed"]
SetBy = Literal["default", "yaml", "kwarg", "write", "tcp-switch", "computed"]

MAX_PATH_CHARS = 4096


class CheckConfigInput(ToolInput):
    script: StrictStr | None = Field(default=None, max_length=MAX_PATH_CHARS,
                                     description="Path of a Python swarm client script (read, never run).")
    yaml: StrictStr | None = Field(
        default=None, max_length=MAX_PATH_CHARS,
        description="A YAML to check: the script's base, or a YAML alone. The base the script passes as "
        "base_yaml_config (it replaces the script's own base_yaml_config for the comparison), or a YAML on its own.")
    agentjet_version: AgentJetVersionArg = None
    agentjet_root: AgentJetRootArg = None
    cwd: StrictStr | None = Field(
        default=None, max_length=MAX_PATH_CHARS,
        description="The directory the client is launched from. AgentJetJob resolves a relative base_yaml_config "
        "against it; without it, a relative path is only looked for in candidate folders (the script's folder "
        "up to its repository root) and the result says so. Relative script/yaml paths resolve against it too.")
    detail: Literal["compact", "full"] = Field(
        default="compact", description="full adds every location, value and construction. Compact: findings (rule, "
        "severity, key, location, message, fix) and the effective values by name.")

    @model_validator(mode="after")
    def _something_to_check(self) -> CheckConfigInput:
        if not self.script and not self.yaml:
            raise ValueError("give script (a swarm client .py), yaml, or both")
        return self


class Location(ToolOutput):
    file: str | None = Field(description="Absolute path; null for a bundled AgentJet release's defaults (no file "
                             "here).")
    line: int | None = Field(default=None, description="1-based line, when known.")
    key: str | None = Field(default=None, description="The dotted key set here, when a finding has several inputs.")
    source: str | None = Field(default=None, description="What sets it here: default, yaml, kwarg, write, "
                               "tcp-switch.")


class Finding(SparseOutput):
    rule: str
    severity: Severity
    key: str | None = Field(description="Dotted config key, e.g. ajet.rollout.max_env_worker.")
    location: str | None = Field(default=None, description="file:line of the first location: the script checked "
                                 "by its name, other files by their path (absent: AgentJet's bundled default).")
    message: str
    fix: str
    locations: list[Location] | None = Field(default=None, description="detail=full: every line that matters; the "
                                             "effective setter of each input first, overridden ones after.")
    values: dict[str, JsonValue] | None = Field(default=None, description="detail=full: the numbers behind it.")


class Skipped(ToolOutput):
    rule: str = Field(description="The rule id (compact: the ids that share the reason, comma-separated).")
    reason: str = Field(description="Why the check could not run (the unknown values and what they depend on).")


class Summary(ToolOutput):
    errors: int
    warnings: int
    infos: int
    skipped: int = Field(description="Checks that could not run (see skipped).")


class EffectiveValue(ToolOutput):
    key: str = Field(description="Dotted config key.")
    value: JsonValue = Field(default=None, description="What the engine gets; null when unknown (see unresolved).")
    source: Source = Field(description="default, yaml, kwarg, write, tcp-switch; env-default / cli-default when the "
                           "script's value is an environment or command-line default; computed for derived values.")
    set_by: SetBy = Field(description="The mechanism that sets it (kwarg, write, yaml, ...).")
    location: Location | None = Field(default=None, description="Where it is set.")
    assumes: list[str] = Field(default_factory=list, description="What must stay at its default for the value to "
                               "hold (an environment variable unset, an option not given).")
    unresolved: str | None = Field(default=None, description="Why the value is unknown.")
    note: str | None = None


#: Values only a swarm engine has: a classic-mode config shows none of them.
SWARM_ONLY = ("interchange_method", "max_inference_tracker_threads", "swarm_mode_sample_collection_method",
              "episode_cap", "engine_cap", "client_parallelism")


class Effective(SparseOutput):
    """The values the engine would get (kwargs, then the tcp switch, then writes made before any dump). A
    classic-mode config has no swarm-only values (``SWARM_ONLY``)."""

    max_env_worker: EffectiveValue
    num_repeat: EffectiveValue
    train_batch_size: EffectiveValue
    n_gpus_per_node: EffectiveValue
    nnodes: EffectiveValue
    interchange_method: EffectiveValue | None = None
    max_prompt_length: EffectiveValue
    max_response_length: EffectiveValue
    max_response_length_in_one_turn: EffectiveValue
    max_model_len: EffectiveValue
    lora_rank: EffectiveValue
    lora_load_format: EffectiveValue
    layered_summon: EffectiveValue
    lr: EffectiveValue
    temperature: EffectiveValue  # the rollout's sampling temperature: an engine value users ask for
    enable_swarm_mode: EffectiveValue
    enable_interchange_server: EffectiveValue
    max_inference_tracker_threads: EffectiveValue | None = None
    swarm_mode_sample_collection_method: EffectiveValue | None = None
    model_path: EffectiveValue
    logger: EffectiveValue
    experiment_name: EffectiveValue
    save_freq: EffectiveValue  # with the next two: whether a relaunch resumes, and from where
    total_training_steps: EffectiveValue
    checkpoint_base_dir: EffectiveValue
    episode_cap: EffectiveValue | None = Field(default=None, description="Most episodes at once: the engine's cap, "
                                               "bounded by this client's own pool when known (source computed).")
    engine_cap: EffectiveValue | None = Field(default=None, description="The cap the engine's values alone allow.")
    client_parallelism: EffectiveValue | None = Field(default=None, description="What this client script runs at "
                                                      "once (the pool that runs its episodes), when a script is read.")
    unresolved: dict[str, str] = Field(description="Every dotted key whose value is unknown -> why.")


class KwargInfo(ToolOutput):
    name: str
    value: JsonValue
    resolved: bool
    expression: str
    how: str = Field(description="literal, constant, imported constant, dataclass default/argument, arithmetic, "
                     "path, env-default, cli-default, or unresolved.")
    assumes: list[str] = Field(default_factory=list)
    unresolved: str | None = None
    line: int


class WriteInfo(ToolOutput):
    key: str
    value: JsonValue
    resolved: bool
    expression: str
    kind: str
    line: int
    after_freeze: bool


class FreezeInfo(ToolOutput):
    call: str
    line: int


class BaseYamlInfo(ToolOutput):
    expression: str | None = Field(description="base_yaml_config as written in the script (null: not passed).")
    path: str | None = Field(description="The YAML compared, or the missing one (null: AgentJet's defaults).")
    anchor: Literal["absolute", "script_dir", "cwd", "explicit", "defaults", "unresolved"]
    state: Literal["defaults", "file", "missing", "unresolved", "refused"] = Field(
        description="defaults: AgentJet's own swarm default; file: composed; missing: not there; unresolved: its path "
        "is known only at run time; refused: AgentJet refuses to compose it (see the agentjet-refusal finding). "
        "Unless defaults or file, every value it would set is unknown.")
    exists: bool
    tried: list[str] = Field(description="Every path looked at, in order.")
    launch_dir_known: bool = Field(description="False when the path is relative and no cwd was given.")


class ConstructionInfo(ToolOutput):
    line: int
    variable: str | None
    callee: str
    kwargs: list[KwargInfo]
    dynamic_kwargs: list[str] = Field(description="Splats or positional arguments that could not be resolved.")
    base_yaml: BaseYamlInfo
    writes: list[WriteInfo]
    freezes: list[FreezeInfo]
    effective: Effective | None = Field(default=None, description="This construction's values; null for the first "
                                        "(the top-level effective).")


class CheckConfigResult(SparseOutput):
    summary: str = Field(description="One line to quote: how many findings, and the worst.")
    findings: list[Finding] = Field(description="Errors first, then warnings, then infos.")
    counts: Summary
    skipped: list[Skipped] = Field(description="Checks that could not run, with the reason.")
    values: dict[str, JsonValue] | None = Field(default=None, description="detail=compact: the first construction's "
                                                "effective values by name (null: unknown, see unknown).")
    unknown: dict[str, str] | None = Field(default=None, description="detail=compact: why the null values are "
                                           "unknown (names sharing a reason listed together, comma-separated).")
    effective: Effective | None = Field(default=None, description="detail=full: resolved values of the first "
                                        "construction (or the YAML alone), each with its source.")
    constructions: list[ConstructionInfo] | None = Field(default=None, description="detail=full: every construction "
                                                         "(kwargs, base, writes, freezes).")
    yaml_customised: list[str] | None = Field(default=None, description="detail=full: keys the checked YAML sets to "
                                              "something other than AgentJet's defaults.")
    agentjet: AgentJetRef = Field(description="The AgentJet every version-dependent finding describes (its label, "
                                  "e.g. 'AgentJet 0.1.0 (c68c154f)', is named in those messages and fixes).")
    notes: list[str]
