"""The one-line ``summary`` of each experiment tool's answer: the run's state and what to do next, in words an
assistant can quote as they are. One small function per tool, each called at the end of that tool, reading
only the answer it summarises (so it never says more than the answer knows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skill_server.experiments.models import ExperimentStatus, LaunchOutput, StopOutput

MAX_SUMMARY = 600
#: A run's state as the predicate of "Run X ...".
_STATE_WORDS = {"running": "is running", "stalled": "is stalled", "succeeded": "succeeded", "failed": "failed",
                "stopped": "was stopped", "timed_out": "timed out (max_time)", "lost": "is lost",
                "unreachable": "is unreachable"}


def _clip(text: str) -> str:
    text = " ".join(text.split())  # one line, whatever a title or hint carried
    return text if len(text) <= MAX_SUMMARY else text[:MAX_SUMMARY - 3] + "..."


def _step(s: ExperimentStatus) -> str:
    if s.global_step is None:
        return "no training step yet"
    total = s.progress.total_steps if s.progress is not None else None
    return f"step {s.global_step}" + (f" of {total}" if total else "")


def _worst_error(s: ExperimentStatus) -> str:
    if not s.errors:
        return ""
    e = s.errors[0]
    more = f" (+{len(s.errors) - 1} more)" if len(s.errors) > 1 else ""
    return f"; error {e.title!r} seen {e.count}x{more}: {e.hint.rstrip('. ')}"


def run_state(s: ExperimentStatus) -> str:
    """experiment_status (each run): where it is, the worst error seen, and the next call."""
    head = f"Run {s.id} {_STATE_WORDS.get(s.state, s.state)}"
    queued = s.scheduler is not None and s.scheduler.get("state") == "PENDING"
    if s.state in ("running", "queued") and queued:
        assert s.scheduler is not None
        return _clip(f"Run {s.id} is queued by Slurm (job {s.scheduler.get('job_id')}, reason "
                     f"{s.scheduler.get('reason')}); next: wait_experiment id={s.id} until=started.")
    if s.state == "running":
        nxt = ("; first step overdue: read its lines and errors, stop_experiment if it hangs" if s.first_step_overdue
               else f"; next: wait_experiment id={s.id}" + (" until=first_step" if not s.first_step_seen else ""))
        return _clip(f"{head} at {_step(s)}{_worst_error(s)}{nxt}.")
    if s.state == "stalled":
        quiet = f": no progress for {int(s.quiet_s or 0)} s (bound {int(s.stall_bound_s or 0)} s)"
        return _clip(f"{head} at {_step(s)}{quiet}{_worst_error(s)}; read its lines, stop_experiment if it hangs.")
    code = f" (exit code {s.exit_code})" if s.exit_code is not None else ""
    if s.state in ("unreachable",):
        return _clip(f"{head}{code}: its host did not answer; check again later{_worst_error(s)}.")
    nxt = f"next: collect_results id={s.id}" if s.state in ("succeeded", "failed", "stopped", "timed_out") \
        else "its processes are gone without an exit code"
    return _clip(f"{head}{code} at {_step(s)}{_worst_error(s)}; {nxt}.")


def launched(out: LaunchOutput) -> str:
    """launch_experiment: what started where, and the call that watches it."""
    roles = ", ".join(p.role for p in out.processes)
    return _clip(f"Launched run {out.id} (tmux session {out.session}) on {out.host}: {len(out.processes)} "
                 f"process{'es' if len(out.processes) != 1 else ''} ({roles}); next: wait_experiment id={out.id} "
                 "until=first_step.")


_WAIT_ENDS = {
    "exited": "the run ended",
    "first_step": "the first training step appeared",
    "pattern": "the pattern matched",
    "started": "its Slurm job left the queue",
    "error": "a new error signature appeared",
    "timeout": "nothing to act on yet",
    "unreachable": "its host did not answer",
}


def waited(s: ExperimentStatus, reason: str, next_wait_s: int) -> str:
    """wait_experiment: why the wait ended, then the run's state and next call."""
    again = f" Call wait_experiment again in about {next_wait_s} s." if next_wait_s and reason == "timeout" else ""
    return _clip(f"Wait ended: {_WAIT_ENDS.get(reason, reason)}. {run_state(s)}{again}")


def stopped(out: StopOutput) -> str:
    """stop_experiment: the run's state after the stop, and what is still alive."""
    alive = f"; {len(out.still_alive)} process(es) survived SIGKILL (see still_alive)" if out.still_alive else ""
    if out.killed:
        how = f" after SIGTERM/SIGKILL of {', '.join(out.killed)}"
    elif out.interrupted:
        how = " after Ctrl-C"
    else:
        how = " (nothing was running to stop)"
    return _clip(f"Run {out.id} {_STATE_WORDS.get(out.state, out.state)}{how}{alive}; next: collect_results "
                 f"id={out.id}.")


def compared(leader: str | None, metric: str | None, value: float | None, runner_up: str | None,
             n_runs: int, n_differing: int) -> str:
    """compare_experiments: who leads on which metric, and how many config keys differ."""
    if leader is None:
        lead = "no run has a value of the primary metric yet (see notes)"
    else:
        lead = f"{leader} leads on {metric} ({value:.6g})" + (f" ahead of {runner_up}" if runner_up else "")
    return _clip(f"Compared {n_runs} run{'s' if n_runs != 1 else ''}: {lead}; {n_differing} config key"
                 f"{'s' if n_differing != 1 else ''} differ.")


def collected(results_path: str, state: str | None, n_val: int, n_train: int, n_errors: int,
              plot_path: str | None) -> str:
    """collect_results: what was written, and how much it holds."""
    run = f"run {state}; " if state else ""
    plot = f"; plot {plot_path}" if plot_path else ""
    errors = f"; {n_errors} error signature{'s' if n_errors != 1 else ''}" if n_errors else ""
    return _clip(f"Wrote {results_path} ({run}{n_val} validation and {n_train} training metrics{errors}{plot}).")


def listed(runs: list[ExperimentStatus], problems: int) -> str:
    """experiment_status: one run's own line, or how many runs are in which state."""
    unread = f"; {problems} registry row{'s' if problems != 1 else ''} unreadable (see problems)" if problems else ""
    if len(runs) == 1:
        return _clip(runs[0].summary + unread)
    if not runs:
        return _clip(f"No experiment in the registry{unread}.")
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.state] = counts.get(run.state, 0) + 1
    states = ", ".join(f"{n} {state}" for state, n in counts.items())
    errors = sum(1 for run in runs if run.errors)
    errs = f"; {errors} with error signatures" if errors else ""
    return _clip(f"{len(runs)} runs: {states}{errs}{unread}; experiment_status id=... shows one.")
