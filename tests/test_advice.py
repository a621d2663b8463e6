"""Advice that fits the state (issue 30): the ``next`` each experiment tool's summary gives, for every state a run
can be in, is what an engineer would do: look at the lines of a run that may hang and stop it, fix the named cause
of a failure, wait on a run that is fine, wrap up a run that finished; never a wait for a first step that will not
come, nor a wrap-up (with its finish.flag) of a run that failed or was stopped. Built from answers as the tools
make them; no run is needed."""

from __future__ import annotations

from typing import Any

from skill_server.experiments import sentences
from skill_server.experiments.models import ErrorHit, ExperimentStatus, LaunchOutput, ProcessInfo, StopOutput

RUN = "ajet_x-20261201-000000-abcd"
OOM = ErrorHit(signature="cuda_oom", title="CUDA out of memory", severity="error", line="torch.OutOfMemoryError",
               count=2, hint="lower actor_rollout_ref.rollout.gpu_memory_utilization to 0.6")


def status(state: str, **fields: Any) -> ExperimentStatus:
    base: dict[str, Any] = dict(
        summary="", id=RUN, session="ajet_x", socket="s", host="local", attach="", state=state, exit_code=None,
        started_at="2026-12-01T00:00:00+00:00", elapsed_s=10.0, time_left_s=None, max_time_s=86400,
        first_step_seen=True, first_step_overdue=False, global_step=5, last_metrics={}, errors=[], lines=[],
        cursor="0", skipped_bytes=0, unscanned_bytes=0, processes=[], log_path="/r/x.log", result_dir="/r")
    base.update(fields)
    return ExperimentStatus(**base)


def act(trigger: str, action: str, result: str) -> str:
    return f"2026-12-01T01:00:00+00:00 {trigger} -> {action}: {result}"


def test_a_running_run_is_waited_on_and_a_run_that_may_hang_is_looked_at_and_stopped():
    assert sentences.run_state(status("running", first_step_seen=False, global_step=None)).endswith(
        f"next: wait_experiment id={RUN} until=first_step.")
    assert sentences.run_state(status("running")).endswith(f"next: wait_experiment id={RUN}.")
    hang = f"read its newest lines (experiment_status id={RUN}), stop_experiment id={RUN} if it hangs"
    overdue = sentences.run_state(status("running", first_step_seen=False, global_step=None, first_step_overdue=True))
    assert overdue.endswith(f"its first step is overdue: {hang}.") and "until=first_step" not in overdue
    stalled = sentences.run_state(status("stalled", quiet_s=950, stall_bound_s=900))
    assert stalled.endswith(f"no progress for 950 s (bound 900 s); {hang}.")
    erring = sentences.run_state(status("running", errors=[OOM]))
    assert erring.endswith(f"{hang}, then fix the cause (errors[0].hint).") and "gpu_memory_utilization" in erring
    # a wait that ended on its own stall_s while the run still counts as running: about the hang, not a wait
    quiet = sentences.waited(status("running", first_step_seen=False, global_step=None, quiet_s=600,
                                    quiet_since="output"), "stalled", 30)
    assert quiet == (f"Wait ended: no new output for 600 s. Run {RUN} is running at no training step yet; {hang}.")


def test_a_finished_run_is_wrapped_up_and_a_failed_or_stopped_one_is_fixed_never_wrapped_up():
    assert sentences.run_state(status("succeeded", exit_code=0)).endswith(
        f"next: collect_results id={RUN} (results.md, plot, finish.flag).")
    assert sentences.run_state(status("timed_out")).endswith(f"next: collect_results id={RUN} (results.md, plot, "
                                                             "finish.flag).")
    collected = act("end:succeeded", "collect", "/r/results.md written; finish.flag written")
    assert sentences.run_state(status("succeeded", exit_code=0, actions=[collected])).endswith(
        f"its monitor wrote /r/results.md and finish.flag: nothing is left to do (collect_results id={RUN} would "
        "only add a plot).")
    failed = sentences.run_state(status("failed", exit_code=1, errors=[OOM]))
    assert failed.endswith("next: fix the cause (cuda_oom: errors[0].hint says how) and launch it again.")
    bare = sentences.run_state(status("failed", exit_code=1))
    assert bare.endswith(f"next: read its last lines (experiment_status id={RUN} since=0) for the cause, fix it and "
                         "launch it again.")
    by_policy = status("stopped", exit_code=130, errors=[OOM], actions=[
        act("error:cuda_oom", "stop", "stopped"),
        act("end:stopped", "collect", "/r/results.md written; no finish.flag (the experiment ended stopped)")])
    said = sentences.run_state(by_policy)
    assert said.startswith(f"Run {RUN} was stopped by its policy on error:cuda_oom (stopped)")
    assert said.endswith("next: fix the cause (cuda_oom: errors[0].hint says how) and launch it again; its monitor "
                         "wrote /r/results.md (no finish.flag).")
    by_hand = sentences.run_state(status("stopped", exit_code=130))
    assert by_hand.endswith("stopped on request; launch it again when ready.")
    lost = sentences.run_state(status("lost"))
    assert lost.endswith(f"its processes are gone without an exit code: read its last lines (experiment_status "
                         f"id={RUN} since=0), then launch it again.")
    for text in (failed, bare, said, by_hand, lost):
        assert "collect_results" not in text and "until=first_step" not in text, text


def test_a_stop_and_a_collect_say_what_fits_what_is_left():
    base = status("stopped", exit_code=130).model_dump()
    stopped = StopOutput(**base, interrupted=["main"], killed=[], killed_processes=[], still_alive=[],
                         session_removed=True)
    said = sentences.stopped(stopped)
    assert said == f"Run {RUN} was stopped after Ctrl-C; stopped on request; launch it again when ready."
    flagged = sentences.collected("/r/results.md", "succeeded", 1, 3, 0, None, 2, True, None)
    assert flagged == "Wrote /r/results.md (experiment succeeded; 1 validation and 3 training metrics over its 2 " \
                      "attempts) and finish.flag."
    unflagged = sentences.collected("/r/results.md", "failed", 0, 3, 1, None, 1, False, None)
    assert unflagged.endswith("; no finish.flag: it failed, it did not finish; fix the cause and launch again, or "
                              "write_finish_flag=true to close it as it is.")


def test_a_launch_with_a_policy_says_what_its_monitor_does_alone():
    out = LaunchOutput(summary="", id=RUN, session="ajet_x", socket="s", host="local", log_path="/r/x.log",
                       result_dir="/r", attach="", started_at="2026-12-01T00:00:00+00:00", max_time_s=86400,
                       first_step_timeout_s=1200,
                       processes=[ProcessInfo(role="main", host="local", state="running", exit_code=None,
                                              log_path="/r/x.log")],
                       policy={"on_error": "resume", "errors": ["nccl_error"], "on_stall": None, "on_end": "collect",
                               "max_resumes": 2, "notify_file": "/w/alerts.log", "notify_command": ""})
    assert sentences.launched(out) == (
        f"Launched run {RUN} (tmux session ajet_x) on local: 1 process (main); its monitor carries out its policy "
        "with no call (on_error resume, at most 2 resumes, on_end collect, a line per happening to /w/alerts.log); "
        f"next: wait_experiment id={RUN} until=first_step.")
