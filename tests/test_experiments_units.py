"""Experiment lifecycle pieces that need no tmux: signatures, log reading, metrics, blueprints, results parsing."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from skill_server.app.table import TOOLS_BY_NAME
from skill_server.core.errors import ToolInputError
from skill_server.experiments import blueprint, logs, summaries
from skill_server.experiments import checks as launch
from skill_server.experiments.signatures import SIGNATURES, SIGNATURES_BY_NAME, render_table
from skill_server.experiments.spec import RunSpec
from tests.conftest import REPO

ISSUE_LIST = (
    "cuda_oom", "vllm_wake_oom", "nccl_error", "ray_start_failure", "host_oom_killed", "nan_loss", "python_exception",
    "swarm_server_unreachable", "engine_offline", "episode_expired", "batch_not_divisible", "illegal_token_length",
    "gpu_memory_check_failed", "swanlab_api_key_missing", "config_conflict",
)


# ---- signatures


def test_signature_table_covers_the_issue_and_examples_match():
    assert set(ISSUE_LIST) <= set(SIGNATURES_BY_NAME)
    assert len(SIGNATURES_BY_NAME) == len(SIGNATURES)
    for sig in SIGNATURES:
        assert sig.severity in ("error", "warning")
        assert sig.hint and "\n" not in sig.hint
        assert sig.regex.search(sig.example), sig.name
        if sig.needles:
            assert any(n in sig.example for n in sig.needles), sig.name


def test_signatures_do_not_fire_on_healthy_lines():
    healthy = "\n".join([
        "(TaskRunner pid=4821) step:1 - critic/real_reward:0.25 - actor/kl_loss:0.0 - training/global_step:1",
        "Killed episode budget is 12",  # not the shell's 'Killed' line
        "Received workflow output for episode 3f2a (Reward: 0.5)",
        "Rollout progress (812.5 tokens/s): [0-5]:3 threads  //  [finished]:12 threads",
        "[validate_config] All configuration checks passed successfully!",
        "no errors here; ErrorHandler configured",
    ])
    state = logs.ScanState(offsets=[0])
    logs.scan_text(healthy, state, None, role="main", now=1.0)
    assert state.errors == {}
    assert state.first_step_seen and state.global_step == 1


def test_error_signatures_page_is_in_sync_with_the_table():
    page = (REPO / "references" / "error-signatures.md").read_text()
    assert render_table() in page, "regenerate the table: python -m skill_server.experiments.signatures"
    for sig in SIGNATURES:
        assert f"`{sig.name}`" in page and sig.hint in page


# ---- metric lines


def test_metric_line_with_ray_prefix_and_value_forms():
    line = ("\x1b[36m(TaskRunner pid=48213, ip=10.0.0.2)\x1b[0m step:12 - critic/llm_call_cnt:4.0 - "
            "actor/pg_loss:-0.0041 - actor/lr:1e-06 - training/global_step:12 - perf/mfu/actor:np.float64(0.31) - "
            "actor/kl_loss:nan - note:abc")
    step, metrics = logs.parse_metric_line(line)
    assert step == 12
    assert metrics["actor/pg_loss"] == -0.0041 and metrics["actor/lr"] == 1e-06
    assert metrics["training/global_step"] == 12 and isinstance(metrics["training/global_step"], int)
    assert metrics["perf/mfu/actor"] == 0.31 and math.isnan(metrics["actor/kl_loss"])
    assert "note" not in metrics
    assert logs.parse_metric_line("step:3 - a:1")[0] == 3
    assert logs.parse_metric_line("rollout step begin") is None
    assert logs.parse_metric_line("Training Progress: step:3 - a:1") is None


def test_scan_keeps_last_metrics_and_counts_errors(tmp_path: Path):
    state = logs.ScanState(offsets=[0])
    text = ("step:1 - actor/kl_loss:0.0 - training/global_step:1\nValueError: x\n"
            "step:2 - actor/kl_loss:nan - training/global_step:2\nValueError: y\n")
    logs.scan_text(text, state, None, role="server", now=5.0)
    assert state.global_step == 2 and state.last_metrics["actor/kl_loss"] is None  # NaN is reported as null
    assert state.errors["python_exception"]["count"] == 2
    assert state.errors["python_exception"]["line"] == "ValueError: y"
    assert state.errors["nan_loss"]["count"] == 1 and state.errors["nan_loss"]["role"] == "server"
    assert state.first_step_seen and state.first_step_at == 5.0


# ---- appended-byte reading


def test_read_appended_only_new_complete_lines(tmp_path: Path):
    log = tmp_path / "x.log"
    log.write_text("a\nb\npart")
    chunk = logs.read_appended(str(log), 0, 1024, final=False)
    assert chunk.text == "a\nb\n" and chunk.end == 4
    with log.open("a") as fh:
        fh.write("ial\nc\n")
    chunk = logs.read_appended(str(log), chunk.end, 1024, final=False)
    assert chunk.text == "partial\nc\n" and chunk.skipped == 0
    assert logs.read_appended(str(log), chunk.end, 1024, final=False).text == ""
    log.write_text("tail without newline")
    assert logs.read_appended(str(log), 0, 1024, final=True).text == "tail without newline"
    # a file that shrank (rotated) restarts at 0
    assert logs.read_appended(str(log), 10_000, 1024, final=True).reset


def test_read_appended_budget_keeps_newest_whole_lines(tmp_path: Path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i}\n" for i in range(10_000)))
    chunk = logs.read_appended(str(log), 0, 1000, final=False)
    lines = chunk.text.splitlines()
    assert lines[-1] == "line 9999" and lines[0].startswith("line ") and len(chunk.text) <= 1000
    assert chunk.skipped + len(chunk.text.encode()) == log.stat().st_size
    assert logs.read_appended(str(log), 0, 10, final=False).text == ""  # no whole line fits: wait


# ---- blueprints


@pytest.mark.parametrize("text,seconds", [
    ("24 hours", 86400), ("90 min", 5400), ("1.5h", 5400), ("2h30m", 9000), ("1 day", 86400), ("45s", 45),
    ("12 小时", 43200),
])
def test_parse_duration(text, seconds):
    assert blueprint.parse_duration(text) == seconds


def test_a_negative_duration_is_reported_and_a_range_is_not_negative(tmp_path):
    assert blueprint.parse_duration("-5h") == -18000 and blueprint.parse_duration(" - 2 hours") == -7200
    assert blueprint.parse_duration("4-6 hours") == 21600 and blueprint.parse_duration("run-2h") == 7200
    checked = blueprint.validate_text("[exp_max_time]\n-5h\n", tmp_path)
    assert checked.max_time_s is None
    assert any(p.field == "exp_max_time" and "negative" in p.message for p in checked.problems)


def test_parse_max_time_with_first_step_clause():
    assert blueprint.parse_max_time("24 hours per run; first step within 20 min") == (86400, 1200)
    assert blueprint.parse_max_time("about a day") == (None, None)
    assert blueprint.parse_max_time("24") == (None, None)


def test_validate_tolerates_formatting_and_reports_problems(tmp_path: Path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "exp.yaml").write_text("ajet: {}\n")
    text = f"""Blueprint for the top-k ablation.

## [exp_purpose]
- description: what we test
- content: Ablate top-k sampling on math

**[exp_codebase_dir]**: `{code}`
- [exp_venv_exe]: ./venv/bin/python
exp_yaml_path: exp.yaml

### [exp_launch_command]
```bash
python -m ajet.launcher --conf exp.yaml \\
    --autokill
```
[exp_max_time]
ninety minutes or so

[todo]
- tune lr
"""
    v = blueprint.validate_text(text, tmp_path)
    assert v.values["exp_purpose"] == "Ablate top-k sampling on math"
    assert v.values["exp_launch_command"] == "python -m ajet.launcher --conf exp.yaml --autokill"
    assert v.resolved["exp_yaml_path"] == str(code / "exp.yaml")
    by_field = {(p.field, p.severity) for p in v.problems}
    assert ("exp_result_dir", "error") in by_field  # missing section
    assert ("exp_venv_exe", "warning") in by_field and ("exp_venv_exe", "error") in by_field  # relative + missing
    assert ("exp_max_time", "error") in by_field  # unparsable
    assert "tune lr" in v.notes and not v.ok


def test_agentjets_numbered_label_form_parses(tmp_path: Path):
    """AgentJet's own blueprint example numbers its bullets (content 1, content 2, warning 1, note 1)."""
    code = tmp_path / "code"
    (code / "venv" / "bin").mkdir(parents=True)
    (code / "venv" / "bin" / "python").write_text("")
    (code / "venv" / "bin" / "python").chmod(0o755)
    (code / "exp.yaml").write_text("ajet: {}\n")
    text = f"""    # Experiment Blueprint

    ## [exp_purpose]
    - description: what this run finds out
    - hint: one sentence
    - content 1: Ablate top-k sampling on math
    - content 2: against the baseline of run 3

    ## [exp_codebase_dir]
    - description: absolute path
    - content 1: {code}
    - content 2:
    - warning 1: never the venv

    ## [exp_venv_exe]
    - content 1: {code}/venv/bin/python

    ## [exp_yaml_path]
    - content 1: {code}/exp.yaml

    ## [exp_launch_command]
    - content 1: python -m ajet.launcher --conf exp.yaml --autokill

    ## [exp_result_dir]
    - content 1: {code}/results

    ## [exp_max_time]
    - content 1: 24 hours
    - content 2: first step within 20 minutes

    ## Other Notes
    - note 1: install flash-attn first
"""
    v = blueprint.validate_text(text, tmp_path)
    assert v.ok, v.problems
    assert v.values["exp_purpose"] == "Ablate top-k sampling on math\nagainst the baseline of run 3"
    assert v.resolved["exp_codebase_dir"] == str(code) and v.resolved["exp_venv_exe"] == f"{code}/venv/bin/python"
    assert v.values["exp_launch_command"] == "python -m ajet.launcher --conf exp.yaml --autokill"
    assert (v.max_time_s, v.first_step_timeout_s) == (86400, 1200)
    assert "install flash-attn first" in v.notes


def test_template_round_trips_through_validate(tmp_path: Path):
    text = blueprint.render({"exp_purpose": "p", "exp_codebase_dir": str(tmp_path), "exp_launch_command": "echo"})
    v = blueprint.validate_text(text, tmp_path)
    assert v.max_time_s == 86400 and v.first_step_timeout_s == 1200
    assert v.values["exp_result_dir"] == "./auto_agent/exp_results/"
    assert {p.field for p in v.problems if p.severity == "error"} == {"exp_venv_exe", "exp_yaml_path"}


def test_blueprint_tool_validate_and_template(tmp_path: Path):
    spec = TOOLS_BY_NAME["blueprint"]
    path = tmp_path / "blueprint.md"
    out = spec.invoke({"action": "template", "path": str(path), "purpose": "math ablation",
                       "codebase_dir": str(tmp_path), "launch_command": "python train.py", "max_time": "2h"})
    assert out.path == str(path) and path.read_text() == out.text and out.max_time_s == 7200
    with pytest.raises(Exception, match="exists"):
        spec.invoke({"action": "template", "path": str(path), "purpose": "x"})
    out = spec.invoke({"action": "validate", "path": str(path)})
    assert out.fields["exp_launch_command"] == "python train.py" and not out.ok
    with pytest.raises(ToolInputError) as err:
        spec.invoke({"action": "template", "max_time": "soon"})
    assert err.value.field == "max_time"
    with pytest.raises(ToolInputError) as err:
        spec.invoke({"action": "validate", "path": str(path), "purpose": "x"})
    assert err.value.field == "purpose"
    for arguments in ({"action": "validate", "text": "x", "host": "gpu1"}, {"action": "template", "host": "gpu1"}):
        with pytest.raises(ToolInputError) as err:  # a host takes a path: its folder resolves the relative ones
            spec.invoke(arguments)
        assert err.value.field == "host", arguments


def test_a_relative_blueprint_path_resolves_against_the_working_directory_in_both_tools(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bp.md").write_text("## [exp_purpose]\n- content: relative\n")
    assert TOOLS_BY_NAME["blueprint"].invoke({"action": "validate", "path": "bp.md"}).path == str(tmp_path / "bp.md")
    with pytest.raises(ToolInputError) as err:  # read, then refused for its missing sections (nothing started)
        TOOLS_BY_NAME["launch_experiment"].invoke({"blueprint": "bp.md"})
    assert err.value.field == "blueprint" and "blueprint has problems" in err.value.message
    for tool, arguments in (("blueprint", {"action": "validate", "path": "gone.md"}),
                            ("launch_experiment", {"blueprint": "gone.md"})):
        with pytest.raises(ToolInputError) as err:
            TOOLS_BY_NAME[tool].invoke(arguments)
        assert f"not found: {tmp_path / 'gone.md'}" in err.value.message


@pytest.mark.parametrize("value,host,source,run_host", [
    ("gpu1:/abs/bp.md", None, ("gpu1", "/abs/bp.md"), "gpu1"),
    ("gpu1:~/exp/bp.md", "gpu1", ("gpu1", "~/exp/bp.md"), "gpu1"),
    ("alice@[::1]:/x/bp.md", None, ("alice@[::1]", "/x/bp.md"), "alice@[::1]"),
    ("/abs/bp.md", "gpu1", ("gpu1", "/abs/bp.md"), "gpu1"),  # a plain path is on the run's host
    ("local:/abs/bp.md", "gpu1", ("local", "/abs/bp.md"), "gpu1"),  # read here, run on gpu1
    ("bp.md", None, ("local", "bp.md"), "local"),
    ("notes:draft.md", None, ("local", "notes:draft.md"), "local"),  # no path after the colon: a file here
    ("./a:/b.md", None, ("local", "./a:/b.md"), "local"),
])
def test_where_a_blueprint_is_read_and_where_it_runs(value, host, source, run_host):
    found, runs_on = blueprint.locate(value, host, "blueprint")
    assert (found.host, found.path) == source and runs_on == run_host


@pytest.mark.parametrize("value,host,words", [
    ("gpu1:/abs/bp.md", "gpu2", "the blueprint is on gpu1 but host is gpu2"),
    ("ssh://u@h:2222/x.md", None, "cannot prefix a path"),
    ("-oProxyCommand=x:/bp.md", None, "would be read by ssh as an option"),
])
def test_a_blueprint_place_that_cannot_be_meant_is_refused_before_any_host_is_asked(value, host, words):
    with pytest.raises(ToolInputError) as err:
        blueprint.locate(value, host, "blueprint")
    assert err.value.field == "blueprint" and words in err.value.message and "\n" not in err.value.message


# ---- names


@pytest.mark.parametrize("name,expected", [("ajet-run1", "ajet-run1"), ("run_1", "ajet_run_1"), ("x_ajet", "x_ajet")])
def test_session_names(name, expected):
    assert launch.session_name(name, None) == expected


@pytest.mark.parametrize("name", ["my exp", "a.b", "a:b", "résumé", "", "x" * 65, "a;rm -rf", "$(x)"])
def test_session_names_with_odd_characters_are_rejected(name):
    with pytest.raises(ToolInputError) as err:
        launch.session_name(name, None)
    assert err.value.field == "name"


def test_session_name_from_purpose():
    assert launch.session_name(None, "Math: top-k ablation (v2)!") == "ajet_math_top_k_ablation_v2"


def test_session_name_from_a_long_purpose_is_a_few_whole_words():
    purpose = "25 training steps of the math recipe we want to compare against the baseline"
    assert launch.session_name(None, purpose) == "ajet_25_training_steps_math"
    assert launch.session_name(None, "Does a larger max_env_worker help?") == "ajet_larger_max_env_worker"
    assert launch.session_name(None, "the of and") == "ajet_the_of_and"  # nothing but filler: kept as written


# ---- results parsing


def test_parse_dict_line_variants():
    assert summaries.parse_dict_line("{'mean_reward': 0.5, 'name': 'x', 'n': 3}") == {"mean_reward": 0.5, "n": 3.0}
    parsed = summaries.parse_dict_line("step 3: {'a': nan, 'b': -inf, 'c': np.float64(0.25), 'd': True}")
    assert math.isnan(parsed["a"]) and parsed["b"] == -math.inf and parsed["c"] == 0.25 and parsed["d"] == 1.0
    assert summaries.parse_dict_line("{'a': __import__('os').system('true')}") is None
    assert summaries.parse_dict_line("| a | b |") is None


def test_plateau_and_summary():
    assert summaries.plateaued([0.1, 0.3, 0.5, 0.5, 0.5, 0.5]) is True
    assert summaries.plateaued([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]) is False
    assert summaries.plateaued([0.1, 0.2]) is None
    rows = [{"mean_reward": v, "actor/pg_loss": 1 - v} for v in (0.1, 0.2, 0.3, 0.3, 0.3, 0.3)]
    summary = {m.key: m for m in summaries.summarise(rows)}
    assert summary["mean_reward"].best == 0.3 and summary["mean_reward"].trend == "up"
    assert summary["mean_reward"].plateau is True
    assert summary["actor/pg_loss"].best == 0.7 and summary["actor/pg_loss"].plateau is None


def test_tool_annotations_are_honest():
    t = TOOLS_BY_NAME
    assert t["experiment_status"].read_only and not t["experiment_status"].destructive
    assert not t["launch_experiment"].read_only and not t["launch_experiment"].idempotent
    assert t["stop_experiment"].destructive and not t["stop_experiment"].read_only
    assert t["wait_experiment"].reports_progress
    assert not t["collect_results"].read_only and not t["blueprint"].read_only
    assert t["collect_results"].destructive  # it replaces results.md and metrics.png


def test_wait_timeout_is_clamped_and_inputs_are_named():
    spec = TOOLS_BY_NAME["wait_experiment"]
    with pytest.raises(ToolInputError) as err:
        spec.invoke({"id": "x", "until": "pattern"})
    assert err.value.field == "pattern"
    with pytest.raises(ToolInputError) as err:
        spec.invoke({"id": "x", "until": "later"})
    assert err.value.field == "until"
    with pytest.raises(ToolInputError) as err:
        spec.invoke({"id": "nope", "timeout_s": 500})
    assert err.value.field == "id"


def test_wait_refuses_a_status_cursor_and_says_where_it_goes():
    """A wait result carries the status `cursor`; handing it back to wait (without a pattern) is refused with
    the call that does read new lines."""
    with pytest.raises(ToolInputError) as err:
        TOOLS_BY_NAME["wait_experiment"].invoke({"id": "x", "since": "120"})
    assert err.value.field == "since"
    assert str(err.value) == ("since: is for until='pattern'; to read new log lines use "
                              "experiment_status(id, since=...)")


def test_wait_back_off_advances_only_with_timeouts_and_an_ended_run_has_exited():
    from skill_server.experiments.store import open_registry
    from skill_server.tools.wait_experiment.tool import WAIT_SCHEDULE_S, _settle

    with open_registry() as reg:
        reg.insert(id="r", session="s", socket="sock", created=0.0, started_at="",
                   spec=RunSpec.from_json({"processes": [{"role": "main", "log_path": "/x.log"}], "run_dir": "/r"}))
        assert [_settle(reg, "r", "running", "timeout")[1] for _ in range(7)] == list(WAIT_SCHEDULE_S) + [960]
        assert _settle(reg, "r", "running", "first_step") == ("first_step", 960)  # read, not advanced
        assert _settle(reg, "r", "running", "error") == ("error", 30)
        assert _settle(reg, "r", "unreachable", "unreachable") == ("unreachable", 960)
        for reason, final in (("timeout", "exited"), ("error", "exited"), ("pattern", "pattern"),
                              ("first_step", "first_step")):
            assert _settle(reg, "r", "failed", reason) == (final, 0)
        assert reg.get("r").timeouts == 8


def test_read_only_lookups_on_a_fresh_machine_create_no_registry():
    state = Path(os.environ["SKILL_SERVER_STATE_DIR"])
    assert TOOLS_BY_NAME["experiment_status"].invoke({}).experiments == []
    for tool, arguments in (("experiment_status", {"id": "x"}), ("wait_experiment", {"id": "x"}),
                            ("compare_experiments", {"ids": ["x", "y"]})):
        with pytest.raises(ToolInputError, match="no experiment"):
            TOOLS_BY_NAME[tool].invoke(arguments)
    assert not state.exists()


# ---- vLLM's KV cache: the utilization it needs, with its arithmetic and inputs, and what each fix costs

KV_V0 = ("(WorkerDict pid=7) ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
         "that can be stored in KV cache (16832). Try increasing `gpu_memory_utilization` or decreasing "
         "`max_model_len` when initializing the engine.")
PROFILE = ("INFO 04-02 21:43:03 worker.py:241] the current vLLM instance can use total_gpu_memory (79.11GiB) x "
           "gpu_memory_utilization (0.60) = 47.47GiB")
#: Qwen2.5-7B-Instruct's config.json (the fields the KV shape needs)
QWEN_7B = {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "hidden_size": 3584,
           "torch_dtype": "bfloat16"}


def test_the_kv_cache_fix_gives_the_utilization_needed_with_its_arithmetic():
    from skill_server.experiments.fixes import hint_for, model_kv

    shape = model_kv(QWEN_7B)
    assert shape == {"layers": 28, "kv_heads": 4, "head_dim": 128, "dtype": "bfloat16", "dtype_bytes": 2}
    config = {"lengths": {"max_model_len": 32768, "max_prompt_length": 2048, "max_response_length": 30720,
                          "gpu_memory_utilization": 0.6, "tensor_model_parallel_size": 1},
              "model_kv": {**shape, "source": "/m/Qwen2.5-7B-Instruct/config.json"}}
    hint = hint_for("vllm_kv_cache_too_small", KV_V0, config, [PROFILE])
    # 2 x 28 layers x 4 KV heads x 128 x 2 B = 57344 B per token; (32768 - 16832) x 57344 B = 0.851 GiB;
    # 0.851 / 79.11 = 0.01076: 0.60 + 0.01076 = 0.6108 -> at least 0.62
    per_token = 2 * 28 * 4 * 128 * 2
    assert per_token == 57344 and "57344 B per token from /m/Qwen2.5-7B-Instruct/config.json" in hint
    assert "raise ajet.rollout.gpu_memory_utilization to at least 0.62 (now 0.6)" in hint
    assert "(32768 - 16832) tokens x 57344 B = 0.851 GiB / 79.11 GiB = 0.6108" in hint
    assert "GPU memory 79.11 GiB from vLLM's memory profile line" in hint and "a lower bound" in hint
    # both fixes with their cost to the experiment: the shorter context defeats a 32k experiment
    assert "Fix 2: lower ajet.rollout.max_model_len to 16384 (at most 16832)" in hint
    assert "an experiment about 32768-token context no longer tests it" in hint
    assert "Cost: vLLM keeps that share of each GPU it shares with the trainer" in hint


def test_tensor_parallel_splits_the_kv_heads_and_v1_gives_the_memory_outright():
    from skill_server.experiments.fixes import hint_for, model_kv

    tp4 = {"lengths": {"gpu_memory_utilization": 0.8, "tensor_model_parallel_size": 4},
           "model_kv": model_kv(QWEN_7B), "gpu_total_mib": 81920, "gpu_host": "gpu1"}
    hint = hint_for("vllm_kv_cache_too_small", KV_V0, tp4)
    assert "4 KV heads / TP 4" in hint and "= 14336 B per token" in hint  # one KV head per GPU
    assert "GPU memory 80.0 GiB from nvidia-smi on gpu1" in hint
    v1 = ("ValueError: To serve at least one request with the models's max seq len (32768), (4.0 GiB KV cache is "
          "needed, which is larger than the available KV cache memory (2.6 GiB). Based on the available memory, the "
          "estimated maximum model length is 21296.")
    hint = hint_for("vllm_kv_cache_too_small", v1, {"lengths": {"gpu_memory_utilization": 0.9}, "gpu_total_mib": 24576})
    assert "0.9 + (4 - 2.6) GiB / 24 GiB = 0.9583, so at least 0.96" in hint and "likely short of memory" in hint
    too_much = hint_for("vllm_kv_cache_too_small", v1.replace("(4.0 GiB", "(40.0 GiB"),
                        {"lengths": {"gpu_memory_utilization": 0.9}, "gpu_total_mib": 24576})
    assert "no gpu_memory_utilization makes room" in too_much and "tensor_model_parallel_size" in too_much


def test_without_the_gpu_memory_the_fix_names_what_is_missing():
    from skill_server.experiments.fixes import hint_for, model_kv

    hint = hint_for("vllm_kv_cache_too_small", KV_V0, {"lengths": {"gpu_memory_utilization": 0.6},
                                                       "model_kv": model_kv(QWEN_7B)})
    assert "how far is unknown here, for want of the GPU's memory" in hint and "(the cache must grow by" in hint
    assert "at least" not in hint.split("Fix 2")[0]


def test_vllms_log_alone_gives_the_utilization():
    """v0's profile lines: the GPU's memory and the utilization in force, and the KV GiB the error's cache holds."""
    from skill_server.experiments.fixes import hint_for

    reserved = ("INFO worker.py:241] model weights take 15.23GiB; non_torch_memory takes 0.19GiB; PyTorch activation "
                "peak memory takes 30.2GiB; the rest of the memory reserved for KV Cache is 0.92GiB.")
    hint = hint_for("vllm_kv_cache_too_small", KV_V0, {}, [PROFILE, reserved])
    # 0.92 GiB for 16832 tokens: 58690 B per token; (32768 - 16832) x that = 0.871 GiB; 0.6 + 0.871 / 79.11 = 0.611
    assert "0.92 GiB of KV cache for 16832 tokens from vLLM's log" in hint
    assert "raise ajet.rollout.gpu_memory_utilization to at least 0.62 (now 0.6)" in hint


def test_the_kv_fix_says_what_each_more_sequence_at_once_costs_and_offers_no_tensor_parallel_past_the_gpus():
    """The lower bound fits one whole sequence; rollouts run many at once: each more costs the KV of one whole
    sequence (57344 B x 32768 tokens = 1.75 GiB, 1.75 / 79.11 = 0.022 of the GPU). With TP already at the node's
    GPU count there is nothing to spread over: that fix is left out."""
    from skill_server.experiments.fixes import hint_for, model_kv

    config = {"lengths": {"gpu_memory_utilization": 0.6, "tensor_model_parallel_size": 1, "n_gpus_per_node": 1},
              "model_kv": model_kv(QWEN_7B)}
    hint = hint_for("vllm_kv_cache_too_small", KV_V0, config, [PROFILE])
    assert "each more at once needs 1.75 GiB more (0.022 of the GPU; 2 at once 0.64, 4 at once 0.68)" in hint, hint
    assert "tensor_model_parallel_size" not in hint
    config["lengths"]["n_gpus_per_node"] = 8
    assert "raise ajet.rollout.tensor_model_parallel_size (now 1, of 8 GPUs per node)" in hint_for(
        "vllm_kv_cache_too_small", KV_V0, config, [PROFILE])


def test_a_summary_quotes_a_long_hint_up_to_a_sentences_end_and_says_where_the_rest_is():
    from skill_server.experiments.sentences import HINT_IN_SUMMARY, _hint_head

    long = "First sentence with the number 0.62 in it. " + "Then the arithmetic, at length. " * 30
    head = _hint_head(long)
    quoted = head.removesuffix(" (all of it: errors[0].hint)")
    assert quoted != head and quoted.startswith("First sentence with the number 0.62 in it.")
    assert quoted.endswith("at length") and len(quoted) <= HINT_IN_SUMMARY and "..." not in head
    assert _hint_head("Short hint.") == "Short hint"
