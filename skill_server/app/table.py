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
import os
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
    #: what the published description leaves out, for references/tools.md (``app.tool_docs``) only
    details: str = ""

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
            "Exact ceiling of overwatch's 'Running Episodes' gauge for an AgentJet swarm engine (max_env_worker, "
            "num_repeat, train_batch_size), bounded by what the clients run together; which bound binds, and the "
            "fewest engine changes reaching a target. Takes the numbers, or reads them from an engine YAML, a client "
            "script or a live server (url/id)."
        ),
        input_model="skill_server.tools.episode_cap.models:EpisodeCapQuery",
        output_model="skill_server.tools.episode_cap.models:EpisodeCapAnswer",
        run="skill_server.tools.episode_cap.tool:compute_episode_cap",
        details=(
            "The cap is min(max_env_worker, num_repeat * min(train_batch_size, ceil(max_env_worker / num_repeat))), "
            "with floor instead of ceil in older engines; thread_rule=auto takes the selected AgentJet's rule. What "
            "the clients together run (client_parallelism: one total or a per-client list) bounds it further. The "
            "answer names the AgentJet version it describes."
        ),
        read_only=True,
    ),
    ToolSpec(
        name="build_config",
        title="Build the config AgentJetJob hands to the engine",
        description=(
            "The YAML AgentJetJob(**kwargs) plus post-construction writes ('set') dumps, byte for byte, for a bundled "
            "AgentJet release or an install read statically (never imported); refuses what AgentJet refuses, with its "
            "exception. Takes kwargs/base_yaml/set, or a client script. Returns the YAML and every value's provenance. "
            "Read-only unless output_path is given (a NEW file: it never replaces one)."
        ),
        input_model="skill_server.tools.build_config.models:BuildConfigInput",
        output_model="skill_server.tools.build_config.models:BuildConfigResult",
        run="skill_server.tools.build_config.tool:build_config",
        details=(
            "The release is agentjet_version (default the newest bundled) or the install at agentjet_root. Inputs "
            "real AgentJet refuses are refused with the cause and AgentJet's exception. The answer names the AgentJet "
            "it describes and carries warnings. Read-only unless output_path is given: that file is created, never "
            "replaced."
        ),
        read_only=False,
        destructive=False,
        idempotent=True,
    ),
    ToolSpec(
        name="check_config",
        title="Lint an AgentJet swarm client script and its YAML",
        description=(
            "Static linter (the script is never run) for AgentJet swarm clients: every AgentJetJob, its kwargs, base "
            "YAML, later writes and dumps, checked against the YAML and AgentJet's defaults, plus the client's own "
            "concurrency and episode protocol (begin/end/abort on every path). Findings carry a stable rule id, a "
            "location and a fix; effective values carry why they are unknown. Compact by default; detail=full for "
            "every location and value."
        ),
        input_model="skill_server.tools.check_config.models:CheckConfigInput",
        output_model="skill_server.tools.check_config.models:CheckConfigResult",
        run="skill_server.tools.check_config.tool:check_config",
        details=(
            "The script is read with ast only. base_yaml_config is located where AgentJetJob opens it (pass cwd, the "
            "launch directory, for a relative one). Everything AgentJet would refuse (the causes build_config refuses "
            "with) is a finding with AgentJet's exception, all at once. Findings describe one AgentJet release "
            "(agentjet_version or agentjet_root; default the newest bundled), named in agentjet and in every "
            "version-dependent message. A value that depends on the environment, the command line or a missing or "
            "refused base YAML is null with the reason; checks that could not run are listed in skipped. The rules "
            "are documented in [split-configuration.md](split-configuration.md): split-configuration, "
            "kwarg-overrides-yaml, redundant-kwarg, unsupported-kwarg, kwarg-group-incomplete, escape-hatch-has-kwarg, "
            "unknown-key, write-after-dump, length-budget, lora-rules, batch-not-divisible-by-gpus, "
            "samples-below-world-size, base-yaml-missing, base-not-swarm, interchange-not-tcp, cap-not-divisible, "
            "cap-limited-by-batch, tracker-threads-below-cap, no-checkpoints, no-total-steps, agentjet-refusal."
        ),
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
        details=(
            "It reads GET /get_engine_status and /get_current_batch_rollout_pool_information. Claimed episodes are "
            "what the gauge counts; the stalest episodes are set against their discard timeout; the cap comes from "
            "cap arguments, a dumped config yaml, or the yaml_backup.yaml the engine wrote. An unreachable server is "
            "reachable=false with the reason and what to check next. Every call ends within watch_s + timeout_s."
        ),
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
            "action='template' renders an experiment blueprint (and writes it to a new path); 'validate' parses one, "
            "here or on an ssh host, and lists its problems. Never runs anything."
        ),
        input_model="skill_server.tools.blueprint.models:BlueprintInput",
        output_model="skill_server.tools.blueprint.models:BlueprintOutput",
        run="skill_server.tools.blueprint.tool:blueprint_tool",
        details=(
            "The sections are [exp_purpose], [exp_codebase_dir], [exp_venv_exe], [exp_yaml_path], "
            "[exp_launch_command], [exp_result_dir] and [exp_max_time]; defaults: 24 h, first step within 20 min, "
            "./auto_agent/exp_results/. An existing file is never replaced. validate reports missing sections, "
            "relative or missing paths, and an unreadable or over-long max time."
        ),
        read_only=False,
        destructive=False,
        idempotent=False,
    ),
    ToolSpec(
        name="launch_experiment",
        title="Launch an experiment in tmux, here or on ssh hosts",
        description=(
            "Start a run (a blueprint, name+command+workdir, or processes such as a swarm server and its clients) in "
            "tmux here or on ssh hosts; returns at once with id, log path and attach command. Follow with "
            "wait_experiment."
        ),
        input_model="skill_server.tools.launch_experiment.models:LaunchInput",
        output_model="skill_server.tools.launch_experiment.models:LaunchOutput",
        run="skill_server.tools.launch_experiment.tool:launch_experiment",
        details=(
            "Each run gets a detached session of a dedicated tmux server, on this machine or an ssh host ('host', and "
            "per process 'processes[i].host': one experiment may span hosts). Output goes to a log file on the "
            "process's host and the exit code to a file; env is set explicitly; a process with wait_for_url starts "
            "once that URL answers; the max time is enforced on the host (the run ends timed_out) and runs survive "
            "ssh dropping. A running name is refused; with "
            "require_free_gpus (e.g. 0.95) a GPU on the host with less memory free refuses the start, naming the pids "
            "that hold it."
        ),
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
        details=(
            "timeout_s defaults to 30 and is clamped to 50; progress is reported while waiting. The max time is "
            "enforced on the run's host, never by this call; an unreachable host gives reason 'unreachable'."
        ),
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
        details=(
            "States: running, succeeded, failed, stopped, timed_out, lost, or unreachable when a host cannot be "
            "asked. The first-step check looks for the first step:N line; metrics are the last `step:N - key:value` "
            "line's; progress gives global and total steps, seconds per step, steps per hour and ETA, each with its "
            "source or why it is unknown; checkpoints are global_step_N folders (step, size, time). At most 200 new "
            "lines / 16 KB per call. metrics_history takes names or globs and is downsampled to history_points. It "
            "reads only appended bytes, one round trip per host, hosts in parallel."
        ),
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
        details=(
            "Metrics default to the reward, validation, loss and entropy metrics every run has, from every step:N "
            "line scanned. The leader is decided on the primary metric by its last-k mean (higher is better unless "
            "the metric is loss-like or higher_is_better says otherwise; the answer says which was assumed). Config "
            "differences come from each run's blueprint or --conf YAML, or yaml_paths such as a dumped config, "
            "bounded."
        ),
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
        details=(
            "Ctrl-C is SIGINT to each process group; grace_s defaults to 10; SIGTERM and SIGKILL also reach processes "
            "that left the group (setsid, double fork). The run is never reported stopped while a process of it "
            "lives. Its tmux sessions are removed; sessions not in the registry are never touched. Any id of a "
            "resumed run stops its later attempts too and cancels a relaunch waiting for its backoff (the summary "
            "says so). A Slurm job whose controller does not answer is stopped by the run's monitor on its node, "
            "and the summary says the stop could not be confirmed."
        ),
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
        details=(
            "Hosts are asked in parallel, one round trip each. Memory is in MiB; free_fraction is (total-used)/total, "
            "what AgentJet's launcher checks against 0.95; processes are the compute processes (pid, MiB, name) from "
            "nvidia-smi's CSV queries. A host without nvidia-smi, a failing driver or an unreachable host has gpus "
            "null and the reason, never an error of the whole call."
        ),
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
        details=(
            "start checks ray on every node first (same version; require_free_gpus checks GPUs), starts ray start "
            "--head on head and --address on every worker with this server's logs, max time and stop guarantees, then "
            "waits up to timeout_s (at most 50, progress reported) until ray status lists every node; call it again "
            "to keep waiting. status reads ray status on the head (bounded). stop runs ray stop --force on every "
            "node; kill_gpu_processes=true also ends the GPU holders owned by the ssh user."
        ),
        read_only=False,
        destructive=True,
        idempotent=False,
        open_world=True,
        reports_progress=True,
    ),
    # --- environments: checking a host for AgentJet, and installing it there ---
    ToolSpec(
        name="preflight",
        title="Is a host ready for AgentJet?",
        description=(
            "Read-only: are hosts (local, ssh, a Slurm allocation) ready for AgentJet? Host, environment (inside "
            "python), GPUs, network: ready_for per role, each check's status, value, expected, evidence and fix."
        ),
        input_model="skill_server.tools.preflight.models:PreflightInput",
        output_model="skill_server.tools.preflight.models:PreflightOutput",
        run="skill_server.tools.preflight.tool:preflight",
        details=(
            "Statuses: ok, warn, fail, skip (does not apply, or not asked, with why), unknown (not looked at in time; "
            "never ok). The environment checks run inside `python` on each host (torch with its CUDA and C++ ABI, "
            "vLLM, verl against what the AgentJet release accepts, Ray, transformers, flash_attn and its kernels "
            "imported, ajet with version and commit, not conda's base env). With slurm_job the login node gets the "
            "host, environment and network checks and every node of the job the driver, GPU, memory and /dev/shm "
            "checks. The whole call ends within timeout_s. What each check means: "
            "[environments.md](environments.md)."
        ),
        read_only=True,
        idempotent=True,
        open_world=True,
    ),
    ToolSpec(
        name="install_agentjet",
        title="Install AgentJet into a new environment",
        description=(
            "Install AgentJet into a new environment (conda, uv or venv) it owns. plan: the exact commands, changing "
            "nothing; run: a tracked, resumable experiment (wait_experiment takes its id); status: the stages."
        ),
        input_model="skill_server.tools.install_agentjet.models:InstallInput",
        output_model="skill_server.tools.install_agentjet.models:InstallOutput",
        run="skill_server.tools.install_agentjet.tool:install_agentjet",
        details=(
            "Stages: checkout (a given checkout as it is, or a clone at the pinned commit), env, network (the index "
            "and GitHub), agentjet (pip install -e .[verl], or . for a client, with index_url), flash_attn (the "
            "prebuilt wheel whose tag matches the env, else a source build with CUDA_HOME of torch's CUDA, refused "
            "without one, FLASH_ATTN_CUDA_ARCHS from the GPUs and MAX_JOBS bounded by RAM), lock (pip freeze) and "
            "verify (preflight's environment probe). Each stage has a done-marker and a verification: a run again "
            "resumes where it stopped and redoes a broken stage. It never touches the base conda env, the system "
            "Python, ~/.bashrc, pip's configuration, drivers or Docker, refuses a folder it did not create, never "
            "deletes one, and prints root steps as instructions. See [environments.md](environments.md)."
        ),
        read_only=False,
        destructive=False,
        idempotent=False,
        open_world=True,
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
        details=(
            "Metrics come from the validation and training markdown files (dict-like metric lines; paths from the "
            "run's YAML or given), or when they are absent the log's step:N lines (metrics_source says which). The "
            "plateau check covers mean_reward and task_pass_rate. metrics.png (optionally with other runs overlaid) "
            "is embedded in results.md; without matplotlib the series are returned in plot_data. results.md and "
            "metrics.png replace the previous ones; finish.flag is empty; all are written atomically on the host "
            "holding the result directory (the answer says which). Only regular files are read, bounded."
        ),
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


# --- read-only mode ---------------------------------------------------------------------------------

#: ``SKILL_SERVER_READ_ONLY=1`` in the server's (or the CLI's) environment: only the tools whose hints say they
#: change nothing (``read_only``) are published and run; a call of another is refused, saying why.
READ_ONLY_ENV = "SKILL_SERVER_READ_ONLY"
_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def read_only_mode() -> bool:
    """Whether ``SKILL_SERVER_READ_ONLY`` asks for read-only mode; a value that is neither on nor off is an
    error (``ToolInputError`` naming the variable), never a guess."""
    value = os.environ.get(READ_ONLY_ENV, "").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise ToolInputError(f"{os.environ[READ_ONLY_ENV]!r} is neither on (1, true, yes) nor off (0, false, no, empty)",
                         field=READ_ONLY_ENV)


def published_tools(read_only: bool | None = None) -> tuple[ToolSpec, ...]:
    """The tools both front ends publish: all of them, or in read-only mode those that change nothing."""
    only_reads = read_only_mode() if read_only is None else read_only
    return tuple(spec for spec in TOOLS if spec.read_only) if only_reads else TOOLS


def refusal(spec: ToolSpec) -> str | None:
    """Why ``spec`` may not run here (read-only mode and a tool that changes things), or None."""
    if spec.read_only or not read_only_mode():
        return None
    allowed = ", ".join(t.name for t in published_tools(True))
    return (f"refused: {READ_ONLY_ENV}=1 (read-only mode) runs only the tools that change nothing, and "
            f"{spec.name} changes things; it runs where the server is started without {READ_ONLY_ENV} "
            f"(allowed here: {allowed})")
