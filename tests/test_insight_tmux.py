"""Watching runs like an ML engineer, against real tmux runs of the stand-in trainer (tests/fixtures/fake_trainer.py).

Steps and the first step, progress and ETA, checkpoints, metric history, results from the history with a
plot, comparisons (also through a real MCP client, image block included) and the ``watch`` stream read
line by line from a real subprocess while a run proceeds.
"""

from __future__ import annotations

import base64
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from skill_server.core.errors import ToolInputError
from skill_server.experiments import plots
from tests.conftest import REPO, cli_env, run_cli_to_closed_pipe
from tests.experiment_helpers import call, status, tmux_socket, trainer, wait_exit, wait_until, workdir  # noqa: F401  (fixtures are used by name)
from tests.png_helpers import decode_png, has_colour

pytestmark = pytest.mark.needs("tmux")


def write_yaml(path: Path, name: str, total: int | None = 40, num_repeat: int = 4) -> Path:
    path.write_text("ajet:\n  project_name: proj\n  experiment_name: " + name + "\n  trainer_common:\n"
                    f"    total_training_steps: {'null' if total is None else total}\n"
                    "    checkpoint_base_dir: ./ckpt\n    save_freq: 4\n"
                    f"  rollout:\n    num_repeat: {num_repeat}\n")
    return path


# ---- steps are steps


def test_first_step_without_kl_loss_ends_the_wait_and_is_not_overdue(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="nokl", workdir=str(workdir), first_step_timeout_s=60,
               command=trainer("--no-kl", "--steps", "6", "--delay", "0.5", "--hold", "1.5"))
    first = call("wait_experiment", id=out["id"], until="first_step", timeout_s=20)
    assert first["reason"] == "first_step" and first["state"] == "running"
    assert first["first_step_seen"] and not first["first_step_overdue"] and first["global_step"] >= 1
    assert "actor/kl_loss" not in first["last_metrics"]
    done = wait_exit(out["id"])
    assert done["global_step"] == 6 and done["first_step_seen"] and not done["first_step_overdue"]


def test_a_first_step_is_late_only_if_a_look_after_the_deadline_missed_it(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="late", workdir=str(workdir), first_step_timeout_s=1,
               command=trainer("--steps", "2", "--hold", "3", "--delay", "0.2"))
    time.sleep(1.5)
    early = status(out["id"], max_lines=0)
    assert not early["first_step_seen"] and early["first_step_overdue"]
    seen = call("wait_experiment", id=out["id"], until="first_step", timeout_s=20)
    assert seen["first_step_seen"] and seen["first_step_overdue"]  # a look at 1.5 s had not found it
    quiet = call("launch_experiment", name="quiet", workdir=str(workdir), first_step_timeout_s=1,
                 command=trainer("--steps", "2", "--hold", "0", "--delay", "0.1"))
    done = wait_exit(quiet["id"])  # its first look already sees step 1: nothing says it was late
    assert done["first_step_seen"] and not done["first_step_overdue"]


def test_one_oom_line_counts_once(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="oom1", command=trainer("--mode", "oom"), workdir=str(workdir))
    errors = {e["signature"]: e for e in wait_exit(out["id"])["errors"]}
    assert errors["cuda_oom"]["count"] == 1 and errors["python_exception"]["count"] == 1


# ---- progress and checkpoints


def test_progress_and_checkpoints_from_the_runs_yaml(tmux_socket: str, workdir: Path):
    write_yaml(workdir / "exp.yaml", "expA", total=40)
    ckpt = workdir / "ckpt" / "proj" / "expA"
    out = call("launch_experiment", name="prog", workdir=str(workdir), command=trainer(
        "--steps", "12", "--delay", "0.1", "--timing", "2.5", "--checkpoint-dir", str(ckpt), "--save-freq", "4",
        "--conf", "exp.yaml", "--tail-sleep", "60"))
    s = wait_until(lambda: (x := status(out["id"], max_lines=0))["global_step"] == 12 and x, timeout=30)
    p = s["progress"]
    assert p["total_steps"] == 40 and "total_training_steps" in p["total_steps_source"]
    assert str(workdir / "exp.yaml") in p["total_steps_source"]
    assert p["seconds_per_step"] == 2.5 and p["seconds_per_step_source"].startswith("timing_s/step")
    assert p["steps_per_hour"] == 1440.0 and p["eta_s"] == 70.0 and p["eta_at"] and p["unknown"] == {}
    c = wait_until(lambda: (x := status(out["id"], max_lines=0)["checkpoints"])["latest"] == 12 and x)
    assert c["directory"] == str(ckpt) and c["host"] == "local" and "ajet.project_name" in c["source"]
    assert [(x["step"], x["size_bytes"], x["files"]) for x in c["checkpoints"]] == [(4, 4000, 1), (8, 8000, 1),
                                                                                     (12, 12000, 1)]
    assert c["checkpoints"][0]["path"] == str(ckpt / "global_step_4") and not c["truncated"]
    listing = call("experiment_status", max_lines=0)["experiments"][0]
    assert listing["checkpoints"] is None and listing["progress"]["total_steps"] == 40  # the list skips the walk
    stopped = call("stop_experiment", id=out["id"], grace_s=1)
    assert stopped["progress"]["eta_s"] is None and stopped["progress"]["unknown"]["eta_s"] == "the run has ended"


def test_progress_from_the_tqdm_bar_and_observed_times(tmux_socket: str, workdir: Path):
    bar = call("launch_experiment", name="bar", workdir=str(workdir),
               command=trainer("--steps", "5", "--delay", "0.05", "--tqdm", "--total", "50", "--timing", "1"))
    p = wait_exit(bar["id"])["progress"]
    assert p["total_steps"] == 50 and "Training Progress" in p["total_steps_source"]
    slow = call("launch_experiment", name="slow", workdir=str(workdir),
                command=trainer("--steps", "6", "--delay", "1.0"))
    wait_until(lambda: status(slow["id"], max_lines=0)["global_step"], timeout=30)
    p = wait_until(lambda: (x := status(slow["id"], max_lines=0)["progress"])["seconds_per_step"] and x, timeout=30)
    assert p["seconds_per_step_source"].startswith("observed") and p["seconds_per_step"] > 0
    assert p["total_steps"] is None and "total_training_steps" in p["unknown"]["total_steps"]
    assert "total_steps" in p["unknown"]["eta_s"]
    c = status(slow["id"], max_lines=0)["checkpoints"]
    assert c["directory"] is None and "no training YAML" in c["reason"]
    call("stop_experiment", id=slow["id"], grace_s=1)


# ---- metric history


def test_metrics_history_with_globs_range_restart_and_downsampling(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="hist", workdir=str(workdir), command=trainer(
        "--steps", "30", "--restart-after", "20", "--restart-from", "11", "--val-every", "5", "--delay", "0"))
    wait_exit(out["id"])
    s = status(out["id"], max_lines=0, metrics_history=["critic/score/*", "val-core/*", "nope*"], history_points=5)
    h = s["metrics_history"]
    names = [x["name"] for x in h["series"]]
    assert names == ["critic/score/max", "critic/score/mean", "critic/score/min", "val-core/math/reward/mean@4"]
    mean = h["series"][1]
    assert mean["points"] == 30 and len(mean["steps"]) == 5 and mean["steps"][-1] == 30
    assert mean["last"][-1] == pytest.approx(3.2) and mean["min"][0] == pytest.approx(0.3)
    assert h["series"][3]["points"] == 6 and h["unmatched"] == ["nope*"] and "critic/real_reward" in h["available"]
    assert "went back 1 time" in h["note"] and "buckets" in h["method"]
    assert s["progress"]["restarts"][0]["from_step"] == 20 and s["progress"]["restarts"][0]["to_step"] == 11
    ranged = status(out["id"], max_lines=0, metrics_history=["critic/real_reward"], history_from_step=5,
                    history_to_step=9)["metrics_history"]["series"][0]
    assert ranged["steps"] == [5, 6, 7, 8, 9] and ranged["last"] == pytest.approx([0.7, 0.8, 0.9, 1.0, 1.1])
    assert status(out["id"], max_lines=0)["metrics_history"] is None
    for args, field in [({"id": out["id"], "metrics_history": ["a"], "history_from_step": 9, "history_to_step": 5},
                         "history_to_step"),
                        ({"id": out["id"], "history_points": 10}, "history_points"),
                        ({"metrics_history": ["a"]}, "metrics_history"),
                        ({"id": out["id"], "metrics_history": []}, "metrics_history")]:
        with pytest.raises(ToolInputError) as err:
            call("experiment_status", **args)
        assert err.value.field == field, args


# ---- results from the history, with a plot


def test_collect_results_without_markdown_uses_the_log_and_draws_the_plot(tmux_socket: str, workdir: Path,
                                                                           tmp_path: Path):
    a = call("launch_experiment", name="resa", workdir=str(workdir),
             command=trainer("--steps", "12", "--no-kl", "--val-every", "4", "--delay", "0"))
    b = call("launch_experiment", name="resb", workdir=str(workdir), result_dir=str(workdir / "b"),
             command=trainer("--steps", "8", "--delay", "0"))
    wait_exit(a["id"])
    wait_exit(b["id"])
    res = call("collect_results", id=a["id"], overlay_ids=["ajet_resb"], image_data=True)
    assert res["metrics_source"]["training"] == "the log's step lines (metric history, 12 steps)"
    assert res["metrics_source"]["validation"].startswith("the log's step lines")
    train = {m["key"]: m for m in res["train_metrics"]}
    assert train["critic/real_reward"]["n"] == 12 and train["critic/real_reward"]["best"] == pytest.approx(1.4)
    assert train["actor/pg_loss"]["trend"] == "flat" and "val-core/math/reward/mean@4" not in train
    assert [m["key"] for m in res["val_metrics"]] == ["val-core/math/reward/mean@4"]
    text = Path(res["results_path"]).read_text()
    assert "## Training metrics\n\nSource: the log's step lines (metric history, 12 steps).\n\n| metric |" in text
    assert "(none)" not in text.split("## Training metrics")[1].split("##")[0]
    assert "![metrics over steps](metrics.png)" in text
    plot = res["plot"]
    png = Path(plot["path"]).read_bytes()
    assert Path(plot["path"]) == Path(res["results_path"]).parent / "metrics.png" and plot["host"] == "local"
    assert base64.b64decode(plot["data_base64"]) == png and plot["size_bytes"] == len(png)
    assert Path(plot["local_path"]).read_bytes() == png  # the copy a file-reading tool can show
    pixels = decode_png(png)
    assert pixels.shape[:2] == (plot["height"], plot["width"])
    assert has_colour(pixels, plots.RUN_COLORS[0]) and has_colour(pixels, plots.RUN_COLORS[1])  # both runs
    assert "ajet_resa" in plot["title"] and "ajet_resb" in plot["title"]
    alone = call("collect_results", id=b["id"], plot_metrics=["critic/score/mean"])
    pixels = decode_png(Path(alone["plot"]["path"]).read_bytes())
    assert has_colour(pixels, plots.RUN_COLORS[0]) and not has_colour(pixels, plots.RUN_COLORS[1])
    assert alone["plot"]["data_base64"] is None and alone["plot"]["width"] == 640
    skipped = call("collect_results", id=b["id"], plot=False)
    assert skipped["plot"] is None and skipped["plot_data"] is None
    with pytest.raises(ToolInputError) as err:
        call("collect_results", result_dir=str(workdir), plot_metrics=["x"])
    assert err.value.field == "plot_metrics"
    with pytest.raises(ToolInputError) as err:
        call("collect_results", id=a["id"], overlay_ids=["no-such-run"])
    assert err.value.field == "overlay_ids.0"


def test_collect_results_without_matplotlib_returns_the_data(tmux_socket: str, workdir: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    out = call("launch_experiment", name="noplot", workdir=str(workdir),
               command=trainer("--steps", "5", "--delay", "0"))
    wait_exit(out["id"])
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    res = call("collect_results", id=out["id"])
    assert res["plot"] is None and any("pip install 'agentjet-swarm-skill[plots]'" in n for n in res["notes"])
    series = {s["name"]: s for s in res["plot_data"]["series"]}
    assert series["critic/score/mean"]["steps"] == [1, 2, 3, 4, 5]
    text = Path(res["results_path"]).read_text()
    assert "metrics.png" not in text and not (Path(res["results_path"]).parent / "metrics.png").exists()


# ---- comparing runs


def _two_runs(workdir: Path) -> tuple[str, str]:
    write_yaml(workdir / "a.yaml", "expA", num_repeat=4)
    write_yaml(workdir / "b.yaml", "expB", num_repeat=8)
    a = call("launch_experiment", name="cmpa", workdir=str(workdir),
             command=trainer("--steps", "12", "--delay", "0", "--conf", "a.yaml"))
    b = call("launch_experiment", name="cmpb", workdir=str(workdir),
             command=trainer("--steps", "8", "--delay", "0", "--conf", "b.yaml"))
    wait_exit(a["id"])
    wait_exit(b["id"])
    return a["id"], b["id"]


def test_compare_experiments_leader_direction_and_config_differences(tmux_socket: str, workdir: Path,
                                                                     tmp_path: Path):
    a, b = _two_runs(workdir)
    out = call("compare_experiments", ids=[a, "ajet_cmpb"], metrics=["critic/score/mean", "actor/pg_loss"], last_k=5,
               plot=True, image_data=True)
    assert [r["id"] for r in out["runs"]] == [a, b] and out["metrics"] == ["critic/score/mean", "actor/pg_loss"]
    ra = {m["metric"]: m for m in out["runs"][0]["metrics"]}["critic/score/mean"]
    assert (ra["n"], ra["final"], ra["final_step"], ra["best"], ra["best_step"]) == (12, 1.4, 12, 1.4, 12)
    assert ra["last_k_mean"] == pytest.approx(1.2)
    lead = out["leader"]
    assert lead["leader"] == a and lead["runner_up"] == b and lead["direction"] == "higher"
    assert lead["margin"] == pytest.approx(0.4) and lead["relative_margin"] == pytest.approx(0.5)
    assert lead["direction_source"].startswith("assumed") and lead["ranking"] == [a, b]
    assert lead["statistic"] == "mean of the last 5 values"
    diffs = {d["key"]: d["values"] for d in out["config_differences"]}
    assert diffs == {"ajet.experiment_name": ["expA", "expB"], "ajet.rollout.num_repeat": [4, 8]}
    assert out["config_keys_differing"] == 2 and out["runs"][0]["config_file"] == str(workdir / "a.yaml")
    assert any(n.startswith("the runs' commands differ") and "b.yaml" in n for n in out["notes"])
    assert not any("different steps" in n for n in out["notes"])  # 12 and 8 steps: alike enough
    short = call("launch_experiment", name="cmpc", workdir=str(workdir),
                 command=trainer("--steps", "3", "--delay", "0", "--conf", "a.yaml"))
    wait_exit(short["id"])
    unlike = call("compare_experiments", ids=[a, short["id"]], metrics=["critic/score/mean"])
    assert any(f"{short['id']} step 3" in n and "same step" in n for n in unlike["notes"])
    assert out["runs"][0]["state"] == "succeeded" and out["runs"][0]["global_step"] == 12
    pixels = decode_png(base64.b64decode(out["plot"]["data_base64"]))
    assert has_colour(pixels, plots.RUN_COLORS[0]) and has_colour(pixels, plots.RUN_COLORS[1])
    assert out["plot"]["path"] is None  # read-only: never written
    loss = call("compare_experiments", ids=[a, b], primary="actor/pg_loss")
    assert loss["leader"]["direction"] == "lower" and "loss" in loss["leader"]["direction_source"]
    assert loss["metrics"][0] == "actor/pg_loss" and loss["plot"] is None
    flipped = call("compare_experiments", ids=[a, b], metrics=["critic/score/mean"], higher_is_better=False)
    assert flipped["leader"]["leader"] == b and flipped["leader"]["direction_source"] == "given (higher_is_better)"
    dumped = write_yaml(workdir / "dumped.yaml", "expB", num_repeat=6)
    given = call("compare_experiments", ids=[a, b], yaml_paths=[None, str(dumped)])
    assert {d["key"]: d["values"] for d in given["config_differences"]}["ajet.rollout.num_repeat"] == [4, 6]
    assert given["runs"][1]["config_file"] == str(dumped)
    for args, field in [({"ids": [a, a]}, "ids.1"), ({"ids": [a, "no-such-run"]}, "ids.1"),
                        ({"ids": [a, b], "primary": "zzz*"}, "primary"),
                        ({"ids": [a, b], "yaml_paths": [None, "rel.yaml"]}, "yaml_paths.1"),
                        ({"ids": [a, b], "yaml_paths": [None, None, None]}, "yaml_paths")]:
        with pytest.raises(ToolInputError) as err:
            call("compare_experiments", **args)
        assert err.value.field == field, args


def test_compare_without_matplotlib_returns_the_series(tmux_socket: str, workdir: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    a, b = _two_runs(workdir)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = call("compare_experiments", ids=[a, b], metrics=["critic/score/mean"], plot=True)
    assert out["plot"] is None and any("pip install 'agentjet-swarm-skill[plots]'" in n for n in out["notes"])
    assert out["plot_data"][a]["series"][0]["steps"] == list(range(1, 13))
    assert out["plot_data"][b]["series"][0]["points"] == 8


def test_watch_imports_neither_mcp_nor_matplotlib(tmux_socket: str):
    code = ("import sys; from skill_server.app import cli; rc = cli.main(['watch', 'no-such-run']); "
            "sys.stderr.write(repr(sorted(m for m in ('mcp', 'matplotlib') if m in sys.modules)) + str(rc))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env(),
                          timeout=60, check=False)
    assert proc.stderr.strip().endswith("[]1"), proc.stderr


@pytest.mark.anyio
async def test_plots_reach_an_mcp_client_as_image_blocks(tmux_socket: str, workdir: Path, tmp_path: Path):
    from mcp import Client

    from skill_server.app.mcp_server import build_server

    a, b = _two_runs(workdir)
    async with Client(build_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["compare_experiments"].annotations.read_only_hint
        compared = await client.call_tool("compare_experiments", {"ids": [a, b], "plot": True})
        assert not compared.is_error, compared.content
        images = [c for c in compared.content if c.type == "image"]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        assert decode_png(base64.b64decode(images[0].data)).shape[1] == 1280
        assert compared.structured_content["plot"]["data_base64"] is None
        assert json.loads(compared.content[0].text)["leader"]["leader"] == a
        collected = await client.call_tool("collect_results", {"id": a})
        assert not collected.is_error, collected.content
        image = next(c for c in collected.content if c.type == "image")
        path = Path(collected.structured_content["plot"]["path"])
        assert base64.b64decode(image.data) == path.read_bytes()
        # clients that show the model only the structured result: the kept copy, by path and as a resource
        for result in (compared, collected):
            plot = result.structured_content["plot"]
            link = next(c for c in result.content if c.type == "resource_link")
            assert link.uri == plot["uri"] and link.mime_type == "image/png" and plot["uri"].startswith("agentjet://plot/")
            shown = next(c for c in result.content if c.type == "image")
            assert Path(plot["local_path"]).read_bytes() == base64.b64decode(shown.data)
            read = await client.read_resource(plot["uri"])
            assert base64.b64decode(read.contents[0].blob) == base64.b64decode(shown.data)
            assert read.contents[0].mime_type == "image/png"
        assert collected.structured_content["plot"]["local_path"] != str(path)  # a copy, not the run's file
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        assert "agentjet://plot/{name}" in templates
        with pytest.raises(Exception, match="no kept plot"):
            await client.read_resource("agentjet://plot/nothing-here.png")
        plain = await client.call_tool("experiment_status", {"id": a})
        assert [c.type for c in plain.content] == ["text"]


# ---- the watch stream


class Watch:
    """``python -m skill_server watch ...`` as a real subprocess; lines are read as they arrive."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "skill_server", "watch", *args], cwd=REPO, env=cli_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_line(self, timeout: float = 60.0) -> str | None:
        return self.lines.get(timeout=timeout)

    def rest(self, timeout: float = 60.0) -> list[str]:
        out = []
        while (line := self.next_line(timeout)) is not None:
            out.append(line)
        return out

    def finish(self, timeout: float = 60.0) -> tuple[int, str]:
        rc = self.proc.wait(timeout=timeout)
        assert self.proc.stderr is not None
        return rc, self.proc.stderr.read()


def kinds(lines: list[str]) -> list[str]:
    return [line.split(" ", 3)[2] for line in lines]


def test_watch_prints_events_while_the_run_proceeds(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="watched", workdir=str(workdir), command=trainer(
        "--steps", "12", "--delay", "0.4", "--hold", "2", "--timing", "0.4", "--tqdm", "--total", "12",
        "--say", "6:OSError: [Errno 24] Too many open files"))
    watch = Watch(out["id"], "--every", "5", "--interval", "0.3")
    first = watch.next_line()
    assert first is not None and " ajet_watched started " in first and f"{out['id']} state=running" in first
    assert status(out["id"], max_lines=0)["state"] == "running"  # the line came while the run was going
    lines = [first] + watch.rest()
    rc, err = watch.finish()
    assert rc == 0 and err == ""
    events = kinds(lines)
    assert events[0] == "started" and events[-1] == "finished" and events.count("finished") == 1
    assert events.count("first_step") == 1
    signatures = [line.split()[3] for line in lines if line.split()[2] == "error"]
    assert sorted(signatures) == ["python_exception", "too_many_open_files"]  # the OSError line is both, once each
    steps = [int(line.split()[3].split("/")[0]) for line in lines if line.split()[2] == "step"]
    assert steps == sorted(steps) and {s // 5 for s in steps} >= {1, 2} and steps[-1] <= 12
    step_line = next(line for line in lines if line.split()[2] == "step" and "/12" in line)
    assert "critic/score/mean=" in step_line and "s/step" in step_line
    error = next(line for line in lines if line.split()[2] == "error" and line.split()[3] == "too_many_open_files")
    assert "too_many_open_files (error)" in error and "ulimit -n" in error
    assert lines[-1].endswith(f"finished succeeded exit_code=0 after {lines[-1].split('after ')[1]}")
    assert all(line.split()[1] == "ajet_watched" and line[:4].isdigit() for line in lines)


def test_watch_exit_codes_json_lines_interrupts_and_errors(tmux_socket: str, workdir: Path):
    crash = call("launch_experiment", name="wcrash", workdir=str(workdir), command=trainer("--mode", "crash"))
    wait_exit(crash["id"])
    watch = Watch("ajet_wcrash", "--json", "--interval", "0.2")
    records = [json.loads(line) for line in watch.rest()]
    rc, err = watch.finish()
    assert rc == 10 and err == ""
    assert records[0]["event"] == "started" and records[-1]["event"] == "finished"
    assert records[-1]["state"] == "failed" and records[-1]["exit_code"] == 1
    assert "python_exception" in {r.get("signature") for r in records if r["event"] == "error"}
    closed = run_cli_to_closed_pipe("watch", "ajet_wcrash")  # the reader went away before the first line
    assert closed.returncode == 141 and closed.stderr == ""

    hang = call("launch_experiment", name="whang", workdir=str(workdir), command=trainer("--mode", "hang"))
    watch = Watch(hang["id"], "--interval", "0.2")
    assert "started" in (watch.next_line() or "")
    watch.proc.send_signal(signal.SIGINT)
    rc, err = watch.finish()
    assert rc == 130 and "Traceback" not in err
    timed = Watch(hang["id"], "--interval", "0.2", "--max-time", "1")
    timed.rest()
    assert timed.finish()[0] == 124
    call("stop_experiment", id=hang["id"], grace_s=1)
    stopped = Watch(hang["id"])
    assert kinds(stopped.rest())[-1] == "finished" and stopped.finish()[0] == 11

    unknown = Watch("no-such-run")
    assert unknown.rest() == []
    rc, err = unknown.finish()
    assert rc == 1 and err.count("\n") == 1 and "no-such-run" in err
    usage = Watch(hang["id"], "--every", "0")
    assert usage.finish()[0] == 2


def test_watch_until_ends_at_the_events_an_assistant_acts_on(tmux_socket: str, workdir: Path):
    """Launch, then one watch that returns when something happens: first step (20), an error (21), a stall (22)."""
    quiet = call("launch_experiment", name="wquiet", workdir=str(workdir),
                 command=trainer("--steps", "2", "--delay", "0") + "; sleep 120")
    first = Watch(quiet["id"], "--json", "--interval", "0.2", "--until", "first_step")
    records = [json.loads(line) for line in first.rest()]
    assert first.finish()[0] == 20 and "first_step" in [r["event"] for r in records]  # and that look's step line
    stall = Watch(quiet["id"], "--json", "--interval", "0.3", "--until", "stall,error", "--stall", "4")
    records = [json.loads(line) for line in stall.rest()]
    (stalled,) = [r for r in records if r["event"] == "stalled"]
    assert stall.finish()[0] == 22 and records[-1] == stalled
    assert stalled["quiet_since"] == "step" and stalled["quiet_s"] >= 4 and stalled["global_step"] == 2
    crash = call("launch_experiment", name="wcrash2", workdir=str(workdir),
                 command=trainer("--steps", "3", "--delay", "0.2", "--say", "2:torch.OutOfMemoryError: CUDA out of "
                                 "memory.") + "; sleep 120")
    erred = Watch(crash["id"], "--json", "--interval", "0.2", "--until", "error")
    records = [json.loads(line) for line in erred.rest()]
    assert erred.finish()[0] == 21 and "cuda_oom" in [r.get("signature") for r in records if r["event"] == "error"]
    assert Watch(quiet["id"], "--until", "naps").finish()[0] == 2
    for run in (quiet, crash):
        call("stop_experiment", id=run["id"], grace_s=1)


def test_concurrent_status_calls_store_every_step_once(tmux_socket: str, workdir: Path):
    from concurrent.futures import ThreadPoolExecutor

    from skill_server.experiments.store import open_registry

    out = call("launch_experiment", name="race", workdir=str(workdir),
               command=trainer("--steps", "150", "--delay", "0.01", "--tail-sleep", "1"))

    def poll(_: int) -> int:
        done = 0
        while status(out["id"], max_lines=0, checkpoints=False)["state"] == "running":
            done += 1
        return done

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert sum(pool.map(poll, range(6))) > 6
    s = status(out["id"], max_lines=0, metrics_history=["critic/real_reward"], history_points=1000)
    series = s["metrics_history"]["series"][0]
    assert s["unscanned_bytes"] == 0 and series["steps"] == list(range(1, 151))
    with open_registry() as reg:
        rows = reg.conn.execute("SELECT COUNT(*), COUNT(DISTINCT p.step) FROM metric_points p JOIN metric_series s "
                                "ON s.id = p.series WHERE s.exp_id = ? AND s.name = 'critic/real_reward'",
                                (out["id"],)).fetchone()
    assert rows == (150, 150)  # racing callers never stored a line twice
