"""The one-line ``summary`` of each experiment tool's answer: the run's state and what to do next, in words an
assistant can quote as they are. One small function per tool, each called at the end of that tool, reading
only the answer it summarises (so it never says more than the answer knows).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skill_server.experiments.models import ExperimentInfo, ExperimentStatus, LaunchOutput, StopOutput

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


def _worst_error(s: ExperimentStatus, hint: bool = True) -> str:
    if not s.errors:
        return ""
    e = s.errors[0]
    more = f" (+{len(s.errors) - 1} more)" if len(s.errors) > 1 else ""
    return f"; {e.severity} {e.title!r} seen {e.count}x{more}: {_hint_head(e.hint)}" if hint else ""


#: How much of an error's hint a summary quotes; a longer one (a computed fix) is cut at a sentence's end.
HINT_IN_SUMMARY = 360


def _hint_head(hint: str) -> str:
    """The hint, or its first whole sentences and where the rest is: a summary is bounded, a cut mid-word hides
    the very number a computed fix is about."""
    text = " ".join(hint.split()).rstrip(". ")
    if len(text) <= HINT_IN_SUMMARY:
        return text
    cut = text.rfind(". ", 0, HINT_IN_SUMMARY)
    return (text[:cut] if cut > 0 else text[:HINT_IN_SUMMARY].rsplit(" ", 1)[0]) + " (all of it: errors[0].hint)"


def acts(s: ExperimentStatus) -> list[tuple[str, str, str]]:
    """(trigger, action, result) of each of the run's policy actions ('<time> <trigger> -> <action>: <result>')."""
    out = []
    for line in s.actions:
        _, _, rest = line.partition(" ")
        trigger, _, rest = rest.partition(" -> ")
        action, _, result = rest.partition(": ")
        out.append((trigger, action, result))
    return out


def _stopped_by(s: ExperimentStatus) -> str:
    """' by its policy on <trigger> (<result>)' when the run's own policy stopped it, else '' (a stop that led
    to a relaunch says only its trigger: the next attempt tells the rest)."""
    if s.state != "stopped":
        return ""
    for trigger, action, result in acts(s):
        if action in ("stop", "resume") and result.startswith("stopped"):
            relaunched = action == "resume" and "relaunching" in result
            return f" by its policy on {trigger}" + ("" if relaunched else f" ({result})")
    return ""


def _collected_by_monitor(s: ExperimentStatus) -> str | None:
    """Where the run's monitor wrote its results (``on_end: collect``), or None."""
    for _, action, result in acts(s):
        if action == "collect" and " written" in result and not result.startswith("collect failed"):
            return result.split(" written", 1)[0]
    return None


def _after_end(s: ExperimentStatus, cancelled: bool = False) -> str:
    """The next call for an ended run, as an engineer would make it: its next attempt when it was resumed; its
    relaunch when it is to come, or failed (tried again); the wrap-up of a run that finished (succeeded, or ran its
    max time); for one that failed, was stopped or vanished, the cause to fix (its worst error's hint names it) or
    its lines to read, never a wrap-up with finish.flag. ``cancelled``: a stop just cancelled its pending
    relaunch."""
    if s.next_attempt:
        return f"resumed as {s.next_attempt}: experiment_status id={s.next_attempt}"
    resumes = [result for _, action, result in acts(s) if action == "resume"]
    if resumes and not cancelled and resumes[-1].startswith("relaunch failed"):
        return (f"its resume could not be carried out ({resumes[-1]}): experiment_status id={s.id} says when it "
                "is relaunched")
    if resumes and not cancelled and " relaunching" in resumes[-1]:  # the backoff runs: not the end of the chain
        return f"its resume policy relaunches it ({resumes[-1]}): wait_experiment id={s.id} follows it"
    written = _collected_by_monitor(s)
    if s.state in ("succeeded", "timed_out"):
        if written:
            return (f"its monitor wrote {written} and finish.flag: nothing is left to do (collect_results id={s.id} "
                    "would only add a plot)")
        return f"next: collect_results id={s.id} (results.md, plot, finish.flag)"
    kept = f"; its monitor wrote {written} (no finish.flag)" if written else ""
    if s.state == "stopped" and not _stopped_by(s):
        return f"stopped on request{kept}; launch it again when ready"
    if s.errors:
        return f"next: fix the cause ({s.errors[0].signature}: errors[0].hint says how) and launch it again{kept}"
    return (f"next: read its last lines (experiment_status id={s.id} since=0) for the cause, fix it and launch it "
            f"again{kept}")


#: The checkpoint a resume continued from, as the relaunching attempt's action says it.
_RELAUNCHING = re.compile(r"relaunching as (\S+), (?:continuing from (global_step_\d+)|starting over)")


def _resumed_from(previous: ExperimentStatus, attempt: str) -> str:
    """Where ``attempt`` continued from, as the attempt before it (which relaunched it) recorded."""
    for _, action, result in acts(previous):
        found = _RELAUNCHING.match(result) if action == "resume" else None
        if found and found.group(1) == attempt:
            return f"(from {found.group(2)})" if found.group(2) else "(started over)"
    return "(from a checkpoint not recorded)"


def attempts(chain: list[ExperimentStatus]) -> str:
    """experiment_status of a resumed run (``chain``: it, then each later attempt, oldest first): each attempt
    by its suffix (``.r2``) with the checkpoint it continued from and its state; the newest one's state ends
    with its next call."""
    first, newest = chain[0], chain[-1]

    def name(a: ExperimentStatus) -> str:
        return a.id[len(first.id):] if a.id.startswith(first.id + ".") else a.id

    # The experiment's outcome first (what a morning reader asks), then each attempt in order.
    lead = (f"Experiment {first.id} {_STATE_WORDS.get(newest.state, newest.state)} at {_step(newest)} over "
            f"{len(chain)} attempts")
    head = f"attempt 1 {_STATE_WORDS.get(first.state, first.state)}{_stopped_by(first)} at {_step(first)}"
    later = [f"{name(a)} {_resumed_from(p, a.id)} {_STATE_WORDS.get(a.state, a.state)} at {_step(a)}"
             for p, a in zip(chain[:-2], chain[1:-1])]
    last = run_state(newest, hints=False).removeprefix(f"Run {newest.id} ")
    later.append(f"{name(newest)} {_resumed_from(chain[-2], newest.id)} {last}")
    return _clip(f"{lead}: {head}; " + "; ".join(later))


def _hung(s: ExperimentStatus) -> str:
    """What an engineer does about a run that may hang: read its newest lines, stop it if it hangs."""
    return f"read its newest lines (experiment_status id={s.id}), stop_experiment id={s.id} if it hangs"


def _while_running(s: ExperimentStatus) -> str:
    """The next call for a running run: its error's fix, its overdue first step, or a wait."""
    if s.errors and s.errors[0].severity == "error":
        return f"{_hung(s)}, then fix the cause (errors[0].hint)"
    if s.first_step_overdue:
        return f"its first step is overdue: {_hung(s)}"
    return f"next: wait_experiment id={s.id}" + (" until=first_step" if not s.first_step_seen else "")


def run_state(s: ExperimentStatus, *, hints: bool = True) -> str:
    """experiment_status (each run): where it is, the worst error seen with its hint (not without ``hints``:
    a chain's line keeps its room for the next call), and the next call."""
    head = f"Run {s.id} {_STATE_WORDS.get(s.state, s.state)}"
    if s.state == "queued" and s.scheduler is not None:
        return _clip(f"Run {s.id} is queued by {s.scheduler.get('scheduler') or 'its scheduler'} (job "
                     f"{s.scheduler.get('job_id')}, reason {s.scheduler.get('reason')}); next: wait_experiment "
                     f"id={s.id} until=started.")
    if s.state == "running":
        return _clip(f"{head} at {_step(s)}{_worst_error(s, hints)}; {_while_running(s)}.")
    if s.state == "stalled":
        quiet = f": no progress for {int(s.quiet_s or 0)} s (bound {int(s.stall_bound_s or 0)} s)"
        return _clip(f"{head} at {_step(s)}{quiet}{_worst_error(s, hints)}; {_hung(s)}.")
    code = f" (exit code {s.exit_code})" if s.exit_code is not None else ""
    if s.state in ("unreachable",):
        return _clip(f"{head}{code}: its host did not answer; check again later{_worst_error(s, hints)}.")
    nxt = _after_end(s) if s.state in ("succeeded", "failed", "stopped", "timed_out") \
        else (f"its processes are gone without an exit code: read its last lines (experiment_status id={s.id} "
              "since=0), then launch it again")
    return _clip(f"{head}{_stopped_by(s)}{code} at {_step(s)}{_worst_error(s, hints)}; {nxt}.")


def _policy_words(policy: dict[str, Any]) -> str:
    """What the run's monitor does alone, from the policy in force (the launch answer's ``policy``)."""
    acts = [f"{key} {policy[key]}" for key in ("on_error", "on_stall", "on_first_step_overdue") if policy.get(key)]
    if "resume" in (policy.get("on_error"), policy.get("on_stall")):
        acts.append(f"at most {policy.get('max_resumes')} resume{'s' if policy.get('max_resumes') != 1 else ''}")
    if policy.get("on_end"):
        acts.append(f"on_end {policy['on_end']}")
    told = [where for where in (policy.get("notify_file"), "notify_command" if policy.get("notify_command") else "")
            if where]
    if told:
        acts.append("a line per happening to " + " and ".join(told))
    return ", ".join(acts)


def launched(out: LaunchOutput) -> str:
    """launch_experiment: what started where, what its monitor does alone (its policy), and the call that watches
    it."""
    roles = ", ".join(p.role for p in out.processes)
    alone = (f"; its monitor carries out its policy with no call ({_policy_words(out.policy)})" if out.policy
             else "")
    return _clip(f"Launched run {out.id} (tmux session {out.session}) on {out.host}: {len(out.processes)} "
                 f"process{'es' if len(out.processes) != 1 else ''} ({roles}){alone}; next: wait_experiment "
                 f"id={out.id} until=first_step.")


_WAIT_ENDS = {
    "exited": "the run ended",
    "first_step": "the first training step appeared",
    "pattern": "the pattern matched",
    "started": "its job left its scheduler's queue",
    "error": "a new error signature appeared",
    "timeout": "nothing to act on yet",
    "unreachable": "its host did not answer",
}


def waited(s: ExperimentStatus, reason: str, next_wait_s: int, followed: str | None = None) -> str:
    """wait_experiment: why the wait ended (on the newest attempt of the run ``followed`` when the wait moved
    on to it), then the run's state and next call."""
    again = f" Call wait_experiment again in about {next_wait_s} s." if next_wait_s and reason == "timeout" else ""
    elsewhere = [p.reason for p in s.processes if p.reason and p.reason.endswith("ask there")]
    if reason == "unreachable" and elsewhere and len(elsewhere) == len(s.processes):
        return _clip(f"Wait ended at once: run {s.id} is another machine's ({elsewhere[0]}); this machine cannot "
                     "see its processes, so waiting here cannot help.")
    moved = f" (run {followed} was resumed: this is its newest attempt)" if followed else ""
    if reason == "stalled" and s.state == "running":  # quiet for the wait's own stall_s: about the hang, not a wait
        quiet = f"no new {'step' if s.quiet_since == 'step' else 'output'} for {int(s.quiet_s or 0)} s"
        return _clip(f"Wait ended{moved}: {quiet}. Run {s.id} is {s.state} at {_step(s)}{_worst_error(s)}; "
                     f"{_hung(s)}.")
    return _clip(f"Wait ended{moved}: {_WAIT_ENDS.get(reason, reason)}. {run_state(s)}{again}")


def stopped(out: StopOutput, unconfirmed: Sequence[str] = (), also: Sequence[str] = (), cancelled: bool = False) -> str:
    """stop_experiment: the run's state after the stop, and what is still alive; a stop its hosts could not
    confirm (``unconfirmed``: per host why, and what was done instead); the lineage's other runs it stopped
    (``also``) and a pending relaunch it cancelled."""
    if unconfirmed:
        return _clip(f"Run {out.id}: the stop could not be confirmed ({'; '.join(unconfirmed)}); its processes are "
                     f"marked stopped: experiment_status id={out.id} shows them end, stop_experiment again once it "
                     "can be confirmed.")
    alive = f"; {len(out.still_alive)} process(es) survived SIGKILL (see still_alive)" if out.still_alive else ""
    if out.killed:
        how = f" after SIGTERM/SIGKILL of {', '.join(out.killed)}"
    elif out.interrupted:
        how = " after Ctrl-C"
    else:
        how = _stopped_by(out) or (" (nothing of it was running)" if also or cancelled
                                   else " (nothing was running to stop)")
    more = f"; also stopped {', '.join(also)}" if also else ""
    more += "; the relaunch its resume policy had pending is cancelled" if cancelled else ""
    return _clip(f"Run {out.id} {_STATE_WORDS.get(out.state, out.state)}{how}{alive}{more}; "
                 f"{_after_end(out, cancelled)}.")


def compared(leader: str | None, metric: str | None, value: float | None, runner_up: str | None,
             n_runs: int, n_differing: int) -> str:
    """compare_experiments: who leads on which metric, and how many config keys differ."""
    if leader is None:
        lead = "no run has a value of the primary metric yet (see notes)"
    else:
        lead = f"{leader} leads on {metric} ({value:.6g})" + (f" ahead of {runner_up}" if runner_up else "")
    return _clip(f"Compared {n_runs} run{'s' if n_runs != 1 else ''}: {lead}; {n_differing} config key"
                 f"{'s' if n_differing != 1 else ''} differ.")


def collected(document: str, state: str | None, n_val: int, n_train: int, n_errors: int, plot_path: str | None,
              attempts: int, flagged: bool, whole: ExperimentInfo | None) -> str:
    """collect_results: what was written, how much it holds (every attempt), finish.flag or why not, and the next
    step."""
    run = f"experiment {state}; " if state else ""
    plot = f"; plot {plot_path}" if plot_path else ""
    errors = f"; {n_errors} error signature{'s' if n_errors != 1 else ''}" if n_errors else ""
    over = f" over its {attempts} attempts" if attempts > 1 else ""
    head = f"Wrote {document} ({run}{n_val} validation and {n_train} training metrics{over}{errors}{plot})"
    if flagged:
        return _clip(f"{head} and finish.flag.")
    if state in ("running", "stalled", "queued", "relaunching"):
        nxt = (f"it still runs: results.md is interim, no finish.flag; wait_experiment id={whole.id}" if whole
               else "it still runs: results.md is interim, no finish.flag")
    elif state in ("succeeded", "timed_out") or state is None:
        nxt = "no finish.flag (write_finish_flag=false)"
    else:
        nxt = (f"no finish.flag: it {_STATE_WORDS.get(state, state)}, it did not finish; fix the cause and launch "
               "again, or write_finish_flag=true to close it as it is")
    return _clip(f"{head}; {nxt}.")


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
