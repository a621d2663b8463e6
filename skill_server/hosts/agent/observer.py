"""What an observation reads of a run's monitor: its document, as of the bytes the logs hold now.

``report`` gives, per process, what the monitor found (``MonitorReport``) plus the run's part (``RunReport``:
whether the monitor lives, its heartbeat's age, whether its supervisor runs and the monitor's replacements so
far, the phase, the clock, the policies' state, and the attempts a resume started after it). It never writes
anything; with ``heal`` it also replaces the monitor of a monitored run whose monitor died before the run's end,
or froze with no supervisor left to replace it (``supervisor.replace_monitor``; at most one start per
``RESTART_EVERY_S``; the new one resumes from the last document). A monitor that runs inside a scheduler's job
(``backend.monitor_in_job``) is never started here: its supervisor does that inside the job, and its lock on the
shared filesystem says whether it lives. Stdlib only, Python 3.8.
"""

from __future__ import annotations

import json
import os
import time

from . import backend, files, heartbeat, procs, scanner
from .files import AgentError
from .protocol import TYPE_CHECKING
from .rundir import (
    BEAT,
    LOCK,
    NEXT_ATTEMPT,
    RESTARTED,
    SPEC,
    STOP_REQUESTED,
    SUPERVISOR_BEAT,
    SUPERVISOR_LOCK,
    RunDir,
    spec_of,
)

if TYPE_CHECKING:
    from typing import Any

    from .protocol import MonitorDocument, MonitorReport, RoleFindings, RunReport

RESTART_EVERY_S = 30.0
#: How long an observation waits for the monitor to finish reading an ended process's log.
DRAIN_WAIT_S = 2.0
#: An observation reads ahead of the monitor (what was written since its last look) up to this many bytes.
CATCH_UP_BYTES = 1024 * 1024


def lock_free(run_dir: str) -> bool:
    """Whether no monitor holds the run's lock (it is dead, or none was ever started)."""
    return heartbeat.lock_free(os.path.join(run_dir, LOCK))


def _restarted_lately(run: RunDir) -> bool:
    """Whether an observation started the run's monitor less than ``RESTART_EVERY_S`` ago, by the machine's boot
    clock written in ``monitor.restarted`` (never a file's time against this process's wall clock, which a clock
    step, or a caller whose clock is off, would move by hours)."""
    text = files.read_small(run.file(RESTARTED), 64)
    try:
        at = float((text or "").strip())
    except ValueError:
        return False
    now = procs.uptime()
    return at <= now < at + RESTART_EVERY_S


def ensure_running(run: RunDir, doc: MonitorDocument | None, heal: bool) -> tuple[bool, bool]:
    """(whether the run's monitor lives, whether this call started it). Without ``heal`` it only looks; with it,
    a monitor that is dead, or frozen with no supervisor left to replace it, is replaced here (at most once per
    ``RESTART_EVERY_S``; a full disk that keeps the stamp from being written does not stop it)."""
    if doc is not None and doc.get("ended"):
        return False, False
    alive = not lock_free(run.path)
    if not heal or not _supervisor_down(run) or (alive and not _frozen(run)):
        return alive, False  # its supervisor does it (it may be spacing out replacements that died young)
    spec = run.spec()
    if spec is None or backend.of_handle(spec.get("handle")).monitor_in_job or _restarted_lately(run):
        return alive, False
    try:
        files.write_atomic(run.file(RESTARTED), ("%.3f\n" % procs.uptime()).encode("ascii"), replace=True, mode=0o600)
    except AgentError:
        pass
    from . import supervisor

    why = "it gave no sign of life and no supervisor replaces it" if alive else "neither it nor its supervisor runs"
    return supervisor.replace_monitor(run, why, "a status call") is None, True


def _frozen(run: RunDir) -> bool:
    """The monitor has not beaten for ``heartbeat.STALE_S``."""
    age = heartbeat.age(heartbeat.read(run.file(BEAT))[1])
    return age is not None and age > heartbeat.STALE_S


def _supervisor_down(run: RunDir) -> bool:
    """No supervisor runs to replace the monitor (none holds its lock, or the one that does is frozen)."""
    if heartbeat.lock_free(run.file(SUPERVISOR_LOCK)):
        return True
    age = heartbeat.age(heartbeat.read(run.file(SUPERVISOR_BEAT))[1])
    return age is not None and age > heartbeat.STALE_S


def _role_of(doc: MonitorDocument | None, role: str) -> RoleFindings | None:
    found = ((doc or {}).get("roles") or {}).get(role)
    return found if isinstance(found, dict) else None


def _drained(run: RunDir, role: str) -> MonitorDocument | None:
    """The findings once the monitor has read ``role``'s log to its end (None: not within ``DRAIN_WAIT_S``)."""
    end = time.monotonic() + DRAIN_WAIT_S
    while time.monotonic() < end:
        time.sleep(0.05)
        doc = run.findings()
        found = _role_of(doc, role)
        if doc is not None and (doc.get("ended") or (found is not None and found.get("drained"))):
            return doc
    return None


def report(run_dir: str, role: str, *, final: bool, cache: dict[str, Any], heal: bool = False,
           healed: list[str] | None = None) -> MonitorReport | None:
    """What the run's monitor found for ``role`` (None: the run has no monitor), for an observation, as of the
    bytes the log holds now. An ended process: the observation waits (``DRAIN_WAIT_S`` at most) for the
    monitor to read its log to the end, so the answer that first says "ended" has its last lines and
    points. A running one: what was written since the monitor's last look (at most ``CATCH_UP_BYTES``) is read
    here by the same rules (``catch_up``), without writing anything."""
    run = RunDir(run_dir)
    if run_dir not in cache:
        cache[run_dir] = _looked_up(run, heal, healed)
    entry = cache[run_dir]
    if entry is None:
        return None
    found = _role_of(entry["doc"], role)
    if final and entry["alive"] and not (found is not None and found.get("drained")):
        fresh = _drained(run, role)
        if fresh is not None:
            entry["doc"], found = fresh, _role_of(fresh, role)
    kept: MonitorDocument = entry["doc"] or {}  # type: ignore[assignment]  # the cache holds documents
    out: MonitorReport = dict(found) if found is not None else {}  # type: ignore[assignment]
    if found is not None and not found.get("drained") and not kept.get("ended"):
        out = catch_up(run_dir, kept, role, final) or out
    out["run"] = _run_report(run, kept, entry)
    return out


def _looked_up(run: RunDir, heal: bool, healed: list[str] | None) -> dict[str, Any] | None:
    """A run's cache entry for one observation: its monitor's document and whether the monitor lives (None: the
    run has no monitor)."""
    if not run.monitored():
        return None
    doc = run.findings()
    alive, started = ensure_running(run, doc, heal)
    if started and healed is not None:
        named = (doc or {}).get("exp_id") or (run.spec() or {}).get("exp_id") or run.path
        healed.append("started the monitor of %s again" % named)
    return {"doc": doc, "alive": alive, "started": started}


def _run_report(run: RunDir, kept: MonitorDocument, entry: dict[str, Any]) -> RunReport:
    """The run's part of a report: what the monitor's document says of the whole run here."""
    said: RunReport = {
        "alive": entry["alive"], "ended": bool(kept.get("ended")), "clock_s": kept.get("clock_s"),
        "timed_out": bool(kept.get("timed_out")), "internal_errors": kept.get("internal_errors", 0),
        "stall": kept.get("stall") or {}, "actions": kept.get("actions") or [], "notify": kept.get("notify") or {},
        "pending_resume": kept.get("pending_resume") or None}
    if kept.get("phase"):
        said["phase"] = str(kept.get("phase"))
    from .supervisor import state

    watchers = state(run, entry["alive"] and not entry.get("started"), bool(kept.get("ended")))
    failed = watchers.pop("resume_failed", None)
    pending = said.get("pending_resume")
    if failed and pending and not pending.get("failed"):  # the monitor could not write it (a full disk)
        said["pending_resume"] = dict(pending, failed=failed["failed"], tries=failed.get("tries") or 1)  # type: ignore[typeddict-item]
    said.update(watchers)  # type: ignore[typeddict-item]
    if run.has(STOP_REQUESTED):
        said["stop_requested"] = True
    if run.has(NEXT_ATTEMPT):  # a resume policy started attempts after this one (its monitor may still be ending)
        if "attempts" not in entry:
            entry["attempts"] = run.attempts_after()
        if entry["attempts"]:
            said["attempts"] = entry["attempts"]
    return said


#: spec file -> (its modification time, the spec, its compiled table): an observation compiles a run's table once.
_SPECS: dict[str, tuple[int, dict[str, Any], scanner.Table]] = {}


def catch_up(run_dir: str, doc: MonitorDocument, role: str, final: bool) -> MonitorReport | None:
    """``role``'s findings with what its log gained since the monitor's last look folded in (None: nothing to
    add, or more than ``CATCH_UP_BYTES``, which the monitor reads itself)."""
    from .runstate import Run
    from .watchers import TICK_S, LogTail

    path = os.path.join(run_dir, SPEC)
    try:
        mtime = os.stat(path).st_mtime_ns
        cached = _SPECS.get(path)
        if cached is None or cached[0] != mtime:
            spec = spec_of(json.loads(files.read_small(path, 16 * 1024 * 1024) or ""))
            cached = _SPECS[path] = (mtime, spec, scanner.Table(spec.get("signatures") or []))
        run = Run(run_dir, cached[1], doc, table=cached[2])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    for r in run.roles:
        if r.name == role:
            size = files.file_size(r.log_path) or 0
            if not 0 < size - int(r.found.offset) <= CATCH_UP_BYTES:
                return None
            tail = LogTail(run, r, keep_points=False)
            tail.previous_look = max(tail.previous_look, run.clock() - TICK_S)  # the monitor looked since
            while tail.read(run, run.clock(), final=final):
                pass
            return r.found.to_json()  # type: ignore[return-value]  # no ``run`` part yet: ``report`` adds it
    return None
