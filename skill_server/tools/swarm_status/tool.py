"""Live status of AgentJet swarm servers, related to the episode cap (tool ``swarm_status``).

Reads two read-only routes of each server, ``GET /get_engine_status`` and
``GET /get_current_batch_rollout_pool_information`` (plus ``/get_server_experiment_dir`` when no cap
settings were given, to read the config the engine dumped there), and explains the number overwatch
shows as "Running Episodes": it counts *claimed* episodes only (the entries of
``running_episode_details``), so it sits between zero and the engine's episode cap. The models are in
``models``, parsing the pool answer in ``parse``, the sentences of ``diagnosis`` in ``diagnosis``; reading
the routes, the experiment links and the engine's dumped config are the ``skill_server.swarm`` service's.

Servers are read concurrently with one hard deadline (``timeout_s``); a server that is down, slow,
not AgentJet, broken or hostile yields ``reachable: false`` (or a per-field error) with the reason,
never an exception, and never costs the other servers their results. A whole call, watch included,
returns within ``watch_s + timeout_s``. Unknown values are left out of the output, not set to null.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Collection
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from skill_server.agentjet.cap import EpisodeCapInput, EpisodeCapResult, episode_cap_for
from skill_server.agentjet.release import Release, select_agentjet
from skill_server.agentjet.swarm_api import ROUTE_ENGINE, ROUTE_POOL
from skill_server.core.errors import ToolInputError, internal_error_message
from skill_server.core.http_json import FetchError
from skill_server.core.models import Progress
from skill_server.swarm.config import EngineSettings, locate_dump, read_dumped, read_settings
from skill_server.swarm.links import ExperimentLink, experiment_server, experiments_on_port, is_local, normalize_url
from skill_server.swarm.read import RawAnswers, int_or_none, not_an_integer, opt_str, read_servers
from skill_server.tools.swarm_status.diagnosis import busy_answered, diagnose, unreachable_advice, watch_sentences
from skill_server.tools.swarm_status.models import (
    DEFAULT_URL,
    ENV_URL,
    CapConfig,
    ServerStatus,
    SwarmStatusInput,
    SwarmStatusResult,
    WatchSample,
    WatchStats,
)
from skill_server.tools.swarm_status.parse import parse_pool

log = logging.getLogger("skill_server.tools.swarm_status.tool")

__all__ = ["ROUTE_ENGINE", "ROUTE_POOL", "SwarmStatusInput", "SwarmStatusResult", "ServerStatus", "swarm_status",
           "normalize_url"]

#: With the default timeout_s, a server that accepted the connection but had not answered gets this much more.
BUSY_GRACE_S = 8.0
_CAP_FIELDS = ("max_env_worker", "num_repeat", "train_batch_size", "client_parallelism")


# ----------------------------------------------------------------------------------------------- inputs

def _cap_config(settings: EngineSettings, source: Literal["yaml", "server"]) -> CapConfig:
    cfg = CapConfig(yaml=str(settings.path))
    for name, value in settings.values.items():
        setattr(cfg, name, value)
        cfg.sources[name] = source
    return cfg


def config_from_yaml(path: str | Path, *, field: str, source: Literal["yaml", "server"]) -> CapConfig:
    """The cap settings of a dumped AgentJet config."""
    return _cap_config(read_settings(path, field=field), source)


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


# ----------------------------------------------------------------------------------------------- status

def _read_dumped_config(dumped: Path) -> CapConfig | str:
    """The cap settings of the config an engine dumped on this machine, or why they cannot be read."""
    return read_dumped(dumped, lambda path: config_from_yaml(path, field="config", source="server"))


def build_status(url: str, raw: RawAnswers, cfg: CapConfig | None, *, release: Callable[[], Release],
                 dumped_config: Callable[[Path], CapConfig | str],
                 timeout: float = 3.0, link: ExperimentLink | None = None) -> ServerStatus:
    """One server's status object from what its routes gave; a server that sends nonsense costs only
    its own fields, never the call (an unexpected failure is reported as this server's reason).
    ``release()`` is the AgentJet whose thread rule the episode cap follows; ``dumped_config`` reads
    the config the engine dumped (``swarm_status`` caches it, so a watch reads each file once)."""
    try:
        return _build_status(url, raw, cfg, release, dumped_config, timeout, link)
    except Exception as exc:  # a hostile answer found a path the parser did not expect
        log.warning("could not interpret the answer of %s", url, exc_info=True)
        status = ServerStatus(url=url, reachable=False, experiment=link,
                              reason=f"could not interpret its answer ({internal_error_message(exc)})")
        status.diagnosis = [f"Could not read the swarm server at {url}: {status.reason}."]
        return status


def _build_status(url: str, raw: RawAnswers, cfg: CapConfig | None, release: Callable[[], Release],
                  dumped_config: Callable[[Path], CapConfig | str], timeout: float,
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
        status.engine_status = opt_str(eng.get("engine_status"), 200)
        status.engine_status_detail = opt_str(eng.get("engine_status_detail"))
        status.global_step, ok = int_or_none(eng.get("global_step"))
        if not ok:
            status.field_errors["global_step"] = not_an_integer(eng.get("global_step"))
    else:
        status.field_errors[ROUTE_ENGINE] = str(raw.engine)
    if isinstance(raw.pool, dict):
        parse_pool(raw.pool, status)
        if status.engine_status is None:  # fall back to the engine fields the pool info carries
            status.engine_status = opt_str(raw.pool.get("engine_status"), 200)
        if status.global_step is None:
            status.global_step, _ = int_or_none(raw.pool.get("global_step"))
    elif raw.pool is None:
        status.field_errors[ROUTE_POOL] = "the server has published no rollout pool information yet"
    else:
        status.field_errors[ROUTE_POOL] = str(raw.pool)
    if cfg is None and raw.experiment_dir is not None:
        cfg = _config_from_experiment_dir(url, raw.experiment_dir, status, link, dumped_config)
    status.config = cfg
    status.episode_cap = _cap_for(status, cfg, release)
    status.diagnosis = diagnose(status, cfg)
    return status


def _failure_kind(engine: Any, pool: Any) -> str:
    """What the failures say, the most telling first: a wrong answer, then a server that accepted the connection
    but did not answer in time ("busy": alive, busy or stuck), a timeout, nothing listening."""
    kinds = {"busy" if item.kind == "timeout" and item.connected else item.kind
             for item in (engine, pool) if isinstance(item, FetchError)}
    for kind in ("answer", "busy", "timeout", "unreachable"):
        if kind in kinds:
            return kind
    return "answer"


def is_busy(raw: RawAnswers) -> bool:
    """Every route timed out after the server accepted the connection: it is alive but not answering."""
    return all(isinstance(item, FetchError) and item.kind == "timeout" and item.connected
               for item in (raw.engine, raw.pool))


def _grace_for_busy(urls: list[str], raws: list[RawAnswers], started: float, with_experiment_dir: bool
                    ) -> tuple[list[RawAnswers], dict[int, float]]:
    """Read the busy servers once more, for up to ``BUSY_GRACE_S``: AgentJet's /start_engine holds the whole server
    for about 5 s when the experiment's backup folder exists, which the default timeout alone would call down.
    Returns the answers and, per server that answered now, the seconds since the call began."""
    busy = [i for i, raw in enumerate(raws) if is_busy(raw)]
    if not busy:
        return raws, {}
    again = read_servers([urls[i] for i in busy], BUSY_GRACE_S, with_experiment_dir=with_experiment_dir)
    waited = round(time.monotonic() - started, 1)
    out = list(raws)
    answered: dict[int, float] = {}
    for i, raw in zip(busy, again):
        out[i] = raw
        if isinstance(raw.engine, dict) or isinstance(raw.pool, dict):
            answered[i] = waited
    return out, answered


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


def _config_from_experiment_dir(url: str, answer: Any, status: ServerStatus, link: ExperimentLink | None,
                                dumped_config: Callable[[Path], CapConfig | str]) -> CapConfig | None:
    """The cap settings of the config the running engine dumped, when its directory is on this machine."""
    where = locate_dump(url, answer, link)
    if where.experiment_dir is not None:
        status.experiment_dir = where.experiment_dir
    if where.problem is not None:
        status.field_errors[where.problem[0]] = where.problem[1]
        return None
    if where.path is None:
        return None
    found = dumped_config(where.path)
    if isinstance(found, str):
        status.field_errors["config"] = found
        return None
    return found


def _combine_reasons(engine: Any, pool: Any) -> str:
    first, second = str(engine), "no rollout pool information" if pool is None else str(pool)
    if first == second:
        return first
    return f"{ROUTE_ENGINE}: {first}; {ROUTE_POOL}: {second}"


def _cap_for(status: ServerStatus, cfg: CapConfig | None, release: Callable[[], Release]) -> EpisodeCapResult | None:
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
        return episode_cap_for(EpisodeCapInput(
            max_env_worker=cfg.max_env_worker, num_repeat=num_repeat, train_batch_size=batch,
            client_parallelism=cfg.client_parallelism,
            max_inference_tracker_threads=cfg.max_inference_tracker_threads,
        ), release())
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
        counts = [x.running_episodes for x in read if x.running_episodes is not None]  # all of them (above)
        stats.running_min, stats.running_max = min(counts), max(counts)
        stats.running_mean = round(sum(counts) / len(counts), 2)
    done = [x for x in read if x.completed_episodes is not None]
    if len(done) >= 2 and done[-1].t_s > done[0].t_s:
        stats.completions_per_minute = round(completions(done) * 60.0 / (done[-1].t_s - done[0].t_s), 2)
    steps = [x.global_step for x in samples if x.reachable and x.global_step is not None]
    if len(steps) >= 2:
        stats.steps_advanced = steps[-1] - steps[0]
    return stats


def completions(done: list[WatchSample]) -> int:
    """Episodes completed between the first and the last of these samples (each has completed_episodes).

    Within a step the server's counter only grows, but the trainer's worker threads push it concurrently, so a
    read may show an older, lower count: progress is measured against the highest count seen in the step.
    A new step (global_step changed) resets the counter: the previous step ended at its episode target at
    least (its stop rule needs that many, for every count-based method), so the episodes between the highest
    count seen and that target count too, then the new step's count."""
    total = 0
    high = done[0].completed_episodes or 0
    for prev, cur in zip(done, done[1:]):
        count = cur.completed_episodes or 0
        if cur.global_step != prev.global_step:
            target = prev.completed_episode_target or 0
            total += max(0, target - high) + count
            high = count
        elif count > high:
            total += count - high
            high = count
    return total


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
    if inp.agentjet_version is not None or inp.agentjet_root is not None:
        chosen = select_agentjet(inp.agentjet_version, inp.agentjet_root)  # checked up front: a bad one errs now
        release: Callable[[], Release] = lambda: chosen  # noqa: E731
    else:
        release = functools.cache(select_agentjet)  # the default, chosen once per call when a cap is first computed

    def report(done: float, total: float, message: str) -> None:
        if progress is not None:
            try:
                progress(done, total, message)
            except Exception:  # progress is best effort
                log.debug("progress callback failed", exc_info=True)

    dumped_config = functools.cache(_read_dumped_config)  # a watch reads each server's dumped config once

    def build_all(raws: list[RawAnswers], longer: Collection[int] = ()) -> list[ServerStatus]:
        """Statuses of ``raws``; the servers in ``longer`` were given the busy grace too."""
        return [build_status(u, r, cfg, release=release, dumped_config=dumped_config, link=link,
                             timeout=timeout + BUSY_GRACE_S if i in longer else timeout)
                for i, (u, r) in enumerate(zip(urls, raws))]

    def read_all(deadline: float | None = None) -> list[ServerStatus]:
        return build_all(read_servers(urls, timeout, deadline=deadline, with_experiment_dir=want_dir))

    if not inp.watch_s:
        report(0, 1, f"reading {len(urls)} swarm server(s)")
        raws = read_servers(urls, timeout, with_experiment_dir=want_dir)
        answered: dict[int, float] = {}
        longer: set[int] = set()
        if "timeout_s" not in inp.model_fields_set:  # a timeout the caller chose is kept exactly
            longer = {i for i, raw in enumerate(raws) if is_busy(raw)}
            raws, answered = _grace_for_busy(urls, raws, started, want_dir)
        statuses = build_all(raws, longer)
        for i, waited in answered.items():
            statuses[i].diagnosis.insert(0, busy_answered(waited, timeout))
        report(1, 1, _progress_line(statuses))
    else:
        statuses = _watch(inp.watch_s, timeout, started, urls, read_all, report)

    checked = datetime.now(timezone.utc).isoformat(timespec="seconds")
    summary = _summary(statuses)
    if many:
        for status in statuses:
            status.summary = _summary([status])
        return SwarmStatusResult(servers=statuses, summary=summary, checked_at=checked)
    first = statuses[0]
    fields = {name: getattr(first, name) for name in ServerStatus.model_fields if name != "summary"}
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
                                         completed_episodes=st.completed_episodes,
                                         completed_episode_target=st.completed_episode_target))
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
        step = (f"step {s.global_step}" if s.global_step is not None else "step unknown"
                if "global_step" in s.field_errors or ROUTE_ENGINE in s.field_errors
                else "no training step yet")  # the server sends null before the trainer's first update
        return (f"{s.url}: {s.engine_status or 'status unknown'}, {step}, "
                f"{s.running_episodes if s.running_episodes is not None else '?'} running episodes{cap}")
    total = sum(s.running_episodes or 0 for s in up)
    down = [s.url for s in statuses if not s.reachable]
    text = f"{len(up)} of {len(statuses)} servers reachable, {total} running episodes in total"
    if down:
        text += f"; unreachable: {', '.join(down)}"
    return text
