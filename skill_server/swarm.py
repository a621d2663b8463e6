"""Live status of AgentJet swarm servers, related to the episode cap (tool ``swarm_status``).

Reads two read-only routes of each server, ``GET /get_engine_status`` and
``GET /get_current_batch_rollout_pool_information``, and explains the number overwatch shows as
"Running Episodes": it counts *claimed* episodes only (the entries of ``running_episode_details``),
so it sits between zero and the engine's episode cap. The explanation is a list of plain sentences:
gauge at the cap and the knob that lifts it, far below the cap so the clients are the limit, engine
not rolling so zero is expected, episodes near their discard timeout, step targets nearly met.

Servers are read concurrently with one hard deadline (``timeout_s``); a server that is down, slow,
not AgentJet or broken yields ``reachable: false`` with the reason, never an exception.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from skill_server.agentjet.compose import get_path
from skill_server.cap import EpisodeCapInput, EpisodeCapResult, compute_episode_cap
from skill_server.errors import ToolInputError
from skill_server.http_json import FetchError, get_json, run_parallel
from skill_server.models import NonNegativeInt, PositiveInt, Progress, ToolInput, ToolOutput
from skill_server.safe_yaml import load_yaml_file

log = logging.getLogger("skill_server.swarm")

ENV_URL = "AJET_SWARM_URL"
DEFAULT_URL = "http://localhost:10086"
ROUTE_ENGINE = "/get_engine_status"
ROUTE_POOL = "/get_current_batch_rollout_pool_information"
MAX_URLS = 32
MAX_WATCH_S = 50.0
STALEST_SHOWN = 5
#: An episode idle for this share of its discard timeout is "close to" it.
NEAR_TIMEOUT_FRACTION = 0.75
#: The step's own target counts as "nearly met" from this share on.
NEAR_TARGET_FRACTION = 0.9
#: The gauge is "far below" the cap under this share of it.
FAR_BELOW_FRACTION = 0.5

ENGINE_STATES = (
    "ENGINE.OFFLINE", "ENGINE.BOOTING", "ENGINE.ROLLING", "ENGINE.ROLLING_POST",
    "ENGINE.WEIGHT_SYNCING", "ENGINE.WEIGHT_EXPORTING",
)
_NOT_ROLLING_WHY = {
    "ENGINE.OFFLINE": "no training runs: a client has to sync a config and start the engine",
    "ENGINE.BOOTING": "the trainer is starting (Ray, model load, vLLM); this can take minutes",
    "ENGINE.ROLLING_POST": "this step's target is met, so the engine hands out no new episodes and waits for the "
                           "claimed ones to end before the weight update",
    "ENGINE.WEIGHT_SYNCING": "the trainer is updating the model between steps; leaving ROLLING wiped the episode "
                             "records, and claiming resumes when the next step sets ROLLING",
    "ENGINE.WEIGHT_EXPORTING": "the trainer is exporting weights; claiming resumes when it sets ROLLING again",
}
_METHOD_TARGETS = {
    "rollout_until_finish_enough_episodes": ("completed_episodes", "completed_episode_target", "episodes"),
    "rollout_until_finish_enough_tasks": ("completed_tasks", "completed_task_target", "tasks"),
    "rollout_until_finish_enough_non_dummy_tasks": (
        "completed_non_dummy_tasks", "completed_non_dummy_task_target", "non-dummy tasks"),
}
_CAP_FIELDS = ("max_env_worker", "num_repeat", "train_batch_size", "client_parallelism")
_SECONDS = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(?:s|sec|secs|seconds)?\s*$")


# ----------------------------------------------------------------------------------------------- models

class SwarmStatusInput(ToolInput):
    url: str | None = Field(
        default=None,
        description=f"One swarm server, e.g. http://10.0.0.5:10086. Default: ${ENV_URL}, else {DEFAULT_URL}. "
                    "The result is then that server's status object.",
    )
    urls: list[str] | None = Field(
        default=None, min_length=1, max_length=MAX_URLS,
        description="Several swarm servers, read at once; the result then lists them under `servers`.",
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
        default=None, description="Each swarm client's own concurrency, one entry per client.")
    yaml: str | None = Field(
        default=None,
        description="Path to a dumped AgentJet config (e.g. yaml_backup.yaml) to read max_env_worker, num_repeat, "
                    "train_batch_size, max_inference_tracker_threads and the sample collection method from. "
                    "Explicit cap arguments override its values.",
    )
    watch_s: float | None = Field(
        default=None, gt=0, le=MAX_WATCH_S,
        description="Watch this many seconds (at most 50): sample the gauge repeatedly, with progress "
                    "notifications, and report min/max/mean running episodes and completions per minute.",
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
        if self.url is not None and self.urls is not None:
            raise ValueError("url and urls: give one server (url) or several (urls), not both")
        given = [name for name in ("num_repeat", "train_batch_size", "client_parallelism")
                 if getattr(self, name) is not None]
        if given and self.max_env_worker is None and self.yaml is None:
            raise ValueError(f"max_env_worker is required with {', '.join(given)} (or give yaml to read it from)")
        return self


def normalize_url(value: str) -> str:
    """``host:port`` or ``http(s)://host:port[/prefix]`` → canonical base URL without a trailing slash."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    text = value.strip()
    if not text or any(ch.isspace() for ch in text):
        raise ValueError(f"not a URL: {value!r}")
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"only http:// and https:// swarm servers are supported, got {value!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"invalid port in {value!r}") from None
    if not parts.hostname or (port is not None and not 0 < port < 65536):
        raise ValueError(f"no host in {value!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"a server base URL takes no query or fragment: {value!r}")
    return text.rstrip("/")


class CapConfig(ToolOutput):
    """The engine settings the diagnosis used, and where each came from."""

    max_env_worker: int | None = None
    num_repeat: int | None = None
    train_batch_size: int | None = None
    client_parallelism: list[int] | None = None
    max_inference_tracker_threads: int | None = None
    sample_collection_method: str | None = None
    sources: dict[str, Literal["argument", "yaml"]] = Field(
        default_factory=dict, description="Per setting: given as an argument or read from the yaml file.")
    yaml: str | None = Field(default=None, description="The yaml file read, if any.")


class StaleEpisode(ToolOutput):
    episode_uuid: str
    client_uuid: str | None = None
    task_id: str | None = None
    llm_call_count: int | None = None
    idle_s: float | None = Field(default=None, description="Seconds since the episode's last activity.")
    discard_timeout_s: float | None = Field(
        default=None, description="Idle time after which the server takes the episode back.")
    idle_fraction: float | None = Field(default=None, description="idle_s / discard_timeout_s.")


class StepProgress(ToolOutput):
    """The count whose target ends the current step, for this sample collection method."""

    counter: str = Field(description="Which field ends the step, e.g. completed_tasks.")
    done: int
    target: int
    fraction: float


class WatchSample(ToolOutput):
    t_s: float = Field(description="Seconds since the watch began.")
    reachable: bool
    engine_status: str | None = None
    global_step: int | None = None
    running_episodes: int | None = None
    completed_episodes: int | None = None


class WatchStats(ToolOutput):
    duration_s: float
    samples: int
    samples_read: int = Field(description="Samples in which the server answered.")
    running_min: int | None = None
    running_max: int | None = None
    running_mean: float | None = None
    completions_per_minute: float | None = Field(
        default=None, description="Episodes completed per minute (counter resets at a new step are followed).")
    steps_advanced: int | None = Field(default=None, description="global_step at the end minus at the start.")
    series: list[WatchSample]


class ServerStatus(ToolOutput):
    url: str
    reachable: bool = Field(description="True when at least one route answered like an AgentJet swarm server.")
    reason: str | None = Field(default=None, description="Why the server could not be read (reachable false).")
    field_errors: dict[str, str] = Field(
        default_factory=dict, description="Parts that could not be read although the server answered, by route "
                                          "or field.")
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
    step_progress: StepProgress | None = None
    stalest_episodes: list[StaleEpisode] | None = Field(
        default=None, description=f"The {STALEST_SHOWN} running episodes idle the longest.")
    episodes_near_timeout: int | None = Field(
        default=None, description=f"Running episodes idle for at least {NEAR_TIMEOUT_FRACTION:.0%} of their "
                                  "discard timeout.")
    episode_cap: EpisodeCapResult | None = Field(
        default=None, description="The full episode_cap result, when max_env_worker is known.")
    diagnosis: list[str] = Field(default_factory=list, description="Plain sentences explaining the gauge.")
    watch: WatchStats | None = None


class SwarmStatusResult(ServerStatus):
    """With ``url`` (or the default): the server's own fields at the top level and ``servers`` null.
    With ``urls``: ``servers`` lists one object per URL in the given order and the top-level server
    fields stay null (``url``, ``reachable``) or empty."""

    url: str | None = Field(default=None, description="The server read (single-server form); null with urls.")
    reachable: bool | None = Field(default=None, description="Single-server form only; null with urls.")
    servers: list[ServerStatus] | None = Field(
        default=None, description="One status per URL when urls was given; null in the single-server form.")
    config: CapConfig | None = Field(default=None, description="Cap settings used, when any were given.")
    summary: str = Field(description="One line over all servers.")
    checked_at: str = Field(description="UTC time of the (last) read, ISO 8601.")


# ----------------------------------------------------------------------------------------------- inputs

def _yaml_int(data: dict[str, Any], path: str) -> int | None:
    node = get_path(data, path, None)
    if node is None:
        return None
    if isinstance(node, bool) or not isinstance(node, int) or node < 1:
        raise ToolInputError(f"{path} in the file must be a positive integer, got {node!r}", field="yaml")
    return node


def _yaml_str(data: dict[str, Any], path: str) -> str | None:
    node = get_path(data, path, None)
    if node is None:
        return None
    if not isinstance(node, str):
        raise ToolInputError(f"{path} in the file must be a string, got {node!r}", field="yaml")
    return node


def resolve_config(inp: SwarmStatusInput) -> CapConfig | None:
    """Merge cap arguments with values from ``yaml`` (arguments win); None when nothing was given."""
    cfg = CapConfig()
    if inp.yaml is not None:
        data = load_yaml_file(inp.yaml, field="yaml")
        if not isinstance(data.get("ajet"), dict):
            raise ToolInputError(f"{inp.yaml} has no 'ajet' mapping; give a config dumped by AgentJetJob "
                                 "(for example saved_experiments/<name>/yaml_backup.yaml)", field="yaml")
        from_yaml: dict[str, Any] = {
            "max_env_worker": _yaml_int(data, "ajet.rollout.max_env_worker"),
            "num_repeat": _yaml_int(data, "ajet.rollout.num_repeat"),
            "train_batch_size": _yaml_int(data, "ajet.data.train_batch_size"),
            "max_inference_tracker_threads": _yaml_int(data, "ajet.interchange_server.max_inference_tracker_threads"),
            "sample_collection_method": _yaml_str(data, "ajet.swarm_mode_sample_collection_method"),
        }
        for name, value in from_yaml.items():
            if value is not None:
                setattr(cfg, name, value)
                cfg.sources[name] = "yaml"
        cfg.yaml = str(inp.yaml)
    for name in _CAP_FIELDS:
        value = getattr(inp, name)
        if value is not None:
            setattr(cfg, name, list(value) if isinstance(value, list) else value)
            cfg.sources[name] = "argument"
    if inp.yaml is None and not cfg.sources:
        return None
    if cfg.max_env_worker is None and any(cfg.sources.get(n) == "argument" for n in _CAP_FIELDS):
        raise ToolInputError(f"{inp.yaml} has no ajet.rollout.max_env_worker; give max_env_worker", field="max_env_worker")
    return cfg


def _target_urls(inp: SwarmStatusInput) -> tuple[list[str], bool]:
    if inp.urls is not None:
        return list(inp.urls), True
    if inp.url is not None:
        return [inp.url], False
    env = os.environ.get(ENV_URL, "").strip()
    if env:
        try:
            return [normalize_url(env)], False
        except ValueError as exc:
            raise ToolInputError(f"${ENV_URL} is not usable ({exc}); pass url explicitly", field="url") from None
    return [DEFAULT_URL], False


# ----------------------------------------------------------------------------------------------- reading

class _Raw:
    """What the two routes of one server gave: a document or the reason it is missing."""

    def __init__(self, engine: Any, pool: Any) -> None:
        self.engine = engine  # dict | FetchError
        self.pool = pool      # dict | None (published nothing yet) | FetchError


def _json_kind(doc: Any) -> str:
    return {type(None): "null", list: "an array", str: "a string", bool: "a boolean"}.get(type(doc), "a number")


def _check_engine(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise FetchError(f"answer is JSON {_json_kind(doc)}, not an object: not an AgentJet swarm server")
    if "engine_status" not in doc:
        raise FetchError("JSON without engine_status: not an AgentJet swarm server")
    return doc


_POOL_KEYS = ("running_episode_details", "completed_episodes", "sample_collection_method", "completed_tasks")


def _check_pool(doc: Any) -> dict[str, Any] | None:
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise FetchError(f"answer is JSON {_json_kind(doc)}, not an object: not an AgentJet swarm server")
    if not any(key in doc for key in _POOL_KEYS):
        raise FetchError("JSON without rollout pool fields (running_episode_details, completed_episodes): "
                         "not an AgentJet swarm server")
    return doc


def _read_servers(urls: list[str], timeout: float) -> list[_Raw]:
    """Both routes of every server at once; returns when all answered or the deadline passed."""
    deadline = time.monotonic() + timeout
    calls = []
    for base in urls:
        calls.append(lambda b=base: _check_engine(get_json(b + ROUTE_ENGINE, timeout=timeout, deadline=deadline)))
        calls.append(lambda b=base: _check_pool(get_json(b + ROUTE_POOL, timeout=timeout, deadline=deadline)))
    results = run_parallel(
        calls, deadline=deadline + 0.25,
        late=lambda: FetchError(f"no complete answer within {timeout:g}s (server too slow or stalled)"),
    )
    out = []
    for index in range(len(urls)):
        engine, pool = results[2 * index], results[2 * index + 1]
        for item in (engine, pool):
            if isinstance(item, BaseException) and not isinstance(item, FetchError):
                log.warning("unexpected error reading %s: %r", urls[index], item)
        out.append(_Raw(_as_fetch(engine), _as_fetch(pool)))
    return out


def _as_fetch(item: Any) -> Any:
    if isinstance(item, BaseException) and not isinstance(item, FetchError):
        return FetchError(f"unexpected {type(item).__name__}: {item}")
    return item


# ----------------------------------------------------------------------------------------------- parsing

def _int_or_none(value: Any) -> tuple[int | None, bool]:
    """(integer, ok). None is fine; strings of digits and integral floats are accepted."""
    if value is None:
        return None, True
    if isinstance(value, bool):
        return None, False
    if isinstance(value, int):
        return value, True
    if isinstance(value, float) and value.is_integer():
        return int(value), True
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip()), True
    return None, False


def parse_seconds(value: Any) -> float | None:
    """'12.3s' / '240.0s' / 12.3 → seconds; anything else (garbage, negative, NaN) → None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        match = _SECONDS.match(value)
        if not match:
            return None
        seconds = float(match.group(1))
    else:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def _opt_str(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _parse_running(details: Any, status: ServerStatus) -> None:
    if details is None:
        details = {}
    if not isinstance(details, dict):
        status.field_errors["running_episode_details"] = f"expected an object, got {type(details).__name__}"
        return
    episodes: list[StaleEpisode] = []
    unreadable = 0
    clients: Counter[str] = Counter()
    for uuid, info in details.items():
        info = info if isinstance(info, dict) else {}
        idle = parse_seconds(info.get("time_since_last_activity"))
        limit = parse_seconds(info.get("discard_episode_timeout"))
        if idle is None or limit is None:
            unreadable += 1
        calls, _ = _int_or_none(info.get("llm_call_count"))
        client = _opt_str(info.get("client_uuid"))
        if client:
            clients[client] += 1
        episodes.append(StaleEpisode(
            episode_uuid=str(uuid),
            client_uuid=client,
            task_id=_opt_str(info.get("optional_task_id")) or None,
            llm_call_count=calls,
            idle_s=idle,
            discard_timeout_s=limit,
            idle_fraction=round(idle / limit, 3) if idle is not None and limit else None,
        ))
    status.running_episodes = len(details)
    status.running_clients = len(clients)
    status.running_by_client = dict(clients.most_common())
    episodes.sort(key=lambda e: (e.idle_s is None, -(e.idle_s or 0.0)))
    status.stalest_episodes = episodes[:STALEST_SHOWN]
    status.episodes_near_timeout = sum(
        1 for e in episodes if e.idle_fraction is not None and e.idle_fraction >= NEAR_TIMEOUT_FRACTION)
    if unreadable:
        status.field_errors["running_episode_details"] = (
            f"{unreadable} of {len(details)} entries lack a readable idle time or discard timeout")


def _parse_pool(pool: dict[str, Any], status: ServerStatus) -> None:
    for name in ("completed_episodes", "completed_episode_target", "completed_tasks", "completed_task_target",
                 "completed_non_dummy_tasks", "completed_non_dummy_task_target", "task_expected_num_repeat"):
        value, ok = _int_or_none(pool.get(name))
        setattr(status, name, value)
        if not ok:
            status.field_errors[name] = f"not an integer: {pool.get(name)!r}"[:160]
    method = pool.get("sample_collection_method")
    status.sample_collection_method = _opt_str(method) or None
    _parse_running(pool.get("running_episode_details"), status)
    instruction = pool.get("swarm_client_instruction")
    if isinstance(instruction, dict) and isinstance(instruction.get("active_clients"), list):
        status.active_clients = len(instruction["active_clients"])
    counter = _METHOD_TARGETS.get(status.sample_collection_method or "")
    if counter is not None:
        done, target = getattr(status, counter[0]), getattr(status, counter[1])
        if done is not None and target:
            status.step_progress = StepProgress(counter=counter[0], done=done, target=target,
                                                fraction=round(done / target, 3))


def build_status(url: str, raw: _Raw, cfg: CapConfig | None) -> ServerStatus:
    """One server's status object from what its two routes gave."""
    status = ServerStatus(url=url, reachable=False)
    engine_ok = isinstance(raw.engine, dict)
    if not engine_ok and not isinstance(raw.pool, dict):
        status.reason = _combine_reasons(raw.engine, raw.pool)
        status.diagnosis = [f"Could not read the swarm server at {url}: {status.reason}."]
        return status
    status.reachable = True
    if engine_ok:
        eng = raw.engine
        status.engine_status = _opt_str(eng.get("engine_status"))
        status.engine_status_detail = _opt_str(eng.get("engine_status_detail"))
        status.global_step, ok = _int_or_none(eng.get("global_step"))
        if not ok:
            status.field_errors["global_step"] = f"not an integer: {eng.get('global_step')!r}"[:160]
    else:
        status.field_errors[ROUTE_ENGINE] = str(raw.engine)
    if isinstance(raw.pool, dict):
        _parse_pool(raw.pool, status)
        if status.engine_status is None:  # fall back to the engine fields the pool info carries
            status.engine_status = _opt_str(raw.pool.get("engine_status"))
        if status.global_step is None:
            status.global_step, _ = _int_or_none(raw.pool.get("global_step"))
    elif raw.pool is None:
        status.field_errors[ROUTE_POOL] = "the server has published no rollout pool information yet"
    else:
        status.field_errors[ROUTE_POOL] = str(raw.pool)
    status.episode_cap = _cap_for(status, cfg)
    status.diagnosis = diagnose(status, cfg)
    return status


def _combine_reasons(engine: Any, pool: Any) -> str:
    first, second = str(engine), "no rollout pool information" if pool is None else str(pool)
    if first == second:
        return first
    return f"{ROUTE_ENGINE}: {first}; {ROUTE_POOL}: {second}"


def _cap_for(status: ServerStatus, cfg: CapConfig | None) -> EpisodeCapResult | None:
    if cfg is None:
        return None
    if cfg.max_env_worker is None:
        status.field_errors["episode_cap"] = f"{cfg.yaml} has no ajet.rollout.max_env_worker; give max_env_worker"
        return None
    num_repeat = cfg.num_repeat or status.task_expected_num_repeat or None
    batch = cfg.train_batch_size or status.completed_task_target or None
    if num_repeat is None:
        status.field_errors["episode_cap"] = ("num_repeat is unknown (not given, not in the yaml, not published by "
                                              "the server); give num_repeat")
        return None
    try:
        return compute_episode_cap(EpisodeCapInput(
            max_env_worker=cfg.max_env_worker, num_repeat=num_repeat, train_batch_size=batch,
            client_parallelism=cfg.client_parallelism,
            max_inference_tracker_threads=cfg.max_inference_tracker_threads,
        ))
    except Exception as exc:  # the cap is an extra; never lose the live status over it
        status.field_errors["episode_cap"] = f"{type(exc).__name__}: {exc}"
        return None


# ----------------------------------------------------------------------------------------------- diagnosis

_KNOB = {
    "max_env_worker": "max_env_worker (the engine's thread pool)",
    "train_batch_size": "train_batch_size (only train_batch_size x num_repeat loops exist per step)",
    "clients": "the clients' combined concurrency",
}


def diagnose(s: ServerStatus, cfg: CapConfig | None) -> list[str]:
    """Plain sentences relating the live numbers to the cap and the engine state."""
    out: list[str] = []
    state = s.engine_status
    rolling = state == "ENGINE.ROLLING"
    running = s.running_episodes
    cap = s.episode_cap
    step = s.step_progress
    step_ending = step is not None and step.fraction >= NEAR_TARGET_FRACTION

    if state is not None and state not in ENGINE_STATES:
        out.append(f"Engine status {state!r} is not one this tool knows ({', '.join(ENGINE_STATES)}); "
                   "the server may be a newer or older AgentJet.")
    if state in _NOT_ROLLING_WHY:
        count = f"{running} running episodes" if running is not None else "no running episodes"
        zero = "zero is expected" if state != "ENGINE.ROLLING_POST" else "the gauge falls toward zero"
        out.append(f"The engine is {state}, not ROLLING: {_NOT_ROLLING_WHY[state]}. {count.capitalize()}; {zero}.")
        if s.engine_status_detail:
            out.append(f"The server's status detail: {s.engine_status_detail}")
    if running is None:
        if s.reachable and ROUTE_POOL in s.field_errors:
            out.append("The running-episode count is unknown because the rollout pool information could not be read.")
    elif cap is not None and (rolling or state is None):
        limit = cap.episode_cap
        binding = [b for b in cap.binding] or ["max_env_worker"]
        if running > limit:
            out.append(f"The gauge ({running}) is above the computed cap ({limit}): the engine runs a different "
                       "config than the cap inputs describe; check max_env_worker, num_repeat and train_batch_size "
                       "against the engine's yaml_backup.yaml.")
        elif running >= limit or (limit >= 20 and running >= 0.95 * limit):
            knob = " and ".join(_KNOB[b] for b in binding)
            out.append(f"The gauge ({running}) is at the episode cap ({limit}), which {knob} sets: more clients "
                       "will not raise it.")
            out.extend(_lifting_advice(cap, binding))
        elif running < FAR_BELOW_FRACTION * limit:
            if step_ending:
                out.append(f"The gauge ({running}) is far below the cap ({limit}), but this step is nearly done "
                           f"({step.done}/{step.target} {step.counter}): fewer episodes are handed out near the "
                           "end of a step.")
            else:
                held = (f"; {s.running_clients} client(s) hold the claimed episodes"
                        if s.running_clients is not None else "")
                out.append(f"The gauge ({running}) is far below the cap ({limit}): the engine has room, so the "
                           f"clients are the limit{held}. Raise each client's parallelism (threads / concurrent "
                           "episodes) or start more clients.")
        else:
            out.append(f"The gauge ({running}) is below the cap ({limit}) but not far: the clients nearly "
                       "saturate the engine.")
    elif running is not None and rolling and cap is None:
        out.append(f"{running} episodes are claimed (overwatch's gauge). Give max_env_worker (with num_repeat and "
                   "train_batch_size) or yaml to relate it to the episode cap.")
    if cfg is not None:
        out.extend(_config_mismatch(s, cfg, cap is not None))
    if s.episodes_near_timeout:
        stale = s.stalest_episodes[0] if s.stalest_episodes else None
        example = ""
        if stale is not None and stale.idle_s is not None and stale.discard_timeout_s is not None:
            example = (f" (stalest: {stale.episode_uuid}, idle {stale.idle_s:g}s of {stale.discard_timeout_s:g}s"
                       + (f", client {stale.client_uuid}" if stale.client_uuid else "") + ")")
        out.append(f"{s.episodes_near_timeout} running episode(s) are close to their discard timeout{example}: "
                   "the server returns an episode to the pool once it is idle past the timeout (checked every "
                   "10 s) and the client's late result is dropped. A stuck client or a very slow LLM call or "
                   "environment is likely; raise discard_episode_timeout in begin_episode if such waits are normal.")
    if step is not None and rolling and step_ending:
        out.append(f"The step's target is nearly met ({step.done} of {step.target} {step.counter.replace('_', ' ')}"
                   f" for {s.sample_collection_method}): a weight sync is near, and the gauge will drop to zero "
                   "during it.")
    elif s.sample_collection_method and "agree_sync_weight" in s.sample_collection_method and rolling:
        out.append(f"With {s.sample_collection_method} the step ends when the clients agree to sync weights, "
                   "not at an episode count.")
    return out


def _lifting_advice(cap: EpisodeCapResult, binding: list[str]) -> list[str]:
    picked: list[str] = []
    for sentence in cap.suggestions:
        if ("max_env_worker" in binding and sentence.startswith("To lift the cap")) \
                or ("train_batch_size" in binding and sentence.startswith("train_batch_size=")) \
                or ("clients" in binding and sentence.startswith("The clients together")):
            picked.append(sentence)
    return picked


def _config_mismatch(s: ServerStatus, cfg: CapConfig, have_cap: bool) -> list[str]:
    out = []
    if cfg.num_repeat and s.task_expected_num_repeat and cfg.num_repeat != s.task_expected_num_repeat:
        out.append(f"num_repeat is {cfg.num_repeat} in the given config but the engine expects "
                   f"{s.task_expected_num_repeat} episodes per task: the cap above may not match the running engine.")
    if cfg.train_batch_size and s.completed_task_target and cfg.train_batch_size != s.completed_task_target:
        out.append(f"train_batch_size is {cfg.train_batch_size} in the given config but the engine's task target "
                   f"is {s.completed_task_target}.")
    if cfg.sample_collection_method and s.sample_collection_method \
            and cfg.sample_collection_method != s.sample_collection_method:
        out.append(f"The config says {cfg.sample_collection_method} but the engine uses "
                   f"{s.sample_collection_method}.")
    filled = [name for name, mine, theirs in (
        ("num_repeat", cfg.num_repeat, s.task_expected_num_repeat),
        ("train_batch_size", cfg.train_batch_size, s.completed_task_target)) if not mine and theirs]
    if filled and have_cap:
        out.append(f"{' and '.join(filled)} for the cap came from the server's published targets.")
    return out


# ----------------------------------------------------------------------------------------------- watching

def _watch_times(watch_s: float) -> list[float]:
    interval = max(1.0, watch_s / 10)
    times = [k * interval for k in range(int(watch_s // interval) + 1)]
    if times[-1] < watch_s - 1e-6:
        times.append(watch_s)
    return times


def _watch_stats(samples: list[WatchSample], duration: float) -> WatchStats:
    read = [x for x in samples if x.reachable and x.running_episodes is not None]
    stats = WatchStats(duration_s=round(duration, 2), samples=len(samples), samples_read=len(read), series=samples)
    if read:
        counts = [x.running_episodes for x in read]
        stats.running_min, stats.running_max = min(counts), max(counts)  # type: ignore[type-var]
        stats.running_mean = round(sum(counts) / len(counts), 2)  # type: ignore[arg-type]
    done = [x for x in read if x.completed_episodes is not None]
    if len(done) >= 2 and done[-1].t_s > done[0].t_s:
        total = 0
        for prev, cur in zip(done, done[1:]):
            new_step = prev.global_step is not None and cur.global_step is not None and cur.global_step != prev.global_step
            if new_step or cur.completed_episodes < prev.completed_episodes:  # type: ignore[operator]
                total += cur.completed_episodes  # type: ignore[operator]  # the counter restarted
            else:
                total += cur.completed_episodes - prev.completed_episodes  # type: ignore[operator]
        stats.completions_per_minute = round(total * 60.0 / (done[-1].t_s - done[0].t_s), 2)
    steps = [x.global_step for x in samples if x.reachable and x.global_step is not None]
    if len(steps) >= 2:
        stats.steps_advanced = steps[-1] - steps[0]
    return stats


# ----------------------------------------------------------------------------------------------- the tool

def swarm_status(inp: SwarmStatusInput, progress: Progress | None = None) -> SwarmStatusResult:
    """Read each server (once, or repeatedly with watch_s) and explain its Running Episodes gauge."""
    urls, many = _target_urls(inp)
    cfg = resolve_config(inp)
    timeout = inp.timeout_s

    def report(done: float, total: float, message: str) -> None:
        if progress is not None:
            try:
                progress(done, total, message)
            except Exception:  # progress is best effort
                log.debug("progress callback failed", exc_info=True)

    if not inp.watch_s:
        report(0, 1, f"reading {len(urls)} swarm server(s)")
        raws = _read_servers(urls, timeout)
        statuses = [build_status(u, r, cfg) for u, r in zip(urls, raws)]
        report(1, 1, _progress_line(statuses))
    else:
        times = _watch_times(inp.watch_s)
        series: list[list[WatchSample]] = [[] for _ in urls]
        statuses = []
        start = time.monotonic()
        for k, at in enumerate(times):
            wait = start + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            t = round(time.monotonic() - start, 2)
            raws = _read_servers(urls, timeout)
            statuses = [build_status(u, r, cfg) for u, r in zip(urls, raws)]
            for i, st in enumerate(statuses):
                series[i].append(WatchSample(t_s=t, reachable=st.reachable, engine_status=st.engine_status,
                                             global_step=st.global_step, running_episodes=st.running_episodes,
                                             completed_episodes=st.completed_episodes))
            report(k + 1, len(times), f"sample {k + 1}/{len(times)}: {_progress_line(statuses)}")
        duration = time.monotonic() - start
        for st, samples in zip(statuses, series):
            st.watch = _watch_stats(samples, duration)
            st.diagnosis.extend(_watch_sentences(st.watch))

    checked = datetime.now(timezone.utc).isoformat(timespec="seconds")
    summary = _summary(statuses)
    if many:
        return SwarmStatusResult(servers=statuses, config=cfg, summary=summary, checked_at=checked)
    fields = statuses[0].model_dump()
    fields["episode_cap"] = statuses[0].episode_cap
    fields["watch"] = statuses[0].watch
    return SwarmStatusResult(**fields, config=cfg, summary=summary, checked_at=checked)


def _watch_sentences(w: WatchStats) -> list[str]:
    if not w.samples_read:
        return [f"During the {w.duration_s:g}s watch the server never answered ({w.samples} tries)."]
    text = (f"Over {w.duration_s:g}s ({w.samples_read} of {w.samples} samples read) the gauge ranged "
            f"{w.running_min}-{w.running_max} (mean {w.running_mean:g})")
    if w.completions_per_minute is not None:
        text += f", with {w.completions_per_minute:g} episodes completed per minute"
    if w.steps_advanced:
        text += f", and {w.steps_advanced} training step(s) finished"
    return [text + "."]


def _progress_line(statuses: list[ServerStatus]) -> str:
    parts = []
    for st in statuses:
        if not st.reachable:
            parts.append(f"{st.url} unreachable")
        else:
            parts.append(f"{st.url} {st.engine_status or '?'} running={st.running_episodes}")
    return "; ".join(parts)


def _summary(statuses: list[ServerStatus]) -> str:
    up = [s for s in statuses if s.reachable]
    if len(statuses) == 1:
        s = statuses[0]
        if not s.reachable:
            return f"{s.url}: unreachable ({s.reason})"
        cap = f" of cap {s.episode_cap.episode_cap}" if s.episode_cap is not None else ""
        return (f"{s.url}: {s.engine_status or 'status unknown'}, step {s.global_step}, "
                f"{s.running_episodes if s.running_episodes is not None else '?'} running episodes{cap}")
    total = sum(s.running_episodes or 0 for s in up)
    down = [s.url for s in statuses if not s.reachable]
    text = f"{len(up)} of {len(statuses)} servers reachable, {total} running episodes in total"
    if down:
        text += f"; unreachable: {', '.join(down)}"
    return text
