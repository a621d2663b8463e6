"""The one-line ``summary`` an assistant can quote: the first key of every tool's answer, never null, one line,
and it says what the answer's own fields say."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from skill_server.app.table import TOOLS, TOOLS_BY_NAME, model_schema
from skill_server.experiments import blueprint as bp
from skill_server.tools.ray_cluster.models import RayClusterOutput
from skill_server.tools.ray_cluster.tool import cluster_summary
from tests.conftest import call_cli, cli_env
from tests.experiment_helpers import call as ecall
from tests.experiment_helpers import tmux_socket, trainer, workdir  # noqa: F401  (fixtures by name)
from tests.gpu_helpers import A100, install_fake_smi
from tests.swarm_standin import SwarmStandin, SwarmState, episode


def one_line(text: str) -> bool:
    return isinstance(text, str) and text.strip() != "" and "\n" not in text


def test_every_answer_schema_starts_with_a_required_summary_string():
    for spec in TOOLS:
        schema = model_schema(spec.output_type)
        assert next(iter(schema["properties"])) == "summary", spec.name
        assert "summary" in schema["required"], spec.name
        assert schema["properties"]["summary"]["type"] == "string", spec.name


def test_episode_cap_and_build_config_summaries_match_their_numbers():
    code, out, _ = call_cli("episode_cap", {"max_env_worker": 512, "num_repeat": 8, "train_batch_size": 32})
    assert code == 0 and next(iter(out)) == "summary" and one_line(out["summary"])
    assert out["summary"].startswith(f"Episode cap {out['episode_cap']} ")
    assert "train_batch_size binds" in out["summary"]
    code, out, _ = call_cli("build_config", {"kwargs": {"num_repeat": 6}})
    assert code == 0 and next(iter(out)) == "summary" and one_line(out["summary"])
    assert "1 kwarg and 0 writes" in out["summary"] and out["agentjet"]["version"] in out["summary"]


def test_blueprint_summary_says_validity_and_the_first_problem(tmp_path):
    code, out, _ = call_cli("blueprint", {"action": "validate", "text": "hello"})
    assert code == 0 and next(iter(out)) == "summary" and one_line(out["summary"])
    errors = [p for p in out["problems"] if p["severity"] == "error"]
    assert out["summary"].startswith(f"The blueprint is not valid: {len(errors)} errors; first: "
                                     f"{errors[0]['field']}: {errors[0]['message']}")
    (tmp_path / "a.yaml").write_text("ajet: {}\n")
    valid = bp.render({"exp_purpose": "p", "exp_codebase_dir": str(tmp_path), "exp_venv_exe": sys.executable,
                       "exp_yaml_path": str(tmp_path / "a.yaml"), "exp_launch_command": "python train.py"})
    r = TOOLS_BY_NAME["blueprint"].invoke({"action": "validate", "text": valid})
    assert r.ok and r.summary.startswith("The blueprint is valid"), r.summary


def test_gpu_status_summary_counts_the_free_gpus(tmp_path):
    state = {"gpus": [{"uuid": f"GPU-{i}", "name": A100, "memory_total": 81920, "memory_used": used,
                       "utilization": 0} for i, used in enumerate((4, 40000, 4))], "processes": []}
    install_fake_smi(tmp_path / "bin", state)
    code, out, _ = call_cli("gpu_status", {}, env=cli_env(PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin"))
    assert code == 0 and next(iter(out)) == "summary" and one_line(out["summary"])
    assert out["summary"] == "local: 2 of 3 GPUs free (95% of memory)."


def test_swarm_status_summary_per_server_and_over_all():
    running = {f"e{i}": episode(5.0) for i in range(3)}
    with SwarmStandin(SwarmState(running=running)) as a, SwarmStandin(SwarmState()) as b:
        code, out, _ = call_cli("swarm_status", {"urls": [a.url, b.url]})
        assert code == 0 and next(iter(out)) == "summary" and one_line(out["summary"])
        assert out["summary"] == "2 of 2 servers reachable, 3 running episodes in total"
        assert [next(iter(s)) for s in out["servers"]] == ["summary", "summary"]
        assert out["servers"][0]["summary"].startswith(f"{a.url}: ENGINE.ROLLING, step 3, 3 running episodes")
        single = out["servers"][0]["summary"]
        code, out, _ = call_cli("swarm_status", {"url": a.url})
        assert code == 0 and next(iter(out)) == "summary" and out["summary"] == single


def test_ray_cluster_summary_says_the_state_and_the_next_step():
    base = dict(summary="", id="r1", session="s", state="running", head="gpu1", workers=["gpu2"], port=6379,
                address="10.0.0.1:6379", ray_version="2.9", expected_nodes=2, nodes=None, resources=None, reason=None)
    waiting = RayClusterOutput(action="start", alive_nodes=1, ready=False, next_wait_s=20, **base)
    assert cluster_summary(waiting) == ("Ray cluster on gpu1 (run r1, running): not ready yet, 1/2 nodes alive; call "
                                        "ray_cluster start again in 20 s to keep waiting.")
    ready = RayClusterOutput(action="status", alive_nodes=2, ready=True, **base)
    assert cluster_summary(ready) == "Ray cluster on gpu1 (run r1, running): ready, 2/2 nodes alive."


@pytest.mark.needs("tmux")
def test_the_experiment_tools_say_the_runs_state_and_the_next_call(tmux_socket: str, workdir: Path):
    out = ecall("launch_experiment", name="said", workdir=str(workdir),
                command=trainer("--steps", "3", "--delay", "0.2"))
    exp_id = out["id"]
    assert next(iter(out)) == "summary" and one_line(out["summary"])
    assert out["summary"] == (f"Launched run {exp_id} (tmux session {out['session']}) on local: 1 process (main); "
                              f"next: wait_experiment id={exp_id} until=first_step.")
    waited = ecall("wait_experiment", id=exp_id, until="exit", timeout_s=30)
    assert next(iter(waited)) == "summary" and one_line(waited["summary"])
    assert waited["state"] == "succeeded"
    assert waited["summary"].startswith(f"Wait ended: the run ended. Run {exp_id} succeeded (exit code "
                                        f"{waited['exit_code']}) at step {waited['global_step']}")
    assert waited["summary"].endswith(f"next: collect_results id={exp_id} (results.md, plot, finish.flag).")
    status = ecall("experiment_status", id=exp_id)
    assert next(iter(status)) == "summary" and status["summary"] == status["experiments"][0]["summary"]
    assert status["experiments"][0]["summary"].startswith(f"Run {exp_id} succeeded")
    listing = ecall("experiment_status")
    assert listing["summary"].startswith(f"Run {exp_id}") or listing["summary"].startswith(
        f"{len(listing['experiments'])} runs: ")
    compared = ecall("compare_experiments", ids=[exp_id], metrics=["critic/score/mean"])
    assert next(iter(compared)) == "summary" and one_line(compared["summary"])
    assert compared["summary"].startswith(f"Compared 1 run: {exp_id} leads on critic/score/mean")
    collected = ecall("collect_results", id=exp_id, plot=False)
    assert next(iter(collected)) == "summary" and one_line(collected["summary"])
    assert collected["summary"].startswith(f"Wrote {collected['document_path']} (experiment {collected['state']}; "
                                           f"{len(collected['val_metrics'])} validation and "
                                           f"{len(collected['train_metrics'])} training metrics")
    stopped = ecall("stop_experiment", id=exp_id)
    assert next(iter(stopped)) == "summary"
    assert stopped["summary"].startswith(f"Run {exp_id} succeeded (nothing was running to stop)")


@pytest.mark.needs("tmux")
def test_a_crashed_run_and_a_running_one_say_so_with_the_error_and_the_next_call(tmux_socket: str, workdir: Path):
    crashed = ecall("launch_experiment", name="crash", workdir=str(workdir), command=trainer("--mode", "crash"))
    waited = ecall("wait_experiment", id=crashed["id"], until="exit", timeout_s=30)
    assert waited["state"] == "failed" and waited["errors"], waited["summary"]
    first = waited["errors"][0]
    assert f"Run {crashed['id']} failed (exit code {waited['exit_code']})" in waited["summary"]
    assert f"error {first['title']!r} seen {first['count']}x" in waited["summary"] and one_line(waited["summary"])
    running = ecall("launch_experiment", name="slow", workdir=str(workdir),
                    command=trainer("--steps", "50", "--delay", "1"))
    try:
        ecall("wait_experiment", id=running["id"], until="first_step", timeout_s=30)
        now = ecall("experiment_status", id=running["id"])["experiments"][0]
        assert now["state"] == "running" and now["summary"].startswith(f"Run {running['id']} is running at step ")
        assert now["summary"].endswith(f"next: wait_experiment id={running['id']}.")
        everything = ecall("experiment_status")
        assert everything["summary"].startswith("2 runs: ") and "1 running" in everything["summary"] \
            and "1 failed" in everything["summary"]
    finally:
        stopped = ecall("stop_experiment", id=running["id"], grace_s=2)
    assert stopped["summary"].startswith(f"Run {running['id']} was stopped after ")


def test_check_config_summary_counts_the_findings_and_names_the_worst(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("from ajet import AgentJetJob\njob = AgentJetJob(grpo_n=4, num_repeat=6, max_env_worker=128)\n")
    code, out, _ = call_cli("check_config", {"script": str(script)})
    assert code == 0 and next(iter(out)) == "summary" and one_line(out["summary"])
    counts, worst = out["counts"], out["findings"][0]
    assert worst["severity"] == "error" and out["summary"].startswith(f"{counts['errors']} error")
    assert f"worst: error {worst['rule']}: " in out["summary"] and "AgentJet 0.1.0 (c68c154f)" in out["summary"]
    (tmp_path / "clean.py").write_text("x = 1\n")
    code, out, _ = call_cli("check_config", {"script": str(tmp_path / "clean.py")})
    assert out["summary"].startswith("No findings against AgentJet 0.1.0 (c68c154f)") or out["findings"]
