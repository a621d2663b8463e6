"""Hostile and silent swarm servers: one of them never costs the others their results, and every call,
watch included, ends within its documented bound (watch_s + timeout_s).

The servers are real local HTTP servers (tests/swarm_standin.py) answering with exact hostile bytes.
"""

from __future__ import annotations

import json
import time

import pytest

from skill_server.app.table import TOOLS_BY_NAME
from skill_server.core.errors import ToolInputError
from skill_server.tools.swarm_status.tool import ROUTE_ENGINE, ROUTE_POOL
from tests.swarm_standin import SwarmStandin, SwarmState, episode


def status(**arguments):
    return TOOLS_BY_NAME["swarm_status"].invoke(arguments)


def pool_with(**fields) -> bytes:
    base = SwarmState().pool_doc()
    text = json.dumps(base)[:-1]
    for name, raw in fields.items():  # raw JSON text, spliced in as written (duplicates: the last one wins)
        text += f', "{name}": {raw}'
    return (text + "}").encode()


HOSTILE_POOLS = {
    "superscript": pool_with(completed_tasks='"\u00b2"'),
    "5000-digits": pool_with(completed_tasks="1" * 5000),
    "10**400": pool_with(completed_tasks=str(10**400)),
    "1e400": pool_with(completed_task_target="1e400", completed_episodes="-1e400"),
    "nan": pool_with(completed_tasks="NaN", task_expected_num_repeat="Infinity"),
    "wrong-types": pool_with(engine_status="[1, 2]", global_step='{"a": 1}', sample_collection_method="[]",
                             running_episode_details='[["x"]]', swarm_client_instruction='"x"'),
    "episode-garbage": pool_with(running_episode_details=json.dumps({
        "a": {"time_since_last_activity": 10**400, "discard_episode_timeout": "1e999s", "llm_call_count": "\u00b2",
              "client_uuid": ["x"] * 1000, "optional_task_id": {"k": "v"}},
        "\ud800-ish": episode(5.0), "b": None, "c": [1, 2]})),
    "deep": b'{"completed_tasks": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "not-utf8": b'{"completed_tasks": "\xff\xfe"}',
}
HOSTILE_ENGINES = {
    "engine-nested": b'{"engine_status": {"x": [1, 2]}, "global_step": "12345678901234567890123"}',
    "engine-huge-step": b'{"engine_status": "ENGINE.ROLLING", "global_step": ' + b"9" * 5000 + b"}",
}


def hostile_servers() -> list[SwarmState]:
    states = [SwarmState(raw={ROUTE_POOL: body}) for body in HOSTILE_POOLS.values()]
    states += [SwarmState(raw={ROUTE_ENGINE: body}) for body in HOSTILE_ENGINES.values()]
    states.append(SwarmState(failures={ROUTE_ENGINE: "drip", ROUTE_POOL: "drip"}))       # slowloris
    states.append(SwarmState(failures={ROUTE_ENGINE: "huge_unsized", ROUTE_POOL: "huge"}))
    states.append(SwarmState(failures={ROUTE_ENGINE: "slow", ROUTE_POOL: "slow"}, slow_s=600))  # silent
    return states


def test_hostile_servers_never_cost_the_good_ones_their_results():
    from contextlib import ExitStack

    with ExitStack() as stack:
        good = stack.enter_context(SwarmStandin())
        good.state.set_running(24, clients=3)
        others = [stack.enter_context(SwarmStandin(state)) for state in hostile_servers()]
        late_good = stack.enter_context(SwarmStandin())
        late_good.state.set_running(8)
        urls = [good.url, *(s.url for s in others), late_good.url]
        r = status(urls=urls, timeout_s=1.5, max_env_worker=64, num_repeat=4, train_batch_size=16)
    assert [s.url for s in r.servers] == urls
    first, *bad, last = r.servers
    assert first.reachable and first.running_episodes == 24 and first.running_clients == 3
    assert first.episode_cap.episode_cap == 64 and not first.field_errors
    assert last.reachable and last.running_episodes == 8
    names = list(HOSTILE_POOLS) + list(HOSTILE_ENGINES) + ["drip", "huge", "silent"]
    for name, server in zip(names, bad):
        shown = server.model_dump_json()  # the whole answer serialises
        assert "\n" not in (server.reason or "") and len(shown) < 100_000, name
        assert server.reachable is False or server.field_errors, name
    by_name = dict(zip(names, bad))
    assert by_name["superscript"].completed_tasks is None
    assert by_name["superscript"].field_errors["completed_tasks"] == "not an integer in range: '²'"
    assert by_name["5000-digits"].field_errors["completed_tasks"] == "not an integer in range: <a 5000-digit number>"
    assert "401-digit" in by_name["10**400"].field_errors["completed_tasks"]
    assert set(by_name["1e400"].field_errors) == {"completed_task_target", "completed_episodes"}
    assert by_name["wrong-types"].reachable and "running_episode_details" in by_name["wrong-types"].field_errors
    garbage = by_name["episode-garbage"]
    assert garbage.reachable and garbage.running_episodes == 4
    assert any(e.episode_uuid == "\\ud800-ish" for e in garbage.stalest_episodes)
    assert "nested too deeply" in by_name["deep"].field_errors[ROUTE_POOL]
    assert "not valid JSON" in by_name["not-utf8"].field_errors[ROUTE_POOL]
    assert by_name["engine-huge-step"].reachable and by_name["engine-huge-step"].global_step == 3  # from the pool
    assert "within 1.5s" in by_name["drip"].reason and "within 1.5s" in by_name["silent"].reason
    assert "2 MiB limit" in by_name["huge"].reason
    assert r.summary.startswith(f"{sum(1 for s in r.servers if s.reachable)} of {len(urls)} servers reachable")


def test_watch_against_a_silent_server_ends_within_its_bound():
    """A server that accepts connections and never answers: the call still ends by watch_s + timeout_s."""
    silent = SwarmState(failures={ROUTE_ENGINE: "slow", ROUTE_POOL: "slow"}, slow_s=600)
    with SwarmStandin(silent) as server:
        started = time.monotonic()
        r = status(url=server.url, watch_s=4, timeout_s=3)
        elapsed = time.monotonic() - started
    assert elapsed < 4 + 3 + 2, f"{elapsed:.1f}s"
    assert r.reachable is False and r.watch.samples_read == 0
    assert 1 <= r.watch.samples <= 3  # reads that overran their slot skipped the samples due meanwhile
    assert any("never answered" in d for d in r.diagnosis)


def test_watch_and_timeout_together_stay_under_a_minute():
    with pytest.raises(ToolInputError) as err:
        status(url="http://127.0.0.1:9", watch_s=50, timeout_s=10)
    assert "watch_s + timeout_s is 60 s; keep it within 55 s" in str(err.value)
    assert TOOLS_BY_NAME["swarm_status"].validate({"watch_s": 50, "timeout_s": 5})
