"""Parsing a swarm server's rollout pool answer into ``swarm_status``'s ``ServerStatus``, field by field.

A field a server got wrong becomes a field error or is left out, never an exception (the scalars are read
by ``skill_server.swarm.read``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from skill_server.swarm.read import int_or_none, not_an_integer, opt_str, parse_seconds
from skill_server.tools.swarm_status.models import (
    NEAR_TIMEOUT_FRACTION,
    STALEST_SHOWN,
    ServerStatus,
    StaleEpisode,
    StepProgress,
)

_METHOD_TARGETS = {
    "rollout_until_finish_enough_episodes": ("completed_episodes", "completed_episode_target", "episodes"),
    "rollout_until_finish_enough_tasks": ("completed_tasks", "completed_task_target", "tasks"),
    "rollout_until_finish_enough_non_dummy_tasks": (
        "completed_non_dummy_tasks", "completed_non_dummy_task_target", "non-dummy tasks"),
}


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
        calls, _ = int_or_none(info.get("llm_call_count"))
        client = opt_str(info.get("client_uuid"))
        if client:
            clients[client] += 1
        episodes.append(StaleEpisode(
            episode_uuid=opt_str(uuid, 200) or "",
            client_uuid=client,
            task_id=opt_str(info.get("optional_task_id")) or None,
            llm_call_count=calls,
            idle_s=idle,
            discard_timeout_s=limit,
            idle_fraction=round(idle / limit, 3) if idle is not None and limit else None,
        ))
    status.running_episodes = len(details)
    status.running_clients = len(clients)
    status.running_by_client = dict(clients.most_common())
    episodes.sort(key=_urgency)
    status.stalest_episodes = episodes[:STALEST_SHOWN]
    status.episodes_near_timeout = sum(
        1 for e in episodes if e.idle_fraction is not None and e.idle_fraction >= NEAR_TIMEOUT_FRACTION)
    if unreadable:
        status.field_errors["running_episode_details"] = (
            f"{unreadable} of {len(details)} entries lack a readable idle time or discard timeout")


def _urgency(e: StaleEpisode) -> tuple[bool, bool, float, float]:
    """How close an episode is to being taken back, most urgent first: by the share of its own discard timeout
    it has been idle (clients give each episode its timeout in begin_episode, so idle seconds alone mislead),
    an episode whose timeout cannot be read ahead of those known to be safe, and one without an idle time last."""
    return (e.idle_s is None, e.idle_fraction is not None, -(e.idle_fraction or 0.0), -(e.idle_s or 0.0))


def parse_pool(pool: dict[str, Any], status: ServerStatus) -> None:
    for name in ("completed_episodes", "completed_episode_target", "completed_tasks", "completed_task_target",
                 "completed_non_dummy_tasks", "completed_non_dummy_task_target", "task_expected_num_repeat"):
        value, ok = int_or_none(pool.get(name))
        setattr(status, name, value)
        if not ok:
            status.field_errors[name] = not_an_integer(pool.get(name))
    method = pool.get("sample_collection_method")
    status.sample_collection_method = opt_str(method, 200) or None
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
