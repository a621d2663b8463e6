"""episode_cap: golden cases from the facts (section 3) through the domain function and the CLI."""

from __future__ import annotations

import pytest

from skill_server.agentjet.cap import EpisodeCapInput
from skill_server.app.table import get_tool
from skill_server.core.errors import ToolInputError
from skill_server.core.models import MAX_JSON_INT
from skill_server.tools.episode_cap.tool import compute_episode_cap
from tests.agentjet_fixtures import ROLLOUT_FLOOR, write_reference_checkout
from tests.conftest import call_cli


def cap(**kw):
    return compute_episode_cap(EpisodeCapInput(**kw))


def test_not_divisible_ceil_rule():
    r = cap(max_env_worker=128, num_repeat=6, train_batch_size=32, thread_rule="ceil")
    assert (r.episode_cap, r.worker_loops, r.divisible) == (128, 132, False)
    assert r.n_task == 22 and r.queued_loops == 4 and r.idle_threads == 0
    assert r.binding == ["max_env_worker"]
    assert r.bounds.train_batch_size == 192 and r.bounds.clients is None
    assert any("126 or 132" in s for s in r.suggestions)


def test_batch_size_binds():
    r = cap(max_env_worker=512, num_repeat=8, train_batch_size=32)
    assert r.episode_cap == 256 and r.worker_loops == 256
    assert r.binding == ["train_batch_size"] and r.divisible
    assert any("Raise train_batch_size to 64" in s for s in r.suggestions)


def test_floor_rule_leaves_remainder_idle():
    r = cap(max_env_worker=128, num_repeat=6, train_batch_size=32, thread_rule="floor")
    assert (r.episode_cap, r.worker_loops, r.idle_threads) == (126, 126, 2)
    # the rounding of max_env_worker to whole GRPO groups binds: max_env_worker is the knob (its own suggestion)
    assert r.binding == ["max_env_worker"] and r.bounds.max_env_worker_groups == 126
    assert any("2 pool threads stay idle" in s for s in r.suggestions)
    assert any(s.startswith("To lift the cap, raise max_env_worker") for s in r.suggestions)
    assert r.thread_rule == "floor" and r.thread_rule_source == "given (thread_rule=floor)"


def test_grpo_n_alias_and_the_bundled_rule():
    r = cap(max_env_worker=128, grpo_n=4)
    assert r.num_repeat == 4 and r.episode_cap == 128 and r.bounds.train_batch_size is None
    assert r.thread_rule == "ceil"
    assert r.thread_rule_source.startswith("AgentJet 0.1.0 (c68c154f): ceil() in rollout_swarm")
    assert (r.agentjet.source, r.agentjet.version, r.agentjet.commit[:8]) == ("bundled", "0.1.0", "c68c154f")
    assert "ceil rule: AgentJet 0.1.0 (c68c154f)" in r.explanation


def test_clients_bind_and_never_raise():
    low = cap(max_env_worker=128, num_repeat=4, train_batch_size=32, client_parallelism=[16, 16])
    assert low.episode_cap == 32 and low.binding == ["clients"] and low.engine_cap == 128
    assert not any(s.startswith("To lift the cap, raise max_env_worker") for s in low.suggestions)
    total = cap(max_env_worker=128, num_repeat=4, train_batch_size=32, client_parallelism=32)
    assert (total.episode_cap, total.binding, total.bounds.clients) == (32, ["clients"], 32)
    many = cap(max_env_worker=128, num_repeat=4, train_batch_size=32, client_parallelism=[64] * 10)
    assert many.episode_cap == 128 and many.bounds.clients == 640
    assert many.binding == ["max_env_worker", "train_batch_size"]  # 32 x 4 = 128 = the pool: both bind
    assert any("never raises the engine cap" in s for s in many.suggestions)
    tie = cap(max_env_worker=128, num_repeat=4, train_batch_size=32, client_parallelism=128)
    assert tie.binding == ["max_env_worker", "train_batch_size", "clients"]


def test_empty_client_list_is_refused_not_a_cap_of_zero():
    with pytest.raises(ToolInputError) as info:
        get_tool("episode_cap").validate({"max_env_worker": 128, "num_repeat": 4, "client_parallelism": []})
    assert info.value.field == "client_parallelism" and "empty list" in str(info.value)
    idle = cap(max_env_worker=128, num_repeat=4, client_parallelism=0)  # said on purpose: no client runs anything
    assert idle.episode_cap == 0 and idle.binding == ["clients"]


def test_integers_beyond_float_precision_are_exact():
    big = MAX_JSON_INT  # 2**53 - 1: a float would round the quotient and the products
    r = cap(max_env_worker=big, num_repeat=3, train_batch_size=big)
    assert r.n_task == -(-big // 3) and r.worker_loops == r.n_task * 3 and r.episode_cap == big
    assert r.queued_loops == r.n_task * 3 - big == 2 and not r.divisible
    assert r.bounds.train_batch_size == 3 * big  # above 2**53, still exact
    assert any(f"{(big // 3) * 3} or {r.n_task * 3}" in s for s in r.suggestions)
    even = cap(max_env_worker=big - 1, num_repeat=2, client_parallelism=[big, big])
    assert even.bounds.clients == 2 * big and even.episode_cap == big - 1 and even.divisible


def test_small_batch_bounds_cap():
    r = cap(max_env_worker=128, num_repeat=4, train_batch_size=8)
    assert r.episode_cap == 32 and r.binding == ["train_batch_size"] and r.idle_threads == 96


def test_tracker_threads_warning():
    r = cap(max_env_worker=128, num_repeat=6, train_batch_size=32, max_inference_tracker_threads=64)
    assert any("max_inference_tracker_threads=64 is below the cap (128)" in s for s in r.suggestions)
    quiet = cap(max_env_worker=128, num_repeat=4, max_inference_tracker_threads=256)
    assert not any("max_inference_tracker_threads" in s for s in quiet.suggestions)


def test_floor_rule_pool_smaller_than_group():
    r = cap(max_env_worker=3, num_repeat=4, thread_rule="floor")
    assert r.episode_cap == 0 and r.n_task == 0
    assert "refuses to start" in r.suggestions[0]
    ceil = cap(max_env_worker=3, num_repeat=4, thread_rule="ceil")
    assert ceil.episode_cap == 3 and ceil.worker_loops == 4


def test_auto_rule_read_from_an_install(tmp_path, monkeypatch):
    old = write_reference_checkout(tmp_path / "old", version="0.0.9", rollout=ROLLOUT_FLOOR)
    r = cap(max_env_worker=128, num_repeat=6, train_batch_size=32, agentjet_root=str(old))
    assert r.thread_rule == "floor" and r.episode_cap == 126 and "floor division (//)" in r.thread_rule_source
    assert r.agentjet.source == "install" and r.agentjet.version == "0.0.9" and r.agentjet.path == str(old.resolve())
    new = write_reference_checkout(tmp_path / "new")
    monkeypatch.setenv("AJET_ROOT", str(new))
    r = cap(max_env_worker=128, num_repeat=6, train_batch_size=32)
    assert r.thread_rule == "ceil" and "ceil() in rollout_swarm" in r.thread_rule_source
    assert r.agentjet.source == "install"
    given = cap(max_env_worker=128, num_repeat=6, thread_rule="floor", agentjet_version="c68c154")
    assert given.agentjet.source == "bundled" and given.thread_rule_source.startswith("given")


def test_install_without_a_rollout_rule_needs_thread_rule(tmp_path):
    root = write_reference_checkout(tmp_path / "aj", rollout=None)
    with pytest.raises(ToolInputError) as info:
        cap(max_env_worker=128, num_repeat=6, agentjet_root=str(root))
    assert info.value.field == "thread_rule" and "rule of AgentJet 0.1.0" in str(info.value)
    assert cap(max_env_worker=128, num_repeat=6, agentjet_root=str(root), thread_rule="ceil").episode_cap == 128


def test_install_without_swarm_support_is_refused(tmp_path):
    root = write_reference_checkout(tmp_path / "pre-swarm", version="0.0.1", swarm_default=False)
    with pytest.raises(ToolInputError) as info:
        cap(max_env_worker=128, num_repeat=6, agentjet_root=str(root))
    message = str(info.value)
    assert info.value.field == "agentjet_root" and "AgentJet 0.0.1" in message and "no swarm support" in message
    assert "ajet_swarm_default.yaml" in message


@pytest.mark.parametrize(
    "args, field",
    [
        ({"max_env_worker": 0, "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": -5, "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": 128, "num_repeat": 0}, "num_repeat"),
        ({"max_env_worker": "128", "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": 12.5, "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": True, "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": 128, "num_repeat": 4, "client_parallelism": [4, -1]}, "client_parallelism: entry 1"),
        ({"max_env_worker": 128, "num_repeat": 4, "client_parallelism": []}, "client_parallelism"),
        ({"max_env_worker": 128, "num_repeat": 4, "client_parallelism": "4"}, "client_parallelism"),
        ({"max_env_worker": 128, "num_repeat": 4, "client_parallelism": [True]}, "client_parallelism"),
        ({"max_env_worker": 2**53, "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": 10**400, "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": 128, "num_repeat": 4, "agentjet_version": "9.9.9"}, "agentjet_version"),
        ({"max_env_worker": 128, "num_repeat": 4, "thread_rule": "round"}, "thread_rule"),
        ({"max_env_worker": 128, "num_repeat": 4, "train_batch": 3}, "train_batch"),
        ({"max_env_worker": 128}, "num_repeat"),
        ({"max_env_worker": 128, "num_repeat": 4, "grpo_n": 8}, "grpo_n"),
        ({"max_env_worker": 128, "num_repeat": 4, "agentjet_root": "/nonexistent/ajet"}, "agentjet_root"),
    ],
)
def test_bad_input_names_the_field(args, field):
    code, out, err = call_cli("episode_cap", args)
    assert code == 1 and out is None
    assert err.count("\n") == 1 and field in err, err


def test_cli_golden_cases_and_pairs():
    code, out, _ = call_cli("episode_cap", {"max_env_worker": 128, "num_repeat": 6, "train_batch_size": 32})
    assert code == 0 and out["episode_cap"] == 128 and out["worker_loops"] == 132 and out["divisible"] is False
    code, out, _ = call_cli("episode_cap", {"max_env_worker": 512, "grpo_n": 8, "train_batch_size": 32})
    assert code == 0 and out["episode_cap"] == 256 and out["binding"] == ["train_batch_size"]
    from tests.conftest import run_cli
    proc = run_cli("call", "episode_cap", "max_env_worker=128", "num_repeat=6", "train_batch_size=32",
                   "thread_rule=floor")
    assert proc.returncode == 0 and '"episode_cap":126' in proc.stdout


def test_the_cli_path_stays_light():
    """episode_cap reads only the release's small release.json: no YAML layers, not even the yaml module."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO, cli_env

    code = ("import sys, io, contextlib, json; from skill_server.app import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    cli.main(['call', 'episode_cap', 'max_env_worker=128', 'num_repeat=6'])\n"
            "from skill_server.agentjet.release import newest_bundled\n"
            "sys.stdout.write(json.dumps(['yaml' in sys.modules, newest_bundled()._files is None]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env(),
                          timeout=60, check=False)
    assert json.loads(proc.stdout) == [False, True], proc.stderr


def test_every_suggested_setting_fills_the_pool_with_no_loop_waiting():
    """The settings every cap fix suggests are balanced under both thread rules: cap = pool, nothing queued or idle."""
    from skill_server.agentjet.cap import balanced_settings

    for mew in range(1, 37):
        for n in range(1, 8):
            for tbs in (None, *range(1, 9)):
                for b in balanced_settings(mew, n, tbs):
                    batch = b.train_batch_size or tbs
                    for rule in ("ceil", "floor"):
                        r = cap(max_env_worker=b.max_env_worker, num_repeat=n, train_batch_size=batch, thread_rule=rule)
                        assert (r.queued_loops, r.idle_threads, r.episode_cap) == (0, 0, b.max_env_worker), \
                            (mew, n, tbs, b, rule)


def test_a_batch_bound_pool_that_is_not_a_multiple_gets_one_consistent_fix():
    """128 threads, groups of 6, batch 16: 96 loops, none queued. Raising the batch alone to 22 would queue 4."""
    r = cap(max_env_worker=128, num_repeat=6, train_batch_size=16)
    assert (r.episode_cap, r.queued_loops, r.binding) == (96, 0, ["train_batch_size"])
    text = " ".join(r.suggestions)
    assert "Raise train_batch_size to 21 and set max_env_worker to 126" in text and "lower max_env_worker to 96" in text
    assert "22" not in text and "wait in the queue" not in text
    assert "job the client syncs to the engine" in text and "not in the engine's yaml_backup.yaml" in text


def test_the_first_suggestion_reaches_the_clients_concurrency():
    """Clients [64, 64, 64] against a cap of 96: the first suggestion reaches 192, not the 126 of the pool."""
    r = cap(max_env_worker=128, num_repeat=6, train_batch_size=16, client_parallelism=[64, 64, 64])
    assert (r.engine_cap, r.episode_cap) == (96, 96)
    plan = r.plan
    assert plan is not None and (plan.target, plan.aim, plan.reaches, plan.episode_cap) == (192, "clients", True, 192)
    assert {c.name: (c.value, c.was) for c in plan.changes} == {"max_env_worker": (192, 128),
                                                                "train_batch_size": (32, 16)}
    first = r.suggestions[0]
    assert first.startswith("To run 192 episodes at once (the clients' concurrency): set max_env_worker 192 (now "
                            "128) and train_batch_size 32 (now 16), with num_repeat 6") and "= 192" in first
    assert "For 192 at once (the clients): max_env_worker 192 and train_batch_size 32 (cap 192)" in r.summary
    # what the first suggestion asks for, given back to the tool, gives that cap
    again = cap(max_env_worker=192, num_repeat=6, train_batch_size=32, client_parallelism=[64, 64, 64])
    assert again.episode_cap == 192 and again.plan is None


@pytest.mark.parametrize(("kw", "changes", "capped"), [
    # already there: no change
    ({"max_env_worker": 128, "num_repeat": 4, "train_batch_size": 32, "target": 100}, {}, 128),
    # a target that is no multiple of the group size: the pool in whole groups (304, not 300)
    ({"max_env_worker": 64, "num_repeat": 8, "train_batch_size": 32, "target": 300,
      "max_inference_tracker_threads": 64},
     {"max_env_worker": 304, "train_batch_size": 38, "max_inference_tracker_threads": 304}, 304),
    # a wide enough pool: only the batch moves
    ({"max_env_worker": 512, "num_repeat": 8, "train_batch_size": 32, "target": 512}, {"train_batch_size": 64}, 512),
    # no batch given (unbounded): only the pool moves
    ({"max_env_worker": 64, "num_repeat": 4, "target": 200}, {"max_env_worker": 200}, 200),
    # floor rule: a pool that is no multiple loses its partial group, so it must grow to whole groups
    ({"max_env_worker": 130, "num_repeat": 6, "train_batch_size": 32, "target": 130, "thread_rule": "floor"},
     {"max_env_worker": 132}, 132),
])
def test_a_target_gets_the_fewest_changes_checked_by_the_same_arithmetic(kw, changes, capped):
    r = cap(**kw)
    assert r.plan is not None and {c.name: c.value for c in r.plan.changes} == changes
    assert r.plan.episode_cap == capped and r.plan.reaches and r.suggestions[0].startswith(
        "The engine already allows" if not changes else "To run")
    settings = {k: v for k, v in kw.items() if k in ("max_env_worker", "num_repeat", "train_batch_size",
                                                    "thread_rule")}
    settings.update({k: v for k, v in changes.items() if k != "max_inference_tracker_threads"})
    assert cap(**settings).engine_cap == capped  # the plan's cap is the cap of its settings


def test_every_plan_reaches_its_target_under_both_rules():
    for mew in (1, 7, 64, 96, 128):
        for n in (1, 4, 6, 8):
            for tbs in (None, 1, 16, 32):
                for target in (1, 50, 96, 192, 257):
                    for rule in ("ceil", "floor"):
                        r = cap(max_env_worker=mew, num_repeat=n, train_batch_size=tbs, target=target,
                                thread_rule=rule)
                        assert r.plan is not None and r.plan.reaches, (mew, n, tbs, target, rule)
                        values = {"max_env_worker": mew, "train_batch_size": tbs}
                        values.update({c.name: c.value for c in r.plan.changes
                                       if c.name != "max_inference_tracker_threads"})
                        got = cap(num_repeat=n, thread_rule=rule, **values)
                        assert got.engine_cap == r.plan.episode_cap >= target, (mew, n, tbs, target, rule)


def test_a_script_sizes_the_planned_batch_for_its_gpus(tmp_path):
    script = tmp_path / "client.py"
    script.write_text("from ajet.copilot.job import AgentJetJob\n"
                      "job = AgentJetJob(num_repeat=6, batch_size=16, max_env_worker=96, n_gpu=8)\n")
    r = compute_episode_cap(get_tool("episode_cap").input_type(script=str(script), target=150))
    # 150 -> 25 groups of 6 (cap 150), but 25 x 6 is no multiple of 8 GPUs: the batch goes to 28 (168)
    assert {c.name: c.value for c in r.plan.changes} == {"max_env_worker": 150, "train_batch_size": 28}
    assert r.plan.episode_cap == 150
