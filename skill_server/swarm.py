"""Live status of AgentJet swarm servers, related to the episode cap (tool ``swarm_status``).

Reads two read-only routes of each server, ``GET /get_engine_status`` and
``GET /get_current_batch_rollout_pool_information`` (plus ``/get_server_experiment_dir`` when no cap
settings were given, to read the config the engine dumped there), and explains the number overwatch
shows as "Running Episodes": it counts *claimed* episodes only (the entries of
``running_episode_details``), so it sits between zero and the engine's episode cap. The sentences of
``diagnosis`` are written in ``swarm_diagnosis``.

Servers are read concurrently with one hard deadline (``timeout_s``); a server that is down, slow,
not AgentJet, broken or hostile yields ``reachable: false`` (or a per-field error) with the reason,
never an exception, and never costs the other servers their results. A whole call, watch included,
returns within ``watch_s + timeout_s``. Unknown values are left out of the output, not set to null.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, StrictStr, field_validator, model_validator

from skill_server.agentjet.compose import get_path
from skill_server.agentjet.keys import KEYS
from skill_server.cap import EpisodeCapInput, EpisodeCapResult, compute_episode_cap
from skill_server.errors import SkillError, ToolInputError, internal_error_message, utf8_safe
from skill_server.http_json import FetchError, get_json, run_parallel
from skill_server.models import MAX_JSON_INT, NonNegativeInt, PositiveInt, Progress, SparseOutput, ToolInput
from skill_server.safe_yaml import load_yaml_file
from skill_server.swarm_diagnosis import (
    NEAR_TIMEOUT_FRACTION,
    ROUTE_ENGINE,
    ROUTE_POOL,
    diagnose,
    unreachable_advice,
    watch_sentences,
)
from skill_server.swarm_experiments import ExperimentLink, experiment_server, experiments_on_port, is_local

log = logging.getLogger("skill_server.swarm")

__all__ = ["ROUTE_ENGINE", "ROUTE_POOL", "SwarmStatusInput", "SwarmStatusResult", "ServerStatus", "swarm_status",
           "normalize_url", "parse_seconds"]

ENV_URL = "AJET_SWARM_URL"
DEFAULT_URL = "http://localhost:10086"
ROUTE_EXPERIMENT_DIR = "/get_server_experiment_dir"
DUMPED_CONFIG = "yaml_backup.yaml"
MAX_URLS = 32
MAX_WATCH_S = 50.0
#: watch_s + timeout_s bound a call; keep it under the ~60 s after which MCP clients give up.
MAX_CALL_S = 55.0
STALEST_SHOWN = 5
_METHOD_TARGETS = {
    "rollout_until_finish_enough_episodes": ("completed_episodes", "completed_episode_target", "episodes"),
    "rollout_until_finish_enough_tasks": ("completed_tasks", "completed_task_target", "tasks"),
    "rollout_until_finish_enough_non_dummy_tasks": (
        "completed_non_dummy_tasks", "completed_non_dummy_task_target", "non-dummy tasks"),
}
_CAP_FIELDS = ("max_env_worker", "num_repeat", "train_batch_size", "client_parallelism")
_SECONDS = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(?:s|sec|secs|seconds)?\s*$")
_DIGITS = re.compile(r"^\s*-?[0-9]{1,16}\s*$")


# ----------------------------------------------------------------------------------------------- models

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
        description="An experiment this skill launched (id or session name): read the swarm server it started, "
                    "at the port it was given (--swarm-port, AJET_SWARM_URL or a wait_for_url; default 10086).",
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
        description="Path to a dumped AgentJet config (e.g. yaml_backup.yaml) to read max_env_worker, num_repeat, "
                    "train_batch_size, max_inference_tracker_threads and the sample collection method from. "
                    "Explicit cap arguments override its values. Without yaml and cap arguments, the config the "
                    "server dumped in its experiment directory is read when that directory is on this machine.",
    )
    watch_s: float | None = Field(
        default=None, gt=0, le=MAX_WATCH_S,
        description="Watch this many seconds (at most 50): sample the gauge repeatedly, with progress "
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


class WatchStats(SparseOutput):
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


class ServerStatus(SparseOutput):
    """One server. Every optional field is left out when the server did not say (no nulls)."""

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
        default=None, description=f"The {STALEST_SHOWN} running episodes idle the longest.")
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

    url: str | None = Field(default=None, description="The server read (single-server form).")
    reachable: bool | None = Field(default=None, description="Single-server form only.")
    servers: list[ServerStatus] | None = Field(
        default=None, description="One status per URL when urls was given.")
    summary: str = Field(description="One line over all servers.")
    checked_at: str = Field(description="UTC time of the (last) read, ISO 8601.")


# ----------------------------------------------------------------------------------------------- inputs

def _yaml_int(data: dict[str, Any], path: str, field: str) -> int | None:
    node = get_path(data, path, None)
    if node is None:
        return None
    if isinstance(node, bool) or not isinstance(node, int) or not 1 <= node <= MAX_JSON_INT:
        raise ToolInputError(f"{path} in the file must be a positive integer, got {node!r}"[:300], field=field)
    return node


def _yaml_str(data: dict[str, Any], path: str, field: str) -> str | None:
    node = get_path(data, path, None)
    if node is None:
        return None
    if not isinstance(node, str):
        raise ToolInputError(f"{path} in the file must be a string, got {node!r}"[:300], field=field)
    return node


def config_from_yaml(path: str | Path, *, field: str, source: Literal["yaml", "server"]) -> CapConfig:
    """The cap settings of a dumped AgentJet config."""
    data = load_yaml_file(path, field=field)
    if not isinstance(data.get("ajet"), dict):
        raise ToolInputError(f"{path} has no 'ajet' mapping; give a config dumped by AgentJetJob "
                             "(for example saved_experiments/<name>/yaml_backup.yaml)", field=field)
    cfg = CapConfig(yaml=str(path))
    found = {name: _yaml_int(data, KEYS[name], field)
             for name in ("max_env_worker", "num_repeat", "train_batch_size", "max_inference_tracker_threads")}
    found["sample_collection_method"] = _yaml_str(data, KEYS["swarm_mode_sample_collection_method"], field)
    for name, value in found.items():
        if value is not None:
            setattr(cfg, name, value)
            cfg.sources[name] = source
    return cfg


def resolve_config(inp: SwarmStatusInput) -> CapConfig | None:
    """Merge cap arguments with values from ``yaml`` (arguments win); None when nothing was given."""
    cfg = config_from_yaml(inp.yaml, field="yaml", source="yaml") if inp.yaml is not None else CapConfig()
    for name in _CAP_FIELDS:
        value = getattr(inp, name)
        if value is not None:
            setattr(cfg, name, list(value) if isinstance(value, list) else value)
            cfg.sources[name] = "argument"
    if inp.yaml is None and not cfg.sources:
        return None
    if cfg.max_env_worker is None and any(cfg.sources.get(n) == "argument" for n in _CAP_FIELDS):
        raise ToolInputError(f"{cfg.yaml} has no ajet.rollout.max_env_worker; give max_env_worker",
                             field="max_env_worker")
    return cfg


def _target_urls(inp: SwarmStatusInput) -> tuple[list[str], bool, ExperimentLink | None]:
    if inp.urls is not None:
        return list(inp.urls), True, None
    if inp.url is not None:
        return [inp.url], False, None
    if inp.id is not None:
        link = experiment_server(inp.id)
        return [link.url], False, link
    env = os.environ.get(ENV_URL, "").strip()
    if env:
        try:
            return [normalize_url(env)], False, None
        except ValueError as exc:
            raise ToolInputError(f"${ENV_URL} is not usable ({exc}); pass url explicitly", field="url") from None
    return [DEFAULT_URL], False, None


# ----------------------------------------------------------------------------------------------- reading

class _Raw:
    """What the routes of one server gave: a document or the reason it is missing."""

    def __init__(self, engine: Any, pool: Any, experiment_dir: Any = None) -> None:
        self.engine = engine                  # dict | FetchError
        self.pool = pool                      # dict | None (published nothing yet) | FetchError
        self.experiment_dir = experiment_dir  # dict | FetchError | None (not asked)


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


def _check_experiment_dir(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise FetchError(f"answer is JSON {_json_kind(doc)}, not an object")
    return doc


def _read_servers(urls: list[str], timeout: float, *, deadline: float | None = None,
                  with_experiment_dir: bool = False) -> list[_Raw]:
    """The routes of every server at once; returns when all answered or the deadline passed."""
    now = time.monotonic()
    if deadline is None or deadline - now >= timeout:
        per_read, end = timeout, now + timeout
    else:  # the call's own bound comes first
        per_read, end = max(0.05, round(deadline - now, 2)), max(now + 0.05, deadline)
    routes: list[tuple[str, Any]] = [(ROUTE_ENGINE, _check_engine), (ROUTE_POOL, _check_pool)]
    if with_experiment_dir:
        routes.append((ROUTE_EXPERIMENT_DIR, _check_experiment_dir))
    calls = [
        (lambda b=base, r=route, check=check: check(get_json(b + r, timeout=per_read, deadline=end)))
        for base in urls for route, check in routes
    ]
    results = run_parallel(
        calls, deadline=end + 0.25,
        late=lambda: FetchError(f"no complete answer within {per_read:g}s (server too slow or stalled)", "timeout"),
    )
    out = []
    width = len(routes)
    for index, url in enumerate(urls):
        got = [_as_fetch(item, url) for item in results[index * width:(index + 1) * width]]
        out.append(_Raw(got[0], got[1], got[2] if with_experiment_dir else None))
    return out


def _as_fetch(item: Any, url: str) -> Any:
    if isinstance(item, BaseException) and not isinstance(item, FetchError):
        log.warning("unexpected error reading %s: %r", url, item)
        return FetchError(f"unexpected {type(item).__name__}: {item}"[:300])
    return item


# ----------------------------------------------------------------------------------------------- parsing

def _int_or_none(value: Any) -> tuple[int | None, bool]:
    """(integer, ok). None is fine; integral numbers and ASCII digit strings within JSON's exact range are
    accepted; anything else (another type, '²', a 5,000-digit number, 10**400, NaN) is not."""
    if value is None:
        return None, True
    if isinstance(value, bool):
        return None, False
    if isinstance(value, int):
        return (value, True) if abs(value) <= MAX_JSON_INT else (None, False)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) <= MAX_JSON_INT:
            return int(value), True
        return None, False
    if isinstance(value, str) and _DIGITS.match(value):
        number = int(value.strip())
        return (number, True) if abs(number) <= MAX_JSON_INT else (None, False)
    return None, False


def _not_an_integer(value: Any) -> str:
    return f"not an integer in range: {value!r}"[:160]


def parse_seconds(value: Any) -> float | None:
    """'12.3s' / '240.0s' / 12.3 → seconds; anything else (garbage, negative, NaN, huge) → None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        if isinstance(value, (int, float)):
            seconds = float(value)
        elif isinstance(value, str) and len(value) <= 64:
            match = _SECONDS.match(value)
            if not match:
                return None
            seconds = float(match.group(1))
        else:
            return None
    except (OverflowError, ValueError):
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def _opt_str(value: Any, limit: int = 500) -> str | None:
    """Text a server sent, bounded, with anything UTF-8 cannot carry (lone surrogates) escaped."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return utf8_safe(text)


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
            episode_uuid=_opt_str(uuid, 200) or "",
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
            status.field_errors[name] = _not_an_integer(pool.get(name))
    method = pool.get("sample_collection_method")
    status.sample_collection_method = _opt_str(method, 200) or None
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


def build_status(url: str, raw: _Raw, cfg: CapConfig | None, *, timeout: float = 3.0,
                 link: ExperimentLink | None = None) -> ServerStatus:
    """One server's status object from what its routes gave; a server that sends nonsense costs only
    its own fields, never the call (an unexpected failure is reported as this server's reason)."""
    try:
        return _build_status(url, raw, cfg, timeout, link)
    except Exception as exc:  # a hostile answer found a path the parser did not expect
        log.warning("could not interpret the answer of %s", url, exc_info=True)
        status = ServerStatus(url=url, reachable=False, experiment=link,
                              reason=f"could not interpret its answer ({internal_error_message(exc)})")
        status.diagnosis = [f"Could not read the swarm server at {url}: {status.reason}."]
        return status


def _build_status(url: str, raw: _Raw, cfg: CapConfig | None, timeout: float,
                  link: ExperimentLink | None) -> ServerStatus:
    status = ServerStatus(url=url, reachable=False, experiment=link)
    engine_ok = isinstance(raw.engine, dict)
    if not engine_ok and not isinstance(raw.pool, dict):
        status.reason = _combine_reasons(raw.engine, raw.pool)
        kind = _failure_kind(raw.engine, raw.pool)
        links = [link] if link is not None else _experiments_for(url) if kind != "answer" else []
        if link is None and len(links) == 1:
            status.experiment = links[0]
        status.diagnosis = [f"Could not read the swarm server at {url}: {status.reason}."]
        status.diagnosis += unreachable_advice(url, kind, links, timeout)
        return status
    status.reachable = True
    if engine_ok:
        eng = raw.engine
        status.engine_status = _opt_str(eng.get("engine_status"), 200)
        status.engine_status_detail = _opt_str(eng.get("engine_status_detail"))
        status.global_step, ok = _int_or_none(eng.get("global_step"))
        if not ok:
            status.field_errors["global_step"] = _not_an_integer(eng.get("global_step"))
    else:
        status.field_errors[ROUTE_ENGINE] = str(raw.engine)
    if isinstance(raw.pool, dict):
        _parse_pool(raw.pool, status)
        if status.engine_status is None:  # fall back to the engine fields the pool info carries
            status.engine_status = _opt_str(raw.pool.get("engine_status"), 200)
        if status.global_step is None:
            status.global_step, _ = _int_or_none(raw.pool.get("global_step"))
    elif raw.pool is None:
        status.field_errors[ROUTE_POOL] = "the server has published no rollout pool information yet"
    else:
        status.field_errors[ROUTE_POOL] = str(raw.pool)
    if cfg is None and raw.experiment_dir is not None:
        cfg = _config_from_experiment_dir(url, raw.experiment_dir, status, link)
    status.config = cfg
    status.episode_cap = _cap_for(status, cfg)
    status.diagnosis = diagnose(status, cfg)
    return status


def _failure_kind(engine: Any, pool: Any) -> str:
    kinds = {getattr(item, "kind", "answer") for item in (engine, pool) if isinstance(item, FetchError)}
    for kind in ("answer", "timeout", "unreachable"):  # anything that answered says the most
        if kind in kinds:
            return kind
    return "answer"


def _experiments_for(url: str) -> list[ExperimentLink]:
    """Experiments of this skill that gave a swarm server the port of ``url`` (local URLs only)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return []
    if not is_local(url):
        return []
    return [x for x in experiments_on_port(port) if x.host is None][:3]


def _config_from_experiment_dir(url: str, answer: Any, status: ServerStatus,
                                link: ExperimentLink | None) -> CapConfig | None:
    """The cap settings of the config the running engine dumped, when its directory is on this machine."""
    if isinstance(answer, FetchError):
        if answer.status != 404:  # 404: an AgentJet without the route; nothing to report
            status.field_errors[ROUTE_EXPERIMENT_DIR] = str(answer)
        return None
    directory = answer.get("server_experiment_dir") if isinstance(answer, dict) else None
    if not isinstance(directory, str) or not directory.strip():
        return None  # the engine has not started an experiment yet
    status.experiment_dir = _opt_str(directory, 1000)
    where = Path(directory)
    if not where.is_absolute():
        if link is None or not link.workdir:
            status.field_errors["config"] = (f"the experiment directory {directory!r} is relative to the server's "
                                             "working directory, which is unknown; give yaml")
            return None
        where = Path(link.workdir) / where
    if not is_local(url) and (link is None or link.host is not None):
        status.field_errors["config"] = (f"the server runs on another machine; its config is {where / DUMPED_CONFIG} "
                                         "there (copy it here and give yaml)")
        return None
    dumped = where / DUMPED_CONFIG
    if not dumped.is_file():
        status.field_errors["config"] = f"{dumped} is not on this machine; give yaml"
        return None
    try:
        return config_from_yaml(dumped, field="config", source="server")
    except SkillError as exc:
        status.field_errors["config"] = exc.message
        return None


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
        status.field_errors["episode_cap"] = f"{type(exc).__name__}: {exc}"[:300]
        return None


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
            new_step = (prev.global_step is not None and cur.global_step is not None
                        and cur.global_step != prev.global_step)
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
    """Read each server (once, or repeatedly with watch_s) and explain its Running Episodes gauge.

    Bounded: the call returns within ``watch_s + timeout_s`` (``timeout_s`` without a watch), however
    silent or slow the servers are.
    """
    started = time.monotonic()
    urls, many, link = _target_urls(inp)
    cfg = resolve_config(inp)
    timeout = inp.timeout_s
    want_dir = cfg is None

    def report(done: float, total: float, message: str) -> None:
        if progress is not None:
            try:
                progress(done, total, message)
            except Exception:  # progress is best effort
                log.debug("progress callback failed", exc_info=True)

    def read_all(deadline: float | None = None) -> list[ServerStatus]:
        raws = _read_servers(urls, timeout, deadline=deadline, with_experiment_dir=want_dir)
        return [build_status(u, r, cfg, timeout=timeout, link=link) for u, r in zip(urls, raws)]

    if not inp.watch_s:
        report(0, 1, f"reading {len(urls)} swarm server(s)")
        statuses = read_all()
        report(1, 1, _progress_line(statuses))
    else:
        statuses = _watch(inp.watch_s, timeout, started, urls, read_all, report)

    checked = datetime.now(timezone.utc).isoformat(timespec="seconds")
    summary = _summary(statuses)
    if many:
        return SwarmStatusResult(servers=statuses, summary=summary, checked_at=checked)
    first = statuses[0]
    fields = {name: getattr(first, name) for name in ServerStatus.model_fields}
    return SwarmStatusResult(**fields, summary=summary, checked_at=checked)


def _watch(watch_s: float, timeout: float, started: float, urls: list[str], read_all: Any,
           report: Any) -> list[ServerStatus]:
    """Sample every server on a schedule; a read that runs long skips the samples it overran, and no read
    runs past ``watch_s + timeout_s`` after the start."""
    times = _watch_times(watch_s)
    end = started + watch_s + timeout
    series: list[list[WatchSample]] = [[] for _ in urls]
    statuses: list[ServerStatus] = []
    taken = 0
    for k, at in enumerate(times):
        due = started + at
        now = time.monotonic()
        if taken and k + 1 < len(times) and now > started + times[k + 1]:
            continue  # the previous read ran past this sample's slot
        if due > now:
            time.sleep(due - now)
        if taken and time.monotonic() >= end:
            break
        t = round(time.monotonic() - started, 2)
        statuses = read_all(end)
        taken += 1
        for i, st in enumerate(statuses):
            series[i].append(WatchSample(t_s=t, reachable=st.reachable, engine_status=st.engine_status,
                                         global_step=st.global_step, running_episodes=st.running_episodes,
                                         completed_episodes=st.completed_episodes))
        report(k + 1, len(times), f"sample {k + 1}/{len(times)}: {_progress_line(statuses)}")
    duration = time.monotonic() - started
    for st, samples in zip(statuses, series):
        st.watch = _watch_stats(samples, duration)
        st.diagnosis.extend(watch_sentences(st.watch))
    return statuses


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
