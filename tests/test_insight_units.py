"""Watching runs, the parts that need no tmux: step lines, progress, metric history, config, checkpoints, plots."""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

import pytest

from skill_server.core.errors import ToolFailure
from skill_server.core.jsonsafe import json_number
from skill_server.core.models import ImageAttachment, ToolOutput, attached_images
from skill_server.experiments import history, logs, plots, progress, runconfig
from skill_server.experiments.observe import first_step_pattern
from skill_server.experiments.progress import ProgressState, StepLine
from skill_server.experiments.spec import RunSpec
from skill_server.experiments.store import Row, open_registry
from skill_server.hosts.agent import ops as agent
from skill_server.tools.compare_experiments.tool import config_differences, stats
from tests.png_helpers import decode_png, has_colour

STEP = ("(TaskRunner pid=48213) step:{n} - critic/llm_call_cnt:4.0 - critic/real_reward:{r} - actor/entropy:1.4 - "
        "actor/pg_loss:-0.0041 - actor/grad_norm:0.71 - training/global_step:{n} - training/epoch:0 - "
        "critic/score/mean:{r} - timing_s/gen:2.1 - timing_s/step:{t} - perf/throughput:812.5")


def step(n: int, reward: float = 0.5, t: float = 3.0) -> str:
    return STEP.format(n=n, r=reward, t=t)


def scan(text: str, state: logs.ScanState | None = None, pattern: re.Pattern[str] | None = None,
         now: float = 100.0, role: str = "main") -> tuple[logs.ScanState, list[StepLine]]:
    state = state or logs.ScanState(offsets=[0])
    return state, logs.scan_text(text, state, pattern, role=role, now=now)


# ---- steps are steps


def test_first_step_is_the_first_step_line_without_kl_loss():
    state, lines = scan("Changed engine status to ENGINE.ROLLING\n" + step(1) + "\n")
    assert state.first_step_seen and state.first_step == 1 and state.first_step_at == 100.0
    assert [line.step for line in lines] == [1] and "actor/kl_loss" not in lines[0].metrics
    assert state.global_step == 1 and state.last_metrics["critic/real_reward"] == 0.5


def test_validation_step_zero_is_not_the_first_training_step():
    state, lines = scan("(TaskRunner pid=1) step:0 - val-core/math/reward/mean@4:0.05\n")
    assert [line.step for line in lines] == [0] and not state.first_step_seen
    scan(step(1) + "\n", state)
    assert state.first_step_seen and state.first_step == 1


def test_first_step_pattern_is_an_override_and_the_legacy_default_is_not():
    state, _ = scan(step(1) + "\n", pattern=re.compile(r"^EPOCH 1 DONE$", re.M))
    assert not state.first_step_seen and state.global_step == 1
    scan("EPOCH 1 DONE\n", state, pattern=re.compile(r"^EPOCH 1 DONE$", re.M), now=150.0)
    assert state.first_step_seen and state.first_step_at == 150.0

    def row(pattern: object) -> Row:
        return Row("x", "s", "sock", 0.0, "", RunSpec.from_json({"first_step_pattern": pattern, "processes": []}),
                   None, None, None, None, "", {}, 0, 0)

    assert first_step_pattern(row(logs.LEGACY_FIRST_STEP_PATTERN)) is None  # runs launched before this change
    assert first_step_pattern(row(None)) is None and first_step_pattern(row("(")) is None
    assert first_step_pattern(row(r"EPOCH \d")).pattern == r"EPOCH \d"


def test_a_line_matching_twice_counts_once():
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    state, _ = scan("Traceback (most recent call last):\n" + oom)
    assert state.errors["cuda_oom"]["count"] == 1 and state.errors["python_exception"]["count"] == 1
    scan(oom + "ok\n" + oom, state)
    assert state.errors["cuda_oom"]["count"] == 3
    count, last = logs.count_matching_lines(re.compile("a", re.M), "aaa\nbab\nccc\na")
    assert (count, last) == (3, 12)


def test_a_tqdm_redraw_does_not_hide_the_next_step_line():
    text = step(1) + "\n\rTraining Progress:  10%|#         | 1/10 [00:03<00:27, 3.00s/it]" + step(2) + "\n"
    state, lines = scan(text)
    assert [line.step for line in lines] == [1, 2]
    assert state.progress.tqdm_total == 10 and state.progress.tqdm_rate_s == 3.0


# ---- progress


def test_seconds_per_step_prefers_timing_then_tqdm_then_observed():
    state = ProgressState()
    progress.fold(state, [StepLine(1, {"timing_s/step": 3.0}, "m"), StepLine(2, {"timing_s/step": 5.0}, "m"),
                          StepLine(3, {"timing_s/step": 4.0}, "m")], "", 10.0)
    est = progress.estimate(state, 3, 10, "ajet.trainer_common.total_training_steps in x.yaml", finished=False)
    assert est.seconds_per_step == 4.0 and "timing_s/step" in est.seconds_per_step_source
    assert est.total_steps == 10 and est.total_steps_source.startswith("ajet.trainer_common")
    assert est.eta_s == 28.0 and est.steps_per_hour == 900.0 and est.unknown == {}

    tq = ProgressState()
    progress.fold(tq, [], "\rTraining Progress:  40%|####      | 4/10 [00:01<00:02, 2.50it/s]", 10.0)
    est = progress.estimate(tq, 4, 99, "config", finished=False)
    assert est.seconds_per_step == 0.4 and "Training Progress" in est.seconds_per_step_source
    assert est.total_steps == 10 and "log" in est.total_steps_source  # the bar's total wins over the config

    seen = ProgressState()
    progress.fold(seen, [StepLine(s, {}, "m") for s in (1, 2, 3)], "", 1000.0)
    assert progress.estimate(seen, 3, None, None, finished=False).seconds_per_step is None
    progress.fold(seen, [StepLine(4, {}, "m"), StepLine(5, {}, "m")], "", 1060.0)
    est = progress.estimate(seen, 5, None, None, finished=False)
    assert est.seconds_per_step == 30.0 and est.seconds_per_step_source.startswith("observed")
    assert est.total_steps is None and "total_training_steps" in est.unknown["total_steps"]
    assert "total_steps" in est.unknown["eta_s"]


def test_a_restart_is_recorded_and_restarts_the_rate():
    state = ProgressState()
    progress.fold(state, [StepLine(s, {"timing_s/step": 9.0}, "m") for s in range(1, 61)], "", 10.0)
    progress.fold(state, [StepLine(41, {"timing_s/step": 2.0}, "m"), StepLine(42, {}, "m")], "", 20.0)
    assert state.restarts == [{"role": "m", "from_step": 60, "to_step": 41, "seen_at": 20.0}]
    assert state.step_times == [2.0] and state.batches == [[20.0, 42]]
    est = progress.estimate(state, 42, 100, "cfg", finished=True)
    assert est.eta_s is None and est.unknown["eta_s"] == "the run has ended"
    assert ProgressState.from_json(state.to_json()) == state
    assert ProgressState.from_json({"batches": [["x", 1]], "step_times": [-1, "a"], "tqdm_total": 2**80}) == \
        ProgressState()


def test_scan_state_round_trips_and_drops_damage():
    state, _ = scan(step(3) + "\n")
    again = logs.ScanState.from_json(state.to_json(), 1)
    assert again.to_json() == state.to_json()
    broken = logs.ScanState.from_json({"offsets": [5], "first_step": "x", "points_seq": -4, "progress": [1]}, 1)
    assert broken.offsets == [5] and broken.first_step is None and broken.points_seq == 0


# ---- metric history


def _row(reg, exp_id: str = "run-1") -> int:
    reg.insert(id=exp_id, session="s", socket="sock", created=0.0, started_at="",
               spec=RunSpec.from_json({"processes": [{"role": "main", "log_path": "/x.log"}], "run_dir": "/r"}))
    return reg.get(exp_id).scan_version


def test_history_is_stored_with_the_scan_state_and_merged_by_step():
    with open_registry() as reg:
        version = _row(reg)
        first = [StepLine(s, {"m": float(s), "loss": 1.0 / s}, "main") for s in range(1, 61)]
        assert history.save_scan_and_points(reg, "run-1", {"points_seq": 60}, version, first, 0)
        # a racing caller that scanned the same bytes stores nothing
        assert not history.save_scan_and_points(reg, "run-1", {}, version, first, 0)
        resumed = [StepLine(s, {"m": -float(s), "nan": float("nan")}, "main") for s in range(41, 71)]
        assert history.save_scan_and_points(reg, "run-1", {}, version + 1, resumed, 60)
        series = history.read_series(reg, "run-1", "m")
        assert series.steps == list(range(1, 71))
        assert series.values[:40] == [float(s) for s in range(1, 41)]
        assert series.values[40:] == [-float(s) for s in range(41, 71)]  # the newest line of a step wins
        assert history.read_series(reg, "run-1", "nan").values == [None] * 30
        ranged = history.read_series(reg, "run-1", "loss", 10, 12)
        assert ranged.steps == [10, 11, 12]
        assert history.metric_names(reg, "run-1") == ["loss", "m", "nan"]
        view = history.history_view(reg, ["run-1"], ["l*", "nope/*"], None, None, 200, restarts=1)
        assert [s.name for s in view.series] == ["loss"] and view.unmatched == ["nope/*"]
        assert view.available == ["loss", "m", "nan"] and "went back 1 time" in view.note


def test_downsampling_keeps_spikes_and_the_last_step():
    values: list[float | None] = [0.5] * 10_000
    values[4321] = 99.0
    values[777] = -5.0
    series = history.Series("m", list(range(10_000)), values)
    d = history.downsample(series, 200)
    assert len(d.steps) == 200 and d.points == 10_000 and d.steps[-1] == 9999
    assert max(v for v in d.max if v is not None) == 99.0 and min(v for v in d.min if v is not None) == -5.0
    assert all(v == 0.5 for v in d.last)
    small = history.downsample(history.Series("m", [1, 2, 3], [1.0, None, 3.0]), 200)
    assert small.steps == [1, 2, 3] and small.last == [1.0, None, 3.0] and small.min == [1.0, None, 3.0]
    assert history.match_names(["a/x", "a/y", "b"], ["a/*", "b", "c"]) == (["a/x", "a/y", "b"], ["c"])


def test_history_bounds_names_per_run():
    with open_registry() as reg:
        version = _row(reg)
        wide = [StepLine(1, {f"k{i}": 1.0 for i in range(history.MAX_SERIES_PER_RUN + 50)} | {"x" * 300: 1.0}, "m")]
        assert history.save_scan_and_points(reg, "run-1", {}, version, wide, 0)
        assert len(history.metric_names(reg, "run-1")) == history.MAX_SERIES_PER_RUN


# ---- the run's YAML


def test_conf_arguments_and_config_summaries(tmp_path: Path):
    assert runconfig.conf_arguments("cd /w && python -m ajet.launcher --conf exp.yaml --autokill; echo") == ["exp.yaml"]
    assert runconfig.conf_arguments("x --conf='my exp.yaml'") == ["my exp.yaml"]
    assert runconfig.conf_arguments("x 'unterminated") == []
    cand = runconfig.Candidate("local", "/w/exp.yaml", "/w")
    full = {"ajet": {"project_name": "p", "experiment_name": "e",
                     "trainer_common": {"total_training_steps": 200, "checkpoint_base_dir": "./ckpt"}}}
    out = runconfig.summarise(cand, full)
    assert out["total_steps"] == 200 and out["checkpoint_dir"] == "/w/ckpt/p/e"
    assert "ajet.project_name" in out["checkpoint_source"]
    default = runconfig.summarise(cand, {"ajet": {"trainer_common": {"total_training_steps": None}}})
    assert "total_steps" not in default and default["checkpoint_dir"] == "/w/saved_checkpoints/ajet_default_project"
    assert "c68c154f" in default["checkpoint_source"] and "other experiments" in default["checkpoint_note"]
    # the experiment's own folder when the YAML names it, even without a project (AgentJet's default project)
    named = runconfig.summarise(cand, {"ajet": {"experiment_name": "night_a"}})
    assert named["checkpoint_dir"] == "/w/saved_checkpoints/ajet_default_project/night_a"
    assert "project_name ajet_default_project" in named["checkpoint_source"] and "checkpoint_note" not in named
    verl = runconfig.summarise(cand, {"trainer": {"default_local_dir": "${trainer.x}/y", "total_training_steps": 7}})
    assert verl["total_steps"] == 7 and "checkpoint_dir" not in verl  # an unresolved interpolation is not a path
    dumped = {"trainer": {"default_local_dir": "${trainer.checkpoint_base_dir}/${trainer.project_name}/"
                          "${trainer.experiment_name}", "checkpoint_base_dir": "/ck", "project_name": "p",
                          "experiment_name": "e"}}
    assert runconfig.summarise(cand, dumped)["checkpoint_dir"] == "/ck/p/e"  # a dump's interpolation, resolved
    assert runconfig.summarise(cand, {"trainer": {"default_local_dir": "/ck"}})["checkpoint_dir"] == "/ck"


def test_default_checkpoint_base_follows_the_bundled_agentjet(monkeypatch: pytest.MonkeyPatch):
    """The fallback base is read from the newest bundled release, so bundling the next one updates it."""
    from types import SimpleNamespace

    from skill_server.agentjet import release

    layers = {runconfig.AGENTJET_DEFAULT_LAYER: SimpleNamespace(data={"ajet": {"trainer_common": {
        "checkpoint_base_dir": "/data/ckpts"}}})}
    newer = SimpleNamespace(label="AgentJet 9.9.9 (abcdef12)", config_file=layers.get)
    monkeypatch.setattr(release, "newest_bundled", lambda: newer)
    cand = runconfig.Candidate("node1", "/w/exp.yaml", "/w")
    out = runconfig.summarise(cand, {"ajet": {"project_name": "p", "experiment_name": "e"}})
    assert out["checkpoint_dir"] == "/data/ckpts/p/e" and "AgentJet 9.9.9 (abcdef12)" in out["checkpoint_source"]
    layers.clear()  # a release whose defaults name no base: the directory is unknown, not guessed
    assert "checkpoint_dir" not in runconfig.summarise(cand, {"ajet": {"project_name": "p"}})


def test_flatten_and_config_differences():
    a = runconfig.flatten({"ajet": {"lr": 1e-6, "rollout": {"n": 4}, "tags": [1, 2]}, "same": "x"})
    b = runconfig.flatten({"ajet": {"lr": 3e-6, "rollout": {"n": 4}}, "same": "x"})
    assert a == {"ajet.lr": 1e-6, "ajet.rollout.n": 4, "ajet.tags": [1, 2], "same": "x"}
    diffs, total = config_differences([a, None, b], 10)
    assert total == 2 and [d.key for d in diffs] == ["ajet.lr", "ajet.tags"]
    assert diffs[0].values == [1e-6, None, 3e-6] and diffs[1].values == ["[1, 2]", None, "(absent)"]
    assert config_differences([a, None], 10) == ([], 0)
    assert len(config_differences([{f"k{i}": i for i in range(100)}, {}], 5)[0]) == 5


def test_stats_direction_and_last_k():
    series = history.Series("actor/pg_loss", [1, 2, 3, 4], [0.5, 0.1, None, 0.3])
    s = stats(series, 2, lower=True)
    assert (s.n, s.final, s.final_step, s.best, s.best_step) == (3, 0.3, 4, 0.1, 2)
    assert s.last_k_mean == pytest.approx(0.2)
    assert stats(history.Series("m", [], []), 5, lower=False).final is None


# ---- checkpoints on a host (the agent's bounded walk)


def test_checkpoint_walk_is_bounded_and_never_follows_links(tmp_path: Path):
    base = tmp_path / "ckpt"
    for n in (5, 10, 15):
        d = base / "proj" / "exp" / f"global_step_{n}" / "actor"
        d.mkdir(parents=True)
        (d / "model.pt").write_bytes(b"\0" * n)
    (base / "proj" / "exp" / "latest_checkpointed_iteration.txt").write_text("15")
    outside = tmp_path / "outside" / "global_step_99"
    outside.mkdir(parents=True)
    (base / "link").symlink_to(tmp_path / "outside")
    (base / "global_step_x").mkdir()

    def walk(path: Path, **kw: object) -> dict:
        request = {"v": agent.PROTOCOL_VERSION, "ops": [{"op": "checkpoints", "path": str(path), **kw}]}
        return agent.handle(request)["results"][0]

    found = walk(base)
    assert [c["step"] for c in found["checkpoints"]] == [5, 10, 15] and not found["truncated"]
    assert found["checkpoints"][0]["size"] == 5 and found["checkpoints"][0]["files"] == 1
    assert walk(base / "proj" / "exp")["latest"] == 15 and found["latest"] is None
    assert walk(base, limit=2)["more"] == 1 and [c["step"] for c in walk(base, limit=2)["checkpoints"]] == [10, 15]
    tight = walk(base, max_entries=4)
    assert tight["truncated"] and len(tight["checkpoints"]) < 3
    assert walk(base, max_depth=0)["checkpoints"] == []
    assert walk(tmp_path / "nope")["kind"] == "not_found"
    (tmp_path / "file").write_text("x")
    assert walk(tmp_path / "file")["kind"] == "not_regular"


# ---- plots


def test_render_overlays_runs_in_their_colours(tmp_path: Path):
    curves = [plots.Curve("run-a", "critic/score/mean", [1, 2, 3], [0.1, 0.2, 0.4]),
              plots.Curve("run-b", "critic/score/mean", [1, 2, 3], [0.2, 0.1, None]),
              plots.Curve("run-a", "actor/pg_loss", list(range(100)), [0.5] * 100, [0.4] * 100, [0.9] * 100)]
    picture = plots.render(curves, "two runs")
    pixels = decode_png(picture.png)
    assert pixels.shape[:2] == (picture.height, picture.width) == (440, 1280)
    assert has_colour(pixels, plots.RUN_COLORS[0]) and has_colour(pixels, plots.RUN_COLORS[1])
    assert not has_colour(pixels, plots.RUN_COLORS[2])
    single = plots.render(curves[:1], "one run")
    assert decode_png(single.png).shape[:2] == (single.height, single.width) == (440, 640)
    with pytest.raises(ToolFailure, match="nothing to plot"):
        plots.render([], "empty")


def test_without_matplotlib_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    assert not plots.available()
    with pytest.raises(plots.PlotsUnavailable) as err:
        plots.render([plots.Curve("a", "m", [1], [1.0])], "t")
    assert "pip install 'agentjet-swarm-skill[plots]'" in str(err.value) and "\n" not in str(err.value)


def test_default_metrics_prefer_rewards_then_losses():
    names = ["actor/entropy", "actor/pg_loss", "critic/score/mean", "perf/throughput", "val-core/a/b@4"]
    assert plots.default_metrics(names) == ["critic/score/mean", "val-core/a/b@4", "actor/pg_loss", "actor/entropy"]
    assert plots.default_metrics(["x", "y"]) == ["x", "y"]


def test_images_are_found_anywhere_in_a_result():
    class Out(ToolOutput):
        items: list[ImageAttachment]
        other: dict[str, ImageAttachment | None]

    a = ImageAttachment.of(b"\x89PNG1", mime_type="image/png", title="a", width=1, height=1)
    b = ImageAttachment.of(b"\x89PNG2", mime_type="image/png", title="b", width=1, height=1)
    empty = ImageAttachment(mime_type="image/png", title="c", width=1, height=1, size_bytes=0)
    out = Out(items=[a, empty], other={"x": b, "y": None})
    assert [i.title for i in attached_images(out)] == ["a", "b"]
    assert "_data" not in out.model_dump()["items"][0] and out.model_dump()["items"][0]["size_bytes"] == 5


def test_a_returned_picture_is_kept_for_clients_that_drop_image_blocks(monkeypatch: pytest.MonkeyPatch):
    """A kept copy in the state dir (the newest KEPT_MAX), named per run or per set of runs, served by name."""
    picture = plots.Picture(b"\x89PNG-first", 1, 1)
    notes: list[str] = []
    image = picture.attachment("t", False, keep_as=plots.kept_name("metrics", ["ajet_x-20260101-000000-ab12"]),
                               notes=notes)
    assert image.uri == "agentjet://plot/ajet_x-20260101-000000-ab12-metrics.png" and notes == []
    assert Path(image.local_path) == plots.kept_dir() / "ajet_x-20260101-000000-ab12-metrics.png"
    assert Path(image.local_path).read_bytes() == b"\x89PNG-first" == plots.read_kept(image.uri.rsplit("/", 1)[1])
    pair, swapped = plots.kept_name("compare", ["a", "b"]), plots.kept_name("compare", ["b", "a"])
    assert pair.startswith("compare-") and pair.endswith(".png") and pair != swapped
    for bad in ("../state.sqlite", "x.txt", "missing.png"):
        with pytest.raises(ValueError, match="no kept plot"):
            plots.read_kept(bad)
    monkeypatch.setattr(plots, "KEPT_MAX", 3)
    os.utime(image.local_path, (999, 999))
    for i in range(5):
        plots.keep(b"\x89PNG", f"run{i}-metrics.png", notes)
        os.utime(plots.kept_dir() / f"run{i}-metrics.png", (1000 + i, 1000 + i))
    plots.keep(b"\x89PNG", "run5-metrics.png", notes)  # the newest three stay
    assert sorted(p.name for p in plots.kept_dir().iterdir()) == ["run3-metrics.png", "run4-metrics.png",
                                                                  "run5-metrics.png"]


def test_a_picture_that_cannot_be_kept_is_a_note(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    blocked = tmp_path / "state"
    blocked.write_text("a file where the state folder should be")
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", str(blocked))
    notes: list[str] = []
    image = plots.Picture(b"\x89PNG", 1, 1).attachment("t", False, keep_as="r-metrics.png", notes=notes)
    assert image.local_path is None and image.uri is None and image.data == b"\x89PNG"
    assert len(notes) == 1 and notes[0].startswith("the plot was not kept for clients that show no image blocks: ")


def test_iso_and_json_safety():
    assert progress.iso(0) == "1970-01-01T00:00:00+00:00"
    assert json_number(math.inf) is None
    assert os.path.basename(plots.INSTALL_HINT) and "matplotlib" in plots.INSTALL_HINT


# ---- collect_results: where each table comes from


def test_a_table_comes_from_its_markdown_file_else_the_history_and_the_notes_say_why():
    from skill_server.tools.collect_results.tool import _markdown_rows, _summaries

    notes: list[str] = []
    answers = {"/r/val.md": {"ok": True, "text": "{'acc': 0.5}\n{'acc': 0.75}\n", "size": 28},
               "/r/empty.md": {"ok": True, "text": "nothing yet\n", "size": 12},
               "/r/gone.md": {"ok": False, "error": "no such file"}}
    rows = _markdown_rows("validation", "val_markdown", "/r/val.md", answers, notes)
    table, source = _summaries("validation", "/r/val.md", rows, {"val-core/x": [1.0]}, notes)
    assert [(m.key, m.n, m.last) for m in table] == [("acc", 2, 0.75)] and source == "markdown file /r/val.md"
    assert notes == []
    history = {"loss": [2.0, 1.0, math.nan], "lr": [1e-6]}
    for path in ("/r/empty.md", "/r/gone.md", None):
        rows = _markdown_rows("training", "train_markdown", path, answers, notes)
        table, source = _summaries("training", path, rows, history, notes)
        assert rows == [] and [m.key for m in table] == ["loss", "lr"]
        assert source == "the log's step lines (metric history, 3 steps)"
    assert _summaries("training", None, [], {}, notes) == ([], "none")
    assert notes == [
        "the training file /r/empty.md has no metric lines yet",
        "training metrics taken from the log's step lines (no usable markdown file)",
        "cannot read the training file /r/gone.md: no such file",
        "training metrics taken from the log's step lines (no usable markdown file)",
        "no training markdown file known (pass train_markdown, or set the YAML's "
        "train_print_to_markdown_file_path)",
        "training metrics taken from the log's step lines (no usable markdown file)",
    ]
