"""episode_cap: golden cases from the facts (section 3) through the domain function and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from skill_server.cap import EpisodeCapInput, compute_episode_cap
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
    assert r.binding == []  # the GRPO-group rounding binds, not one of the three bounds
    assert r.thread_rule == "floor" and r.thread_rule_source == "given"


def test_grpo_n_alias_and_defaults():
    r = cap(max_env_worker=128, grpo_n=4)
    assert r.num_repeat == 4 and r.episode_cap == 128 and r.bounds.train_batch_size is None
    assert r.thread_rule == "ceil" and r.thread_rule_source.startswith("default ceil")


def test_clients_bind_and_never_raise():
    low = cap(max_env_worker=128, num_repeat=4, train_batch_size=32, client_parallelism=[16, 16])
    assert low.episode_cap == 32 and low.binding == ["clients"] and low.engine_cap == 128
    many = cap(max_env_worker=128, num_repeat=4, train_batch_size=32, client_parallelism=[64] * 10)
    assert many.episode_cap == 128 and many.bounds.clients == 640
    assert any("never raises the engine cap" in s for s in many.suggestions)


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


def _fake_rollout(root: Path, body: str) -> Path:
    pkg = root / "ajet" / "task_rollout"
    pkg.mkdir(parents=True)
    (root / "ajet" / "__init__.py").write_text('__version__ = "0.0.9"\n')
    (pkg / "native_parallel_worker.py").write_text(
        "import math\n\nclass W:\n    def rollout_swarm(self, tasks, mode, epoch):\n"
        f"        n_task = {body}\n        return n_task\n"
    )
    return root


def test_auto_rule_detected_from_install(tmp_path, monkeypatch):
    old = _fake_rollout(tmp_path / "old", "min(len(tasks), self.max_parallel // self.rollout_n)")
    r = cap(max_env_worker=128, num_repeat=6, train_batch_size=32, agentjet_root=str(old))
    assert r.thread_rule == "floor" and r.episode_cap == 126 and "floor division" in r.thread_rule_source
    new = _fake_rollout(tmp_path / "new", "min(len(tasks), math.ceil(self.max_parallel / self.rollout_n))")
    monkeypatch.setenv("AJET_ROOT", str(new))
    r = cap(max_env_worker=128, num_repeat=6, train_batch_size=32)
    assert r.thread_rule == "ceil" and "ceil()" in r.thread_rule_source


@pytest.mark.parametrize(
    "args, field",
    [
        ({"max_env_worker": 0, "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": -5, "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": 128, "num_repeat": 0}, "num_repeat"),
        ({"max_env_worker": "128", "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": 12.5, "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": True, "num_repeat": 4}, "max_env_worker"),
        ({"max_env_worker": 128, "num_repeat": 4, "client_parallelism": [4, -1]}, "client_parallelism.1"),
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
    proc = run_cli("call", "episode_cap", "max_env_worker=128", "num_repeat=6", "train_batch_size=32", "thread_rule=floor")
    assert proc.returncode == 0 and '"episode_cap":126' in proc.stdout
