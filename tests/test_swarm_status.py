"""swarm_status against a stand-in swarm server (tests/swarm_standin.py) on 127.0.0.1.

Covers the gauge and diagnosis, the cap from arguments and from a dumped yaml, every failure mode
(each must give reachable=false or a per-field error within timeout_s, never an exception), two
servers at once, watch_s with progress through a real in-process MCP client, the CLI, bad input.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml as pyyaml

from skill_server.app.table import TOOLS_BY_NAME
from skill_server.core.errors import ToolInputError
from skill_server.core.http_json import FetchError, http_get
from skill_server.swarm.read import parse_seconds
from skill_server.tools.swarm_status.tool import ROUTE_ENGINE, ROUTE_POOL, SwarmStatusResult, normalize_url
from tests.conftest import call_cli, cli_env
from tests.swarm_standin import SwarmStandin, SwarmState, episode, free_port_with_nothing_listening

SPEC = TOOLS_BY_NAME["swarm_status"]


def status(**arguments):
    """Through the table, exactly as both front ends call it."""
    return SPEC.invoke(arguments)


@pytest.fixture
def standin():
    with SwarmStandin() as server:
        yield server


def both_routes(mode: str) -> dict[str, str]:
    return {ROUTE_ENGINE: mode, ROUTE_POOL: mode}


# --------------------------------------------------------------------------- the gauge and the diagnosis

def test_gauge_at_cap_names_the_knob(standin):
    standin.state.set_running(128, clients=4)
    standin.state.completed_task_target = 64
    r = status(url=standin.url, max_env_worker=128, num_repeat=4, train_batch_size=64)
    assert r.reachable is True and r.servers is None and r.url == standin.url
    assert (r.engine_status, r.global_step, r.running_episodes, r.running_clients) == ("ENGINE.ROLLING", 3, 128, 4)
    assert r.episode_cap.episode_cap == 128 and r.episode_cap.binding == ["max_env_worker"]
    assert (r.completed_tasks, r.completed_task_target, r.task_expected_num_repeat) == (10, 64, 4)
    assert r.step_progress.counter == "completed_tasks" and r.step_progress.fraction == pytest.approx(10 / 64, abs=1e-3)
    assert not any("given config" in d for d in r.diagnosis)
    at_cap = [d for d in r.diagnosis if "is at the episode cap (128)" in d]
    assert at_cap and "max_env_worker" in at_cap[0] and "more clients will not raise it" in at_cap[0]
    assert any(d.startswith("To lift the cap, raise max_env_worker") for d in r.diagnosis)
    assert r.config.sources == {"max_env_worker": "argument", "num_repeat": "argument", "train_batch_size": "argument"}


def test_batch_size_binding_is_named(standin):
    standin.state.set_running(64)
    standin.state.completed_task_target = 16
    r = status(url=standin.url, max_env_worker=128, num_repeat=4, train_batch_size=16)
    assert r.episode_cap.episode_cap == 64 and r.episode_cap.binding == ["train_batch_size"]
    assert any("at the episode cap (64)" in d and "train_batch_size" in d for d in r.diagnosis)
    assert any(d.startswith("train_batch_size=16 binds") for d in r.diagnosis)


def test_far_below_cap_blames_the_clients(standin):
    standin.state.set_running(12, clients=3)
    r = status(url=standin.url, max_env_worker=128, num_repeat=4, train_batch_size=32)
    assert r.running_episodes == 12 and r.running_by_client == {"client-0": 4, "client-1": 4, "client-2": 4}
    assert any("far below the cap (128)" in d and "clients are the limit" in d and "3 client(s)" in d
               for d in r.diagnosis)


def test_engine_not_rolling_expects_zero(standin):
    standin.state.engine_status = "ENGINE.WEIGHT_SYNCING"
    standin.state.engine_status_detail = "syncing step 3 weights"
    r = status(url=standin.url, max_env_worker=128, num_repeat=4)
    assert r.running_episodes == 0
    assert any("ENGINE.WEIGHT_SYNCING, not ROLLING" in d and "zero is expected" in d for d in r.diagnosis)
    assert not any("far below" in d for d in r.diagnosis)
    assert "The server's status detail: syncing step 3 weights" in r.diagnosis


def test_episodes_near_discard_timeout(standin):
    standin.state.set_running(6, idle_s=3.0)
    standin.state.running["ep-stuck"] = episode(idle_s=230.0, timeout_s=240.0, client="client-slow", task_id="t7")
    standin.state.running["ep-late"] = episode(idle_s=250.0, timeout_s=240.0, client="client-slow")
    r = status(url=standin.url)
    assert r.running_episodes == 8 and r.episodes_near_timeout == 2
    assert [e.episode_uuid for e in r.stalest_episodes] == ["ep-late", "ep-stuck", "ep-0005", "ep-0004", "ep-0003"]
    stuck = r.stalest_episodes[1]
    assert (stuck.idle_s, stuck.discard_timeout_s, stuck.task_id, stuck.client_uuid) == (230.0, 240.0, "t7",
                                                                                         "client-slow")
    assert stuck.idle_fraction == pytest.approx(230 / 240, abs=1e-3) and stuck.llm_call_count == 3
    assert any("2 running episode(s) are close to their discard timeout" in d and "ep-late" in d
               for d in r.diagnosis)
    # no cap inputs: the gauge is reported, and the tool says what would relate it to the cap
    assert r.episode_cap is None and any("Give max_env_worker" in d for d in r.diagnosis)


def test_targets_nearly_met_announce_weight_sync(standin):
    standin.state.set_running(20)
    standin.state.completed_tasks = 30
    r = status(url=standin.url, max_env_worker=128, num_repeat=4, train_batch_size=32)
    assert r.step_progress.done == 30 and r.step_progress.target == 32
    assert any("nearly met" in d and "weight sync is near" in d for d in r.diagnosis)
    # low gauge at the end of a step is not blamed on the clients
    assert not any("clients are the limit" in d for d in r.diagnosis)


def test_episode_method_uses_episode_target(standin):
    standin.state.sample_collection_method = "rollout_until_finish_enough_episodes"
    standin.state.completed_episodes = 120
    r = status(url=standin.url)
    assert r.step_progress.counter == "completed_episodes" and (r.step_progress.done, r.step_progress.target) == (
        120, 128)
    assert any("weight sync is near" in d for d in r.diagnosis)


def test_garbage_episode_details_are_tolerated(standin):
    standin.state.running = {
        "ok": episode(idle_s=10.0),
        "bad-idle": {"time_since_last_activity": "soon", "discard_episode_timeout": "240.0s", "llm_call_count": "x"},
        "not-a-dict": "claimed",
        "numbers": {"time_since_last_activity": 15, "discard_episode_timeout": 0},
    }
    r = status(url=standin.url)
    assert r.reachable and r.running_episodes == 4
    assert [e.episode_uuid for e in r.stalest_episodes[:2]] == ["numbers", "ok"]
    assert r.stalest_episodes[0].idle_fraction is None  # a zero timeout gives no fraction, not a crash
    assert "2 of 4 entries" in r.field_errors["running_episode_details"]


def test_parse_seconds():
    assert parse_seconds("12.3s") == 12.3 and parse_seconds("240.0s") == 240.0 and parse_seconds(" 7 ") == 7.0
    assert parse_seconds(3) == 3.0 and parse_seconds("1e2s") == 100.0
    for bad in ("", "s", "abc", "-3s", "nan", None, True, [], "12.3 minutes", float("inf")):
        assert parse_seconds(bad) is None


def test_num_repeat_and_batch_taken_from_server_when_omitted(standin):
    standin.state.set_running(128)
    r = status(url=standin.url, max_env_worker=128)
    assert r.episode_cap.num_repeat == 4 and r.episode_cap.bounds.train_batch_size == 128
    assert any("came from the server's published targets" in d for d in r.diagnosis)


def test_config_mismatch_and_gauge_above_cap(standin):
    standin.state.set_running(100)
    r = status(url=standin.url, max_env_worker=64, num_repeat=8, train_batch_size=32)
    assert any("above the computed cap (64)" in d for d in r.diagnosis)
    assert any("engine expects 4 episodes per task" in d for d in r.diagnosis)


# --------------------------------------------------------------------------- yaml

def write_dump(tmp_path: Path, **ajet_overrides) -> Path:
    ajet = {
        "rollout": {"max_env_worker": 128, "num_repeat": 6},
        "data": {"train_batch_size": 32},
        "interchange_server": {"max_inference_tracker_threads": 64},
        "swarm_mode_sample_collection_method": "rollout_until_finish_enough_episodes",
    }
    ajet.update(ajet_overrides)
    path = tmp_path / "yaml_backup.yaml"
    path.write_text(pyyaml.safe_dump({"ajet": ajet, "trainer": {"n_gpus_per_node": 8}}, sort_keys=False))
    return path


def test_cap_from_yaml_with_argument_override(standin, tmp_path):
    standin.state.set_running(128)
    path = write_dump(tmp_path)
    r = status(url=standin.url, yaml=str(path), client_parallelism=[100, 100])
    assert r.config.max_env_worker == 128 and r.config.num_repeat == 6 and r.config.max_inference_tracker_threads == 64
    assert r.config.sources["max_env_worker"] == "yaml" and r.config.sources["client_parallelism"] == "argument"
    assert r.episode_cap.episode_cap == 128 and r.episode_cap.worker_loops == 132
    assert any("max_inference_tracker_threads=64" in s for s in r.episode_cap.suggestions)
    assert any("config says rollout_until_finish_enough_episodes but the engine uses rollout_until_finish_enough_tasks"
               in d for d in r.diagnosis)
    assert any("engine expects 4 episodes per task" in d for d in r.diagnosis)
    r = status(url=standin.url, yaml=str(path), num_repeat=4, max_env_worker=256)
    assert r.config.sources["num_repeat"] == "argument" and r.episode_cap.engine_cap == 128  # 32 tasks x 4


@pytest.mark.parametrize("content, needle", [
    ("- a\n- b\n", "mapping"),
    ("ajet: [1, 2]\n", "no 'ajet' mapping"),
    ("trainer: {}\n", "no 'ajet' mapping"),
    ("ajet:\n  rollout:\n    max_env_worker: '${oc.env:N}'\n", "ajet.rollout.max_env_worker"),
    ("ajet: {rollout: {max_env_worker: 0}}\n", "positive integer"),
    ("ajet: {swarm_mode_sample_collection_method: 3}\n", "must be a string"),
    ("ajet: {rollout: [\n", "not valid YAML"),
])
def test_bad_yaml_is_an_input_error_naming_yaml(tmp_path, content, needle):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    with pytest.raises(ToolInputError) as err:
        status(url="http://127.0.0.1:9", yaml=str(path))
    assert err.value.field == "yaml" and needle in str(err.value)


def test_missing_and_oversized_yaml(tmp_path):
    with pytest.raises(ToolInputError) as err:
        status(url="http://127.0.0.1:9", yaml=str(tmp_path / "absent.yaml"))
    assert err.value.field == "yaml" and "not found" in str(err.value)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (6 * 1024 * 1024))
    with pytest.raises(ToolInputError) as err:
        status(url="http://127.0.0.1:9", yaml=str(big))
    assert err.value.field == "yaml" and "limit" in str(err.value)


def test_yaml_without_max_env_worker_reports_why_no_cap(standin, tmp_path):
    path = tmp_path / "partial.yaml"
    path.write_text("ajet: {rollout: {num_repeat: 4}}\n")
    r = status(url=standin.url, yaml=str(path))
    assert r.episode_cap is None and "max_env_worker" in r.field_errors["episode_cap"]
    path.write_text("ajet: {swarm_mode_sample_collection_method: rollout_until_any_client_agree_sync_weight}\n")
    r = status(url=standin.url, yaml=str(path))
    assert any("config says rollout_until_any_client_agree_sync_weight" in d for d in r.diagnosis)


# --------------------------------------------------------------------------- failure modes

@pytest.mark.parametrize("mode, needle", [
    ("html", "HTML page"),
    ("500", "HTTP 500"),
    ("404", "HTTP 404"),
    ("slow", "within 0.5s"),
    ("drip", "within 0.5s"),
    ("truncated", "truncated answer"),
    ("wrong_json", "not an AgentJet swarm server"),
    ("not_json", "not valid JSON"),
    ("list", "JSON an array"),
    ("huge", "2 MiB limit"),
    ("huge_unsized", "2 MiB limit"),
])
def test_failure_modes_are_unreachable_with_a_reason(standin, mode, needle):
    standin.state.failures = both_routes(mode)
    started = time.monotonic()
    r = status(url=standin.url, timeout_s=0.5, max_env_worker=128, num_repeat=4)
    elapsed = time.monotonic() - started
    assert elapsed < 0.5 + 0.4, f"{mode} took {elapsed:.2f}s"
    assert r.reachable is False and needle in r.reason, r.reason
    assert r.running_episodes is None and r.episode_cap is None
    assert r.diagnosis and r.diagnosis[0].startswith(f"Could not read the swarm server at {standin.url}")
    SwarmStatusResult.model_validate(r.model_dump())


def test_connection_refused_is_unreachable():
    url = f"http://127.0.0.1:{free_port_with_nothing_listening()}"
    r = status(url=url, timeout_s=1)
    assert r.reachable is False and "connection refused" in r.reason


def test_one_broken_route_is_a_field_error(standin):
    standin.state.set_running(7)
    standin.state.failures = {ROUTE_ENGINE: "500"}
    r = status(url=standin.url)
    assert r.reachable is True and r.running_episodes == 7
    assert r.engine_status == "ENGINE.ROLLING" and r.global_step == 3  # taken from the pool information
    assert "HTTP 500" in r.field_errors[ROUTE_ENGINE]
    standin.state.failures = {ROUTE_POOL: "truncated"}
    r = status(url=standin.url)
    assert r.reachable is True and r.running_episodes is None and "truncated" in r.field_errors[ROUTE_POOL]
    assert any("count is unknown" in d for d in r.diagnosis)
    standin.state.failures = {ROUTE_POOL: "null"}
    r = status(url=standin.url)
    assert r.reachable is True and "no rollout pool information yet" in r.field_errors[ROUTE_POOL]


def test_null_everywhere_is_not_reachable(standin):
    standin.state.failures = both_routes("null")
    r = status(url=standin.url, timeout_s=1)
    assert r.reachable is False and "JSON null" in r.reason


def test_chunked_answers_are_read(standin):
    standin.state.set_running(9)
    standin.state.failures = both_routes("chunked")
    r = status(url=standin.url)
    assert r.reachable and r.running_episodes == 9 and not r.field_errors


def test_http_get_rejects_non_http_peer():
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def speak_smtp():
        conn, _ = listener.accept()
        conn.sendall(b"220 mail.example ESMTP ready\r\n\r\n")
        conn.close()

    threading.Thread(target=speak_smtp, daemon=True).start()
    with pytest.raises(FetchError, match="not an HTTP answer"):
        http_get(f"http://127.0.0.1:{listener.getsockname()[1]}/", timeout=1)
    listener.close()


# --------------------------------------------------------------------------- several servers

def test_two_servers_at_once_cost_one_timeout():
    slow_state = SwarmState(failures=both_routes("slow"), slow_s=5.0)
    with SwarmStandin() as good, SwarmStandin(slow_state) as slow:
        good.state.set_running(16)
        started = time.monotonic()
        r = status(urls=[good.url, slow.url, f"127.0.0.1:{free_port_with_nothing_listening()}"], timeout_s=0.6,
                   max_env_worker=64, num_repeat=4, train_batch_size=16)
        elapsed = time.monotonic() - started
    assert elapsed < 0.6 + 0.4
    assert r.url is None and r.reachable is None and r.running_episodes is None
    assert [s.url for s in r.servers][:2] == [good.url, slow.url]
    first, second, third = r.servers
    assert first.reachable and first.running_episodes == 16 and first.episode_cap.episode_cap == 64
    assert second.reachable is False and "within 0.6s" in second.reason
    assert third.reachable is False and "connection refused" in third.reason
    assert r.summary.startswith("1 of 3 servers reachable, 16 running episodes in total")
    SwarmStatusResult.model_validate_json(r.model_dump_json())


def test_two_healthy_servers_each_diagnosed():
    with SwarmStandin() as a, SwarmStandin(SwarmState(engine_status="ENGINE.BOOTING")) as b:
        a.state.set_running(64)
        r = status(urls=[a.url, b.url], max_env_worker=64, num_repeat=4, train_batch_size=16)
    assert [s.engine_status for s in r.servers] == ["ENGINE.ROLLING", "ENGINE.BOOTING"]
    assert any("at the episode cap (64)" in d for d in r.servers[0].diagnosis)
    assert any("ENGINE.BOOTING, not ROLLING" in d for d in r.servers[1].diagnosis)


def test_the_caps_of_one_call_describe_one_agentjet_chosen_once(monkeypatch):
    """Several servers, several samples: the AgentJet whose thread rule the caps follow is selected once."""
    import skill_server.tools.swarm_status.tool as swarm_module

    chosen = []
    real = swarm_module.select_agentjet
    monkeypatch.setattr(swarm_module, "select_agentjet", lambda: chosen.append(1) or real())
    with SwarmStandin() as a, SwarmStandin() as b:
        r = status(urls=[a.url, b.url], max_env_worker=64, num_repeat=4, watch_s=2.0, timeout_s=1.0)
    caps = [s.episode_cap for s in r.servers]
    assert all(c is not None and c.agentjet == caps[0].agentjet for c in caps)
    assert len(chosen) == 1 and min(s.watch.samples_read for s in r.servers) >= 2


def test_agentjet_version_and_root_choose_the_agentjet_the_cap_describes(standin, tmp_path):
    """Like every tool that uses AgentJet knowledge: a version or an install is chosen up front (a bad one is
    an error even when no server answers), and the cap names the AgentJet whose thread rule it follows."""
    standin.state.set_running(8)
    r = status(url=standin.url, max_env_worker=64, num_repeat=4, agentjet_version="c68c154f")
    assert r.episode_cap.agentjet.source == "bundled" and r.episode_cap.agentjet.commit.startswith("c68c154f")
    closed = f"http://127.0.0.1:{free_port_with_nothing_listening()}"
    for arguments, field in (({"agentjet_version": "9.9.9"}, "agentjet_version"),
                             ({"agentjet_root": str(tmp_path / "no-agentjet")}, "agentjet_root")):
        with pytest.raises(ToolInputError) as err:
            status(url=closed, **arguments)
        assert err.value.field == field


# --------------------------------------------------------------------------- watch_s through MCP

@pytest.mark.anyio
async def test_watch_with_progress_through_mcp_client():
    from mcp import Client

    from skill_server.app.mcp_server import build_server

    def vary(index: int, state: SwarmState) -> None:
        # the gauge moves 10 -> 20 -> 30; 8 episodes complete between samples
        state.set_running(10 * (index + 1))
        state.completed_episodes = 40 + 8 * index

    notes = []

    async def on_progress(progress, total, message):
        notes.append((progress, total, message))

    with SwarmStandin(SwarmState(on_pool_read=vary)) as server:
        async with Client(build_server()) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            ann = tools["swarm_status"].annotations
            assert (ann.read_only_hint, ann.open_world_hint, ann.idempotent_hint, ann.destructive_hint) == (
                True, True, True, False)
            r = await client.call_tool("swarm_status", {"url": server.url, "watch_s": 2, "max_env_worker": 128,
                                                        "num_repeat": 4}, progress_callback=on_progress)
    assert not r.is_error, r.content
    out = r.structured_content
    watch = out["watch"]
    assert watch["samples"] == 3 and watch["samples_read"] == 3
    assert (watch["running_min"], watch["running_max"], watch["running_mean"]) == (10, 30, 20)
    assert [s["running_episodes"] for s in watch["series"]] == [10, 20, 30]
    assert watch["completions_per_minute"] == pytest.approx(16 * 60 / (watch["series"][-1]["t_s"]), rel=0.05)
    assert out["running_episodes"] == 30  # the fields show the last sample
    assert any("ranged 10-30" in d for d in out["diagnosis"])
    assert len(notes) == 3 and [n[0] for n in notes] == [1, 2, 3] and all(n[1] == 3 for n in notes)
    assert "sample 3/3" in notes[-1][2] and "running=30" in notes[-1][2]


def test_watch_stats_follow_counter_restart_at_new_step():
    from skill_server.tools.swarm_status.tool import WatchSample, _watch_stats

    def sample(t, running, completed, step):
        return WatchSample(t_s=t, reachable=True, engine_status="ENGINE.ROLLING", global_step=step,
                           running_episodes=running, completed_episodes=completed)

    series = [sample(0, 10, 100, 3), sample(10, 12, 120, 3), sample(20, 0, 6, 4),
              WatchSample(t_s=25, reachable=False), sample(30, 8, 16, 4)]
    w = _watch_stats(series, 30.0)
    assert (w.samples, w.samples_read, w.running_min, w.running_max, w.running_mean) == (5, 4, 0, 12, 7.5)
    assert w.completions_per_minute == pytest.approx((20 + 6 + 10) * 60 / 30)  # 100->120, restart ->6, 6->16
    assert w.steps_advanced == 1


def test_watch_times():
    from skill_server.tools.swarm_status.tool import _watch_times

    assert _watch_times(2) == [0, 1, 2] and _watch_times(0.5) == [0, 0.5]
    assert len(_watch_times(50)) == 11 and _watch_times(50)[-1] == 50 and _watch_times(7.5)[-1] == 7.5


# --------------------------------------------------------------------------- CLI and inputs

def test_cli_reads_a_server_from_the_environment(standin):
    standin.state.set_running(5)
    code, out, err = call_cli("swarm_status", {"max_env_worker": 128, "num_repeat": 4},
                              env=cli_env(AJET_SWARM_URL=standin.url))
    assert code == 0, err
    assert out["url"] == standin.url and out["running_episodes"] == 5 and out["episode_cap"]["episode_cap"] == 128
    code, out, err = call_cli("swarm_status", {"urls": [standin.url]}, env=cli_env())
    assert code == 0 and out["servers"][0]["running_episodes"] == 5 and "url" not in out and "reachable" not in out


def test_cli_bad_input_exits_1_naming_the_field():
    code, out, err = call_cli("swarm_status", {"url": "http://a:1", "urls": ["http://b:1"]})
    assert code == 1 and "url and urls" in err and "\n" not in err.strip()


def test_default_url_and_env(monkeypatch):
    monkeypatch.delenv("AJET_SWARM_URL", raising=False)
    port = free_port_with_nothing_listening()
    monkeypatch.setenv("AJET_SWARM_URL", f"127.0.0.1:{port}/")
    r = status(timeout_s=1)
    assert r.url == f"http://127.0.0.1:{port}" and r.reachable is False
    monkeypatch.setenv("AJET_SWARM_URL", "ftp://x")
    with pytest.raises(ToolInputError) as err:
        status()
    assert err.value.field == "url" and "AJET_SWARM_URL" in str(err.value)


@pytest.mark.parametrize("arguments, field", [
    ({"url": "http://a:1", "urls": ["http://b:1"]}, None),
    ({"timeout_s": 0}, "timeout_s"),
    ({"timeout_s": 31}, "timeout_s"),
    ({"watch_s": 51}, "watch_s"),
    ({"watch_s": 0}, "watch_s"),
    ({"urls": []}, "urls"),
    ({"urls": ["http://ok:1", "ftp://bad"]}, "urls"),
    ({"url": "not a url"}, "url"),
    ({"url": "http://host:99999"}, "url"),
    ({"num_repeat": 4}, None),
    ({"max_env_worker": "128"}, "max_env_worker"),
    ({"client_parallelism": [4, -1], "max_env_worker": 8}, "client_parallelism.1"),
    ({"bogus": 1}, "bogus"),
])
def test_bad_arguments_name_the_field(arguments, field):
    with pytest.raises(ToolInputError) as err:
        status(**arguments)
    if field is not None:
        assert err.value.field == field, str(err.value)
    text = str(err.value)
    if "urls" in arguments and "url" in arguments:
        assert "url and urls" in text
    if arguments == {"num_repeat": 4}:
        assert "max_env_worker is required" in text


def test_normalize_url():
    assert normalize_url("localhost:10086") == "http://localhost:10086"
    assert normalize_url(" https://h.example/swarm/ ") == "https://h.example/swarm"
    for bad in ("", "a b", "ftp://h", "http://", "http://h:1?x=1"):
        with pytest.raises(ValueError):
            normalize_url(bad)


def test_output_schema_accepts_both_forms():
    schema = SwarmStatusResult.model_json_schema()
    assert {"servers", "url", "reachable", "running_episodes", "diagnosis", "summary"} <= set(schema["properties"])
    json.dumps(schema)
