"""What a run leaves and what is said about it: fixes computed from error lines, result folders per run, the
best value with its step (real tmux on a private socket per test where a run is launched)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skill_server.experiments import runconfig
from skill_server.experiments.fixes import hint_for
from skill_server.experiments.signatures import SIGNATURES_BY_NAME
from tests.experiment_helpers import call, tmux_socket, trainer, wait_exit, workdir  # noqa: F401  (fixtures by name)

needs_tmux = pytest.mark.needs("tmux")

KV_LINE = ("(WorkerDict pid=48213) ValueError: The model's max seq len (18000) is larger than the maximum number of "
           "tokens that can be stored in KV cache (14336). Try increasing `gpu_memory_utilization` or decreasing "
           "`max_model_len` when initializing the engine.")
KV_LINE_V1 = ("ValueError: To serve at least one request with the models's max seq len (32768), (4.0 GiB KV cache is "
              "needed, which is larger than the available KV cache memory (2.6 GiB). Based on the available memory, "
              "the estimated maximum model length is 21296. Try increasing `gpu_memory_utilization` or decreasing "
              "`max_model_len` when initializing the engine.")
LENGTHS = {"max_model_len": 18000, "max_prompt_length": 3000, "max_response_length": 15000,
           "max_response_length_in_one_turn": 4096, "gpu_memory_utilization": 0.85, "tensor_model_parallel_size": 1}


# ---- vLLM's KV cache: a fix computed from the line and the run's YAML


def test_the_kv_cache_line_has_its_own_signature_and_a_fix_from_its_numbers():
    sig = SIGNATURES_BY_NAME["vllm_kv_cache_too_small"]
    assert sig.severity == "error" and sig.regex.search(KV_LINE) and sig.regex.search(KV_LINE_V1)
    alone = hint_for("vllm_kv_cache_too_small", KV_LINE)
    assert "fits 14336 tokens" in alone and "lower ajet.rollout.max_model_len to 14336" in alone
    assert "max_prompt_length + max_response_length <= max_model_len" in alone
    assert "gpu_memory_utilization" in alone and "tensor_model_parallel_size" in alone
    # with the run's lengths: values that keep AgentJetJob's checks (3000 + 11336 <= 14336, 4096 <= 11336)
    fix = hint_for("vllm_kv_cache_too_small", KV_LINE, {"lengths": LENGTHS})
    assert "max_prompt_length 3000 and max_response_length 11336" in fix
    assert "utilization 0.85 from the run's YAML" in fix
    assert "max_response_length_in_one_turn" not in fix.split("so that")[0]  # 4096 already fits
    v1 = hint_for("vllm_kv_cache_too_small", KV_LINE_V1, {"lengths": {**LENGTHS, "max_model_len": 32768}})
    assert "lower ajet.rollout.max_model_len to 20480 (at most 21296)" in v1
    # a signature without a computed fix keeps its own hint
    assert hint_for("cuda_oom", "CUDA out of memory") == SIGNATURES_BY_NAME["cuda_oom"].hint


def test_the_runs_yaml_lengths_reach_the_fix():
    cand = runconfig.Candidate(host="local", path="/w/exp.yaml", workdir="/w")
    data = {"ajet": {"rollout": {"max_model_len": 18000, "max_response_length_in_one_turn": 4096,
                                 "gpu_memory_utilization": 0.85, "tensor_model_parallel_size": 1},
                     "data": {"max_prompt_length": 3000, "max_response_length": 15000}}}
    assert runconfig.summarise(cand, data)["lengths"] == LENGTHS


@needs_tmux
def test_status_of_a_run_that_hit_the_kv_cache_limit_gives_the_computed_fix(tmux_socket: str, workdir: Path):
    (workdir / "exp.yaml").write_text("ajet:\n  rollout:\n    max_model_len: 18000\n"
                                      "    max_response_length_in_one_turn: 4096\n    gpu_memory_utilization: 0.85\n"
                                      "  data:\n    max_prompt_length: 3000\n    max_response_length: 15000\n")
    command = trainer("--steps", "1", "--say", f"1:{KV_LINE}", "--exit-code", "1") + " --conf exp.yaml"
    out = call("launch_experiment", name="kv", command=command, workdir=str(workdir))
    done = wait_exit(out["id"])
    hit = {e["signature"]: e for e in done["errors"]}["vllm_kv_cache_too_small"]
    assert "max_prompt_length 3000 and max_response_length 11336" in hit["hint"]


@needs_tmux
def test_status_computes_the_utilization_from_the_models_config_and_nvidia_smi(tmux_socket: str, workdir: Path,
                                                                                monkeypatch):
    """The run's YAML names a local model folder: its config.json gives the KV shape; nvidia-smi on the run's
    host (the stand-in, an 80 GiB A100) the GPU's memory; the error line the cache and the sequence."""
    import json

    from tests.gpu_helpers import A100, install_fake_smi
    from tests.test_experiments_units import KV_V0, QWEN_7B

    model = workdir / "Qwen2.5-7B-Instruct"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN_7B))
    install_fake_smi(workdir / "smi" / "bin", {"gpus": [{"uuid": "GPU-1", "name": A100, "memory_total": 81920,
                                                         "memory_used": 4, "utilization": 0}]})
    monkeypatch.setenv("PATH", f"{workdir / 'smi' / 'bin'}:/usr/bin:/bin")
    (workdir / "exp.yaml").write_text(f"ajet:\n  model:\n    path: {model}\n  rollout:\n    max_model_len: 32768\n"
                                      "    gpu_memory_utilization: 0.6\n    tensor_model_parallel_size: 1\n"
                                      "  data:\n    max_prompt_length: 2048\n    max_response_length: 30720\n")
    command = trainer("--steps", "1", "--say", f"1:{KV_V0}", "--exit-code", "1") + " --conf exp.yaml"
    out = call("launch_experiment", name="kv2", command=command, workdir=str(workdir))
    wait_exit(out["id"])
    status = call("experiment_status", id=out["id"])["experiments"][0]
    assert status["errors"][0]["signature"] == "vllm_kv_cache_too_small"  # before the generic traceback one
    hint = {e["signature"]: e for e in status["errors"]}["vllm_kv_cache_too_small"]["hint"]
    # (32768 - 16832) x 57344 B = 0.851 GiB of 80 GiB: 0.6 + 0.0106 -> at least 0.62
    assert "raise ajet.rollout.gpu_memory_utilization to at least 0.62 (now 0.6)" in hint, hint
    assert f"from {model / 'config.json'}" in hint and "GPU memory 80.0 GiB from nvidia-smi on local" in hint


# ---- a run's own result folder: two runs from one directory never overwrite each other's results


@needs_tmux
def test_two_runs_from_one_directory_keep_their_own_logs_and_results(tmux_socket: str, workdir: Path):
    first = call("launch_experiment", name="same", command=trainer("--steps", "2"), workdir=str(workdir))
    wait_exit(first["id"])
    second = call("launch_experiment", name="same", command=trainer("--steps", "3"), workdir=str(workdir))
    wait_exit(second["id"])
    top = workdir / "auto_agent" / "exp_results"
    assert first["result_dir"] == second["result_dir"] == str(top)  # the blueprint's folder, shared
    assert first["log_path"] == str(top / first["id"] / "ajet_same.log")
    assert second["log_path"] == str(top / second["id"] / "ajet_same.log")
    one = call("collect_results", id=first["id"])
    first_results = Path(one["results_path"])
    assert first_results == top / first["id"] / "results.md" and Path(one["finish_flag_path"]) == top / "finish.flag"
    kept = first_results.read_text()
    two = call("collect_results", id=second["id"])
    assert Path(two["results_path"]) == top / second["id"] / "results.md"
    assert first_results.read_text() == kept and first["id"] in kept and second["id"] not in kept
    if one["plot"] is not None:
        assert Path(one["plot"]["path"]) == top / first["id"] / "metrics.png" != Path(two["plot"]["path"])
    # an explicit log path is honoured as given (relative: against result_dir)
    named = call("launch_experiment", name="named", command=trainer("--steps", "1"), workdir=str(workdir),
                 log_path="mine.log")
    assert named["log_path"] == str(top / "mine.log")
    wait_exit(named["id"])


# ---- the best value with its step; one run through compare_experiments


@needs_tmux
def test_the_best_value_comes_with_its_step(tmux_socket: str, workdir: Path):
    val_md, train_md = workdir / "val.md", workdir / "train.md"
    out = call("launch_experiment", name="best", workdir=str(workdir),
               command=trainer("--steps", "8", "--delay", "0", "--val-md", str(val_md), "--train-md", str(train_md)))
    wait_exit(out["id"])
    res = call("collect_results", id=out["id"], val_markdown=str(val_md), train_markdown=str(train_md))
    val = {m["key"]: m for m in res["val_metrics"]}["mean_reward"]
    assert (val["best"], val["best_step"], val["best_point"], val["n"]) == (0.5, None, 5, 8)  # no step in the line
    train = {m["key"]: m for m in res["train_metrics"]}["critic/real_reward"]
    assert (train["best"], train["best_step"], train["best_point"]) == (1.0, 8, 8)
    text = Path(res["results_path"]).read_text()
    assert "| metric | n | first | best | last | trend | plateau | best at |" in text
    assert "| mean_reward | 8 | 0.1 | 0.5 | 0.5 | up | yes | point 5 of 8 |" in text
    assert "| critic/real_reward | 8 | 0.3 | 1 | 1 | up | - | step 8 |" in text
    # from the log's step lines (no markdown): the step is always known
    history = call("collect_results", id=out["id"], val_markdown=str(workdir / "none.md"),
                   train_markdown=str(workdir / "none.md"))
    score = {m["key"]: m for m in history["train_metrics"]}["critic/score/mean"]
    assert (score["best"], score["best_step"]) == (1.0, 8)
    # one id: that run's own statistics
    alone = call("compare_experiments", ids=[out["id"]], metrics=["critic/score/mean"])
    stats = alone["runs"][0]["metrics"][0]
    assert (stats["best"], stats["best_step"], stats["final_step"]) == (1.0, 8, 8)
    assert alone["leader"]["leader"] == out["id"] and alone["leader"]["runner_up"] is None
    assert alone["config_differences"] == []


@needs_tmux
def test_metric_files_that_several_runs_append_to_are_not_read_as_one_run(tmux_socket: str, workdir: Path):
    """AgentJet appends to the YAML's markdown paths, so runs started from one YAML share the files: a run's
    results come from its own log then, and the answer says why."""
    val_md, train_md = workdir / "val.md", workdir / "train.md"
    files = ("--val-md", str(val_md), "--train-md", str(train_md))
    first = call("launch_experiment", name="one", workdir=str(workdir), command=trainer("--steps", "5", "--delay", "0",
                                                                                          *files))
    wait_exit(first["id"])
    second = call("launch_experiment", name="two", workdir=str(workdir), command=trainer("--steps", "3", "--delay", "0",
                                                                                           *files))
    wait_exit(second["id"])
    res = call("collect_results", id=second["id"], val_markdown=str(val_md), train_markdown=str(train_md))
    assert any(f"the training file {train_md} holds lines of more than one run" in n for n in res["notes"])
    assert any(f"the validation file {val_md} holds lines of more than one run" in n for n in res["notes"])
    score = {m["key"]: m for m in res["train_metrics"]}["critic/score/mean"]
    assert score["n"] == 3 and score["best_step"] <= 3  # this run's own three steps, from its log
    alone = call("collect_results", id=first["id"], val_markdown=str(val_md), train_markdown=str(train_md))
    assert any("holds lines of more than one run" in n for n in alone["notes"])  # 8 lines, 5 steps reached


@needs_tmux
def test_a_wait_ends_when_the_run_goes_quiet(tmux_socket: str, workdir: Path):
    """A run that stops printing steps while its processes live: status says for how long, and a wait with
    stall_s ends on it (the run's monitor saw the last step; nothing is guessed from wall clocks here)."""
    out = call("launch_experiment", name="quiet", workdir=str(workdir),
               command=trainer("--steps", "2", "--delay", "0") + "; sleep 120")
    done = call("wait_experiment", id=out["id"], until="first_step", timeout_s=30)
    assert done["reason"] == "first_step"
    stalled = call("wait_experiment", id=out["id"], stall_s=6, timeout_s=40)
    assert stalled["reason"] == "stalled" and stalled["state"] == "running"
    assert stalled["quiet_since"] == "step" and stalled["quiet_s"] >= 6 and stalled["global_step"] == 2
    assert stalled["next_wait_s"] == 30 and stalled["waited_s"] < 30
    busy = call("launch_experiment", name="busy", workdir=str(workdir),
                command=trainer("--steps", "40", "--delay", "0.5"))
    steady = call("wait_experiment", id=busy["id"], stall_s=8, timeout_s=10)
    assert steady["reason"] == "timeout" and steady["quiet_s"] is not None and steady["quiet_s"] < 8
    for run in (out, busy):
        call("stop_experiment", id=run["id"], grace_s=1)
    ended = call("experiment_status", id=out["id"], max_lines=0)
    assert ended.get("quiet_s") is None and ended.get("quiet_since") is None  # only a running run is quiet


# ---- what AgentJet's launcher checks in the launch environment, refused before anything starts

CLASSIC = ("ajet:\n  enable_swarm_mode: false\n  rollout:\n    user_workflow: tutorial.math->MathWorkflow\n"
           "hydra:\n  searchpath:\n    - file://ajet/default_config\n    - file://ajet/default_config/verl\n"
           "defaults:\n  - verl_default\n  - ajet_default\n  - _self_\n")  # ajet_default's logger: swanlab


@needs_tmux
def test_a_swanlab_logger_without_its_key_is_refused_before_launch(tmux_socket: str, workdir: Path, monkeypatch):
    from skill_server.core.errors import ToolInputError
    from skill_server.experiments.store import open_registry

    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    (workdir / "math.yaml").write_text(CLASSIC)
    command = trainer("--steps", "1") + " --conf math.yaml"
    with pytest.raises(ToolInputError) as refused:
        call("launch_experiment", name="swan", command=command, workdir=str(workdir))
    assert refused.value.field == "env" and "SWANLAB_API_KEY" in refused.value.message
    assert "ImportError" in refused.value.message and "logger: tensorboard" in refused.value.message
    with open_registry() as reg:
        assert reg.count() == 0  # nothing was started
    # given in env (or exported here), the same launch starts
    out = call("launch_experiment", name="swan", command=command, workdir=str(workdir),
               env={"SWANLAB_API_KEY": "k"})
    assert wait_exit(out["id"])["state"] == "succeeded"
    tensorboard = CLASSIC.replace("rollout:", "trainer_common:\n    logger: tensorboard\n  rollout:")
    (workdir / "tb.yaml").write_text(tensorboard)
    out = call("launch_experiment", name="tb", command=trainer("--steps", "1") + " --conf tb.yaml",
               workdir=str(workdir))
    assert wait_exit(out["id"])["state"] == "succeeded"


def test_a_first_plot_says_nothing_on_stderr_about_matplotlibs_font_cache(tmp_path: Path):
    """A fresh matplotlib config folder: the first plot builds the font list (matplotlib says so on stderr when
    that takes over 5 s, from a timer: the notice is sent here as the timer would, after a real first draw);
    the notice is dropped, other warnings of the font manager still show."""
    import subprocess
    import sys

    from tests.conftest import REPO, cli_env

    code = ("import logging\n"
            "from skill_server.experiments.plots import Curve, render\n"
            "picture = render([Curve('run', 'loss', [1, 2, 3], [0.5, 0.4, 0.3])], 'first plot')\n"
            "assert picture.png.startswith(b'\\x89PNG')\n"
            "font_manager = logging.getLogger('matplotlib.font_manager')\n"
            "font_manager.warning('Matplotlib is building the font cache; this may take a moment.')\n"
            "font_manager.warning('findfont: a real warning')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env=cli_env(MPLCONFIGDIR=str(tmp_path / "mpl")), check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "findfont: a real warning\n"
    assert list((tmp_path / "mpl").glob("fontlist-*.json"))  # it was a first plot: the font list was built


def test_a_thinned_curve_says_how_many_of_its_steps_the_table_shows():
    """results.md's table of the first metric over the whole run keeps at most CURVE_ROWS steps: a reader who
    sees steps missing is told they were thinned, not lost; a short run shows every step and no such line."""
    from skill_server.hosts.agent import results

    long = results.curve("critic/score/mean", {step: step / 10 for step in range(1, 3 * results.CURVE_ROWS + 1)})
    page = results.render({"curve": long})
    rows = [line for line in page.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == results.CURVE_ROWS and rows[-1].startswith(f"| {3 * results.CURVE_ROWS} |")
    assert f"{results.CURVE_ROWS} of its {3 * results.CURVE_ROWS} steps" in page
    short = results.render({"curve": results.curve("m", {step: 1.0 for step in range(1, 6)})})
    assert " of its " not in short and short.count("| 1 |") == 5
