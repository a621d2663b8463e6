"""The night in one call and the morning in one call (issue 30), with a real tmux server and real processes.

A stand-in verl trainer (``tests/overnight_standin.py``) saves ``global_step_N`` every three steps, continues from
the newest one when started again (verl's ``Load from checkpoint folder:`` line) and, on its first start only,
hangs after an NCCL collective timeout. It is launched with a resume policy, a notify file and ``on_end:
collect``; then no tool call is made until the notify file says the experiment ended. Only then: the file's lines
(one per happening, in their order), one status and one collect_results on the first id (the whole curve, final
and best with their steps, ``alive`` false) and the result directory (the document, then finish.flag). The same
over ssh (an sshd on loopback), and a first step that never comes with ``on_first_step_overdue: stop``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from skill_server.hosts.ssh import close_masters
from tests.experiment_helpers import PY, call, pid_alive, status, tmux_socket, wait_until, workdir  # noqa: F401
from tests.test_experiments_remote import NODE_PY, remote, sshd, workdir_on  # noqa: F401

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

STANDIN = Path(__file__).with_name("overnight_standin.py")
#: A notify file's line: '<UTC time> <run id> <kind>: <text>'.
LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (\S+) (\w+): (.+)$")


def lines(path: Path) -> list[tuple[str, str, str]]:
    """(run id, kind, text) of each line of a notify file."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        found = LINE.match(line)
        assert found, line
        out.append((found.group(2), found.group(3), found.group(4)))
    return out


#: The run's YAML: AgentJet puts its checkpoints in <checkpoint_base_dir>/<project_name>/<experiment_name>.
YAML = """ajet:
  project_name: overnight
  experiment_name: night_a
  trainer_common:
    checkpoint_base_dir: ./saved_checkpoints
    total_training_steps: 12
    save_freq: 3
"""


def night(work: Path, python: str, host: str | None = None) -> tuple[dict, Path, Path]:
    """Launch the stand-in overnight with a resume policy, a notify file and the wrap-up: the one call. An earlier
    experiment of the same project left its checkpoints under the same base."""
    (work / "exp.yaml").write_text(YAML)
    ckpt, alerts = work / "saved_checkpoints" / "overnight" / "night_a", work / "alerts.log"
    (work / "saved_checkpoints" / "overnight" / "older_b" / "global_step_100").mkdir(parents=True)
    command = f"{python} {STANDIN} --conf exp.yaml --starts {work / 'starts'} --total 12 --hang-after 5"
    extra = {"host": host} if host else {}
    out = call("launch_experiment", name="night", workdir=str(work), command=command, **extra,
               policy={"on_error": "resume", "errors": ["nccl_error"], "max_resumes": 2, "backoff_s": 1,
                       "on_end": "collect", "notify_file": str(alerts)})
    return out, ckpt, alerts


def check_the_night(out: dict, ckpt: Path, alerts: Path) -> None:
    first = out["id"]
    said = lines(alerts)
    assert [(i, k) for i, k, _ in said] == [
        (first, "started"), (first, "first_step"), (first, "failure"), (first, "restart"),
        (f"{first}.r2", "first_step"), (f"{first}.r2", "end")], said
    assert said[2][2].startswith("nccl_error (error) in main: [Rank 1] Watchdog caught collective operation "
                                 "timeout") and said[2][2].endswith("-> on_error: resume"), said[2]
    assert said[3][2] == (f"attempt 2 of at most 3 relaunched as {first}.r2 after nccl_error (on_error), "
                          f"continuing from global_step_3 ({ckpt}/global_step_3)"), said[3]
    assert said[4][2].startswith("attempt 2: first training step (step 4)"), said[4]
    result_dir = Path(out["result_dir"])
    assert said[5][2] == (f"ended succeeded (attempt 2) at step 12, exit code 0; results: {result_dir}/results.md; "
                          "finish.flag written"), said[5]


def check_the_morning(out: dict, ckpt: Path) -> None:
    first = out["id"]
    seen = status(first, max_lines=5, metrics_history=["critic/score/mean"])
    whole = seen["experiment"]
    assert seen["alive"] is False and whole["alive"] is False and whole["state"] == "succeeded"
    assert [(a["id"], a["state"]) for a in whole["attempts"]] == [(first, "stopped"), (f"{first}.r2", "succeeded")]
    assert whole["attempts"][0]["ended_by"] == f"nccl_error: stopped and relaunched as {first}.r2 by its policy"
    assert whole["attempts"][1]["resumed_from"] == f"global_step_3 ({ckpt}/global_step_3)"
    logs = [a["log_path"] for a in whole["attempts"]]
    assert logs[1] == logs[0].replace(f"/{first}/", f"/{first}.r2/") and logs[0] != logs[1]  # each its own
    (score,) = [m for m in whole["metrics"] if m["name"] == "critic/score/mean"]
    assert (score["final"], score["final_step"], score["best"], score["best_step"]) == (0.321, 12, 0.401, 8)
    assert score["best_saved"] is False and score["nearest_checkpoint"] == 9
    (curve,) = seen["metrics_history"]["series"]
    assert curve["steps"] == list(range(1, 13))  # steps 1-3 of the first attempt, 4-12 of the second
    assert curve["last"][:3] == [0.05, 0.1, 0.15] and curve["last"][3] == 0.201  # the second start's step 4
    assert seen["policy"]["on_error"] == "resume" and seen["policy"]["notify_file"].endswith("alerts.log")
    assert "Load from checkpoint folder" not in "\n".join(seen["lines"])  # the first attempt's own output only
    listed = seen["checkpoints"]  # the config's own experiment's, not the older one's under the same base
    assert listed["directory"] == str(ckpt) and [c["step"] for c in listed["checkpoints"]] == [3, 6, 9, 12]
    collected = call("collect_results", id=first, plot=False)
    assert collected["alive"] is False and collected["experiment"]["state"] == "succeeded"
    (train,) = [m for m in collected["train_metrics"] if m["key"] == "critic/score/mean"]
    assert (train["n"], train["best"], train["best_step"], train["last"]) == (12, 0.401, 8, 0.321)
    result_dir = Path(out["result_dir"])
    document, flag = result_dir / "results.md", result_dir / "finish.flag"
    assert collected["document_path"] == str(document) and collected["finish_flag_path"] == str(flag)
    assert flag.stat().st_mtime_ns >= document.stat().st_mtime_ns
    text = document.read_text()
    assert f"| 2 | {first}.r2 | succeeded | 4-12 | global_step_3 ({ckpt}/global_step_3) |" in text
    assert "| critic/score/mean (higher is better) | 0.321 | 12 | 0.401 | 8 | no; nearest global_step_9 |" in text


def test_the_night_in_one_call_and_the_morning_in_one_call(tmux_socket: str, workdir: Path):
    out, ckpt, alerts = night(workdir, PY)
    # no tool call from here on until the notify file says the experiment ended
    wait_until(lambda: any(k == "end" for _, k, _ in lines(alerts)), timeout=90, interval=0.2)
    check_the_night(out, ckpt, alerts)
    result_dir = Path(out["result_dir"])
    flag = result_dir / "finish.flag"
    assert flag.stat().st_mtime_ns >= (result_dir / "results.md").stat().st_mtime_ns
    assert (result_dir / out["id"] / "results.md").is_file()  # the experiment's own page, in its own folder
    check_the_morning(out, ckpt)


def test_the_same_night_on_an_ssh_node_with_no_connection(remote):
    work = workdir_on(remote)
    out, ckpt, alerts = night(work, NODE_PY, host="node1")
    close_masters()  # no connection, no tool call: the node's monitors do the night's work alone
    wait_until(lambda: any(k == "end" for _, k, _ in lines(alerts)), timeout=120, interval=0.3)
    check_the_night(out, ckpt, alerts)
    check_the_morning(out, ckpt)


def test_a_first_step_that_never_comes_is_stopped_by_its_policy(tmux_socket: str, workdir: Path):
    alerts, events = workdir / "alerts.log", workdir / "events.jsonl"
    out = call("launch_experiment", name="stuck", workdir=str(workdir), first_step_timeout_s=2,
               command=f"{PY} {STANDIN} --ckpt {workdir / 'ckpt'} --starts {workdir / 'starts'} --never-steps",
               policy={"on_first_step_overdue": "stop", "notify_file": "alerts.log",  # relative: in the workdir
                       "notify_command": f"cat >> {events}"})
    assert out["policy"]["on_first_step_overdue"] == "stop" and out["policy"]["notify_file"] == str(alerts)
    assert out["policy"]["source"] == "argument" and out["policy"]["max_resumes"] == 2  # every field, defaults in
    # no tool call until it ended: the run logs all along, a stall can never be judged; the deadline stops it
    wait_until(lambda: any(k == "end" for _, k, _ in lines(alerts)), timeout=40, interval=0.2)
    said = lines(alerts)
    assert [k for _, k, _ in said] == ["started", "stall", "stopped", "end"], said
    assert said[1][2].startswith("no first training step within its deadline of 2 s (its output last grew ")
    assert said[2][2] == "stopped for good: no first step by its deadline (on_first_step_overdue); stopped"
    assert said[3][2].startswith("ended stopped at step None, exit code ")
    wait_until(lambda: len(told(events)) == 4, timeout=15)
    sent = told(events)  # the command got the same happenings, one JSON object each, its kind a field
    assert [(e["kind"], e["text"]) for e in sent] == [(k, t) for _, k, t in said]
    assert all((e["exp_id"], e["experiment"], e["attempt"]) == (out["id"], out["id"], 1) for e in sent)
    assert sent[1]["since"] == "start" and sent[1]["deadline_s"] == 2 and sent[2]["trigger"] == "first_step_overdue"
    seen = status(out["id"], max_lines=0)
    assert seen["state"] == "stopped" and seen["alive"] is False and seen["first_step_overdue"] is True
    assert seen["summary"].startswith(f"Run {out['id']} was stopped by its policy on first_step_overdue (stopped)")
    assert "until=first_step" not in seen["summary"] and "collect_results" not in seen["summary"]
    assert seen["summary"].endswith(f"next: read its last lines (experiment_status id={out['id']} since=0) for the "
                                    "cause, fix it and launch it again."), seen["summary"]


def told(path: Path) -> list[dict]:
    import json

    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
