"""When nobody is watching (issue 23): the run monitor on the run's host detects stalls and carries out the
launch's policies alone, with real processes and a real tmux server, locally and on an ssh node.

Each test launches, then makes no tool call at all until it checks the files the monitor wrote (the notify
command's log, results.md, finish.flag) and the run's processes; only then does one status call show what
the policy did. Nothing of this server runs in between: the test process only sleeps and reads files.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from skill_server.core.errors import ToolInputError
from skill_server.hosts.ssh import close_masters
from tests.experiment_helpers import PY, call, pid_alive, status, tmux_socket, wait_until, workdir  # noqa: F401  (fixtures are used by name)
from tests.test_experiments_remote import NODE_PY, node_alive, remote, sshd, workdir_on  # noqa: F401

pytestmark = pytest.mark.needs("tmux")

#: A trainer stand-in: three verl-like step lines (0.2 s each), then per mode an NCCL collective timeout line
#: (its wall time noted in the mark file) or nothing, then it hangs with its processes alive, as a hung rank does.
HANGS = r'''
import sys, time
mode, mark = sys.argv[1], sys.argv[2]
for step in range(1, 4):
    print("(TaskRunner pid=7) step:%d - critic/score/mean:%.2f - timing_s/step:0.2 - training/global_step:%d"
          % (step, 0.1 * step, step), flush=True)
    time.sleep(0.2)
if mode == "nccl":
    open(mark, "w").write(repr(time.time()))
    print("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE) ran for "
          "600000 milliseconds before timing out.", flush=True)
time.sleep(600)
'''


#: A trainer stand-in that resumes like verl: each step saves a ``global_step_N`` folder in the checkpoint
#: directory and prints verl's ``local_global_step_folder: <path>`` line; a start continues after the newest
#: folder it finds there (verl's ``trainer.resume_mode: auto`` with the same experiment name and directory).
#: Each of its first three starts logs an NCCL collective timeout two steps in and hangs (a transient failure).
RESUMES = r'''
import os, sys, time
ckpt, starts_file, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(ckpt, exist_ok=True)
done = [int(n.rsplit("_", 1)[1]) for n in os.listdir(ckpt) if n.startswith("global_step_")]
first = max(done) if done else 0
starts = int(open(starts_file).read()) if os.path.exists(starts_file) else 0
open(starts_file, "w").write(str(starts + 1))
print("Load from checkpoint folder: %s/global_step_%d" % (ckpt, first) if first else "training from scratch",
      flush=True)  # verl's own line when it resumes
for step in range(first + 1, total + 1):
    print("step:%d - critic/score/mean:%.2f - timing_s/step:0.1 - training/global_step:%d" % (step, step / 10, step),
          flush=True)
    folder = os.path.join(ckpt, "global_step_%d" % step)
    os.makedirs(folder)
    open(os.path.join(folder, "model.pt"), "w").write("weights")
    print("local_global_step_folder: %s" % folder, flush=True)
    time.sleep(0.1)
    if step == first + 2 and starts < 3:
        print("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran "
              "for 600000 milliseconds before timing out.", flush=True)
        time.sleep(600)
'''


def told(path: Path) -> list[dict]:
    """The happenings the notify command received (it appends each JSON object it reads on stdin)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def acted(run: dict) -> list[tuple[str, str, str]]:
    """(trigger, action, result) of each line of a status's ``actions`` ('time trigger -> action: result')."""
    out = []
    for line in run["actions"]:
        _, rest = line.split(" ", 1)
        trigger, rest = rest.split(" -> ", 1)
        action, result = rest.split(": ", 1)
        out.append((trigger, action, result))
    return out


def kinds(path: Path) -> list[str]:
    return [e["kind"] for e in told(path)]


def test_an_nccl_timeout_that_hangs_is_stopped_by_its_policy_and_the_results_collected(tmux_socket: str,
                                                                                     workdir: Path):
    script, mark, events = workdir / "hang.py", workdir / "failed.at", workdir / "events.jsonl"
    script.write_text(HANGS)
    out = call("launch_experiment", name="nccl", workdir=str(workdir), command=f"{PY} {script} nccl {mark}",
               policy={"on_error": "stop", "on_end": "collect", "notify_command": f"cat >> {events}"})
    wrapper = out["processes"][0]["pid"]
    # no tool call from here on: only the run's monitor acts
    wait_until(lambda: mark.exists() and not pid_alive(wrapper), timeout=30, interval=0.05)
    acted_s = time.time() - float(mark.read_text())
    assert acted_s < 10, acted_s  # the Ctrl-C and its grace included
    wait_until(lambda: "end" in kinds(events), timeout=30)
    got = told(events)
    assert [e["kind"] for e in got] == ["started", "first_step", "failure", "stopped", "end"]
    assert got[2]["signature"] == "nccl_error" and got[2]["exp_id"] == out["id"] and got[2]["policy"] == "stop"
    assert (got[2]["experiment"], got[2]["attempt"], got[2]["severity"]) == (out["id"], 1, "error")
    assert got[3]["trigger"] == "error:nccl_error" and got[3]["why"] == "stopped"
    assert got[3]["text"] == "stopped for good: nccl_error (on_error); stopped"
    document = Path(out["result_dir"]) / "results.md"
    assert got[4]["state"] == "stopped" and got[4]["results"] == str(document) and got[4]["finish_flag"] is None
    assert not (Path(out["result_dir"]) / "finish.flag").exists()  # it did not finish: no flag unless asked
    text = document.read_text()
    assert "state: **stopped**" in text and "nccl_error" in text and "error:nccl_error -> stop: stopped" in text
    assert (Path(out["result_dir"]) / out["id"] / "results.md").read_text() == text.replace(f"]({out['id']}/", "](")
    seen = status(out["id"], max_lines=0)  # the first call since the launch
    assert seen["state"] == "stopped"
    assert [(t, a) for t, a, _ in acted(seen)] == [("error:nccl_error", "stop"), ("end:stopped", "collect")]
    assert seen["summary"].startswith(f"Run {out['id']} was stopped by its policy on error:nccl_error (stopped) "), \
        seen["summary"]
    assert seen["summary"].endswith(f"; next: fix the cause (nccl_error: errors[0].hint says how) and launch it "
                                    f"again; its monitor wrote {document} (no finish.flag)."), seen["summary"]


def test_a_run_that_goes_silent_is_stalled_after_its_bound_then_stopped(tmux_socket: str, workdir: Path):
    script, events = workdir / "hang.py", workdir / "events.jsonl"
    script.write_text(HANGS)
    out = call("launch_experiment", name="silent", workdir=str(workdir), command=f"{PY} {script} silent -",
               policy={"on_stall": "stop", "stall_floor_s": 2, "notify_command": f"cat >> {events}"})
    wrapper = out["processes"][0]["pid"]
    began = time.monotonic()
    wait_until(lambda: not pid_alive(wrapper), timeout=30, interval=0.05)
    assert time.monotonic() - began >= 2.0  # not before its bound: max(2 s, 5 x 0.2 s)
    wait_until(lambda: "end" in kinds(events), timeout=30)
    assert kinds(events) == ["started", "first_step", "stall", "stopped", "end"]  # the Ctrl-C's traceback: no failure
    got = {e["kind"]: e for e in told(events)}
    assert got["stall"]["last_step"] == 3 and got["stall"]["since"] == "step"
    assert got["stall"]["bound_s"] == 2.0 and got["stall"]["quiet_s"] >= 2.0
    assert got["stopped"]["trigger"] == "stall" and got["stopped"]["text"].startswith("stopped for good: it stalled")
    seen = status(out["id"], max_lines=0)
    assert seen["state"] == "stopped" and [t for t, _, _ in acted(seen)] == ["stall"]


def test_a_stalled_run_says_so_and_a_wait_until_stall_returns_on_it(tmux_socket: str, workdir: Path):
    script = workdir / "hang.py"
    script.write_text(HANGS)
    out = call("launch_experiment", name="stall", workdir=str(workdir), command=f"{PY} {script} silent -",
               policy={"on_stall": "notify", "stall_floor_s": 2})
    woke = call("wait_experiment", id=out["id"], until="stall", timeout_s=30)
    assert woke["reason"] == "stalled" and woke["state"] == "stalled"
    assert woke["global_step"] == 3 and woke["stall_bound_s"] == 2.0 and woke["quiet_s"] >= 2.0
    assert f"Run {out['id']} is stalled at step 3: no progress for " in woke["summary"]
    assert (f"(bound 2 s); read its newest lines (experiment_status id={out['id']}), stop_experiment id={out['id']} if "
            "it hangs.") in woke["summary"]
    assert acted(woke) == [("stall", "notify", "no notify_command or notify_file")]
    assert pid_alive(out["processes"][0]["pid"])  # notify only: the run is left alone
    stopped = call("stop_experiment", id=out["id"], grace_s=1)
    assert stopped["state"] == "stopped"


def test_the_notify_command_is_bounded_and_its_failures_are_recorded(tmux_socket: str, workdir: Path):
    script = workdir / "hang.py"
    script.write_text(HANGS)
    hangs_on_the_first = 'read -r line; case "$AJS_KIND" in first_step) sleep 60;; esac; exit 7'
    began = time.monotonic()
    out = call("launch_experiment", name="badnotify", workdir=str(workdir), command=f"{PY} {script} nccl -",
               policy={"on_error": "notify", "notify_command": hangs_on_the_first})

    def failures() -> list[str]:
        return [r for _, a, r in acted(status(out["id"], max_lines=0)) if a == "notify" and r.startswith("failed")]

    # the hanging notification holds up nothing else: the error's action is recorded at once
    done = wait_until(lambda: [a for t, a, _ in acted(status(out["id"], max_lines=0)) if t == "error:nccl_error"],
                      timeout=8, interval=0.3)
    assert done == ["notify"] and time.monotonic() - began < 9
    # told in order: the first step's (killed at its 10 s bound), then the error's and the action's (exit 7 each);
    # none is retried
    last = wait_until(lambda: (f := failures()) and "(3 so far" in f[0] and f, timeout=25, interval=0.5)
    assert last == ["failed (3 so far, 1 killed at the time bound): exit code 7"]
    assert time.monotonic() - began >= 10
    seen = status(out["id"], max_lines=0)
    assert seen["state"] == "running"
    call("stop_experiment", id=out["id"], grace_s=1)


def test_a_policy_names_what_it_acts_on(tmux_socket: str, workdir: Path):
    with pytest.raises(ToolInputError) as err:
        call("launch_experiment", name="p", workdir=str(workdir), command="true",
             policy={"on_error": "stop", "errors": ["nccl_eror"]})
    assert err.value.field == "policy.errors" and "nccl_eror" in str(err.value)
    with pytest.raises(ToolInputError) as err:
        call("launch_experiment", name="p", workdir=str(workdir), command="true", policy={"errors": ["error"]})
    assert err.value.field == "policy.errors"


def test_on_a_node_the_policy_stops_the_hung_run_with_no_connection(remote):
    work = workdir_on(remote)
    script, mark, events = work / "hang.py", work / "failed.at", work / "events.jsonl"
    script.write_text(HANGS)
    out = call("launch_experiment", host="node1", name="nodehang", workdir=str(work),
               command=f"{NODE_PY} {script} nccl {mark}",
               policy={"on_error": "stop", "on_end": "collect", "notify_command": f"cat >> {events}"})
    close_masters()  # no connection, no tool call: only the node's own monitor acts
    wait_until(lambda: "end" in kinds(events), timeout=40, interval=0.1)
    got = told(events)
    assert [e["kind"] for e in got] == ["started", "first_step", "failure", "stopped", "end"]
    stop_event = got[3]
    assert stop_event["why"] == "stopped" and stop_event["host"] != ""
    assert float(mark.read_text()) < time.time()
    assert not (Path(out["result_dir"]) / "finish.flag").exists()
    assert "nccl_error" in (Path(out["result_dir"]) / "results.md").read_text()
    seen = status(out["id"], max_lines=0)
    assert seen["state"] == "stopped" and [a for _, a, _ in acted(seen)] == ["stop", "collect"]
    assert not node_alive("node1", out["processes"][0]["pid"])


def test_a_transient_failure_is_resumed_twice_from_its_checkpoints_then_given_up(tmux_socket: str, workdir: Path):
    script, ckpt, starts, events = workdir / "resumes.py", workdir / "ckpt", workdir / "starts", workdir / "ev.jsonl"
    script.write_text(RESUMES)
    out = call("launch_experiment", name="resumes", workdir=str(workdir),
               command=f"{PY} {script} {ckpt} {starts} 50",
               policy={"on_error": "resume", "max_resumes": 2, "backoff_s": 1, "on_end": "collect",
                       "notify_command": f"cat >> {events}"})
    first = out["id"]
    # no tool call from here on: three attempts fail, two are relaunched by the monitors alone
    wait_until(lambda: "end" in kinds(events), timeout=90, interval=0.2)
    assert starts.read_text() == "3"
    said = [(e["exp_id"], e["kind"]) for e in told(events)]  # one line per happening, a resume is one restart
    assert said == [(first, "started"), (first, "first_step"), (first, "failure"), (first, "restart"),
                    (f"{first}.r2", "first_step"), (f"{first}.r2", "failure"), (f"{first}.r2", "restart"),
                    (f"{first}.r3", "first_step"), (f"{first}.r3", "failure"), (f"{first}.r3", "stopped"),
                    (f"{first}.r3", "end")]
    restarts = [(e["attempt"], e["next_id"], e["checkpoint"]) for e in told(events) if e["kind"] == "restart"]
    assert restarts == [(2, f"{first}.r2", {"step": 2, "path": f"{ckpt}/global_step_2"}),
                        (3, f"{first}.r3", {"step": 4, "path": f"{ckpt}/global_step_4"})]
    assert told(events)[-2]["text"] == ("stopped for good: nccl_error (on_error); stopped; not resumed: gave up after "
                                        "2 resumes")
    collected = (Path(out["result_dir"]) / "results.md").read_text()
    assert "state: **stopped** after 3 attempts" in collected and "last step 6" in collected
    assert "gave up after 2 resumes" in collected
    assert not (Path(out["result_dir"]) / "finish.flag").exists()
    listed = {e["id"]: e for e in call("experiment_status", max_lines=0)["experiments"]}  # the one call
    assert [listed[i]["state"] for i in (first, f"{first}.r2", f"{first}.r3")] == ["stopped"] * 3
    assert (listed[first]["previous_attempt"], listed[first]["next_attempt"]) == (None, f"{first}.r2")
    assert (listed[f"{first}.r2"]["previous_attempt"], listed[f"{first}.r2"]["next_attempt"]) == (first, f"{first}.r3")
    assert (listed[f"{first}.r3"]["previous_attempt"], listed[f"{first}.r3"]["next_attempt"]) == (f"{first}.r2", None)
    assert listed[f"{first}.r3"]["global_step"] == 6 and listed[f"{first}.r2"]["global_step"] == 4
    assert [a for _, a, _ in acted(listed[f"{first}.r3"])] == ["stop", "collect"]
    said = {e["signature"]: e["severity"] for e in listed[f"{first}.r2"]["errors"]}
    assert said["resumed_from_checkpoint"] == "warning"  # verl said it continued; the first attempt did not
    assert "resumed_from_checkpoint" not in {e["signature"] for e in listed[first]["errors"]}


def test_what_happened_overnight_is_one_call_on_the_id_the_user_knows(tmux_socket: str, workdir: Path):
    """A wait on the first id follows the resumes to the newest attempt; status of the first id tells the
    chain (each attempt, the checkpoint it continued from, its state) and the newest attempt's line; collect
    names the attempts its results cover."""
    script, ckpt, starts = workdir / "resumes.py", workdir / "ckpt", workdir / "starts"
    script.write_text(RESUMES)
    out = call("launch_experiment", name="overnight", workdir=str(workdir), command=f"{PY} {script} {ckpt} {starts} 50",
               policy={"on_error": "resume", "max_resumes": 2, "backoff_s": 1, "on_end": "collect"})
    first = out["id"]
    waited = call("wait_experiment", id=first, until="end", timeout_s=50)
    for _ in range(4):  # a wait also wakes on an attempt's new error (its policy acts on it): wait again then
        if waited["reason"] != "error":
            break
        waited = call("wait_experiment", id=first, until="end", timeout_s=50)
    assert (waited["id"], waited["state"], waited["reason"], waited["next_wait_s"]) == (
        f"{first}.r3", "stopped", "exited", 0), waited["summary"]
    assert waited["summary"].startswith(f"Wait ended (run {first} was resumed: this is its newest attempt): "), \
        waited["summary"]
    wait_until(lambda: "collect" in [a for _, a, _ in acted(status(f"{first}.r3", max_lines=0))], timeout=30)
    took = time.perf_counter()
    seen = status(first, max_lines=0)
    chain_s, took = time.perf_counter() - took, time.perf_counter()
    status(f"{first}.r3", max_lines=0)
    print(f"status of the first id (3 attempts): {chain_s:.3f} s; of the newest: {time.perf_counter() - took:.3f} s")
    assert (seen["id"], seen["state"], seen["next_attempt"]) == (first, "stopped", f"{first}.r2")
    result_dir = out["result_dir"].rstrip("/")
    assert seen["summary"] == (
        f"Experiment {first} was stopped at step 6 over 3 attempts: attempt 1 was stopped by its policy on "
        f"error:nccl_error at step 2; .r2 (from global_step_2) was stopped at step 4; .r3 (from global_step_4) was "
        f"stopped by its policy on "
        f"error:nccl_error (stopped; not resumed: gave up after 2 resumes) (exit code 130) at step 6; next: fix the "
        f"cause (nccl_error: errors[0].hint says how) and launch it again; its monitor wrote {result_dir}/results.md "
        "(no finish.flag)."), seen["summary"]
    assert seen["experiment"]["state"] == "stopped" and seen["alive"] is False
    listed = {e["id"]: e["summary"] for e in call("experiment_status", max_lines=0)["experiments"]}
    assert listed[f"{first}.r2"].endswith(f"; resumed as {first}.r3: experiment_status id={first}.r3."), listed
    collected = call("collect_results", id=first, plot=False)
    cover = f"these results cover the 3 attempts of {first} ({first}, {first}.r2, {first}.r3), metrics merged by step"
    assert cover in collected["notes"] and collected["summary"].startswith(
        f"Wrote {result_dir}/results.md (experiment stopped; "), collected["summary"]
    assert " over its 3 attempts" in collected["summary"] and collected["summary"].endswith(
        "; no finish.flag: it was stopped, it did not finish; fix the cause and launch again, or "
        "write_finish_flag=true to close it as it is."), collected["summary"]


def test_a_blueprint_carries_the_policy_and_a_bad_one_is_named(tmux_socket: str, workdir: Path):
    from skill_server.experiments import blueprint

    script, events = workdir / "hang.py", workdir / "events.jsonl"
    script.write_text(HANGS)
    (workdir / "exp.yaml").write_text("ajet: {}\n")
    text = blueprint.render({"exp_purpose": "policy from a blueprint", "exp_codebase_dir": str(workdir),
                             "exp_venv_exe": PY, "exp_yaml_path": "exp.yaml",
                             "exp_launch_command": f"{PY} {script} nccl -"})
    policy = json.dumps({"on_error": "stop", "notify_command": f"cat >> {events}"})
    path = workdir / "blueprint.md"
    path.write_text(text + f"\n## [exp_policy]\n```json\n{policy}\n```\n")
    out = call("launch_experiment", blueprint=str(path), name="bppolicy")
    wait_until(lambda: "end" in kinds(events), timeout=30)
    assert [e["trigger"] for e in told(events) if e["kind"] == "stopped"] == ["error:nccl_error"]
    assert status(out["id"], max_lines=0)["state"] == "stopped"
    assert call("wait_experiment", id=out["id"], until="end", timeout_s=10)["reason"] == "exited"
    path.write_text(text + '\n## [exp_policy]\n{"on_eror": "stop"}\n')
    checked = blueprint.validate_text(path.read_text(), workdir)
    assert [(p.field, p.message) for p in checked.problems if p.severity == "error"] == [
        ("exp_policy", "not a policy (a JSON object of launch_experiment's policy keys): on_eror: Extra inputs are "
                       "not permitted")]


def test_the_template_has_an_empty_policy_section_to_fill_in_and_validate_names_a_bad_key(workdir: Path):
    (workdir / "exp.yaml").write_text("ajet: {}\n")
    args = dict(purpose="template policy", codebase_dir=str(workdir), venv_exe=PY, yaml_path="exp.yaml",
                launch_command="true")
    made = call("blueprint", action="template", path=str(workdir / "bp.md"), **args)
    assert made["ok"] and made["fields"]["exp_policy"] == "" and "## [exp_policy]" in made["text"]
    example = made["text"].split("## [exp_policy]", 1)[1].split("e.g. ", 1)[1].split("; empty: no policy", 1)[0]
    filled = made["text"].replace("- content:\n\n## Notes", f"- content: {example}\n\n## Notes")
    checked = call("blueprint", action="validate", text=filled)
    assert checked["ok"] and json.loads(checked["fields"]["exp_policy"])["on_error"] == "resume", checked
    bad = call("blueprint", action="validate", text=filled.replace('"on_stall"', '"on_stal"'))
    assert not bad["ok"] and bad["summary"].endswith(
        "first: exp_policy: not a policy (a JSON object of launch_experiment's policy keys): on_stal: Extra inputs "
        "are not permitted"), bad["summary"]


def test_a_stop_during_the_backoff_cancels_the_resume(tmux_socket: str, workdir: Path):
    script, ckpt, starts, events = workdir / "resumes.py", workdir / "ckpt", workdir / "starts", workdir / "ev.jsonl"
    script.write_text(RESUMES)
    out = call("launch_experiment", name="cancel", workdir=str(workdir), command=f"{PY} {script} {ckpt} {starts} 50",
               policy={"on_error": "resume", "backoff_s": 5, "notify_command": f"cat >> {events}"})
    wait_until(lambda: "failure" in kinds(events), timeout=30)
    time.sleep(1)  # the stop before the backoff
    during = call("wait_experiment", id=out["id"], timeout_s=1)  # the backoff runs: the chain has not ended
    assert (during["reason"], during["next_wait_s"]) == ("timeout", 30), during["summary"]
    assert "its resume policy relaunches it (stopped; relaunching in 5 s)" in during["summary"]
    assert "collect_results" not in during["summary"]
    whole = status(out["id"], max_lines=0)  # alive, checked: the relaunch its resume policy waits to make
    assert whole["alive"] is True and whole["experiment"]["state"] == "relaunching", whole["experiment"]
    assert f"{out['id']}: a relaunch its resume policy waits to make" in whole["experiment"]["still_running"]
    stopped = call("stop_experiment", id=out["id"], grace_s=1)
    assert stopped["state"] == "stopped"
    assert "the relaunch its resume policy had pending is cancelled" in stopped["summary"], stopped["summary"]
    assert "relaunches it" not in stopped["summary"] and "collect_results" not in stopped["summary"]
    wait_until(lambda: "end" in kinds(events), timeout=30)
    assert kinds(events)[-2:] == ["stopped", "end"]
    assert told(events)[-2]["why"] == "cancelled: stop_experiment was called"
    assert starts.read_text() == "1" and status(out["id"], max_lines=0)["next_attempt"] is None


def test_on_a_node_a_transient_failure_is_resumed_with_no_connection(remote):
    work = workdir_on(remote)
    script, ckpt, starts, events = work / "resumes.py", work / "ckpt", work / "starts", work / "ev.jsonl"
    script.write_text(RESUMES)
    out = call("launch_experiment", host="node1", name="noderesume", workdir=str(work),
               command=f"{NODE_PY} {script} {ckpt} {starts} 50",
               policy={"on_error": "resume", "max_resumes": 1, "backoff_s": 0, "notify_command": f"cat >> {events}"})
    close_masters()  # no connection, no tool call: the node's monitors stop, relaunch and give up alone
    first = out["id"]
    wait_until(lambda: any(e["kind"] == "end" and e["exp_id"] == f"{first}.r2" for e in told(events)), timeout=60)
    said = [(e["exp_id"], e["kind"], e["text"]) for e in told(events) if e["kind"] in ("restart", "stopped")]
    assert said == [(first, "restart", f"attempt 2 of at most 2 relaunched as {first}.r2 after nccl_error (on_error), "
                                       f"continuing from global_step_2 ({ckpt}/global_step_2)"),
                    (f"{first}.r2", "stopped", "stopped for good: nccl_error (on_error); stopped; not resumed: gave up "
                                               "after 1 resume")]
    listed = {e["id"]: e for e in call("experiment_status", max_lines=0)["experiments"]}
    assert listed[first]["next_attempt"] == f"{first}.r2" and listed[f"{first}.r2"]["previous_attempt"] == first
    assert listed[f"{first}.r2"]["state"] == "stopped" and listed[f"{first}.r2"]["global_step"] == 4
    assert listed[f"{first}.r2"]["host"] == "node1"


def test_watch_shows_the_stall_and_the_action_and_ends_on_them(tmux_socket: str, workdir: Path):
    from tests.test_insight_tmux import Watch

    script = workdir / "hang.py"
    script.write_text(HANGS)
    out = call("launch_experiment", name="wstall", workdir=str(workdir), command=f"{PY} {script} silent -",
               policy={"on_stall": "stop", "stall_floor_s": 2})
    watch = Watch(out["id"], "--json", "--interval", "0.3")
    records = [json.loads(line) for line in watch.rest()]
    rc, err = watch.finish()
    assert rc == 11 and err == ""  # the run was stopped (by its policy)
    events = [r["event"] for r in records]  # the stop follows the stall within a look: the action tells both
    assert events.index("action") < events.index("finished") == len(events) - 1
    action = records[events.index("action")]
    assert (action["trigger"], action["action"], action["result"]) == ("stall", "stop", "stopped")
    quiet = call("launch_experiment", name="wstall2", workdir=str(workdir), command=f"{PY} {script} silent -",
                 policy={"on_stall": "notify", "stall_floor_s": 2})
    watch = Watch(quiet["id"], "--json", "--interval", "0.3", "--until", "stall,end")
    records = [json.loads(line) for line in watch.rest()]
    rc, err = watch.finish()
    (stalled,) = [r for r in records if r["event"] == "stalled"]  # its look's lines are printed, then it ends
    assert rc == 22 and err == "" and records[-1]["event"] in ("stalled", "action")
    assert stalled["bound_s"] == 2.0 and stalled["global_step"] == 3 and stalled["quiet_s"] >= 2.0
    call("stop_experiment", id=quiet["id"], grace_s=1)


def test_watch_follows_a_resumed_run_to_its_newest_attempt(tmux_socket: str, workdir: Path):
    from tests.test_insight_tmux import Watch

    script, ckpt, starts = workdir / "resumes.py", workdir / "ckpt", workdir / "starts"
    script.write_text(RESUMES)
    out = call("launch_experiment", name="wresume", workdir=str(workdir), command=f"{PY} {script} {ckpt} {starts} 50",
               policy={"on_error": "resume", "max_resumes": 1, "backoff_s": 1})
    first = out["id"]
    watch = Watch(first, "--json", "--interval", "0.3")
    records = [json.loads(line) for line in watch.rest()]
    rc, err = watch.finish()
    assert rc == 11 and err == ""  # the last attempt was stopped (given up after 1 resume)
    events = [r["event"] for r in records]
    assert events.count("finished") == 1 and events[-1] == "finished" and events.count("started") == 2
    follow = [r for r in records if r["event"] == "state" and r.get("to") == "resumed"]
    assert follow[-1]["next_attempt"] == f"{first}.r2"
    assert follow[-1]["text"] == f"stopped -> resumed as {first}.r2: following it"
    restarted = records[events.index("started", events.index("started") + 1)]
    assert restarted["text"].startswith(f"{first}.r2 state=")


CRASHES = r'''
import sys, time
print("step:1 - critic/score/mean:0.1 - training/global_step:1", flush=True)
time.sleep(0.3)
print("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for "
      "600000 milliseconds before timing out.", flush=True)
sys.exit(134)  # the watchdog's abort: the process ends by itself, before any policy acts
'''


def test_a_run_that_crashes_by_itself_is_waiting_for_its_resume_not_ended(tmux_socket: str, workdir: Path):
    script, events = workdir / "crashes.py", workdir / "ev.jsonl"
    script.write_text(CRASHES)
    out = call("launch_experiment", name="crashes", workdir=str(workdir), command=f"{PY} {script}",
               policy={"on_error": "resume", "backoff_s": 8, "notify_command": f"cat >> {events}"})
    wait_until(lambda: "failure" in kinds(events), timeout=30)
    during = wait_until(lambda: (w := call("wait_experiment", id=out["id"], timeout_s=1))["actions"] and w,
                        timeout=10)
    assert [r for _, _, r in acted(during)][-1:] == ["stopped; relaunching in 8 s"], during["actions"]
    assert (during["reason"], during["next_wait_s"]) == ("timeout", 30), during["summary"]
    assert "its resume policy relaunches it" in during["summary"] and "collect_results" not in during["summary"]
    call("stop_experiment", id=out["id"], grace_s=1)
