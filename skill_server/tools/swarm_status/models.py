"""Input and output models of ``swarm_status`` (the MCP schemas are generated from these)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictStr, field_validator, model_validator

from skill_server.agentjet.cap import EpisodeCapResult
from skill_server.agentjet.identity import AgentJetRootArg, AgentJetVersionArg
from skill_server.core.models import NonNegativeInt, PositiveInt, SparseOutput, ToolInput
from skill_server.swarm.links import ExperimentLink, normalize_url

ENV_URL = "AJET_SWARM_URL"
DEFAULT_URL = "http://localhost:10086"
MAX_URLS = 32
MAX_WATCH_S = 50.0
#: watch_s + timeout_s bound a call; keep it under the ~60 s after which MCP clients give up.
MAX_CALL_S = 55.0
#: An episode idle for this share of its discard timeout is "close to" it.
NEAR_TIMEOUT_FRACTION = 0.75
#: The step's own target counts as "nearly met" from this share on.
NEAR_TARGET_FRACTION = 0.9
#: The gauge is "far below" the cap under this share of it.
FAR_BELOW_FRACTION = 0.5
#: ... and the clients "nearly saturate" the engine from this share on.
NEARLY_SATURATED_FRACTION = 0.8
STALEST_SHOWN = 5


class SwarmStatusInput(ToolInput):
    url: StrictStr | None = Field(
        default=None,
        description=f"One swarm server, e.g. http://10.0.0.5:10086. Default: ${ENV_URL}, else {DEFAULT_URL}. "
                    "The result is then that server's status object.",
    )
    urls: list[StrictStr] | None = Field(
        default=None, min_length=1, max_length=MAX_URLS,
        description="Several swarm servers, read at once; the result then lists them under `servers`.",
    )
    id: StrictStr | None = Field(
        default=None, min_length=1, max_length=200,
        description="A run this skill launched (id or session): read its swarm server. Read the swarm server "
                    "it started, at the port it was given (--swarm-port, AJET_SWARM_URL or a wait_for_url; default "
                    "10086).",
    )
    timeout_s: float = Field(
        default=3.0, gt=0, le=30,
        description="Hard limit in seconds for each read (connect plus the whole answer); servers are read in "
                    "parallel, so several servers cost about one timeout.",
    )
    max_env_worker: PositiveInt | None = Field(
        default=None, description="ajet.rollout.max_env_worker of the engine's config, to compute the episode cap.")
    num_repeat: PositiveInt | None = Field(
        default=None, description="ajet.rollout.num_repeat. When omitted, the server's published "
                                  "task_expected_num_repeat is used if it has one.")
    train_batch_size: PositiveInt | None = Field(
        default=None, description="ajet.data.train_batch_size. When omitted, the server's published task "
                                  "target is used if it has one.")
    client_parallelism: list[NonNegativeInt] | None = Field(
        default=None, max_length=10_000, description="Each swarm client's own concurrency, one entry per client.")
    yaml: StrictStr | None = Field(
        default=None,
        description="A dumped AgentJet config (e.g. yaml_backup.yaml) to read the cap's inputs from. It gives "
                    "max_env_worker, num_repeat, train_batch_size, max_inference_tracker_threads and the sample "
                    "collection method. "
                    "Explicit cap arguments override its values. Without yaml and cap arguments, the config the "
                    "server dumped in its experiment directory is read when that directory is on this machine.",
    )
    agentjet_version: AgentJetVersionArg = None
    agentjet_root: AgentJetRootArg = None
    watch_s: float | None = Field(
        default=None, gt=0, le=MAX_WATCH_S,
        description="Seconds to watch the gauge (at most 50). Sample the gauge repeatedly, with progress "
                    "notifications, and report min/max/mean running episodes and completions per minute. "
                    f"watch_s + timeout_s must stay within {MAX_CALL_S:g} s, the bound on the whole call.",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return None if value is None else normalize_url(value)

    @field_validator("urls")
    @classmethod
    def _check_urls(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        out = []
        for index, item in enumerate(value):
            try:
                out.append(normalize_url(item))
            except ValueError as exc:
                raise ValueError(f"entry {index}: {exc}") from None
        return out

    @model_validator(mode="after")
    def _consistent(self) -> SwarmStatusInput:
        given_targets = [name for name in ("url", "urls", "id") if getattr(self, name) is not None]
        if len(given_targets) > 1:
            raise ValueError(f"{' and '.join(given_targets)}: give one server (url), several (urls) or an "
                             "experiment (id), not more than one of them")
        given = [name for name in ("num_repeat", "train_batch_size", "client_parallelism")
                 if getattr(self, name) is not None]
        if given and self.max_env_worker is None and self.yaml is None:
            raise ValueError(f"max_env_worker is required with {', '.join(given)} (or give yaml to read it from)")
        if self.watch_s is not None and self.watch_s + self.timeout_s > MAX_CALL_S:
            raise ValueError(f"watch_s + timeout_s is {self.watch_s + self.timeout_s:g} s; keep it within "
                             f"{MAX_CALL_S:g} s (MCP clients give up after about a minute)")
        return self


class CapConfig(SparseOutput):
    """The engine settings the diagnosis used, and where each came from."""

    max_env_worker: int | None = None
    num_repeat: int | None = None
    train_batch_size: int | None = None
    client_parallelism: list[int] | None = None
    max_inference_tracker_threads: int | None = None
    sample_collection_method: str | None = None
    sources: dict[str, Literal["argument", "yaml", "server"]] = Field(
        default_factory=dict, description="Per setting: given as an argument, read from the yaml argument, or read "
                                          "from the config the server dumped in its experiment directory.")
    yaml: str | None = Field(default=None, description="The yaml file read, if any.")


class StaleEpisode(SparseOutput):
    episode_uuid: str
    client_uuid: str | None = None
    task_id: str | None = None
    llm_call_count: int | None = None
    idle_s: float | None = Field(default=None, description="Seconds since the episode's last activity.")
    discard_timeout_s: float | None = Field(
        default=None, description="Idle time after which the server takes the episode back.")
    idle_fraction: float | None = Field(default=None, description="idle_s / discard_timeout_s.")


class StepProgress(SparseOutput):
    """The count whose target ends the current step, for this sample collection method."""

    counter: str = Field(description="Which field ends the step, e.g. completed_tasks.")
    done: int
    target: int
    fraction: float


class WatchSample(SparseOutput):
    t_s: float = Field(description="Seconds since the watch began.")
    reachable: bool
    engine_status: str | None = None
    global_step: int | None = None
    running_episodes: int | None = None
    completed_episodes: int | None = None
    completed_episode_target: int | None = None


class WatchStats(SparseOutput):
    duration_s: float
    samples: int
    samples_read: int = Field(description="Samples in which the server answered.")
    running_min: int | None = None
    running_max: int | None = None
    running_mean: float | None = None
    completions_per_minute: float | None = Field(
        default=None, description="Episodes completed per minute. Within a step the counter only grows (a lower "
        "read is a late push of a worker thread, not a reset); at a new step the episodes still completed in the "
        "previous one count up to its episode target.")
    steps_advanced: int | None = Field(default=None, description="global_step at the end minus at the start.")
    series: list[WatchSample]


class ServerStatus(SparseOutput):
    """One server. Every optional field is left out when the server did not say (no nulls)."""

    summary: str | None = Field(default=None, description="One line for this server (in servers).")
    url: str
    reachable: bool = Field(description="True when at least one route answered like an AgentJet swarm server.")
    reason: str | None = Field(default=None, description="Why the server could not be read (reachable false).")
    field_errors: dict[str, str] = Field(
        default_factory=dict, description="Parts that could not be read although the server answered, by route "
                                          "or field.")
    experiment: ExperimentLink | None = Field(
        default=None, description="The experiment this skill launched that runs this server (from id, or the "
                                  "one given this port when the server cannot be read).")
    engine_status: str | None = None
    engine_status_detail: str | None = None
    global_step: int | None = None
    running_episodes: int | None = Field(
        default=None, description="Claimed episodes: len(running_episode_details), exactly overwatch's gauge. "
                                  "Registered-but-unclaimed episodes are not counted.")
    running_clients: int | None = Field(default=None, description="Distinct clients holding those episodes.")
    running_by_client: dict[str, int] | None = None
    sample_collection_method: str | None = None
    completed_episodes: int | None = None
    completed_episode_target: int | None = None
    completed_tasks: int | None = None
    completed_task_target: int | None = None
    completed_non_dummy_tasks: int | None = None
    completed_non_dummy_task_target: int | None = None
    task_expected_num_repeat: int | None = None
    active_clients: int | None = Field(
        default=None, description="Clients the server counts as active (newer servers only).")
    experiment_dir: str | None = Field(
        default=None, description="The server's experiment directory (/get_server_experiment_dir), once started.")
    step_progress: StepProgress | None = None
    stalest_episodes: list[StaleEpisode] | None = Field(
        default=None, description=f"The {STALEST_SHOWN} running episodes closest to being taken back: by the share "
                                  "of their own discard timeout they have been idle (idle_fraction).")
    episodes_near_timeout: int | None = Field(
        default=None, description=f"Running episodes idle for at least {NEAR_TIMEOUT_FRACTION:.0%} of their "
                                  "discard timeout.")
    config: CapConfig | None = Field(default=None, description="Cap settings used for this server, when known.")
    episode_cap: EpisodeCapResult | None = Field(
        default=None, description="The full episode_cap result, when max_env_worker is known.")
    diagnosis: list[str] = Field(default_factory=list, description="Plain sentences explaining the gauge.")
    watch: WatchStats | None = None


class SwarmStatusResult(ServerStatus):
    """With ``url``, ``id`` (or the default): the server's own fields at the top level. With ``urls``:
    ``servers`` lists one object per URL in the given order, and the top level holds only the summary."""

    # Optional here, required in ServerStatus: the several-server form has no single url. pydantic takes a
    # narrower field in a subclass; mypy sees attributes, where that is an incompatible override.
    url: str | None = Field(  # type: ignore[assignment]
        default=None, description="The server read (single-server form).")
    reachable: bool | None = Field(default=None, description="Single-server form only.")  # type: ignore[assignment]
    servers: list[ServerStatus] | None = Field(
        default=None, description="One status per URL when urls was given.")
    summary: str = Field(description="One line over all servers.")  # required here, optional per server
    checked_at: str = Field(description="UTC time of the (last) read, ISO 8601.")
