"""One observation of many experiments: one round trip per host, all hosts in parallel.

For every process the host reports liveness, exit code, markers, the requested appended ranges of its
log (what the caller asks for: new lines, a pattern search) and what the run's monitor found there (its
errors, steps, progress, first step, and the metric points after this registry's cursor). From that
``observe`` derives states (``states``), records final states once, and mirrors the monitor's findings
into each experiment's scan state (``logs.mirror``). Runs launched before monitors existed have none:
for them the host returns the scan range instead and it is scanned here (``logs.scan_text``). It never
signals a run: enforcing the max time is the monitor's job on the run's host. With ``upkeep=HEAL`` (a tool that
asks for it by name, ``experiments.upkeep``) the same round trip also heals: the host starts a monitor that died
and releases the tmux session of a run without a live monitor once every exit code is on disk, and the attempts
a resume policy started are taken into the registry; otherwise an observation changes nothing on the hosts.

The copied points and newly scanned step lines go to the metric history (``history``) in the same
transaction as the scan state. ``extra_reads`` adds byte ranges of each process's log to the same round
trip; ``extra_ops`` adds other agent operations (a YAML read, a checkpoint listing) to the request of a
chosen host, their results land in ``View.extra``. A process is observed through its host's backend (its
``handle``), so an observation costs the same however many runs a host had.
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skill_server.core.deadline import Deadline
from skill_server.experiments import attempts, backends, history, logs, progress
from skill_server.experiments import blueprint as bp
from skill_server.experiments.models import TERMINAL
from skill_server.experiments.progress import StepLine
from skill_server.experiments.spec import RunProcess
from skill_server.experiments.states import ProcFacts, process_state, run_state
from skill_server.experiments.store import Registry, Row, elsewhere_reason, launched_elsewhere
from skill_server.experiments.upkeep import READ_ONLY, Upkeep
from skill_server.hosts import LOCAL, HostUnreachable, Reply, call_hosts, client, result_of
from skill_server.hosts.agent.heartbeat import STALE_S

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import (
        Appended,
        AttemptRecord,
        JobFacts,
        MetricPoint,
        MonitorReport,
        ObserveProc,
        ReadSpan,
    )

log = logging.getLogger(__name__)

#: Most log bytes one observation asks a host for (scan ranges of all its logs together).
HOST_SCAN_BUDGET = 16 * 1024 * 1024
MIN_SCAN_BUDGET = 64 * 1024
OBSERVE_TIMEOUT_S = 30.0

#: ``extra_reads(row) -> [[(offset, budget), ...] per process]``: more ranges to read in the same call.
ExtraReads = Callable[[Row], list[list[tuple[int, int]]]]
#: ``extra_ops(row) -> [(host, op), ...]``: more agent operations in the same call; results in ``View.extra``.
ExtraOps = Callable[[Row], list[tuple[str, client.Op[Any]]]]


@dataclass
class ProcView:
    proc: RunProcess
    state: str
    exit_code: int | None
    alive: bool | None
    final: bool  # no more output will come
    size: int | None
    reads: list[logs.Chunk] = field(default_factory=list)
    reason: str | None = None  # why the host could not be asked
    #: Where the exit code came from on the host ("file", "tmux_option", "pane_status"), None without one.
    exit_source: str | None = None
    #: Seconds since the wrapper started, by its host's boot-relative clock (None once ended or unknown).
    elapsed_s: float | None = None
    #: The scan range, for a run without a monitor.
    scan: logs.Chunk | None = None
    #: What the run's monitor found for this process (None: no monitor, or the host was not asked).
    monitor: MonitorReport | None = None
    #: The monitor's metric points after the registry's cursor, and the cursor after them.
    points: list[MetricPoint] = field(default_factory=list)
    points_cursor: list[int] = field(default_factory=list)
    #: Not asked: a process on host ``local`` of a run another machine launched (``reason`` names it).
    elsewhere: bool = False
    #: Its scheduler's job as the host that submitted it saw it (``JobFacts``); None for a run in no job.
    scheduler: JobFacts | None = None

    @property
    def role(self) -> str:
        return self.proc.role

    @property
    def log_path(self) -> str:
        return self.proc.log_path


@dataclass
class View:
    row: Row
    state: str
    exit_code: int | None
    procs: list[ProcView]
    scan: logs.ScanState
    elapsed_s: float
    note: str | None = None
    #: Results of the ``extra_ops`` asked for this row, in order (``{"ok": false, ...}`` for a host not asked).
    extra: list[client.Result] = field(default_factory=list)


def _scan_budgets(rows: list[Row]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        for p in row.processes:
            counts[p.host] = counts.get(p.host, 0) + 1
    return {h: max(MIN_SCAN_BUDGET, min(logs.SCAN_BUDGET, HOST_SCAN_BUDGET // n)) for h, n in counts.items()}


#: Per host its ops; per (row, process) the host and the index of its answer in that host's observe op.
Requests = tuple[dict[str, list[client.Op[Any]]], dict[tuple[int, int], tuple[str, int]]]


def _requests(rows: list[Row], scans: list[logs.ScanState], extra: list[list[list[tuple[int, int]]]],
              upkeep: Upkeep = READ_ONLY) -> Requests:
    """One ``observe`` op per host covering every process there (always first in the host's list); and where
    each process's answer is."""
    budgets = _scan_budgets(rows)
    procs: dict[str, list[ObserveProc]] = {}
    where: dict[tuple[int, int], tuple[str, int]] = {}
    for r, row in enumerate(rows):
        for i, p in enumerate(row.processes):
            if _not_here(row, p) is not None:
                continue  # another machine's own process: not asked (``observe`` says where to ask)
            on_host = procs.setdefault(p.host, [])
            reads: list[ReadSpan] = [{"offset": o, "budget": b} for o, b in extra[r][i]]
            where[(r, i)] = (p.host, len(on_host))
            entry = {"run_dir": p.run_dir, "role": p.role, "pid": p.pid, "start": p.start, "log_path": p.log_path,
                     "reads": reads, "exp_id": row.id, "pane_id": p.pane_id,
                     "scan": {"offset": scans[r].offsets[i], "budget": budgets[p.host]},
                     "points": scans[r].mirrored.get(p.role, []), **backends.observe_entry(p)}
            on_host.append(entry)  # type: ignore[arg-type]  # ObserveProc's keys
    return {h: [client.observe(procs[h], heal=upkeep.heal)] for h in procs}, where


def _not_here(row: Row, p: RunProcess) -> str | None:
    """Why ``p`` is not observed from this machine: it runs on host ``local`` of the machine that launched
    ``row``, which is another one (a controller judges only what it can see); None when it is observed."""
    controller = launched_elsewhere(row) if p.host == LOCAL else None
    return elsewhere_reason(controller) if controller else None


def _chunk(raw: Appended) -> logs.Chunk:
    return logs.Chunk(logs.strip_ansi(raw["text"]), raw["end"], raw["skipped"], raw["reset"])


def observe(reg: Registry, rows: list[Row], *, extra_reads: ExtraReads | None = None,
            extra_ops: ExtraOps | None = None, deadline: Deadline | None = None,
            upkeep: Upkeep = READ_ONLY) -> list[View]:
    """Current view of each experiment; records final states; never signals or stops anything. The round
    trips end by ``deadline`` (a host that has not answered by then is ``unreachable``). ``upkeep``: what the
    same round trip heals (``upkeep.HEAL``); by default nothing."""
    scans = [logs.ScanState.from_json(row.scan, len(row.processes)) for row in rows]
    extra: list[list[list[tuple[int, int]]]] = [
        extra_reads(row) if extra_reads else [[] for _ in row.processes] for row in rows]
    requests, where = _requests(rows, scans, extra, upkeep)
    added: list[list[tuple[str, int]]] = []
    for row in rows:
        placed = []
        for host, op in (extra_ops(row) if extra_ops else []):
            if host == LOCAL and launched_elsewhere(row):
                placed.append((host, -1))  # that machine's file: answered "no answer"
                continue
            ops = requests.setdefault(host, [client.observe([], heal=upkeep.heal)])
            ops.append(op)
            placed.append((host, len(ops) - 1))
        added.append(placed)
    replies = call_hosts(requests, timeout_s=OBSERVE_TIMEOUT_S, deadline=deadline) if requests else {}
    if upkeep.heal:
        _log_healed(replies)
    now = time.time()
    views = []
    for r, row in enumerate(rows):
        procs = []
        for i, p in enumerate(row.processes):
            elsewhere = _not_here(row, p)
            if elsewhere is not None:
                procs.append(ProcView(p, "unreachable", None, None, False, None, reason=elsewhere, elsewhere=True))
                continue
            host, index = where[(r, i)]
            procs.append(_proc_view(p, replies.get(host), index))
        view = _view(reg, row, procs, scans[r], now)
        chain = _attempts_after(procs) if upkeep.heal else None
        if chain is not None and attempts.take_up(reg, view.row, *chain):
            log.info("took up the attempts after %s", row.id)
        view.extra = [result_of(replies.get(host) if index >= 0 else None, max(index, 0)) for host, index in added[r]]
        views.append(view)
    return views


def still_running(view: View) -> list[str] | None:
    """What of this run still runs, as its hosts said in this observation, each named: a process (alive, or a
    survivor of a stop), its monitor (or, while none lives, its supervisor), a relaunch its resume policy waits to
    make. The one place that says whether
    something of a run lives (an experiment is alive when any attempt's list is not empty); None when nothing
    found runs but a host could not be asked."""
    out: list[str] = []
    for p in view.procs:
        if p.alive or p.state in ("running", "waiting"):
            out.append(f"process {p.role} on {p.proc.host}")
    reports = {p.proc.host: (p.monitor or {}).get("run") or {} for p in view.procs if p.monitor is not None}
    out += [f"its monitor on {host}" for host, run in sorted(reports.items()) if run.get("alive")]
    out += [f"its supervisor on {host} (it starts a new monitor)" for host, run in sorted(reports.items())
            if run.get("supervised") and not run.get("alive") and not run.get("ended")]
    if any(run.get("pending_resume") for run in reports.values()):
        out.append("a relaunch its resume policy waits to make")
    if not out and any(p.state == "unreachable" and not p.elsewhere for p in view.procs):
        return None
    return out


def _attempts_after(procs: list[ProcView]) -> tuple[str, list[AttemptRecord]] | None:
    """(host, records) of the attempts a resume policy started after this run, as its monitor reported them."""
    for p in procs:
        chain = ((p.monitor or {}).get("run") or {}).get("attempts")
        if isinstance(chain, list) and chain:
            return p.proc.host, [c for c in chain if isinstance(c, dict)]
    return None


def _log_healed(replies: dict[str, Reply]) -> None:
    """What a healing observation did on each host (the monitors it started, the sessions it released)."""
    for host, reply in replies.items():
        answer = client.answer(result_of(reply), client.observe)
        for done in answer.get("healed") or [] if answer["ok"] else []:
            log.info("%s: %s", host, done)


def _proc_view(p: RunProcess, reply: Reply | None, index: int) -> ProcView:
    if isinstance(reply, HostUnreachable) or reply is None:
        reason = reply.reason if isinstance(reply, HostUnreachable) else "no answer"
        return ProcView(p, "unreachable", None, None, False, None, reason=reason)
    result = client.answer(reply[0], client.observe)
    if not result["ok"]:
        return ProcView(p, "unreachable", None, None, False, None, reason=result["error"])
    facts_raw = result["procs"][index]
    if facts_raw.get("elsewhere"):
        return ProcView(p, "unreachable", None, None, False, None, reason=facts_raw.get("elsewhere"), elsewhere=True)
    facts = ProcFacts(alive=facts_raw["alive"], exit_code=facts_raw["exit_code"],
                      markers=frozenset(facts_raw["markers"]), final=bool(facts_raw["final"]), size=facts_raw["size"])
    scheduler = facts_raw.get("scheduler")
    if scheduler is not None and scheduler["error"] and facts.alive is None and facts.exit_code is None:
        return ProcView(p, "unreachable", None, None, False, facts.size,
                        reason=f"{scheduler['scheduler']}: {scheduler['error']}", scheduler=scheduler)
    state = process_state(facts)
    final = facts.final or state not in ("running", "waiting")
    chunks = [_chunk(x) for x in facts_raw["reads"]]
    scan = facts_raw.get("scan")
    return ProcView(p, state, facts.exit_code, facts.alive, final, facts.size, chunks,
                    exit_source=facts_raw.get("exit_source"), elapsed_s=facts_raw.get("elapsed_s"),
                    scan=_chunk(scan) if scan is not None else None, monitor=facts_raw.get("monitor"),
                    points=facts_raw.get("points", []), points_cursor=facts_raw.get("points_cursor", []),
                    scheduler=scheduler)


def _view(reg: Registry, row: Row, procs: list[ProcView], scan: logs.ScanState, now: float) -> View:
    state, exit_code, note = run_state([p.state for p in procs], [p.exit_code for p in procs])
    if row.final_state is None and state in TERMINAL:
        if not reg.finish(row.id, state, exit_code, now, note):
            fresh = reg.get(row.id)  # another caller recorded a final state first: that one stands
            if fresh is not None:
                row = fresh
        else:
            row.final_state, row.final_exit_code, row.ended = state, exit_code, now
    if row.final_state:
        state = row.final_state
        exit_code = row.final_exit_code if row.final_exit_code is not None else (
            exit_code if state in ("succeeded", "failed") else None)
        note = row.note or note
        if state in ("stopped", "timed_out"):
            for p in procs:
                if p.state in ("running", "waiting", "lost"):
                    p.state = state
    clock = run_clock(row, procs, now)
    notes = ([note] if note else []) + _host_notes(row, procs, state, clock)
    _fold_scan(reg, row, procs, scan, clock)
    end = row.ended if row.ended else clock
    return View(row, state, exit_code, procs, scan, max(0.0, end - row.created), "; ".join(notes) or None)


def _host_notes(row: Row, procs: list[ProcView], state: str, clock: float) -> list[str]:
    """What the hosts say about a run beyond its state: hosts that could not be asked, a run past its max time
    that its monitor did not end, monitors that are not running, frozen, replaced or met errors."""
    notes = _unreachable_notes(procs, state) + _scheduler_notes(procs) + _replaced_notes(procs)
    if state != "running":
        return notes
    if clock - row.created > float(row.spec.max_time_s or bp.DEFAULT_MAX_TIME_S) + 60:
        notes.append("past its max time but still running: the run's monitor on its host did not end it; "
                     "stop_experiment does")
    return notes + _monitor_notes(procs)


def _scheduler_notes(procs: list[ProcView]) -> list[str]:
    """A run in a scheduler's job whose host could not ask the scheduler but found the job's own record: what it
    says stands, and why the scheduler was not heard (the next call asks again); a job the scheduler requeued (the
    same run started again in it); one the scheduler forgot, judged from what was left of it."""
    errors = {(p.proc.host, p.scheduler["scheduler"]): p.scheduler["error"] for p in procs
              if p.scheduler is not None and p.scheduler.get("error") and p.state != "unreachable"}
    notes = [f"{name} cannot be asked on {host} ({error}): the state is the job's own record (job.json); the next "
             "call asks again" for (host, name), error in sorted(errors.items())]
    facts = next((p.scheduler for p in procs if p.scheduler is not None), None)
    if facts is not None and int(facts.get("restarts") or 0) > 0:
        n = int(facts.get("restarts") or 0)
        notes.append(f"{facts['scheduler']} requeued job {facts['job_id']} ({n} time{'s' if n > 1 else ''}): the same "
                     "run starts again in it, as the same attempt (its log goes on; what the earlier start left is "
                     "in requeued.N/ of its run directory)")
    if facts is not None and facts.get("said"):
        notes.append(str(facts["said"]))
    return notes


def _unreachable_notes(procs: list[ProcView], state: str) -> list[str]:
    """Which hosts could not be asked (the next call retries), and which processes are another machine's."""
    unreachable = sorted({f"{p.proc.host}: {p.reason}" for p in procs if p.state == "unreachable" and not p.elsewhere})
    elsewhere = sorted({f"{p.proc.host}: {p.reason}" for p in procs if p.elsewhere})
    what = "cannot be asked" if state == "unreachable" else "cannot be asked for new output"
    return ([f"host {u} ({what}; the next call retries)" for u in unreachable]
            + [f"host {e} (this machine cannot see that machine's processes)" for e in elsewhere])


def _replaced_notes(procs: list[ProcView]) -> list[str]:
    """The monitors that were replaced (dead, frozen, late at the max time): how often, the last time and why."""
    notes: dict[str, str] = {}
    for p in procs:
        replaced = [r for r in ((p.monitor or {}).get("run") or {}).get("replaced") or [] if isinstance(r, dict)]
        if replaced and p.proc.host not in notes:
            last = replaced[-1]
            when = progress.iso(float(last.get("wall") or 0))
            times = f"{len(replaced)} times, last " if len(replaced) > 1 else ""
            notes[p.proc.host] = (f"the run's monitor on {p.proc.host} was replaced ({times}at {when}, by "
                                  f"{last.get('by') or 'its supervisor'}): {last.get('why')}")
    return list(notes.values())


def _monitor_notes(procs: list[ProcView]) -> list[str]:
    """What a running run's caller must know about its monitors: one that is not running or gives no sign of
    life (and who replaces it), one that reported errors of its own."""
    notes: dict[str, str] = {}
    for p in procs:
        run = (p.monitor or {}).get("run") or {}
        host = p.proc.host
        if p.monitor is None or run.get("ended"):
            continue
        age = run.get("beat_age_s")
        who = ("its supervisor replaces it" if run.get("supervised") else "no supervisor runs either: a status, "
               "wait or watch call starts a new one, at most every 30 s")
        if not run.get("alive"):
            notes[host] = (f"the run's monitor on {host} is not running ({who}): until then the max time is not "
                           "enforced there")
        elif isinstance(age, (int, float)) and age > STALE_S:
            notes[host] = (f"the run's monitor on {host} has given no sign of life for {int(age)} s (frozen: stopped, "
                           f"or stuck on a hung filesystem; {who})")
        elif run.get("internal_errors"):
            notes.setdefault(host, f"the run's monitor on {host} met {run['internal_errors']} error(s) of its own "
                                   f"(see monitor.log in {p.proc.run_dir})")
    return list(notes.values())


def run_clock(row: Row, procs: list[ProcView], now: float) -> float:
    """"Now" on the run's own time line: its registration time plus how long its oldest running wrapper has
    run by its host's boot-relative clock, so durations that decide a state (past the max time, the first
    step late, step rates) cannot be moved by a wall-clock step here or there. The wall clock only when no
    host could tell (no ``/proc`` there, or nothing runs any more)."""
    ages = [p.elapsed_s for p in procs if p.elapsed_s is not None and p.state in ("running", "waiting")]
    return row.created + max(ages) if ages else now


def _save_scan(reg: Registry, row: Row, scan: logs.ScanState, lines: list[StepLine], first_seq: int) -> bool:
    """Store the scan state and its metric points; True also when the registry cannot be written (this
    answer then stands alone and says so), False when another caller scanned these bytes first."""
    try:
        return history.save_scan_and_points(reg, row.id, scan.to_json(), row.scan_version, lines, first_seq)
    except sqlite3.Error as exc:
        if reg.recordable(exc):
            return True
        raise


def first_step_pattern(row: Row) -> re.Pattern[str] | None:
    """The run's own first-step regex, or None for the default rule (the first ``step:N`` line, N >= 1)."""
    pattern = row.spec.first_step_pattern
    if not pattern or pattern == logs.LEGACY_FIRST_STEP_PATTERN:
        return None
    try:
        return re.compile(pattern, re.MULTILINE)
    except (re.error, RecursionError, OverflowError):
        return None


def _fold_scan(reg: Registry, row: Row, procs: list[ProcView], scan: logs.ScanState, now: float) -> None:
    """Mirror what the run's monitors found (or, for a run without one, fold the scan range each host returned)
    into the run's scan state, and the new step lines into the metric history; store both at once
    (compare-and-set)."""
    first_seq = scan.points_seq
    before = scan.to_json()
    if any(p.monitor is not None for p in procs):
        lines = _mirror(row, procs, scan)
    else:
        lines = _scan_here(row, procs, scan, now)
    scan.points_seq = first_seq + len(lines)
    after = scan.to_json()
    if after != before and not _save_scan(reg, row, scan, lines, first_seq):
        fresh = reg.get(row.id)  # another caller stored these findings first: use its result
        if fresh is not None:
            stored = logs.ScanState.from_json(fresh.scan, len(procs))
            scan.__dict__.update(stored.__dict__)


def _mirror(row: Row, procs: list[ProcView], scan: logs.ScanState) -> list[StepLine]:
    """The monitors' findings into the scan state; their new metric points as step lines, in order."""
    reports = {p.role: p.monitor for p in procs if p.monitor is not None}
    logs.mirror(scan, reports, [p.role for p in procs], row.created)
    lines: list[StepLine] = []
    for p in procs:
        if p.monitor is None:
            continue
        for point in p.points:
            metrics = {k: math.nan if v is None else v for k, v in dict(point.get("m") or {}).items()
                       if v is None or isinstance(v, (int, float))}
            lines.append(StepLine(int(point["step"]), metrics, p.role))
        if p.points_cursor:
            scan.mirrored[p.role] = list(p.points_cursor)
    return lines


def _scan_here(row: Row, procs: list[ProcView], scan: logs.ScanState, now: float) -> list[StepLine]:
    """A run without a monitor: fold the scan range each host returned into the scan state, as the monitor would."""
    pattern = first_step_pattern(row)
    changed = False
    lines: list[StepLine] = []
    seen_before = scan.first_step_seen
    for i, p in enumerate(procs):
        chunk = p.scan
        if chunk is None:
            continue
        if chunk.end != scan.offsets[i] or chunk.skipped:
            lines += logs.scan_text(chunk.text, scan, pattern, role=p.role, now=now)
            scan.offsets[i] = chunk.end
            scan.unscanned_bytes += chunk.skipped
            changed = True
    if changed:
        if scan.first_step_seen and not seen_before:  # printed after the previous scan (or the launch)
            scan.first_step_not_before = scan.scanned_at if scan.scanned_at is not None else row.created
        scan.scanned_at = now
    return lines
