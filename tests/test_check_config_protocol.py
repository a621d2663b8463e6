"""The swarm client's own side, read statically: the episode protocol on every path, the pool that runs the
episodes (and its bound folded into the cap, with its line), engine-control calls, per-episode timeouts."""

from __future__ import annotations

import textwrap

import pytest

from skill_server.analysis.script import scan_script
from tests.lint_helpers import lint, only, rules, skipped, write

HEAD = textwrap.dedent("""\
    import os, subprocess
    from concurrent.futures import ThreadPoolExecutor
    from ajet.copilot.job import AgentJetJob
    from ajet.tuner_lib.experimental.swarm_client import SwarmClient
    from ajet.utils.thread_executors import PeriodicDrainThreadPoolExecutor
    from agent import run
    c = SwarmClient("http://localhost:10086")
    job = AgentJetJob(num_repeat=4, batch_size=64, max_env_worker=256)
    """)  # 8 lines: the engine's cap is 256


def scan(tmp_path, body: str):
    path = write(tmp_path, "client.py", HEAD + textwrap.dedent(body))
    protocol = scan_script(path).episodes
    assert protocol is not None
    return protocol


def leaks(tmp_path, body: str) -> list[tuple[str, int, int, str, int | None]]:
    return [(x.function, x.begin_line, x.line, x.path, x.raised_at) for x in scan(tmp_path, body).leaks]


@pytest.mark.parametrize(("body", "found"), [
    # every path ends or aborts: nothing
    ("""
     def rollout(task):
         uuid, key = c.begin_episode()
         try:
             out = run(key)
         except Exception:
             c.abort_episode(uuid)
             raise
         c.end_episode(task, uuid, out)
     """, []),
    ("""
     def rollout(task):
         uuid, key = c.begin_episode()
         try:
             c.end_episode(task, uuid, run(key))
         finally:
             pass
     """, [("rollout", 11, 13, "exception", None)]),  # the run inside end_episode's arguments raises first
    ("""
     def rollout(task):
         uuid, key = c.begin_episode()
         ok = False
         try:
             out = run(key)
             ok = True
         finally:
             if not ok:
                 c.abort_episode(uuid)
         c.end_episode(task, uuid, out)
     """, []),  # a finally that aborts covers the exception path
    # AgentJet's tutorial shape: except: pass swallows the exception with the episode claimed
    ("""
     def rollout(task):
         try:
             uuid, key = c.begin_episode()
             out = run(key)
             c.end_episode(task, uuid, out)
         except:
             pass
     """, [("rollout", 12, 16, "exception", 13)]),
    # an early return, and the end of the function, with the episode open
    ("""
     def rollout(task):
         uuid, key = c.begin_episode()
         if task is None:
             return None
         c.end_episode(task, uuid, None)
     """, [("rollout", 11, 13, "return", None)]),
    ("""
     def rollout(task):
         uuid, key = c.begin_episode()
         if task:
             c.end_episode(task, uuid, None)
     """, [("rollout", 11, 13, "end", None)]),
    # a loop that claims again after a continue that skipped the end
    ("""
     def loop(tasks):
         for task in tasks:
             uuid, key = c.begin_episode()
             if not task:
                 continue
             c.end_episode(task, uuid, None)
     """, [("loop", 12, 12, "again", None), ("loop", 12, 15, "end", None)]),
    # a helper of the script that aborts counts as closing; a wrapper that returns the claim is a begin
    ("""
     def give_back(uuid):
         c.abort_episode(uuid)

     def claim():
         return c.begin_episode()

     def rollout(task):
         uuid, key = claim()
         try:
             out = run(key)
         except Exception:
             give_back(uuid)
             raise
         c.end_episode(task, uuid, out)
     """, []),
    # an except clause for one exception type lets the others through
    ("""
     def rollout(task):
         uuid, key = c.begin_episode()
         try:
             out = run(key)
         except ValueError:
             c.abort_episode(uuid)
             return
         c.end_episode(task, uuid, out)
     """, [("rollout", 11, 13, "exception", None)]),
])
def test_the_flow_of_an_episode_on_every_path(tmp_path, body, found):
    assert leaks(tmp_path, body) == found


def test_an_episode_id_handed_to_unread_code_is_not_judged_but_said(tmp_path):
    body = """
    from agent import finish
    def rollout(task):
        uuid, key = c.begin_episode()
        finish(c, uuid)
    """
    protocol = scan(tmp_path, body)
    assert protocol.leaks == [] and [(h.function, h.callee) for h in protocol.handoffs] == [("rollout", "finish")]
    r = lint(tmp_path / "client.py")
    assert "episode-not-ended" not in rules(r) and "finish()" in skipped(r)["episode-not-ended"][0]


def test_findings_name_the_lines_and_the_fix_aborts(tmp_path):
    write(tmp_path, "client.py", HEAD + textwrap.dedent("""\
        def rollout(task):
            try:
                uuid, key = c.begin_episode()
                c.end_episode(task, uuid, run(key))
            except Exception:
                pass
        """))
    f = only(lint(tmp_path / "client.py"), "episode-leaks-on-exception")
    assert [loc.line for loc in f.locations] == [11, 12] and "abort_episode(episode_uuid)" in f.fix
    assert f.values == {"function": "rollout", "begin_line": 11, "raised_at": 12}


POOLS = """
def rollout(task):
    uuid, key = c.begin_episode()
    try:
        out = run(key)
    except Exception:
        c.abort_episode(uuid)
        raise
    c.end_episode(task, uuid, out)

def log(x):
    print(x)

episodes = PeriodicDrainThreadPoolExecutor(workers=512, max_parallel=128)
side = ThreadPoolExecutor(max_workers=4)
for t in range(10):
    episodes.submit(rollout, t)
    side.submit(log, t)
"""


def test_the_pool_that_runs_episodes_bounds_the_cap_with_its_line(tmp_path):
    protocol = scan(tmp_path, POOLS)
    assert protocol.pool_roles == {22: "episodes", 23: "other"}
    r = lint(tmp_path / "client.py")
    e = r.effective
    assert (e.engine_cap.value, e.client_parallelism.value, e.episode_cap.value) == (256, 128, 128)
    assert e.episode_cap.location.line == 22 and "the client binds" in e.episode_cap.note
    assert "each thread runs one episode at a time" in e.client_parallelism.assumes
    info = only(r, "clients-bind-cap")
    assert info.severity == "info" and info.location.endswith("client.py:22") and "256" in info.message
    compact = lint(tmp_path / "client.py", detail="compact")
    assert (compact.values["episode_cap"], compact.values["engine_cap"], compact.values["client_parallelism"]) == \
        (128, 256, 128)


def test_several_pools_that_run_episodes_leave_the_bound_unknown_and_said(tmp_path):
    write(tmp_path, "client.py", HEAD + POOLS.replace("side.submit(log, t)", "side.submit(rollout, t)"))
    r = lint(tmp_path / "client.py")
    assert r.effective.client_parallelism.value is None and r.effective.episode_cap.value == 256
    why = r.effective.client_parallelism.unresolved
    assert "2 thread pools that run episodes (line 22: 128; line 23: 4) (together at most 132)" in why
    assert any("client's own concurrency is unknown" in s for s in skipped(r)["clients-bind-cap"])


def test_a_pool_far_above_the_cap_is_a_warning(tmp_path):
    write(tmp_path, "client.py", HEAD + POOLS.replace("max_parallel=128", "max_parallel=1024").replace(
        "workers=512", "workers=1024"))
    f = only(lint(tmp_path / "client.py"), "client-pool-over-cap")
    assert f.values == {"client_parallelism": 1024, "engine_cap": 256} and "target=1024" in f.fix


def test_engine_control_and_timeouts(tmp_path):
    write(tmp_path, "client.py", HEAD + textwrap.dedent("""\
        c.auto_sync_train_config_and_start_engine(job, force_restart=os.environ.get("FORCE") == "1")

        def agent(key):
            return subprocess.run(["agent", key], timeout=900)

        def rollout(task):
            uuid, key = c.begin_episode(discard_episode_timeout=300)
            try:
                out = agent(key)
            except Exception:
                c.abort_episode(uuid)
                raise
            c.end_episode(task, uuid, out)

        def unrelated():
            return subprocess.run(["ls"], timeout=5000)

        c.stop_engine()
        """))
    r = lint(tmp_path / "client.py")
    control = [f for f in r.findings if f.rule == "engine-control-in-client"]
    assert [f.locations[0].line for f in control] == [9, 26]
    assert "when environment variable FORCE is set" in control[0].message
    timeout = only(r, "discard-timeout-below-episode-timeout")  # the 5000 s of unrelated() bounds no episode
    assert timeout.values == {"discard_episode_timeout": 300, "client_timeout": 900, "claims": [15]}
    assert "discard_episode_timeout=960" in timeout.fix
