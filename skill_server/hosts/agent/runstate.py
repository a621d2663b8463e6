"""What a run's monitor knows of the run: its spec, its processes and what their logs said, its clock and its
life (``phases.Lifecycle``), shared by the monitor's watchers; and ``monitor.json``, the document it is kept in.

Each room keeps its own state and writes its own part of the document: the log tails the findings per role
(``RoleFindings``), the lifecycle the phase and the events, the stall watch its verdict, the policy its actions,
the notify command's tally and a pending resume (each registers itself in ``Run.parts``). A later monitor of
the same run (the first one died and an observation started another) takes up where the document left off.

Times are on the *run clock*: seconds since the run's first wrapper started, from /proc (boot-relative, so a
step of the wall clock changes no duration); wall times are for display only. Stdlib only, Python 3.8.
"""

from __future__ import annotations

import os
import time

from . import backend, heartbeat, outcome, phases, procs, scanner
from .protocol import LOG_MARK, TYPE_CHECKING
from .rundir import BEAT, FORMAT, RESTART, RunDir

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Protocol

    from .protocol import MonitorDocument
    from .protocol import RoleFindings as RoleFindingsDoc

    class Part(Protocol):
        """A room's own part of ``monitor.json``."""

        def to_json(self) -> dict[str, Any]: ...


class Progress:
    """Training progress of one role (``findings.ProgressLike``)."""

    KEYS = ("last_step_by_role", "step_times", "tqdm_total", "tqdm_step", "tqdm_rate_s", "batches", "restarts")

    def __init__(self) -> None:
        self.last_step_by_role: dict[str, int] = {}
        self.step_times: list[float] = []
        self.tqdm_total: int | None = None
        self.tqdm_step: int | None = None
        self.tqdm_rate_s: float | None = None
        self.batches: list[list[float]] = []
        self.restarts: list[dict[str, Any]] = []

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.KEYS}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Progress:
        out = cls()
        for key in cls.KEYS:
            if key in data:
                setattr(out, key, data[key])
        return out


class RoleFindings:
    """What one role's log has said so far, and how far it was read (``protocol.RoleFindings``)."""

    SCALARS = ("log_path", "start_offset", "offset", "size", "unscannable", "resets", "sampled_bytes", "drained",
               "first_step_seen", "first_step_at", "first_step_not_before", "first_step", "global_step",
               "metrics_step", "last_metrics", "errors", "grew_at", "stepped_at", "looked_at", "points")

    def __init__(self, log_path: str, start_offset: int) -> None:
        self.log_path = log_path
        self.start_offset = start_offset  # bytes the log had before the run: never this run's output
        self.offset = start_offset  # read up to here
        self.size = start_offset
        self.unscannable = 0  # bytes that could not be read (should stay 0)
        self.resets = 0  # times the log shrank (rotated or truncated) and was read again from 0
        self.sampled_bytes = 0  # bytes whose step lines were only sampled for metrics (a flood)
        self.drained = False  # the process ended and its log was read to the end
        self.first_step_seen = False
        self.first_step_at: float | None = None
        self.first_step_not_before: float | None = None  # the look before the one that saw it
        self.first_step: int | None = None
        self.global_step: int | None = None
        self.metrics_step: int | None = None
        self.last_metrics: dict[str, Any] = {}
        self.errors: dict[str, dict[str, Any]] = {}
        self.grew_at: float | None = None  # run clock when the log last grew
        self.stepped_at: float | None = None  # ... when the global step last moved
        self.looked_at: float | None = None  # ... of the last look that brought bytes
        self.points: list[int] = [0, 0, 0]  # [last seq written, count in file, points dropped]
        self.progress = Progress()

    def to_json(self) -> RoleFindingsDoc:
        out: dict[str, Any] = {key: getattr(self, key) for key in self.SCALARS}
        out["progress"] = self.progress.to_json()
        return out  # type: ignore[return-value]  # SCALARS are protocol.RoleFindings' keys

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoleFindings:
        out = cls(str(data.get("log_path", "")), int(data.get("start_offset", 0)))
        for key in cls.SCALARS:
            if key in data:
                setattr(out, key, data[key])
        out.progress = Progress.from_json(data.get("progress") or {})
        return out


def _age_s(start: str | None) -> float | None:
    """Seconds since a process with this start-time token started (Linux: ticks since boot), or None."""
    if not start or not start.isdigit() or not procs.USE_PROC:
        return None
    try:
        with open("/proc/uptime", "rb") as handle:
            uptime = float(handle.read().split()[0])
        return max(0.0, uptime - int(start) / float(os.sysconf("SC_CLK_TCK")))
    except (OSError, ValueError, IndexError):
        return None


class Role:
    """One process of the run on this host, as the spec recorded it, with its findings."""

    def __init__(self, spec: Mapping[str, Any], found: RoleFindings) -> None:
        self.name = str(spec["role"])
        self.pid = spec.get("pid")
        self.start = spec.get("start")
        self.log_path = str(spec["log_path"])
        self.spec = spec
        self.found = found
        self.ended = False  # the wrapper is gone and nothing it left behind still runs
        self.exit_code: int | None = None
        self.orphans_checked = float("-inf")  # when its orphans were last looked for (the first look is at once)

    def wrapper(self) -> procs.Wrapper | None:
        if not isinstance(self.pid, int):
            return None
        return {"role": self.name, "pid": self.pid, "start": self.start if isinstance(self.start, str) else None}


def _compile(pattern: str) -> Any:
    import re

    try:
        return re.compile(pattern, re.MULTILINE)
    except (re.error, RecursionError, OverflowError):
        return None


class Run:
    """Everything the watchers share: the spec, the roles and their findings, the clock, the lifecycle."""

    def __init__(self, run_dir: str, spec: Mapping[str, Any], previous: MonitorDocument | None,
                 table: scanner.Table | None = None) -> None:
        self.dir = run_dir
        self.files = RunDir(run_dir)
        self.spec = spec
        restart = self.files.read_json(RESTART, 64 * 1024) if self.files.has(RESTART) else None
        #: Which start of the run's processes in this directory this is (a scheduler's requeue starts them again).
        self.generation = int((restart or {}).get("generation") or 0)
        taken: Mapping[str, Any] = previous or {}
        #: The processes were started again in this directory since the last document (a scheduler's requeue).
        self.requeued = restart is not None and int(taken.get("generation") or 0) != self.generation
        if restart is not None and self.requeued:
            taken = new_life(taken, restart)
        #: The document this monitor takes up (its rooms take up their parts from it).
        self.previous = taken
        self.exp_id = str(spec["exp_id"])
        self.handle: dict[str, Any] = dict(spec.get("handle") or {})
        self.table = table if table is not None else scanner.Table(spec.get("signatures") or [])
        self.severity = {str(r.get("name")): str(r.get("severity") or "error") for r in spec.get("signatures") or []
                         if isinstance(r, dict)}
        pattern = spec.get("first_step_pattern")
        self.first_step_re = _compile(pattern) if isinstance(pattern, str) and pattern else None
        self.roles = _roles(spec, taken, (restart or {}).get("offsets") or {})
        self.timed_out = bool(taken.get("timed_out"))
        self.session_removed = bool(taken.get("session_removed"))
        self.internal_errors = int(taken.get("internal_errors") or 0)
        self.origin = time.monotonic() - self._age(taken)
        #: Where a previous monitor of this run left the run clock (0: this is the first one).
        clock = taken.get("clock_s")
        self.resumed_at = float(clock) if isinstance(clock, (int, float)) else 0.0
        seen = any(r.found.first_step_seen for r in self.roles)
        self.life = phases.Lifecycle(self.clock, taken, phases.resumed_phase(taken, seen, False))
        #: The rooms' own parts of the document (the stall watch's, the policy's), in the order they registered.
        self.parts: list[Part] = []
        #: Something changed since the document was last written (``dirty``), or a waiting caller wants it now
        #: (``urgent``: a new event, a role's end); ``changes`` counts changes (the scheduler wakes on them).
        self.dirty = True
        self.urgent = True
        self.changes = 0
        #: Leave the watch now: the run was discarded (rolled back) or the monitor was told to stop.
        self.finished = False
        self.discarded = False
        self._written = ""
        #: The monitor's lock (held while it lives) and heartbeat; a Run an observation builds has neither.
        self.lock: heartbeat.Lock | None = None
        self.heart = heartbeat.Beat(self.files.file(BEAT))

    def _age(self, previous: Mapping[str, Any]) -> float:
        """The run clock's reading now: the first wrapper's age; else, on the same boot, from where a previous
        monitor put the clock's zero on the machine's boot clock (a resume's backoff goes on where it was); else
        where a previous monitor left it."""
        for role in self.roles:
            age = _age_s(role.start if isinstance(role.start, str) else None)
            if age is not None and procs.alive(role.pid if isinstance(role.pid, int) else None, role.start):
                return age
        origin = previous.get("origin") or {}
        zero = origin.get("uptime")
        if isinstance(zero, (int, float)) and origin.get("space") and procs.same_boot(origin.get("space")):
            return max(0.0, procs.uptime() - float(zero))
        clock = previous.get("clock_s")
        return float(clock) if isinstance(clock, (int, float)) else 0.0

    # ---- the monitor's own life (``heartbeat``, ``supervisor``)

    def beat(self, busy_s: float = 0.0, force: bool = False) -> None:
        """A sign of life (``busy_s``: and busy for that long, a slow step ahead); nothing for an observation's Run."""
        if self.lock is not None:
            self.heart.beat(busy_s, force)

    def superseded(self) -> bool:
        """Whether a replacement fenced this monitor off (it writes nothing more and ends)."""
        return self.lock is not None and self.lock.superseded()

    def beat_fields(self) -> dict[str, Any]:
        """What the heartbeat's record tells the supervisor: the phase, whether the max time was enforced, and
        when (boot clock) the max time falls (None: no max time here)."""
        limit = float(self.spec.get("max_time_s") or 0)
        deadline = round(procs.uptime() + limit - self.clock(), 1) if limit > 0 else None
        return {"phase": self.phase, "timed_out": self.timed_out, "deadline": deadline}

    @property
    def backend(self) -> backend.Backend:
        return backend.of_handle(self.handle)

    def clock(self) -> float:
        return time.monotonic() - self.origin

    def changed(self, urgent: bool = False) -> None:
        """Something the document keeps changed (``urgent``: write it at once)."""
        self.dirty = True
        self.changes += 1
        if urgent:
            self.urgent = True

    def emit(self, kind: str, **fields: Any) -> None:
        """Record an event within the phase (``phases.Lifecycle.emit``); it is written at once."""
        self.life.emit(kind, **fields)
        self.changed(urgent=True)

    def move(self, phase: str, event: str | None = None, **fields: Any) -> None:
        """Enter ``phase``, recording its move's event (``phases.Lifecycle.move``); written at once, and told to
        the supervisor (``beat_fields``)."""
        self.life.move(phase, event, **fields)
        self.changed(urgent=True)
        if self.lock is not None:
            self.heart.update(phase=self.phase, timed_out=self.timed_out)

    @property
    def phase(self) -> str:
        return self.life.phase

    def note(self, role: Role, text: str) -> None:
        """A line in the role's log, as the wrapper writes its own."""
        try:
            with open(role.log_path, "a", encoding="utf-8") as handle:
                handle.write("%s %s\n" % (LOG_MARK, text))
        except OSError:
            pass

    def end_state(self) -> str:
        """How the run ended on this host, from its exit codes and markers (``outcome``: as the server says it)."""
        return outcome.ended_as([self.files.exit_code(r.name) for r in self.roles],
                                [self.files.markers(r.name) for r in self.roles])

    def document(self, ended: bool) -> MonitorDocument:
        doc: dict[str, Any] = {
            "format": FORMAT, "exp_id": self.exp_id, "pid": os.getpid(), "start": procs.start_time(os.getpid()),
            "clock_s": round(self.clock(), 3), "written_at": time.time(), "ended": ended, "timed_out": self.timed_out,
            "session_removed": self.session_removed, "internal_errors": self.internal_errors,
            "generation": self.generation,
            "origin": {"space": procs.pid_space(), "uptime": round(procs.uptime() - self.clock(), 3)},
            "roles": {r.name: r.found.to_json() for r in self.roles}}
        doc.update(self.life.to_json())
        for part in self.parts:
            doc.update(part.to_json())
        return doc  # type: ignore[return-value]  # protocol.MonitorDocument's keys, each room its own

    def persist(self) -> None:
        """Write the document now (before a stop that ends this monitor too, say)."""
        self.save(ended=False)

    def save(self, ended: bool, only_if_changed: bool = False) -> bool:
        """Write ``monitor.json`` (atomically); ``only_if_changed``: not when it would say what it said last time
        (apart from the clock). Nothing is written into what is left of a discarded run's directory, nor by a
        monitor a replacement fenced off; a full disk is tried again at the next change. False when it could not
        be written."""
        import json

        from .files import AgentError
        from .rundir import FINDINGS, SPEC

        doc = self.document(ended)
        stable = json.dumps({k: v for k, v in doc.items() if k not in ("clock_s", "written_at", "origin")},
                            sort_keys=True)
        self.dirty = False
        if only_if_changed and stable == self._written:
            self.urgent = False
            return True
        if not self.files.has(SPEC) or self.superseded():
            self.urgent = False
            return True
        try:
            self.files.write_json(FINDINGS, doc, replace=True)
        except AgentError:
            self.dirty, self.urgent = True, False  # a full disk: tried again at the persist watch's pace
            return False
        self.urgent = False
        self._written = stable
        return True


def _roles(spec: Mapping[str, Any], taken: Mapping[str, Any], offsets: Mapping[str, Any]) -> list[Role]:
    """The run's roles with what was found of each so far (``taken``: the document taken up); a role with nothing
    found yet is read from its log's size before the run (or at a restart: ``offsets``)."""
    old_roles: Mapping[str, Any] = taken.get("roles") or {}
    roles = []
    for r in spec["roles"]:
        old = old_roles.get(r["role"])
        at = offsets.get(r["role"]) if isinstance(offsets.get(r["role"]), int) else r.get("start_offset")
        found = RoleFindings.from_json(old) if isinstance(old, dict) else RoleFindings(str(r["log_path"]), int(at or 0))
        roles.append(Role(r, found))
    return roles


#: What a monitor keeps of an earlier start of the run's processes (``new_life``).
_KEPT_OVER_A_RESTART = ("format", "exp_id", "events", "event_seq", "policy_seq", "actions", "notify",
                        "notify_queue", "internal_errors")


def new_life(previous: Mapping[str, Any], restart: Mapping[str, Any]) -> dict[str, Any]:
    """The document a monitor takes up when the run's processes were started again in its directory (a scheduler
    requeued its job: ``rundir.RESTART``, which the job's script writes) and the last document is of an earlier
    start: what was found so far is kept (errors, steps, metric points, events, the policies' actions), but the
    phase, the end, the max time, the stall verdict and the processes' state are a new start's, and each log is
    read from its size at the restart (what the earlier start printed is not read again)."""
    offsets = restart.get("offsets") or {}
    roles = {}
    for name, found in (previous.get("roles") or {}).items():
        if isinstance(found, dict):
            at = offsets.get(name)
            roles[name] = dict(found, drained=False, **({"offset": at, "size": at} if isinstance(at, int) else {}))
    kept = {k: v for k, v in previous.items() if k in _KEPT_OVER_A_RESTART}
    return dict(kept, roles=roles, generation=restart.get("generation"))
