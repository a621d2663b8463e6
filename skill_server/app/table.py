"""The one table of tools. Both front ends (``cli``, ``mcp_app``) are built from it.

A tool is a plain function ``run(input_model, progress=None) -> output_model``. Its input model
validates arguments (and names bad fields), its output model is the MCP output schema, and its hints
are what the MCP annotations advertise. Adding a tool means adding one ``ToolSpec`` here, then
refreshing the schema manifest (``python -m skill_server schemas --write``).

Models and functions are named as ``"module:attribute"`` and imported on first use, so listing the
tools or calling one imports only that tool's module: the CLI answers fast and the MCP server starts
about as fast as an empty one (its schemas come from ``tool_schemas.json``, checked by a test).

``ToolSpec.invoke`` is the single path both front ends call, so a given argument gets the same
answer from both: the raw tree is checked (``arguments``), a top-level ``null`` means "not given",
and the rest is validated as JSON in pydantic's strict mode (no ``"3"`` -> 3, no ``"yes"`` -> True).
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from skill_server.app.arguments import check_argument_tree
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.core.text import shorten, utf8_safe

if TYPE_CHECKING:  # pydantic is imported with the first model: listing the tools needs none
    from pydantic import BaseModel

    from skill_server.core.models import Progress

SCHEMA_MANIFEST = Path(__file__).with_name("tool_schemas.json")

Ref = Any  # "module:attribute", or the object itself


@functools.cache
def _import_ref(ref: str) -> Any:
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _resolve(ref: Ref) -> Any:
    return _import_ref(ref) if isinstance(ref, str) else ref


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema the tool table publishes for a model: an input's lean schema, an output's outline
    (``app.published`` says what each keeps; ``references/tools.md`` documents every field).

    Free-form values are typed by ``models.JsonValue`` in the models themselves (a bare ``Any`` would
    publish an untyped ``{}``, which ``tests/test_tool_table.py`` refuses).
    """
    from skill_server.app import published
    from skill_server.core.models import ToolOutput

    schema = model.model_json_schema()
    return published.output_schema(schema) if issubclass(model, ToolOutput) else published.input_schema(schema)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    input_model: Ref
    output_model: Ref
    run: Ref
    read_only: bool
    destructive: bool = False
    idempotent: bool = True
    open_world: bool = False
    reports_progress: bool = False

    @property
    def input_type(self) -> type[BaseModel]:
        """The input model class (imported on first use)."""
        return cast("type[BaseModel]", _resolve(self.input_model))

    @property
    def output_type(self) -> type[BaseModel]:
        """The output model class (imported on first use)."""
        return cast("type[BaseModel]", _resolve(self.output_model))

    @property
    def function(self) -> Callable[..., BaseModel]:
        """The tool function (imported on first use)."""
        return cast("Callable[..., BaseModel]", _resolve(self.run))

    @property
    def input_schema(self) -> dict[str, Any]:
        """The published input schema (from the manifest: no model import needed)."""
        schema: dict[str, Any] = schema_manifest()[self.name]["input"]
        return schema

    def validate(self, arguments: Any) -> BaseModel:
        """Validate raw arguments into the input model, or raise ``ToolInputError`` naming the field."""
        from pydantic import ValidationError

        from skill_server.core.models import describe_validation_error

        if not isinstance(arguments, dict):
            kind = "an array" if isinstance(arguments, list) else type(arguments).__name__
            raise ToolInputError(f"arguments must be a JSON object, got {kind}")
        check_argument_tree(arguments)
        given = {name: value for name, value in arguments.items() if value is not None}
        try:
            return self.input_type.model_validate_json(json.dumps(given), strict=True)
        except ValidationError as exc:
            raise describe_validation_error(exc, self.input_schema) from None

    def invoke(self, arguments: Any, progress: Progress | None = None) -> BaseModel:
        """Validate and run; the single code path shared by both front ends.

        An ``OSError`` that escapes the tool (a file system refusing a path the user gave) becomes a
        one-line ``ToolFailure`` naming the argument that holds that path, when one does.
        """
        model = self.validate(arguments)
        try:
            if self.reports_progress:
                return self.function(model, progress=progress)
            return self.function(model)
        except OSError as exc:
            raise _os_failure(exc, arguments) from None

    @staticmethod
    def dump(result: BaseModel) -> dict[str, Any]:
        """The result as JSON types, as both front ends send it (``SparseOutput`` models omit unknowns).

        Text UTF-8 cannot carry (lone surrogates, from undecodable file names or a hostile server) is
        escaped, so no result ever fails to serialise.
        """
        dumped: dict[str, Any] = _printable_strings(result.model_dump(mode="json"))
        return dumped


def _os_failure(exc: OSError, arguments: dict[str, Any]) -> ToolFailure:
    """Name the argument whose value is (or holds) the path the file system refused."""
    path = exc.filename if isinstance(exc.filename, str) else None
    field = None
    if path:
        stack: list[tuple[Any, str]] = [(value, name) for name, value in arguments.items()]
        while stack and field is None:
            value, name = stack.pop()
            if isinstance(value, str) and value and (value in path or path in value):
                field = name
            elif isinstance(value, dict):
                stack.extend((item, f"{name}.{key}") for key, item in value.items())
            elif isinstance(value, list):
                stack.extend((item, f"{name}.{index}") for index, item in enumerate(value))
    what = exc.strerror or type(exc).__name__
    return ToolFailure(f"{what}: {shorten(path, 160)}" if path else f"file system error: {what}", field=field)


def _printable_strings(data: Any) -> Any:
    """``data`` with every string (and key) encodable as UTF-8."""
    if isinstance(data, str):
        return utf8_safe(data)
    if isinstance(data, list):
        return [_printable_strings(item) for item in data]
    if isinstance(data, dict):
        return {utf8_safe(key) if isinstance(key, str) else key: _printable_strings(value)
                for key, value in data.items()}
    return data


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="episode_cap",
        title="AgentJet swarm episode cap",
        description=(
            "Exact ceiling of overwatch's 'Running Episodes' gauge for an AgentJet swarm engine, from the engine's "
            "max_env_worker, num_repeat and train_batch_size, bounded by what the clients run together. Says which "
            "inputs bind and which knob lifts the cap; adding clients never raises it."
        ),
        input_model="skill_server.tools.episode_cap.models:EpisodeCapInput",
        output_model="skill_server.tools.episode_cap.models:EpisodeCapResult",
        run="skill_server.tools.episode_cap.tool:compute_episode_cap",
        read_only=True,
    ),
    ToolSpec(
        name="build_config",
        title="Build the config AgentJetJob hands to the engine",
        description=(
            "The YAML AgentJetJob(**kwargs) plus post-construction writes ('set') dumps, byte for byte, for a bundled "
            "AgentJet release or an install read statically (never imported); refuses what AgentJet refuses, with its "
            "exception. Returns the YAML and every value's provenance. Writes only a NEW output_path."
        ),
        input_model="skill_server.tools.build_config.models:BuildConfigInput",
        output_model="skill_server.tools.build_config.models:BuildConfigResult",
        run="skill_server.tools.build_config.tool:build_config",
        read_only=False,
        destructive=False,
        idempotent=True,
    ),
    ToolSpec(
        name="check_config",
        title="Lint an AgentJet swarm client script and its YAML",
        description=(
            "Static linter (the script is never run) for AgentJet swarm clients: every AgentJetJob, its kwargs, base "
            "YAML, later writes and dumps, checked against the YAML and AgentJet's defaults. Findings carry a stable "
            "rule id, locations and a fix; effective values carry their source or why they are unknown."
        ),
        input_model="skill_server.tools.check_config.models:CheckConfigInput",
        output_model="skill_server.tools.check_config.models:CheckConfigResult",
        run="skill_server.tools.check_config.tool:check_config",
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="swarm_status",
        title="Live AgentJet swarm server status",
        description=(
            "Read live AgentJet swarm servers (url, urls, or an experiment id) and explain overwatch's 'Running "
            "Episodes' gauge: engine state, step, claimed and completed episodes against targets, stale episodes, the "
            "episode cap and a plain diagnosis. watch_s samples the gauge. Unknown values are omitted."
        ),
        input_model="skill_server.tools.swarm_status.models:SwarmStatusInput",
        output_model="skill_server.tools.swarm_status.models:SwarmStatusResult",
        run="skill_server.tools.swarm_status.tool:swarm_status",
        read_only=True,
        idempotent=True,
        open_world=True,
        reports_progress=True,
    ),
    # --- experiments in tmux, here or on ssh hosts (with the GPU and Ray tools they use) ---
    ToolSpec(
        name="blueprint",
        title="Experiment blueprint: template or validate",
        description=(
            "action='template' renders an experiment blueprint (and writes it to a new path); action='validate' "
            "parses one and lists its problems. Never runs anything."
        ),
        input_model="skill_server.tools.blueprint.models:BlueprintInput",
        output_model="skill_server.tools.blueprint.models:BlueprintOutput",
        run="skill_server.tools.blueprint.tool:blueprint_tool",
        read_only=False,
        destructive=False,
        idempotent=False,
    ),
    ToolSpec(
        name="launch_experiment",
        title="Launch an experiment in tmux, here or on ssh hosts",
        description=(
            "Start a run (a blueprint, or name+command+workdir, or several processes such as a swarm server and its "
            "clients) in tmux here or on ssh hosts, and return at once with id, log path and attach command. The max "
            "time is enforced on the host; runs survive ssh dropping. Follow with wait_experiment."
        ),
        input_model="skill_server.tools.launch_experiment.models:LaunchInput",
        output_model="skill_server.tools.launch_experiment.models:LaunchOutput",
        run="skill_server.tools.launch_experiment.tool:launch_experiment",
        read_only=False,
        idempotent=False,
        open_world=True,
    ),
    ToolSpec(
        name="wait_experiment",
        title="Wait (bounded) for an experiment",
        description=(
            "Read-only: block up to timeout_s (at most 50) until the run exits, shows its first step, matches a "
            "pattern or hits an error signature. Returns the status, reason and next_wait_s, the pause before the "
            "next wait. Never acts on the run."
        ),
        input_model="skill_server.tools.wait_experiment.models:WaitInput",
        output_model="skill_server.tools.wait_experiment.models:WaitOutput",
        run="skill_server.tools.wait_experiment.tool:wait_experiment",
        read_only=True,
        idempotent=True,
        open_world=True,
        reports_progress=True,
    ),
    ToolSpec(
        name="experiment_status",
        title="Experiment status, new log lines, errors and metrics",
        description=(
            "Read-only: state, time left, first-step check, last metrics, progress and ETA, checkpoints, error "
            "signatures with fixes, and the log lines new since a cursor, for one experiment or all; metrics_history "
            "returns chosen metrics over steps."
        ),
        input_model="skill_server.tools.experiment_status.models:StatusInput",
        output_model="skill_server.tools.experiment_status.models:StatusOutput",
        run="skill_server.tools.experiment_status.tool:experiment_status",
        read_only=True,
        idempotent=True,
        open_world=True,
    ),
    ToolSpec(
        name="compare_experiments",
        title="Compare experiments: metrics, speed, leader, config differences",
        description=(
            "Read-only: two to eight runs side by side: per metric the final, best and last-k mean, which run leads "
            "and by how much, steps per hour, and the config keys that differ. plot=true overlays them in one PNG."
        ),
        input_model="skill_server.tools.compare_experiments.models:CompareInput",
        output_model="skill_server.tools.compare_experiments.models:CompareOutput",
        run="skill_server.tools.compare_experiments.tool:compare_experiments",
        read_only=True,
        idempotent=True,
        open_world=True,
    ),
    ToolSpec(
        name="stop_experiment",
        title="Stop an experiment",
        description=(
            "Stop every process of an experiment this server launched, on every host: Ctrl-C, grace_s, then SIGTERM "
            "and SIGKILL, then verify. Lists what was killed and what survived; never touches sessions it did not "
            "launch."
        ),
        input_model="skill_server.tools.stop_experiment.models:StopInput",
        output_model="skill_server.tools.stop_experiment.models:StopOutput",
        run="skill_server.tools.stop_experiment.tool:stop_experiment",
        read_only=False,
        destructive=True,
        idempotent=True,
        open_world=True,
    ),
    ToolSpec(
        name="gpu_status",
        title="GPU memory, utilisation and processes of hosts",
        description=(
            "Read-only: per host ('local' or ssh destinations), every GPU's memory, utilisation, free_fraction and "
            "the processes holding memory, from nvidia-smi. A host that cannot answer is reported with the reason."
        ),
        input_model="skill_server.tools.gpu_status.models:GpuStatusInput",
        output_model="skill_server.tools.gpu_status.models:GpuStatusOutput",
        run="skill_server.tools.gpu_status.tool:gpu_status",
        read_only=True,
        idempotent=True,
        open_world=True,
    ),
    ToolSpec(
        name="ray_cluster",
        title="Start, check or stop a Ray cluster across nodes",
        description=(
            "Multi-node Ray: action='start' runs ray start on head and workers in tmux (as one run of this server) "
            "and waits until every node shows; 'status' lists alive nodes and resources; 'stop' stops the run, runs "
            "ray stop on every node and reports what still holds GPUs."
        ),
        input_model="skill_server.tools.ray_cluster.models:RayClusterInput",
        output_model="skill_server.tools.ray_cluster.models:RayClusterOutput",
        run="skill_server.tools.ray_cluster.tool:ray_cluster",
        read_only=False,
        destructive=True,
        idempotent=False,
        open_world=True,
        reports_progress=True,
    ),
    ToolSpec(
        name="collect_results",
        title="Collect results into results.md and finish.flag",
        description=(
            "Summarise a run's metrics (validation/training markdown or the log's step lines) and log: "
            "first/best/last per metric, trend, plateau, final state, errors. Writes results.md and metrics.png and, "
            "once the run ended, finish.flag, into the result directory."
        ),
        input_model="skill_server.tools.collect_results.models:CollectInput",
        output_model="skill_server.tools.collect_results.models:CollectOutput",
        run="skill_server.tools.collect_results.tool:collect_results",
        read_only=False,
        destructive=True,  # it replaces results.md and metrics.png in the result directory, whoever wrote them
        idempotent=True,
        open_world=True,
    ),
)

TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOLS}


def get_tool(name: str) -> ToolSpec | None:
    return TOOLS_BY_NAME.get(name)


def build_schema_manifest() -> dict[str, Any]:
    """Input and output JSON schemas of every tool, computed from the models (imports them all)."""
    return {
        spec.name: {"input": model_schema(spec.input_type), "output": model_schema(spec.output_type)}
        for spec in TOOLS
    }


@functools.lru_cache(maxsize=1)
def schema_manifest() -> dict[str, Any]:
    """The committed manifest (fast to read); ``tests/test_tool_table.py`` keeps it equal to the models."""
    with SCHEMA_MANIFEST.open(encoding="utf-8") as handle:
        manifest: dict[str, Any] = json.load(handle)
    return manifest


def write_schema_manifest() -> Path:
    from skill_server.core.fsutil import write_text_atomic

    # model order: the order help lists arguments in. One value per line, unindented: diffs stay readable, and
    # the skills CLI copies this file into every assistant's skill folder.
    text = json.dumps(build_schema_manifest(), indent=0) + "\n"
    return write_text_atomic(SCHEMA_MANIFEST, text, overwrite=True)
