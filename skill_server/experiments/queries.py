"""Queries on runs, shared by the experiment tools: find a run, observe runs with their new lines, progress,
checkpoints and metric history, and the status fields every experiment answer carries. Read-only.

Cursors: one byte offset per process log (``"1234"`` or ``"1234,88"``). Without ``since`` a call continues
from the cursor stored by the previous status or wait call of that experiment; an explicit ``since``
reads independently. Lines come from the bytes after the cursor (at most 200 lines and 16 KB), asked
for in the same per-host round trip as everything else.

The same round trip also carries, when needed, a read of the run's YAML (``runconfig``: total steps,
checkpoint directory; cached in the registry) and the checkpoint listing. Only once in a run's life,
when its checkpoint directory has just been learnt from the YAML, does listing it take a second call.
The metric history (``history``) is read from the local registry.
"""

from __future__ import annotations

import math
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.experiments import backends, fixes, history, lineage, logs, progress, runconfig
from skill_server.experiments import blueprint as bp
from skill_server.experiments import checkpoints as ckpt
from skill_server.experiments.models import (
    DEFAULT_HISTORY_POINTS,
    TERMINAL,
    CheckpointList,
    ErrorHit,
    ExperimentStatus,
    MetricsHistory,
    ProcessInfo,
    ProgressInfo,
    RestartInfo,
    StatusState,
)
from skill_server.experiments.observe import View, observe, still_running
from skill_server.experiments.signatures import SIGNATURES_BY_NAME
from skill_server.experiments.store import Registry, Row
from skill_server.experiments.upkeep import HEAL, READ_ONLY, Upkeep
from skill_server.hosts import call_hosts, client, result_of

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import StallVerdict

MAX_CURSOR_OFFSET = 2**62


def parse_cursor(text: str, n: int, field: str) -> list[int]:
    if text == "":
        return [0] * n
    parts = text.split(",")
    if len(parts) != n or not all(p.isascii() and p.isdigit() and len(p) <= 19 for p in parts):
        raise ToolInputError(f"{text!r} is not a cursor of this experiment (expected {n} comma-separated offsets)",
                             field=field)
    offsets = [int(p) for p in parts]
    if any(o > MAX_CURSOR_OFFSET for o in offsets):
        raise ToolInputError(f"{text!r} is not a cursor of this experiment (offset too large)", field=field)
    return offsets


def stored_cursor(row: Row) -> list[int]:
    try:
        return parse_cursor(row.read_cursor, len(row.processes), "cursor")
    except ToolInputError:
        return [0] * len(row.processes)


def line_reads(row: Row, offsets: list[int], max_lines: int) -> list[list[tuple[int, int]]]:
    """The extra read per process that yields its new lines (none when no lines are wanted)."""
    if max_lines == 0:
        return [[] for _ in row.processes]
    budget = max(1024, logs.MAX_BYTES // len(row.processes))
    return [[(offsets[i], budget)] for i in range(len(row.processes))]


def lines_from(view: View, offsets: list[int], max_lines: int) -> tuple[list[str], list[int], int]:
    """(lines, new cursor, skipped bytes) from the line reads that came back with ``view``."""
    if max_lines == 0:
        return [], offsets, 0
    n = len(view.procs)
    out: list[str] = []
    new = list(offsets)
    skipped = 0
    for i, p in enumerate(view.procs):
        if not p.reads:
            continue  # host unreachable: the cursor stays where it was
        chunk = p.reads[0]
        new[i] = chunk.end
        skipped += chunk.skipped
        lines = logs.split_lines(chunk.text)
        if len(lines) > max_lines:
            skipped += sum(len(x.encode()) + 1 for x in lines[:-max_lines])
            lines = lines[-max_lines:]
        out += [f"[{p.role}] {x}" for x in lines] if n > 1 else lines
    if len(out) > max_lines:
        out = out[-max_lines:]
    return out, new, skipped


def progress_info(view: View, config: dict[str, Any] | None, now: float | None = None) -> ProgressInfo:
    """Steps, rate and ETA of one view (``config``: the run's cached YAML summary, if known)."""
    config = config or {}
    total = config.get("total_steps") if isinstance(config.get("total_steps"), int) else None
    est = progress.estimate(view.scan.progress, view.scan.global_step, total, config.get("total_steps_source"),
                            finished=view.state in TERMINAL)
    now = time.time() if now is None else now
    restarts = []
    for r in est.restarts:
        try:
            restarts.append(RestartInfo(role=str(r["role"]), from_step=int(r["from_step"]), to_step=int(r["to_step"]),
                                        seen_at=progress.iso(float(r["seen_at"]))))
        except (KeyError, TypeError, ValueError, OverflowError, OSError):
            continue
    eta_at = progress.iso(now + est.eta_s) if est.eta_s is not None and est.eta_s < 10**10 else None
    return ProgressInfo(global_step=est.global_step, total_steps=est.total_steps,
                        total_steps_source=est.total_steps_source, seconds_per_step=est.seconds_per_step,
                        seconds_per_step_source=est.seconds_per_step_source, steps_per_hour=est.steps_per_hour,
                        eta_s=est.eta_s, eta_at=eta_at, restarts=restarts, unknown=est.unknown)


def quiet(view: View) -> tuple[float | None, str | None]:
    """How long a running run has been quiet, by its monitors' findings (their times on the run clock, the
    clock ``elapsed_s`` reads): since the newest step line, else since its logs last grew; (None, None) when
    it is not running or has no monitor."""
    found = list(view.scan.monitor.values())
    if view.state != "running" or not found:
        return None, None
    for key, since in (("stepped_at", "step"), ("grew_at", "output")):
        times = [float(t) for f in found if isinstance(t := f.get(key), (int, float)) and math.isfinite(t)]
        if times:
            return round(max(0.0, view.elapsed_s - max(times)), 1), since
    return round(view.elapsed_s, 1), "output"  # nothing printed since the start


def stall(view: View) -> StallVerdict | None:
    """The stall verdict of a running run's monitors (the one with the longest bound among those saying
    stalled, else the longest bound), or None: not running, or no monitor judged it yet."""
    if view.state != "running":
        return None
    verdicts = [v for w in view.scan.watchdog.values() if isinstance(v := w.get("stall"), dict) and v]
    if not verdicts:
        return None
    return max(verdicts, key=lambda v: (v.get("stalled") is True, float(v.get("bound_s") or 0)))


def queued(view: View) -> bool:
    """Whether the run is a scheduler's job still in its queue (pending, held, suspended): none of its processes
    has started. The registry keeps calling it running."""
    return view.state == "running" and any(p.scheduler is not None and p.scheduler["queued"] for p in view.procs)


def shown_state(view: View) -> str:
    """The run's state as status, wait and watch say it: ``stalled`` or ``queued`` for a running run when so."""
    if stalled(view):
        return "stalled"
    return "queued" if queued(view) else view.state


def stalled(view: View) -> bool:
    """Whether its monitor says the run stalled and nothing newer (read ahead of the monitor) says otherwise."""
    verdict = stall(view)
    if verdict is None or verdict.get("stalled") is not True:
        return False
    quiet_s = quiet(view)[0]
    return quiet_s is None or quiet_s >= float(verdict.get("bound_s") or 0)


@dataclass(frozen=True)
class ActionTaken:
    """One thing a run's policy did on its host (``hosts.agent.policy``), or the notify command's last failure."""

    at: str
    trigger: str
    action: str
    result: str

    def line(self) -> str:
        return f"{self.at} {self.trigger} -> {self.action}: {self.result}"


def actions(view: View) -> list[ActionTaken]:
    """What the run's policies did on any of its hosts, oldest first, and the notify command's last failure."""
    seen: dict[tuple[Any, ...], ActionTaken] = {}
    for w in view.scan.watchdog.values():
        for a in w.get("actions") or []:
            try:
                key = (float(a["wall"]), str(a["trigger"]), str(a["action"]))
                seen[key] = ActionTaken(at=progress.iso(key[0]), trigger=key[1], action=key[2], result=str(a["result"]))
            except (KeyError, TypeError, ValueError, OverflowError, OSError):
                continue
        tally = w.get("notify") or {}
        failure = tally.get("last_failure")
        if isinstance(failure, dict) and isinstance(failure.get("at"), (int, float)):
            when = view.row.created + float(failure["at"])
            over = f", {int(tally.get('killed') or 0)} killed at the time bound" if tally.get("killed") else ""
            seen[(when, str(failure.get("event")), "notify")] = ActionTaken(
                at=progress.iso(when), trigger=str(failure.get("event")), action="notify",
                result=f"failed ({int(tally.get('failed') or 0)} so far{over}): {failure.get('error')}")
        lost = tally.get("lost")
        if isinstance(lost, dict) and isinstance(lost.get("at"), (int, float)):
            when = view.row.created + float(lost["at"])
            seen[(when, "notify", "not sent")] = ActionTaken(
                at=progress.iso(when), trigger=", ".join(map(str, lost.get("events") or [])), action="notify",
                result=f"not sent ({int(tally.get('dropped') or 0)} so far): {lost.get('why')}")
    done = [seen[k] for k in sorted(seen)]
    return done + _failed_resumes(view, done)


def _failed_resumes(view: View, done: list[ActionTaken]) -> list[ActionTaken]:
    """A relaunch that failed and is tried again, as its monitor's heartbeat said it where ``monitor.json`` could
    not be written (a full disk): the action its monitor could not record."""
    last = next((a for a in reversed(done) if a.action == "resume"), None)
    out = []
    for w in view.scan.watchdog.values():
        pending = w.get("pending_resume")
        failed = pending.get("failed") if isinstance(pending, dict) else None
        if failed and pending and (last is None or not last.result.startswith("relaunch failed")):
            tries = int(pending.get("tries") or 1)
            out.append(ActionTaken(at=progress.iso(time.time()), trigger=str(pending.get("trigger") or "resume"),
                                   action="resume", result=f"relaunch failed: {failed}; trying again ({tries} "
                                   f"{'try' if tries == 1 else 'tries'} so far)"))
            break
    return out


def relaunch_pending(view: View, next_attempt: str | None) -> bool:
    """The ended run's resume policy is about to relaunch it (its last resume action: stopped, relaunching
    after the backoff) and the registry knows no attempt after it yet (``next_attempt``): a wait or watch goes
    on. Not once a stop cancelled it, nor while a relaunch that failed is tried again (that is not promised)."""
    if next_attempt:
        return False
    runs = [p.monitor["run"] for p in view.procs if p.monitor is not None and "run" in p.monitor]
    if any(run.get("stop_requested") for run in runs):
        return False
    pending = [w.get("pending_resume") for w in view.scan.watchdog.values() if w.get("pending_resume")]
    if pending:  # the monitor set it before it stopped the processes, and clears it once relaunched
        return not any(p.get("failed") for p in pending if isinstance(p, dict))
    done = [a for a in actions(view) if a.action == "resume"]
    return bool(done) and " relaunching" in done[-1].result


def status_fields(view: View, lines: list[str], cursor: list[int], skipped: int, *,
                  config: dict[str, Any] | None = None, checkpoints: CheckpointList | None = None,
                  metrics_history: MetricsHistory | None = None, say_queued: bool = False,
                  attempts: tuple[str | None, str | None] = (None, None)) -> ExperimentStatus:
    """The ``ExperimentStatus`` of one view (its summary left for the tool to say; wait and stop add their own
    fields on top); ``say_queued``: a job in its scheduler's queue is ``queued`` (status, wait), else ``running``
    as the registry says; ``attempts``: the attempts before and after it in its lineage."""
    row = view.row
    max_time = row.spec.max_time_s or bp.DEFAULT_MAX_TIME_S
    first_step_s = float(row.spec.first_step_timeout_s or bp.DEFAULT_FIRST_STEP_S)
    scan = view.scan
    errors = []
    for name, hit in scan.errors.items():
        sig = SIGNATURES_BY_NAME.get(name)
        if sig is None:
            continue
        errors.append(ErrorHit(signature=name, title=sig.title, severity=sig.severity, line=str(hit.get("line", "")),
                               count=int(hit.get("count", 0)), role=hit.get("role"),
                               hint=fixes.hint_for(name, str(hit.get("line", "")), config, lines)))
    # a specific signature first: "a Python exception ended the run" only says a traceback is there
    errors.sort(key=lambda e: (e.severity != "error", e.signature in GENERIC_SIGNATURES, -e.count))
    overdue = not scan.first_step_seen and view.elapsed_s > first_step_s
    if scan.first_step_seen:  # late only if a look at the log after the deadline had not seen it yet
        late_from = scan.first_step_not_before if scan.first_step_not_before is not None else scan.first_step_at
        overdue = late_from is not None and late_from - row.created > first_step_s
    quiet_s, quiet_since = quiet(view)
    verdict = stall(view)
    scheduler = scheduler_word(view)
    shown = shown_state(view)
    if shown == "queued":
        overdue = False  # still in its scheduler's queue: nothing could have printed a step yet
    out = ExperimentStatus(
        summary="", id=row.id, session=row.session, socket=row.socket, host=row.host, attach=row.spec.attach,
        state=cast("StatusState", shown if say_queued or shown != "queued" else view.state), exit_code=view.exit_code,
        started_at=row.started_at,
        elapsed_s=round(view.elapsed_s, 1),
        time_left_s=round(max(0.0, max_time - view.elapsed_s), 1) if view.state == "running" else None,
        max_time_s=max_time, first_step_seen=scan.first_step_seen, first_step_overdue=overdue,
        global_step=scan.global_step, quiet_s=quiet_s,
        quiet_since=cast("Literal['step', 'output'] | None", quiet_since),
        stall_bound_s=verdict.get("bound_s") if verdict else None, actions=[a.line() for a in actions(view)],
        previous_attempt=attempts[0], next_attempt=attempts[1],
        last_metrics=scan.last_metrics,
        errors=errors, lines=lines,
        cursor=",".join(str(c) for c in cursor), skipped_bytes=skipped, unscanned_bytes=scan.unscanned_bytes,
        # a ProcView's state is a ProcessState string (states.process_state); pydantic checks it again here
        processes=[ProcessInfo(role=p.role, host=p.proc.host, state=p.state, exit_code=p.exit_code,  # type: ignore[arg-type]
                               log_path=p.log_path, pid=p.proc.pid,
                               attach=row.spec.attach_on(p.proc.host), reason=p.reason)
                   for p in view.procs],
        log_path=view.procs[0].log_path if view.procs else "", result_dir=row.spec.result_dir,
        note=view.note, progress=progress_info(view, config), checkpoints=checkpoints,
        metrics_history=metrics_history, scheduler=scheduler, policy=dict(row.spec.policy) if row.spec.policy else None,
    )
    out._running = still_running(view)
    out.alive = None if out._running is None else bool(out._running)
    out._first_step = scan.first_step
    return out


def scheduler_word(view: View) -> dict[str, str] | None:
    """A run's job in its scheduler's own words (the scheduler, job id, state, reason, nodes, exit code), None for
    a run in no job."""
    facts = next((p.scheduler for p in view.procs if p.scheduler is not None), None)
    if facts is None:
        return None
    words: dict[str, object] = dict(facts)
    return {k: str(words[k]) for k in ("scheduler", "job_id", "state", "reason", "nodes", "exit_code") if words.get(k)}


def find(reg: Registry, key: str, field: str = "id") -> Row:
    row = reg.find(key)
    if row is None:
        raise ToolInputError(f"no experiment {key!r} in the registry (ids and session names are accepted)",
                             field=field)
    return row


def find_any(reg: Registry, key: str, deadline: Deadline | None = None, refusal: str | None = None) -> Row:
    """``find``, and an attempt a resume policy started that the registry has not taken up yet (``<id>.rN``, the
    id its notifications carry): its lineage is observed, healing, until the attempt is taken up. ``refusal``:
    the error is a ``ToolFailure`` saying that (a stop refuses what it did not launch), else ``find``'s."""
    row = reg.find(key)
    head, _, number = key.rpartition(".r")
    first = reg.find(head) if row is None and head and number.isdigit() else None
    for _ in range(lineage.MAX_ATTEMPTS if first is not None else 0):
        assert first is not None
        newest = lineage.of(reg, first).newest or first
        observe(reg, [newest], deadline=deadline, upkeep=HEAL)  # takes up the attempts its host recorded
        row = reg.find(key)
        if row is not None or (lineage.of(reg, first).newest or first).id == newest.id:
            break
    if row is not None:
        return row
    if refusal is not None:
        raise ToolFailure(f"no experiment {key!r} in this server's registry: {refusal}", field="id")
    return find(reg, key)


@dataclass
class HistoryRequest:
    """What ``metrics_history`` asks for."""

    patterns: list[str]
    from_step: int | None = None
    to_step: int | None = None
    max_points: int = DEFAULT_HISTORY_POINTS


@dataclass
class ExtraPlan:
    """The extra operations of one run in a status round trip, and where their answers are."""

    config: dict[str, Any]
    candidates: list[runconfig.Candidate]
    read_config: bool
    list_checkpoints: bool
    read_model: tuple[str, client.Op[Any]] | None = None  # the model's config.json, once (its KV shape)


def plan_extras(reg: Registry, row: Row, want_checkpoints: bool, now: float) -> ExtraPlan:
    """What this call must ask the run's hosts besides the observation: its YAML (when the cached summary is
    missing or stale) and its checkpoint listing (when wanted and the directory is known)."""
    checked_at, config = runconfig.cached(reg, row.id)
    read = runconfig.needs_check(checked_at, config, now) and not (row.final_state and checked_at is not None)
    cands = runconfig.candidates(row) if read else []
    listing = want_checkpoints and ckpt.listing_op(config) is not None  # the cached directory, if known
    return ExtraPlan(config, cands, read, listing, runconfig.model_read(row, config))


def extra_ops(plan: ExtraPlan) -> list[tuple[str, client.Op[Any]]]:
    """The (host, op) pairs of a plan, for ``observe(extra_ops=...)``; the checkpoint listing comes last."""
    ops: list[tuple[str, client.Op[Any]]] = [(c.host, runconfig.read_op(c.path)) for c in plan.candidates]
    if plan.read_model is not None:
        ops.append(plan.read_model)
    if plan.list_checkpoints:
        listing = ckpt.listing_op(plan.config)
        assert listing is not None
        ops.append(listing)
    return ops


def absorb_config(reg: Registry, view: View, plan: ExtraPlan, now: float) -> None:
    """Fold the YAML reads that came back with ``view`` into the plan's config and cache it."""
    old = plan.config
    if plan.read_config:
        plan.config = runconfig.fold_answers(view.row, plan.candidates, view.extra[: len(plan.candidates)])
        if plan.config.get("model_path") == old.get("model_path"):  # the model's shape, read before, still holds
            plan.config.update({k: v for k, v in old.items() if k in ("model_kv", "model_kv_problem")})
    model_answer = len(plan.candidates)
    if plan.read_model is not None and len(view.extra) > model_answer and \
            plan.config.get("model_path") == old.get("model_path"):
        runconfig.absorb_model(plan.config, view.extra[model_answer])
    if plan.read_config or plan.read_model is not None:
        try:
            runconfig.store(reg, view.row.id, plan.config, now)
        except sqlite3.Error as exc:
            if not reg.recordable(exc):
                raise


#: Signatures that only say an error happened (its own line says what): listed after the specific ones.
GENERIC_SIGNATURES = frozenset({"python_exception"})
#: The signature whose computed fix needs the GPU's memory (``fixes.kv_cache_fix``).
KV_SIGNATURE = "vllm_kv_cache_too_small"


def _remember_profile(reg: Registry, view: View, plan: ExtraPlan, lines: list[str], now: float) -> None:
    """vLLM's memory profile figures among the lines read now, kept with the run's config: a later status
    (which reads only newer lines) still computes the KV-cache fix from them."""
    facts = fixes.log_facts(lines)
    known = plan.config.get("vllm_profile")
    if not facts or (isinstance(known, dict) and all(known.get(k) == v for k, v in facts.items())):
        return
    plan.config["vllm_profile"] = {**(known if isinstance(known, dict) else {}), **facts}
    try:
        runconfig.store(reg, view.row.id, plan.config, now)
    except sqlite3.Error as exc:
        if not reg.recordable(exc):
            raise


def _gpu_memory(reg: Registry, view: View, plan: ExtraPlan, deadline: Deadline | None, now: float) -> None:
    """Once a run hit vLLM's KV-cache limit, its host's GPU memory (nvidia-smi, one more call, cached with the
    YAML's summary) for the utilization that fix computes; a scheduled run's GPUs are on its nodes: not asked."""
    from skill_server.gpus import nvidia_smi
    from skill_server.gpus.query import CALL_TIMEOUT_S, from_reply

    config = plan.config
    place = view.row.spec.hosts.get(view.row.host)
    if KV_SIGNATURE not in view.scan.errors or "gpu_total_mib" in config or config.get("gpu_problem") or \
            (place is not None and place.handle.kind != backends.DEFAULT):
        return
    host = view.row.host
    gpus = from_reply(host, call_hosts({host: nvidia_smi.query_ops()}, timeout_s=CALL_TIMEOUT_S,
                                       deadline=deadline)[host])
    sizes = [g.memory_total_mib for g in gpus.gpus or [] if g.memory_total_mib]
    if sizes:
        config["gpu_total_mib"], config["gpu_host"] = min(sizes), host  # the smallest GPU bounds the engines
    else:
        config["gpu_problem"] = gpus.reason or "nvidia-smi listed no GPU memory"
    try:
        runconfig.store(reg, view.row.id, config, now)
    except sqlite3.Error as exc:
        if not reg.recordable(exc):
            raise


def _checkpoints(plan: ExtraPlan, view: View, deadline: Deadline | None) -> CheckpointList:
    """The listing that rode along, or (once per run, right after the YAML named the directory) one more call."""
    if plan.list_checkpoints:
        return ckpt.from_answer(plan.config, view.extra[-1])
    listing = ckpt.listing_op(plan.config)
    if listing is None:
        return ckpt.unknown(plan.config)
    host, op = listing
    return ckpt.from_answer(plan.config, result_of(call_hosts({host: [op]}, timeout_s=30.0, deadline=deadline)[host]))


def observe_with_lines(reg: Registry, rows: list[Row], since: str | None, max_lines: int, *,
                       checkpoints: bool = False, history_request: HistoryRequest | None = None,
                       deadline: Deadline | None = None, follow_attempts: bool = False,
                       upkeep: Upkeep = READ_ONLY) -> list[ExperimentStatus]:
    """Observe ``rows`` (one round trip per host, ending by ``deadline``; ``upkeep``: what it heals) and build
    their status with new lines, progress and, when asked, checkpoints and metric history. ``follow_attempts``
    (a listing): the attempts this observation took into the registry (``attempts.take_up``) are observed too
    and come first, as the newest runs."""
    out = _observe_with_lines(reg, rows, since, max_lines, checkpoints=checkpoints,
                              history_request=history_request, deadline=deadline, upkeep=upkeep)
    known = {row.id for row in rows}
    for _ in range(lineage.MAX_ATTEMPTS):  # followed link by link (each attempt's observation finds the next)
        if not follow_attempts:
            break
        fresh = [r for f in out if (nxt := f.next_attempt) and nxt not in known and (r := reg.get(nxt))]
        if not fresh:
            break
        known.update(r.id for r in fresh)
        out = _observe_with_lines(reg, fresh, since, max_lines, checkpoints=checkpoints,
                                  history_request=history_request, deadline=deadline, upkeep=upkeep) + out
    return out


def _observe_with_lines(reg: Registry, rows: list[Row], since: str | None, max_lines: int, *,
                        checkpoints: bool, history_request: HistoryRequest | None,
                        deadline: Deadline | None, upkeep: Upkeep) -> list[ExperimentStatus]:
    now = time.time()
    starts: dict[str, list[int]] = {}
    plans: dict[str, ExtraPlan] = {}
    for row in rows:
        starts[row.id] = parse_cursor(since, len(row.processes), "since") if since is not None else stored_cursor(row)
        plans[row.id] = plan_extras(reg, row, checkpoints, now)
    views = observe(reg, rows, extra_reads=lambda row: line_reads(row, starts[row.id], max_lines),
                    extra_ops=lambda row: extra_ops(plans[row.id]), deadline=deadline, upkeep=upkeep)
    chains = lineage.links(reg, [view.row for view in views])  # with the attempts this look took up
    out = []
    for view in views:
        row = view.row
        plan = plans[row.id]
        absorb_config(reg, view, plan, now)
        _gpu_memory(reg, view, plan, deadline, now)
        offsets = starts[row.id]
        lines, new, skipped = lines_from(view, offsets, max_lines)
        _remember_profile(reg, view, plan, lines, now)
        if since is None and new != offsets:
            reg.save_cursor(row.id, ",".join(str(c) for c in new))
        listing = _checkpoints(plan, view, deadline) if checkpoints else None
        wanted = None
        if history_request is not None:
            wanted = history.history_view(reg, [row.id], history_request.patterns, history_request.from_step,
                                          history_request.to_step, history_request.max_points,
                                          restarts=len(view.scan.progress.restarts))
        out.append(status_fields(view, lines, new, skipped, config=plan.config, checkpoints=listing,
                                 metrics_history=wanted, say_queued=True, attempts=chains[row.id]))
    if reg.problem:  # say what this call could not record, in every answer it gives
        for status in out:
            status.note = "; ".join(filter(None, [status.note, f"not recorded: {reg.problem}"]))
    return out


