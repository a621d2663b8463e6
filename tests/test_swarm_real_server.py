"""swarm_status against what AgentJet's real swarm server (c68c154) was measured to do, through the stand-in
(tests/swarm_standin.py), which reproduces those behaviours: per-episode timeouts, a null step before the
first update, a /start_engine that holds the whole server, late pushes of worker threads, its lifecycle."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest

from skill_server.app.table import TOOLS_BY_NAME
from skill_server.tools.swarm_status.models import WatchSample
from skill_server.tools.swarm_status.tool import _watch_stats
from tests.swarm_standin import SwarmStandin, SwarmState, episode, free_port_with_nothing_listening


def status(**arguments):
    return TOOLS_BY_NAME["swarm_status"].invoke(arguments)


def post(url: str) -> threading.Thread:
    """POST ``url`` on a thread (the real server's control routes are POSTs)."""
    def send() -> None:
        with urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=30):
            pass

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_the_episodes_closest_to_their_own_timeout_come_first():
    """Clients give each episode its timeout: 42 s idle of 600 s is safe, 40 s of 50 s is not."""
    with SwarmStandin() as server:
        server.state.running = {
            "ep-patient": episode(idle_s=42.0, timeout_s=600.0, client="client-slow-env"),
            "ep-80": episode(idle_s=40.0, timeout_s=50.0, client="client-fast"),
            "ep-82": episode(idle_s=41.0, timeout_s=50.0, client="client-fast"),
        }
        r = status(url=server.url)
    assert [e.episode_uuid for e in r.stalest_episodes] == ["ep-82", "ep-80", "ep-patient"]
    assert r.episodes_near_timeout == 2
    near = next(d for d in r.diagnosis if "close to their discard timeout" in d)
    assert "ep-82, idle 41s of 50s, 82%" in near and "ep-patient" not in near


def test_clients_with_mixed_timeouts_are_read_per_episode():
    with SwarmStandin() as server:
        server.state.set_running(8, idle_s=45.0, clients=2, timeout_s=[600.0, 50.0])
        r = status(url=server.url)
    assert [e.discard_timeout_s for e in r.stalest_episodes] == [50.0] * 4 + [600.0]  # the short ones first
    assert r.episodes_near_timeout == 4


def test_no_step_before_the_first_update_step_zero_after_a_crash():
    with SwarmStandin(SwarmState(global_step=None)) as server:
        r = status(url=server.url)
        assert r.global_step is None and "step None" not in r.summary
        assert r.summary == f"{server.url}: ENGINE.ROLLING, no training step yet, 0 running episodes"
        server.state.crash()
        r = status(url=server.url)
    assert (r.engine_status, r.global_step) == ("ENGINE.OFFLINE", 0) and ", step 0," in r.summary


def test_a_busy_server_is_told_from_a_dead_one():
    """/start_engine holds the real server about 5 s when the backup folder exists; a 3 s read alone said down."""
    with SwarmStandin(SwarmState(engine_status="ENGINE.OFFLINE", start_engine_block_s=5.0)) as server:
        starting = post(server.url + "/start_engine")
        time.sleep(0.3)
        began = time.monotonic()
        r = status(url=server.url)  # the default timeout: a busy server gets its grace
        took = time.monotonic() - began
        assert r.reachable and r.engine_status == "ENGINE.BOOTING" and took < 3 + 8 + 1, took
        assert r.diagnosis[0].startswith("The server answered only after about") and "busy" in r.diagnosis[0]
        starting.join(10)
        server.state.engine_status = "ENGINE.OFFLINE"
        starting = post(server.url + "/start_engine")
        time.sleep(0.3)
        quick = status(url=server.url, timeout_s=1)  # a timeout the caller chose is kept exactly
        starting.join(10)
    assert quick.reachable is False and "within 1s" in quick.reason
    assert any("accepted the connection but gave no answer within 1s" in d and "alive but busy or stuck, not down"
               in d for d in quick.diagnosis)
    dead = status(url=f"http://127.0.0.1:{free_port_with_nothing_listening()}")
    assert dead.reachable is False and "connection refused" in dead.reason
    assert not any("busy" in d for d in dead.diagnosis) and any("Nothing answers" in d for d in dead.diagnosis)


def test_watch_rate_ignores_late_pushes_and_counts_the_end_of_a_step():
    def sample(t: float, completed: int, step: int | None, target: int = 40) -> WatchSample:
        return WatchSample(t_s=t, reachable=True, engine_status="ENGINE.ROLLING", global_step=step,
                           running_episodes=8, completed_episodes=completed, completed_episode_target=target)

    # 10 -> 20, a late push reads 18 (no reset), 30, then a new step: the old one ended at its target of 40
    series = [sample(0, 10, 3), sample(10, 20, 3), sample(20, 18, 3), sample(30, 30, 3), sample(40, 5, 4)]
    w = _watch_stats(series, 40.0)
    assert w.completions_per_minute == pytest.approx((10 + 0 + 10 + 10 + 5) * 60 / 40)
    # before the first update the step is null in every sample: still one step
    first = [sample(0, 3, None), sample(10, 2, None), sample(20, 9, None)]
    assert _watch_stats(first, 20.0).completions_per_minute == pytest.approx(6 * 60 / 20)


def test_a_watch_of_a_server_whose_counter_goes_back_within_a_step():
    counts = [10, 20, 18, 30]

    def push(index: int, state: SwarmState) -> None:
        state.completed_episodes = counts[min(index, len(counts) - 1)]

    with SwarmStandin(SwarmState(on_pool_read=push)) as server:
        r = status(url=server.url, watch_s=3, timeout_s=1)
    series = r.watch.series
    assert [s.completed_episodes for s in series] == counts
    assert r.watch.completions_per_minute == pytest.approx(20 * 60 / (series[-1].t_s - series[0].t_s), rel=1e-3)


def test_the_wording_fits_the_numbers():
    with SwarmStandin() as server:
        r = status(url=server.url, max_env_worker=128, num_repeat=4, train_batch_size=32)
        assert r.running_episodes == 0
        assert any(d.startswith("No episode is claimed although the engine allows 128") for d in r.diagnosis)
        assert not any("0 client(s)" in d for d in r.diagnosis)
        server.state.set_running(5)
        half = status(url=server.url, max_env_worker=12, num_repeat=2, train_batch_size=5)
        server.state.set_running(9)
        near = status(url=server.url, max_env_worker=12, num_repeat=2, train_batch_size=5)
    assert half.episode_cap.episode_cap == 10
    assert any("run 50% of what the engine allows" in d for d in half.diagnosis)
    assert not any("nearly saturate" in d for d in half.diagnosis)
    assert any("close to the cap (10, 90% of it)" in d and "nearly saturate" in d for d in near.diagnosis)


def test_the_servers_lifecycle_as_the_real_one_reports_it(tmp_path):
    """Before the first push, booting, after /stop_engine: what the real server sends, read without a wrong word."""
    state = SwarmState(engine_status="ENGINE.OFFLINE", global_step=None, experiment_dir=str(tmp_path / "exp"))
    with SwarmStandin(state) as server:
        post(server.url + "/start_engine").join(10)
        booting = status(url=server.url, max_env_worker=128, num_repeat=4, train_batch_size=32)
        doc = state.pool_doc()
        assert doc["running_episode_details"] is None and doc["sample_collection_method"] == ""
        assert isinstance(doc["booting_start_time"], float) and "engine_status_detail" not in state.engine_doc()
        assert {"completed_tasks_client_uuids", "training_model_path", "swarm_client_instruction"} <= set(doc)
        state.roll()
        rolling = status(url=server.url, max_env_worker=128, num_repeat=4, train_batch_size=32)
        state.pushed, state.global_step, state.completed_episodes = True, 1, 12
        state.set_running(16)
        post(server.url + "/stop_engine").join(10)
        stopped = status(url=server.url)
    assert booting.engine_status == "ENGINE.BOOTING" and booting.running_episodes == 0
    assert booting.sample_collection_method is None and booting.step_progress is None
    assert booting.completed_task_target == 0 and booting.episode_cap.bounds.train_batch_size == 128
    assert not any("given config" in d or "config says" in d for d in booting.diagnosis + rolling.diagnosis)
    assert any("ENGINE.BOOTING, not ROLLING" in d for d in booting.diagnosis)
    assert "no training step yet" in rolling.summary
    assert (stopped.engine_status, stopped.global_step, stopped.completed_episodes) == ("ENGINE.OFFLINE", 1, 12)
    assert stopped.running_episodes == 0 and stopped.experiment_dir == str(tmp_path / "exp")
