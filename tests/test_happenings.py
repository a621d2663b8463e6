"""What the user is told and what is written for them, piece by piece (issue 30): the happenings the phase machine's
events make, the notifier with real notify commands (bounded output, the end first, losses counted), the merge of
an experiment's attempts by step, and the results pages a result directory holds. Real files and processes, no
tmux: the night's whole story is tests/test_overnight.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from skill_server.hosts.agent import notifier, phases, points, results
from skill_server.hosts.agent.runstate import Run

RESUME = {"on_error": "resume", "errors": ["nccl_error"], "max_resumes": 2, "attempt": 1}


def said(event: dict, policy: dict | None = None) -> list[tuple[str, str]]:
    return [(h["kind"], h["text"]) for h in phases.happenings(event, policy or RESUME)]


def test_each_event_makes_at_most_the_happenings_it_stands_for():
    assert said({"kind": "started", "roles": ["main"], "first_step_s": 1200}) == [
        ("started", "1 process up (main); first training step due within 20 min")]
    assert said({"kind": "started", "roles": ["main"]}, dict(RESUME, attempt=2)) == []  # its restart said it
    line = "[Rank 1] Watchdog caught collective operation timeout"
    assert said({"kind": "error", "signature": "nccl_error", "severity": "error", "role": "main", "line": line,
                 "phase": "running"}) == [("failure", f"nccl_error (error) in main: {line} -> on_error: resume")]
    # a warning is never a failure; what a stop makes a process print is none either
    assert said({"kind": "error", "signature": "resumed_from_checkpoint", "severity": "warning",
                 "phase": "running"}) == []
    assert said({"kind": "error", "signature": "python_exception", "severity": "error", "phase": "stopping"}) == []
    # a resume: the stop before the backoff and the relaunch's own record say nothing; its start is one restart
    assert said({"kind": "action", "action": "resume", "trigger": "error:nccl_error",
                 "result": "stopped; relaunching in 60 s"}) == []
    assert said({"kind": "action", "action": "resume", "trigger": "error:nccl_error",
                 "result": "relaunched as x.r2"}) == []
    assert said({"kind": "action", "action": "resume", "trigger": "error:nccl_error", "attempt": 2, "next_id": "x.r2",
                 "checkpoint": {"step": 10, "path": "/c/global_step_10"},
                 "result": "relaunching as x.r2, continuing from global_step_10 (/c/global_step_10)"}) == [
        ("restart", "attempt 2 of at most 3 relaunched as x.r2 after nccl_error (on_error), continuing from "
                    "global_step_10 (/c/global_step_10)")]
    assert said({"kind": "process_ended", "role": "main"}) == [] and said({"kind": "progressed"}) == []
    assert said({"kind": "ended", "state": "stopped"}) == []  # an attempt's end: its ``finished`` says the end
    assert said({"kind": "timed_out", "max_time_s": 7200}) == [("stopped", "stopped for good: its max time of 2 h "
                                                                          "was reached")]
    assert said({"kind": "finished", "state": "stopped", "last_step": 7, "exit_codes": {"main": 130},
                 "stopped_by": "stop_experiment"}) == [
        ("stopped", "stopped for good: stop_experiment was called"), ("end", "ended stopped at step 7, exit code 130")]
    assert said({"kind": "finished", "state": "succeeded", "last_step": 30, "exit_codes": {"a": 0, "b": 0},
                 "results": "/r/results.md", "finish_flag": "/r/finish.flag"}, dict(RESUME, attempt=2)) == [
        ("end", "ended succeeded (attempt 2) at step 30, exit codes a=0, b=0; results: /r/results.md; finish.flag "
                "written")]
    assert said({"kind": "first_step", "step": 1, "at": 161}) == [("first_step", "first training step (step 1), "
                                                                                 "2m41s after the start")]
    assert said({"kind": "stalled", "since": "step", "quiet_s": 905, "bound_s": 900, "last_step": 13}) == [
        ("stall", "no progress for 15m05s since the last step line (bound 15 min), at step 13")]
    assert said({"kind": "first_step_overdue", "deadline_s": 1200, "quiet_s": 3}) == [
        ("stall", "no first training step within its deadline of 20 min (its output last grew 3 s ago)")]


def _run(tmp_path: Path, **policy: object) -> Run:
    folder = tmp_path / "run"
    folder.mkdir(exist_ok=True)
    return Run(str(folder), {"exp_id": "exp", "roles": [], "policy": policy}, None)


def _tell(run: Run, told: notifier.Notifier, *kinds: str) -> None:
    for seq, kind in enumerate(kinds, 1):
        told.tell(run, {"at": 1.0, "seq": seq}, {"kind": kind, "text": f"{kind} text"})


def test_the_notify_file_gets_one_line_at_once_and_only_a_regular_file_is_written(tmp_path: Path):
    run = _run(tmp_path, lineage="exp", attempt=1)
    told = notifier.Notifier(None, str(tmp_path / "alerts.log"), {})
    _tell(run, told, "started", "first_step")
    lines = (tmp_path / "alerts.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["exp started: started text", "exp first_step: first_step text"]
    assert oct((tmp_path / "alerts.log").stat().st_mode & 0o777) == "0o600" and told.tally["written"] == 2
    os.mkfifo(tmp_path / "fifo")  # never blocks on a FIFO with no reader, never writes into anything but a file
    fifo = notifier.Notifier(None, str(tmp_path / "fifo"), {})
    began = time.monotonic()
    _tell(run, fifo, "end")
    assert time.monotonic() - began < 1 and fifo.tally["failed"] == 1
    assert fifo.tally["last_failure"]["error"].startswith(f"notify_file {tmp_path / 'fifo'}: ")


def test_a_flooding_notify_command_keeps_its_output_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(notifier, "NOTIFY_TIMEOUT_S", 1.0)
    run = _run(tmp_path)
    log = Path(run.files.file("notify.log"))
    log.write_bytes(b"x" * notifier.LOG_MAX)  # an old log at its bound is moved aside first
    told = notifier.Notifier("yes 'a line of a flooding notify command'", None, {})
    _tell(run, told, "started")
    told.flush(run)
    assert told.tally["killed"] == 1 and told.idle()
    assert (tmp_path / "run" / "notify.log.1").stat().st_size == notifier.LOG_MAX
    text = log.read_bytes()  # 8 KiB of a flood that ran a second, its header and how much was left out
    assert len(text) <= notifier.OUTPUT_KEPT + 200 and text.count(b"more bytes of output not kept]") == 1, text[-200:]


def test_at_the_end_what_waits_goes_in_order_and_after_a_hang_only_the_end_and_the_rest_is_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(notifier, "NOTIFY_TIMEOUT_S", 0.5)
    run = _run(tmp_path)
    order = tmp_path / "order"
    quick = notifier.Notifier(f'echo "$AJS_KIND" >> {order}', None, {})
    _tell(run, quick, "started", "first_step", "failure", "end")
    quick.flush(run, within_s=5)  # time enough: in order
    assert order.read_text().split() == ["started", "first_step", "failure", "end"] and quick.tally["sent"] == 4
    order.unlink()
    queue: list[dict] = []  # the policy's state keeps the queue: changed in place
    told = notifier.Notifier(f'echo "$AJS_KIND" >> {order}; sleep 5', None, {}, queue)
    _tell(run, told, "started", "first_step", "failure", "end")
    told.pump(run)  # the first is under way
    assert [p["kind"] for p in queue] == ["first_step", "failure", "end"]
    told.flush(run, within_s=5)
    assert order.read_text().split() == ["started", "end"]  # it hung: then only the end
    assert told.tally["killed"] == 2 and told.tally["failed"] == 2 and told.tally["dropped"] == 2
    assert {k: told.tally["lost"][k] for k in ("events", "why")} == {  # type: ignore[literal-required]
        "events": ["first_step", "failure"], "why": "the notify command hung"}
    assert told.idle() and queue == []


def test_a_notification_still_running_when_the_monitor_ends_is_killed_and_what_waits_is_recorded(tmp_path: Path):
    run = _run(tmp_path)
    order = tmp_path / "order"
    told = notifier.Notifier(f'echo "$AJS_KIND" >> {order}; sleep 5', None, {})
    _tell(run, told, "started", "first_step", "end")
    told.pump(run)
    began = time.monotonic()
    told.flush(run, within_s=0.5)  # less than a time bound: the end goes first, but there is no time for it
    assert time.monotonic() - began < 3 and order.read_text().split() == ["started"]
    assert told.tally["failed"] == 1 and told.tally["last_failure"]["error"] == "killed: the run's monitor was ending"
    assert told.tally["dropped"] == 2 and told.tally["lost"]["events"] == ["end", "first_step"]
    assert told.idle()


def test_a_payload_is_one_json_line_with_its_kind_and_the_experiment(tmp_path: Path):
    run = _run(tmp_path, lineage="exp", attempt=2)
    got = tmp_path / "got"
    told = notifier.Notifier(f"cat > {got}; echo \"$AJS_KIND $AJS_EXP_ID\" >> {got}", None, {})
    told.tell(run, {"at": 3.5, "seq": 9}, {"kind": "failure", "text": "t", "signature": "nccl_error"})
    told.flush(run)
    payload, env = got.read_text().splitlines()
    data = json.loads(payload)
    assert {k: data[k] for k in ("kind", "exp_id", "experiment", "attempt", "at", "seq", "text", "signature")} == {
        "kind": "failure", "exp_id": "exp", "experiment": "exp", "attempt": 2, "at": 3.5, "seq": 9, "text": "t",
        "signature": "nccl_error"}
    assert env == "failure exp" and told.tally["sent"] == 1


def test_attempts_merge_by_step_a_later_one_replacing_from_its_first_step():
    first = {"r": {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4, 5: 0.5}, "only_first": {1: 1.0}}
    second = {"r": {4: 0.41, 5: 0.51, 6: 0.6}}
    third: dict = {}  # failed before its first step: replaces nothing
    merged = points.merge_attempts([(1, first), (4, second), (None, third)])
    assert merged["r"] == {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.41, 5: 0.51, 6: 0.6} and merged["only_first"] == {1: 1.0}
    assert points.merge_attempts([(1, first), (1, {"r": {1: 9.0}})])["r"] == {1: 9.0}  # started over: all replaced


def _doc(exp_id: str, state: str) -> dict:
    return {"id": exp_id, "state": state, "attempts": [{"id": exp_id, "attempt": 1, "state": state}],
            "outcomes": [results.outcome_of("critic/score/mean", {1: 0.1, 2: 0.5, 3: 0.3}, [3])]}


def test_a_result_dir_holds_each_experiments_page_and_an_index_when_it_is_shared(tmp_path: Path):
    one = results.wrap_up(str(tmp_path), _doc("exp-a", "succeeded"), None, flag=True)  # type: ignore[arg-type]
    assert one["page"] == str(tmp_path / "exp-a" / "results.md") and one["document"] == str(tmp_path / "results.md")
    assert one["finish_flag"] == str(tmp_path / "finish.flag") and not one["index"]
    assert (tmp_path / "finish.flag").stat().st_mtime_ns >= (tmp_path / "results.md").stat().st_mtime_ns
    page = (tmp_path / "exp-a" / "results.md").read_text()
    assert "| critic/score/mean (higher is better) | 0.3 | 3 | 0.5 | 2 | no; nearest global_step_3 |" in page
    two = results.wrap_up(str(tmp_path), _doc("exp-b", "failed"), None, flag=False)  # type: ignore[arg-type]
    index = (tmp_path / "results.md").read_text()
    assert two["index"] and two["finish_flag"] is None
    assert "2 experiments share this result directory" in index and "[exp-a/results.md](exp-a/results.md)" in index
    assert "| exp-b | failed | 1 | critic/score/mean final 0.3 (step 3), best 0.5 (step 2) |" in index
    assert (tmp_path / "exp-a" / "results.md").read_text() == page  # one experiment never replaces another's page
    (tmp_path / "results.md").write_text("my own notes\n")  # a document that is not ours: left as it is
    three = results.wrap_up(str(tmp_path), _doc("exp-c", "succeeded"), None, flag=False)  # type: ignore[arg-type]
    assert three["document"] is None and "is not a page of this skill's" in str(three["note"])
    assert (tmp_path / "results.md").read_text() == "my own notes\n"


def test_a_relaunch_that_failed_is_a_failure_and_one_given_up_cancelled_or_stopped_as_it_started_is_a_stop():
    """Issue 31's relaunch that is tried again after a failure (a full disk) is told as what it is: not the end."""
    trigger = {"kind": "action", "action": "resume", "trigger": "error:nccl_error"}
    failed = phases.happenings(dict(trigger, result="relaunch failed: No space left on device; trying again in 30 s"),
                               RESUME)
    assert [(h["kind"], h["signature"], h["text"]) for h in failed] == [
        ("failure", "relaunch_failed", "its relaunch after nccl_error (on_error) failed: No space left on device; "
                                       "trying again in 30 s")]
    assert said(dict(trigger, result="given up after 9 tries: the relaunch was refused")) == [
        ("stopped", "stopped for good, not relaunched: given up after 9 tries: the relaunch was refused")]
    assert said(dict(trigger, result="cancelled: stop_experiment was called")) == [
        ("stopped", "stopped for good, not relaunched: cancelled: stop_experiment was called")]
    assert said(dict(trigger, result="relaunched as x.r2, then stopped: stopped")) == [
        ("stopped", "stopped for good: stop_experiment was called as it was relaunched as x.r2, then stopped: "
                    "stopped")]


def test_a_requeue_by_the_scheduler_is_a_restart_of_the_same_attempt():
    event = {"kind": "started", "roles": ["main"], "requeued": 1, "scheduler": "Slurm", "job": "1234",
             "checkpoint": {"step": 6, "path": "/c/global_step_6"}}
    assert said(event) == [("restart", "its Slurm job 1234 was requeued: the processes started again (attempt 1, "
                                       "start 2), continuing from global_step_6 (/c/global_step_6)")]
    assert said(dict(event, checkpoint=None), dict(RESUME, attempt=2))[0][1].endswith(
        "(attempt 2, start 2), starting over (no global_step_N checkpoint found)")


def test_a_monitor_that_takes_over_sends_the_happenings_its_predecessor_still_owed(tmp_path: Path):
    """The queue is the policy's state in ``monitor.json``: what its predecessor had queued (not what it had started)
    is sent by the new monitor, in order; the notify file is not written again (it got its lines at once)."""
    from skill_server.hosts.agent.policy import Policy

    folder, got, alerts = tmp_path / "run", tmp_path / "got", tmp_path / "alerts.log"
    folder.mkdir()
    events = [{"at": 1.0, "kind": "started", "seq": 1, "phase": "starting", "roles": ["main"]},
              {"at": 2.0, "kind": "first_step", "seq": 2, "phase": "running", "step": 1, "role": "main"},
              {"at": 3.0, "kind": "stalled", "seq": 3, "phase": "stalled", "since": "step", "quiet_s": 60,
               "bound_s": 50, "last_step": 1}]
    owed = [{"kind": "first_step", "exp_id": "exp", "seq": 2, "text": "first training step (step 1)"},
            {"kind": "stall", "exp_id": "exp", "seq": 3, "text": "no progress"}]
    previous = {"events": events, "event_seq": 3, "policy_seq": 3, "phase": "stalled", "notify_queue": owed}
    spec = {"exp_id": "exp", "roles": [], "policy": {"notify_command": f"cat >> {got}",
                                                    "notify_file": str(alerts), "attempt": 1}}
    run = Run(str(folder), spec, previous)  # type: ignore[arg-type]
    policy = Policy(run, previous)
    assert policy.notifier is not None and policy.state.to_json()["notify_queue"] == owed
    policy.tick(run, run.clock())  # nothing new to handle: what was owed starts
    assert policy.state.to_json()["notify_queue"] == owed[1:] and run.urgent  # written at once: not sent twice
    policy.notifier.flush(run, within_s=10)
    told = [json.loads(line) for line in got.read_text().splitlines()]
    assert [(t["kind"], t["seq"]) for t in told] == [("first_step", 2), ("stall", 3)]
    assert not alerts.exists()  # the file had them from the monitor that handled them
    assert policy.state.to_json()["notify_queue"] == []
    fresh = Policy(Run(str(folder), spec, policy.state.to_json()), policy.state.to_json())  # type: ignore[arg-type]
    assert fresh.notifier is not None and fresh.notifier.idle()  # nothing owed: nothing sent again


def test_a_supervisor_about_to_replace_a_dead_monitor_is_something_of_the_experiment_alive():
    from types import SimpleNamespace

    from skill_server.experiments.observe import still_running

    def view(**run: object) -> SimpleNamespace:
        proc = SimpleNamespace(alive=False, state="failed", proc=SimpleNamespace(host="gpu1"), elsewhere=False,
                               monitor={"run": run})
        return SimpleNamespace(procs=[proc])

    assert still_running(view(alive=False, supervised=True, ended=False)) == [  # type: ignore[arg-type]
        "its supervisor on gpu1 (it starts a new monitor)"]
    assert still_running(view(alive=True, supervised=True)) == ["its monitor on gpu1"]  # type: ignore[arg-type]
    assert still_running(view(alive=False, ended=True)) == []  # type: ignore[arg-type]
