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
    """The JSON schema the tool table publishes for a model.

    Free-form values are typed by ``models.JsonValue`` in the models themselves (a bare ``Any`` would
    publish an untyped ``{}``, which ``tests/test_tool_table.py`` refuses).
    """
    return model.model_json_schema()


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
            "Exact ceiling of overwatch's 'Running Episodes' gauge for an AgentJet swarm engine: "
            "min(max_env_worker, num_repeat * min(train_batch_size, ceil(max_env_worker/num_repeat))) (floor in "
            "older engines; thread_rule=auto takes the selected AgentJet's rule), further bounded by what the clients "
            "together run (one total or a per-client list). Says which inputs bind and which knob lifts the cap, and "
            "which AgentJet version it describes. Adding clients never raises it. Takes the numbers, or reads them "
            "from an engine YAML, a client script or a live server (url/id)."
        ),
        input_model="skill_server.tools.episode_cap.models:EpisodeCapQuery",
        output_model="skill_server.tools.episode_cap.models:EpisodeCapAnswer",
        run="skill_server.tools.episode_cap.tool:compute_episode_cap",
        read_only=True,
    ),
    ToolSpec(
        name="build_config",
        title="Build the config AgentJetJob hands to the engine",
        description=(
            "The YAML AgentJetJob(**kwargs) plus post-construction writes ('set') dumps, byte for byte, for a "
            "bundled AgentJet release (agentjet_version, default the newest) or an install read statically "
            "(agentjet_root); AgentJet is never imported. Inputs real AgentJet refuses are refused with the cause "
            "and AgentJet's exception. Returns the YAML, which AgentJet it describes, provenance for every value and "
            "warnings. Read-only unless output_path is given: then it also creates that NEW file (never replaces one)."
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
            "Static linter (ast only; the script is never imported or run) for AgentJet swarm clients: finds every "
            "AgentJetJob construction, its kwargs, base_yaml_config (located where AgentJetJob opens it; pass cwd, "
            "the launch directory, for a relative one), post-construction writes and dump/sync calls, compares them "
            "with the YAML and AgentJet's defaults and reports findings with stable rule ids: "
            "split-configuration, kwarg-overrides-yaml, redundant-kwarg, unsupported-kwarg, kwarg-group-incomplete, "
            "escape-hatch-has-kwarg, unknown-key, write-after-dump, length-budget, lora-rules, "
            "batch-not-divisible-by-gpus, samples-below-world-size, base-yaml-missing, base-not-swarm, "
            "interchange-not-tcp, cap-not-divisible, cap-limited-by-batch, tracker-threads-below-cap, "
            "agentjet-refusal. Each has key, locations (file, line), values and a fix. Everything AgentJet would "
            "refuse (the causes build_config refuses with) is a finding with AgentJet's exception, all at once. "
            "Findings describe one AgentJet release (agentjet_version, agentjet_root; default the newest bundled), "
            "named in agentjet and in every version-dependent message. Effective values carry their source; a value "
            "that depends on the environment, the command line or a missing or refused base YAML is null with the "
            "reason, and checks that could not run are listed in skipped."
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
            "Read one or more live AgentJet swarm servers (GET /get_engine_status and "
            "/get_current_batch_rollout_pool_information), or the one an experiment of this skill launched (id), "
            "and explain overwatch's 'Running Episodes' gauge: engine state, step, claimed episodes (what the gauge "
            "counts), completed episodes/tasks against their targets, the stalest episodes against their discard "
            "timeout, the episode cap (from cap arguments, a dumped config yaml, or the yaml_backup.yaml the engine "
            "wrote) and plain-sentence diagnosis. An unreachable server is reachable=false with the reason and what "
            "to check next. watch_s samples the gauge; every call ends within watch_s + timeout_s. Unknown values "
            "are omitted, never null."
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
            "action='template' renders a complete blueprint markdown ([exp_purpose], [exp_codebase_dir], "
            "[exp_venv_exe], [exp_yaml_path], [exp_launch_command], [exp_result_dir], [exp_max_time]; defaults 24 h, "
            "first step within 20 min, ./auto_agent/exp_results/) and, when path is given, writes it to that new "
            "file (an existing file is never replaced). action='validate' parses one (path or text) and returns its "
            "fields plus problems: missing sections, relative or missing paths, unreadable or over-long max time. "
            "Never runs anything."
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
            "Start a run (from a blueprint, or name+command+workdir, or several processes such as the swarm server "
            "and its clients) in a detached session of a dedicated tmux server, on this machine or on any ssh host "
            "('host', and per process 'processes[i].host': one experiment may span hosts), and return at once with "
            "id, session, log_path and the attach command. Output goes to a log file on the process's host, the exit "
            "code to a file; env is set explicitly; a process with wait_for_url starts once that URL answers; the "
            "max time is enforced on the host (state timed_out). Runs survive the ssh connection dropping. A running "
            "name is refused; with require_free_gpus (e.g. 0.95) a GPU on the host with less memory free refuses "
            "the start, naming the pids that hold it. Follow with wait_experiment / experiment_status."
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
            "Read-only: block up to timeout_s (default 30, clamped to 50) until the run exits, its first training "
            "step shows (until='first_step'), a regex appears (until='pattern') or an error signature appears; "
            "reports progress while waiting. Returns the status plus reason and next_wait_s (back-off 30 s, 1, 2, "
            "4, 8, 16 min). Never acts on the run (the max time is enforced on the run's host); an unreachable host "
            "gives reason 'unreachable'."
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
            "Read-only. State (running/succeeded/failed/stopped/timed_out/lost, or unreachable when a host cannot "
            "be asked) of one experiment or all, with elapsed and remaining time, first-step check (the first "
            "step:N line), last `step:N - key:value` metrics, progress (global and total steps, seconds per step, "
            "steps per hour, ETA, each with its source or why it is unknown), checkpoints (global_step_N folders: "
            "step, size, time), error signatures with fixes, and only the log lines new since the cursor (at most "
            "200 lines / 16 KB). metrics_history returns chosen metrics (globs) over steps, downsampled to "
            "history_points. Reads only appended bytes; one round trip per host, hosts in parallel."
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
            "Read-only. Two to eight runs side by side: per run its state, steps per hour and, for each chosen metric "
            "(names or globs; default reward, validation, loss and entropy metrics every run has), the final value, "
            "the best value and its step, and the mean of the last k values, from every step:N line scanned; which "
            "run leads on the primary metric by its last-k mean and by how much (higher is better unless the metric "
            "is loss-like or higher_is_better says otherwise; the answer says which was assumed); and the keys "
            "whose values differ between the runs' YAMLs (their blueprint or --conf YAML, or yaml_paths such as a "
            "dumped config; bounded). plot=true overlays the runs in one PNG, returned as an image."
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
            "Stop every process of an experiment this server launched, on every host: Ctrl-C (SIGINT to each "
            "process group), wait grace_s (default 10), then SIGTERM and SIGKILL to whatever still runs, including "
            "processes that left the group (setsid, double fork), then verify. Lists what had to be killed and what "
            "survived; the run is never reported stopped while a process of it lives. Removes its tmux sessions. "
            "Sessions not in the registry are never touched."
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
            "Read-only. For each host ('local' or ssh destinations, asked in parallel, one round trip each): every "
            "GPU's index, uuid, name, memory used/total (MiB), utilisation and free_fraction ((total-used)/total, "
            "what AgentJet's launcher checks against 0.95), with the compute processes holding memory (pid, MiB, "
            "name), from nvidia-smi's CSV queries. A host without nvidia-smi, a failing driver or an unreachable "
            "host is reported per host with the reason (gpus null), never as an error of the whole call."
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
            "For multi-node training. action='start': ray start --head on head and --address on every worker (ssh "
            "hosts), each in tmux as processes of one run of this server (logs, max time, stop guarantees), after "
            "checking ray on every node (same version; require_free_gpus checks GPUs); then waits up to timeout_s "
            "(<= 50, progress reported) until ray status lists every node; call again to keep waiting. "
            "action='status': alive nodes and their resources from ray status on the head (bounded). "
            "action='stop': stops the run, runs ray stop --force on every node, reports what still holds GPUs; "
            "kill_gpu_processes=true also ends those owned by the ssh user."
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
            "Summarise the validation and training markdown files (dict-like metric lines; paths from the run's "
            "YAML or given), or when they are absent the log's step:N lines (metrics_source says which), and the "
            "log: first/best/last per metric, trend, plateau check for mean_reward and task_pass_rate, final state "
            "and error summary. Draws metrics over steps (optionally with other runs overlaid) into metrics.png, "
            "returned as an image and embedded in results.md (needs matplotlib; without it the series are returned "
            "in plot_data). Writes <result_dir>/results.md and metrics.png (replacing the previous ones) and, once "
            "the run has ended, an empty finish.flag, atomically, on the host where the run's result directory is "
            "(the answer says which). Reads only regular files, bounded."
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
