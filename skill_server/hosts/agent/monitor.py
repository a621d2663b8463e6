"""The run monitor: one process per run per host, watching the run where it lives whether or not anyone asks.

The launch op starts it once the run's windows exist (``start``): the version-cached agent install
(``<state>/agent/<digest>/``, made by the same stage one that SSH calls run; no per-run copy), in a
session of its own, outside the run's process groups and without the run marker, so a stop, a closed
pane or a dropped ssh link never takes it down with the run. It reads the run's spec file
(``monitor.spec.json``: roles, logs, the wrappers' identities, the max time, the signature table) and
runs a small scheduler of *watchers*, each a job with its own pace (issue 23's stall detection and
policies are more watchers, reading the same findings):

* ``LogTail`` (one per role): every new byte of the role's log goes through the error scanner, the step
  parser and the first-step rule (``findings.fold``); step lines become metric points (``points``); it
  notes when the log last grew and the step last moved (the stall clock).
* ``Processes``: the wrappers' liveness and exit codes; a role whose wrapper ended has its log read to the
  end. A wrapper that vanished without an exit code may leave processes carrying the run marker behind;
  they are watched until they are gone (and ended at the max time).
* ``MaxTime``: at the run's max time every live process is stopped as ``stop_experiment`` stops it, after
  marking it ``timedout`` and saying so in its log.
* ``Persist``: the findings go to ``monitor.json`` (atomically; at most every ``PERSIST_S``, and at once
  when something a waiting caller wants changed: a new error, the first step, a role's end).

It ends when every process of the run on this host has ended and every log was read to its end: then it
removes the run's tmux session if every exit code is on disk, and writes its last ``monitor.json``
(``ended``). It holds ``monitor.lock`` while it lives, so an observation can tell it is gone and start
another (``ensure_running``), which resumes from the last ``monitor.json``.

Times are on the *run clock*: seconds since the run's first wrapper started, from /proc (boot-relative,
so a step of the wall clock changes no duration); wall times are for display only.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from . import files, findings, points, policy, procs, scanner
from .files import AgentError
from .protocol import LOG_MARK, RUN_MARKER, SESSION_REMOVED, TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

SPEC = "monitor.spec.json"
FINDINGS = "monitor.json"
LOCK = "monitor.lock"
LOG = "monitor.log"
#: When an observation last started a monitor here (at most one start per ``RESTART_EVERY_S``).
RESTARTED = "monitor.restarted"
FORMAT = 1

TICK_S = 0.25
PERSIST_S = 2.0
ORPHAN_CHECK_S = 10.0
#: Most bytes of one log read in one look (a longer backlog is read in further looks right away).
CHUNK = 4 * 1024 * 1024
#: With more than this waiting after a look, only the first and last step line of a chunk are parsed for
#: metrics (errors are still scanned in every byte).
SAMPLE_BACKLOG = 64 * 1024 * 1024
KEEP_EVENTS = 200
RESTART_EVERY_S = 30.0
#: How long an observation waits for the monitor to finish reading an ended process's log.
DRAIN_WAIT_S = 2.0
#: An observation reads ahead of the monitor (what was written since its last look) up to this many bytes.
CATCH_UP_BYTES = 1024 * 1024
START_TIMEOUT_S = 20.0


# --------------------------------------------------------------------------------------------------
# findings of one role (``findings.FoldState``), as monitor.json keeps them


class Progress:
    """Training progress of one role (``findings.ProgressLike``)."""

    def __init__(self) -> None:
        self.last_step_by_role: dict[str, int] = {}
        self.step_times: list[float] = []
        self.tqdm_total: int | None = None
        self.tqdm_step: int | None = None
        self.tqdm_rate_s: float | None = None
        self.batches: list[list[float]] = []
        self.restarts: list[dict[str, Any]] = []

    KEYS = ("last_step_by_role", "step_times", "tqdm_total", "tqdm_step", "tqdm_rate_s", "batches", "restarts")

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
    """What one role's log has said so far, and how far it was read."""

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

    def to_json(self) -> dict[str, Any]:
        out = {key: getattr(self, key) for key in self.SCALARS}
        out["progress"] = self.progress.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoleFindings:
        out = cls(str(data.get("log_path", "")), int(data.get("start_offset", 0)))
        for key in cls.SCALARS:
            if key in data:
                setattr(out, key, data[key])
        out.progress = Progress.from_json(data.get("progress") or {})
        return out


# --------------------------------------------------------------------------------------------------
# the run


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


class Run:
    """Everything the watchers share: the spec, the roles and their findings, the clock, the events."""

    def __init__(self, run_dir: str, spec: Mapping[str, Any], previous: Mapping[str, Any] | None,
                 table: scanner.Table | None = None) -> None:
        self.dir = run_dir
        self.spec = spec
        self.exp_id = str(spec["exp_id"])
        self.table = table if table is not None else scanner.Table(spec.get("signatures") or [])
        self.severity = {str(r.get("name")): str(r.get("severity") or "error") for r in spec.get("signatures") or []
                         if isinstance(r, dict)}
        pattern = spec.get("first_step_pattern")
        self.first_step_re = _compile(pattern) if isinstance(pattern, str) and pattern else None
        old_roles = (previous or {}).get("roles") or {}
        self.roles = []
        for r in spec["roles"]:
            old = old_roles.get(r["role"])
            found = RoleFindings.from_json(old) if isinstance(old, dict) else RoleFindings(
                str(r["log_path"]), int(r.get("start_offset") or 0))
            self.roles.append(Role(r, found))
        self.events: list[dict[str, Any]] = list((previous or {}).get("events") or [])
        self.timed_out = bool((previous or {}).get("timed_out"))
        self.session_removed = bool((previous or {}).get("session_removed"))
        self.internal_errors = int((previous or {}).get("internal_errors") or 0)
        self.origin = time.monotonic() - self._age(previous)
        #: Where a previous monitor of this run left the run clock (0: this is the first one).
        clock = (previous or {}).get("clock_s")
        self.resumed_at = float(clock) if isinstance(clock, (int, float)) else 0.0
        self._take_up_policy(previous or {})
        self.urgent = True
        self.finished = False

    def _take_up_policy(self, previous: Mapping[str, Any]) -> None:
        """What a previous monitor of this run left of the stall verdict and the policies' work."""
        #: The stall watcher's verdict (``policy.StallWatch``), the policies' actions, the notify command's tally.
        self.stall: dict[str, Any] = dict(previous.get("stall") or {})
        self.actions: list[dict[str, Any]] = list(previous.get("actions") or [])
        self.notify: dict[str, Any] = dict(previous.get("notify") or {})
        #: Events are numbered; the policies have handled those up to ``policy_seq``.
        self.event_seq = int(previous.get("event_seq") or 0)
        self.policy_seq = int(previous.get("policy_seq") or 0)
        self.stopped_by_policy = any(a.get("action") in ("stop", "resume") for a in self.actions)
        #: A resume policy's relaunch, due after the run ended here: {trigger, due (run clock)}.
        self.pending_resume: dict[str, Any] | None = previous.get("pending_resume") or None

    def _age(self, previous: Mapping[str, Any] | None) -> float:
        """The run clock's reading now: the first wrapper's age, else where a previous monitor left it."""
        for role in self.roles:
            age = _age_s(role.start if isinstance(role.start, str) else None)
            if age is not None and procs.alive(role.pid if isinstance(role.pid, int) else None, role.start):
                return age
        clock = (previous or {}).get("clock_s")
        return float(clock) if isinstance(clock, (int, float)) else 0.0

    def clock(self) -> float:
        return time.monotonic() - self.origin

    def persist(self) -> None:
        """Write the findings now (``monitor.json``): before a policy cancels the Slurm job this monitor runs in."""
        save(self, ended=False)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def emit(self, kind: str, **fields: Any) -> None:
        """Record an event (first step, a new error, a process's end, the max time, the run's end)."""
        self.event_seq += 1
        event = {"at": round(self.clock(), 3), "kind": kind, "seq": self.event_seq}
        event.update(fields)
        self.events = (self.events + [event])[-KEEP_EVENTS:]
        self.urgent = True

    def note(self, role: Role, text: str) -> None:
        """A line in the role's log, as the wrapper writes its own."""
        try:
            with open(role.log_path, "a", encoding="utf-8") as handle:
                handle.write("%s %s\n" % (LOG_MARK, text))
        except OSError:
            pass

    def document(self, ended: bool) -> dict[str, Any]:
        return {"format": FORMAT, "exp_id": self.exp_id, "pid": os.getpid(), "start": procs.start_time(os.getpid()),
                "clock_s": round(self.clock(), 3), "written_at": time.time(), "ended": ended,
                "timed_out": self.timed_out, "session_removed": self.session_removed,
                "internal_errors": self.internal_errors, "roles": {r.name: r.found.to_json() for r in self.roles},
                "events": self.events, "event_seq": self.event_seq, "policy_seq": self.policy_seq,
                "stall": self.stall, "actions": self.actions, "notify": self.notify,
                "pending_resume": self.pending_resume}


def _compile(pattern: str) -> Any:
    import re

    try:
        return re.compile(pattern, re.MULTILINE)
    except (re.error, RecursionError, OverflowError):
        return None


# --------------------------------------------------------------------------------------------------
# the watchers


class Watcher:
    """One job of the monitor. The scheduler calls ``tick`` when it is due; ``tick`` returns the seconds
    until it wants to run again (None: its ``pace_s``)."""

    pace_s = 1.0

    def __init__(self) -> None:
        self.due = 0.0

    def tick(self, run: Run, now: float) -> float | None:
        raise NotImplementedError


class LogTail(Watcher):
    """Reads one role's log as it grows and folds every new byte into the role's findings."""

    pace_s = TICK_S

    def __init__(self, run: Run, role: Role, keep_points: bool = True) -> None:
        super().__init__()
        self.role = role
        #: The run clock of the previous look at the log (bytes or not): a first step seen now was printed after it.
        self.previous_look = run.resumed_at
        self.points: points.PointsFile | None = None
        if keep_points:  # an observation reading ahead of the monitor writes no points
            self.points = points.PointsFile(run.path(role.name + ".metrics.jsonl"))
            self.points.load(upto_seq=int(role.found.points[0] or 0))

    def tick(self, run: Run, now: float) -> float | None:
        if self.role.found.drained:
            return 3600.0
        return 0.0 if self.read(run, now, final=False) else None

    def drain(self, run: Run) -> None:
        """The process ended: read the rest of its log (an unterminated last line too), up to the size it has
        now (something it left behind may still write)."""
        end = files.file_size(self.role.log_path) or 0
        while self.role.found.offset < end and self.read(run, run.clock(), final=True):
            pass
        self.role.found.drained = True
        run.urgent = True

    def read(self, run: Run, now: float, final: bool) -> bool:
        """One look: fold what was appended since the last one (whole lines, unless ``final``); True when a
        full chunk was read and more is waiting."""
        found = self.role.found
        looked, self.previous_look = self.previous_look, now
        try:
            fd, size = files.open_regular(self.role.log_path)
        except (OSError, AgentError):
            return False  # no log yet (or it is not a regular file): nothing to read
        try:
            if size < found.offset:  # rotated or truncated: this run's output starts again at 0
                found.offset, found.resets = 0, found.resets + 1
                run.urgent = True
            want = min(size - found.offset, CHUNK)
            if want <= 0:
                return False
            try:
                data = os.pread(fd, want, found.offset)
            except OSError:
                found.unscannable += want
                found.offset += want
                return want >= CHUNK
        finally:
            os.close(fd)
        if not final:
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) < CHUNK:
                return False  # an unfinished line: wait for its end
            data = data[:cut] if cut else data
        found.offset += len(data)
        found.size = size
        found.grew_at = now
        self.fold(run, data, now, looked, sample=size - found.offset > SAMPLE_BACKLOG)
        found.looked_at = now
        return want >= CHUNK and found.offset < size

    def fold(self, run: Run, data: bytes, now: float, looked: float, sample: bool) -> None:
        found = self.role.found
        text = scanner.strip_ansi(data.decode("utf-8", "replace"))
        if sample:
            found.sampled_bytes += len(data)
        before = {name: int(hit.get("count", 0)) for name, hit in found.errors.items()}
        seen, step = found.first_step_seen, found.global_step
        lines = findings.fold(found, text, run.table, run.first_step_re, role=self.role.name, now=now,
                              sample_steps=sample)
        for name, hit in found.errors.items():
            if name not in before:
                hit["first_at"] = now
                run.emit("error", role=self.role.name, signature=name, severity=run.severity.get(name, "error"),
                         line=hit.get("first_line", ""))
            if int(hit.get("count", 0)) != before.get(name):
                hit["last_at"] = now
        if found.first_step_seen and not seen:
            found.first_step_not_before = looked
            run.emit("first_step", role=self.role.name, step=found.first_step)
        if found.global_step != step:
            found.stepped_at = now
        if lines and self.points is not None:
            self.points.append((line.step, line.metrics) for line in lines)
            found.points = [self.points.seq, self.points.count, self.points.dropped]


class Processes(Watcher):
    """The wrappers: which ended, with which exit code; what a vanished wrapper left behind."""

    pace_s = TICK_S

    def __init__(self, tails: dict[str, LogTail]) -> None:
        super().__init__()
        self.tails = tails

    def tick(self, run: Run, now: float) -> float | None:
        if not os.path.isfile(run.path(SPEC)):  # the run was discarded (rolled back): leave nothing behind
            run.finished = True
            return None
        for role in run.roles:
            if not role.ended:
                self.check(run, role, now)
        if all(r.ended and r.found.drained for r in run.roles):
            run.finished = True
        return None

    def check(self, run: Run, role: Role, now: float) -> None:
        if run.spec.get("slurm") and role.pid is None and not self.started_in_job(run, role):
            return
        wrapper = role.wrapper()
        if wrapper is not None and procs.alive(wrapper["pid"], wrapper["start"]):
            return
        code = files.read_int(run.path(role.name + ".exit"))
        if code is None and now - role.orphans_checked >= ORPHAN_CHECK_S:
            role.orphans_checked = now
            if procs.marked("%s/%s" % (run.exp_id, role.name)):
                return  # the wrapper vanished, something it started still runs: keep watching it
            code = files.read_int(run.path(role.name + ".exit"))
        elif code is None:
            return
        role.ended, role.exit_code = True, code
        if not role.found.drained:
            self.tails[role.name].drain(run)
        run.emit("process_ended", role=role.name, exit_code=code)


    @staticmethod
    def started_in_job(run: Run, role: Role) -> bool:
        """A Slurm run's process is known by the pid its wrapper wrote once the job started it: until then it has
        not started (unless it has an exit code, or the job ended without starting it)."""
        pid = files.read_int(run.path(role.name + ".pid"))
        if pid is not None:
            role.pid, role.start = pid, procs.start_time(pid)
            return True
        if files.exists(run.path(role.name + ".exit")):
            return True
        from . import slurm

        mine = slurm.record(run.dir)
        return mine is not None and mine.get("state") in slurm.FINAL


class MaxTime(Watcher):
    """Ends the run at its max time, as ``stop_experiment`` would, and marks what it ended ``timed_out``."""

    def tick(self, run: Run, now: float) -> float | None:
        limit = float(run.spec.get("max_time_s") or 0)
        if run.timed_out or limit <= 0:
            return 3600.0
        if now < limit:
            return min(1.0, limit - now)
        run.timed_out = True
        wrappers = []
        for role in run.roles:
            if role.ended or (files.exists(run.path(role.name + ".exit"))
                              and not procs.marked("%s/%s" % (run.exp_id, role.name))):
                continue
            try:
                files.touch(run.path(role.name + ".timedout"))
            except OSError:
                pass
            run.note(role, "max time of %d s reached: stopping %s" % (int(limit), role.name))
            wrapper = role.wrapper()
            if wrapper is not None:
                wrappers.append(wrapper)
        run.emit("timed_out", max_time_s=limit)
        report = procs.terminate(wrappers, run.exp_id + "/", float(run.spec.get("grace_s") or 5))
        if report["survivors"]:
            for role in run.roles:
                left = [str(p["pid"]) for p in report["survivors"] if p["role"] == role.name]
                if left:
                    run.note(role, "still alive after SIGKILL: " + ", ".join(left))
        return 3600.0


class Persist(Watcher):
    """Writes ``monitor.json`` when the findings changed: at most every ``PERSIST_S``, at once when urgent."""

    pace_s = PERSIST_S

    def __init__(self) -> None:
        super().__init__()
        self.last = ""

    def tick(self, run: Run, now: float) -> float | None:
        save(run, ended=False, last=self)
        return None


def save(run: Run, ended: bool, last: Persist | None = None) -> None:
    doc = run.document(ended)
    stable = json.dumps({k: v for k, v in doc.items() if k not in ("clock_s", "written_at")}, sort_keys=True)
    if last is not None and stable == last.last:
        run.urgent = False
        return
    if not os.path.isfile(run.path(SPEC)):
        return  # discarded meanwhile: write nothing into what is left of the run directory
    try:
        files.write_atomic(run.path(FINDINGS), json.dumps(doc).encode("utf-8"), replace=True, mode=0o600)
    except AgentError:
        return  # a full disk: the next look tries again
    run.urgent = False
    if last is not None:
        last.last = stable


# --------------------------------------------------------------------------------------------------
# the scheduler


def _tick(run: Run, watcher: Scheduled, now: float) -> float | None:
    """One watcher's tick; a bug in one never ends the monitor (it enforces the max time)."""
    try:
        return watcher.tick(run, now)
    except Exception as exc:  # noqa: BLE001 - logged to monitor.log, counted in monitor.json
        run.internal_errors += 1
        if run.internal_errors <= 20:
            sys.stderr.write("%s %s failed: %s: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), type(watcher).__name__,
                                                        type(exc).__name__, exc))
            sys.stderr.flush()
        return 5.0


if TYPE_CHECKING:
    #: What the scheduler runs: the watchers here and those of ``policy`` (the same members: due, pace_s, tick).
    Scheduled = Watcher | policy.StallWatch | policy.Policy


def run_loop(run: Run, rules: policy.Policy | None = None) -> None:
    """Run the watchers until the run has ended on this host (``finish`` then ends it)."""
    tails = {role.name: LogTail(run, role) for role in run.roles}
    persist = Persist()
    watchers: list[Scheduled] = [Processes(tails), *tails.values(), MaxTime(), policy.StallWatch()]
    if rules is not None:
        watchers.append(rules)
    watchers.append(persist)
    while not run.finished:
        for watcher in watchers:
            now = run.clock()
            if now >= watcher.due or (watcher is persist and run.urgent):
                wait = _tick(run, watcher, now)
                watcher.due = run.clock() + (watcher.pace_s if wait is None else wait)
            if run.finished:
                break
        if not run.finished:
            time.sleep(max(0.0, min(TICK_S, min(w.due for w in watchers) - run.clock())))


def finish(run: Run, rules: policy.Policy | None = None) -> None:
    """The run has ended here: remove its session once every exit code is on disk, carry out the end's policy,
    write the last findings."""
    if not os.path.isfile(run.path(SPEC)):
        return
    from . import tmux

    codes = [files.read_int(run.path(r.name + ".exit")) for r in run.roles]
    if run.spec.get("socket_path") and not run.session_removed and all(c is not None for c in codes):
        removed = tmux.remove_finished(str(run.spec.get("socket_path") or ""), run.exp_id)
        if removed:
            run.session_removed = True
            try:
                files.touch(run.path(SESSION_REMOVED))
            except OSError:
                pass
    run.stall = {}
    run.emit("ended", state=policy.end_state(run), exit_codes={r.name: c for r, c in zip(run.roles, codes)})
    if rules is not None:
        rules.at_end(run)
    save(run, ended=True)


# --------------------------------------------------------------------------------------------------
# starting, and what observations read


def spec_for(exp_id: str, socket_path: str, session: str, started: Sequence[Mapping[str, Any]],
             offsets: Mapping[str, int], max_time_s: int, grace_s: int, config: Mapping[str, Any] | None,
             result_dir: str = "") -> dict[str, Any]:
    """The monitor's spec file: what a launch decided that the monitor needs."""
    config = config or {}
    return {"format": FORMAT, "exp_id": exp_id, "socket_path": socket_path, "session": session,
            "max_time_s": max_time_s, "grace_s": grace_s, "first_step_pattern": config.get("first_step_pattern"),
            "first_step_s": config.get("first_step_s"), "policy": dict(config.get("policy") or {}),
            "result_dir": result_dir, "signatures": list(config.get("signatures") or []),
            "roles": [{"role": p["role"], "log_path": p["log_path"], "start_offset": offsets.get(str(p["role"]), 0),
                       "pid": p["pid"], "start": p["start"], "pane_id": p["pane_id"], "workdir": p.get("workdir")}
                      for p in started]}


def log_sizes(logs: Mapping[str, str]) -> dict[str, int]:
    """Role -> the size its log has before the run starts (what the run did not write), 0 when absent."""
    return {role: files.file_size(path) or 0 for role, path in logs.items()}


#: The channel nonce of a monitor started through stage one (its stdin carries nothing else).
_NONCE = "monitor"
_PAYLOAD: list[bytes] = []


def _payload() -> bytes:
    """What the monitor's interpreter reads on stdin: the stage one and sources SSH ships (built once)."""
    from . import program

    if not _PAYLOAD:
        _PAYLOAD.append(program.ssh_payload(_NONCE))
    return _PAYLOAD[0]


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != RUN_MARKER}
    from .protocol import STATE_DIR_ENV, state_dir

    env[STATE_DIR_ENV] = state_dir()  # the install and the run directory the launch used, whatever HOME says
    return env


#: How a monitor starts from this version's install (``program.install_dir``): nothing else is loaded.
_FROM_INSTALL = ("import sys; sys.path.insert(0, sys.argv[1]); from ajs_agent import monitor; "
                 "sys.exit(monitor.main(sys.argv[2:]))")


def _argv(run_dir: str) -> tuple[list[str], bool]:
    """The monitor's interpreter arguments (after ``python -I -S``), and whether they run this version's install
    (else the stage one SSH calls run, which reads its payload on stdin and installs it)."""
    from . import program

    base = program.install_dir()
    if os.path.isfile(os.path.join(base, program.PACKAGE, "monitor.py")):
        return ["-c", _FROM_INSTALL, base, run_dir], True
    return ["-c", program.BOOTSTRAP, *program.bootstrap_argv(_NONCE), "monitor", run_dir], False


#: In a Slurm run's directory: what the batch script's monitor reads on stdin when the agent was not installed.
STAGE = "monitor.stage"


def job_line(run_dir: str, spec: Mapping[str, Any]) -> str:
    """The batch script's line that starts the run's monitor on the job's first node (``spec`` written first):
    the same program ``start`` runs, with this host's interpreter and state directory (both on the filesystem
    the nodes share); it detaches at once and watches the job's processes there."""
    import shlex

    from .protocol import STATE_DIR_ENV, state_dir

    files.write_atomic(os.path.join(run_dir, SPEC), json.dumps(spec).encode("utf-8"), replace=False, mode=0o600)
    argv, installed = _argv(run_dir)
    stdin = "/dev/null"
    if not installed:
        stdin = os.path.join(run_dir, STAGE)
        files.write_atomic(stdin, _payload(), replace=True, mode=0o600)
    q = shlex.quote
    return "(cd %s && env -u %s %s=%s %s -I -S %s < %s > /dev/null 2>> %s) || echo 'the run monitor did not start'" % (
        q(run_dir), RUN_MARKER, STATE_DIR_ENV, q(state_dir()), q(sys.executable), " ".join(q(a) for a in argv),
        q(stdin), q(os.path.join(run_dir, LOG)))


def in_job(run_dir: str) -> bool:
    """Whether the run is a Slurm job's: its monitor runs inside the allocation, never on this (login) node."""
    return os.path.isfile(os.path.join(run_dir, "job.sh"))


def start(run_dir: str, spec: Mapping[str, Any] | None = None) -> None:
    """Start the run's monitor (writing its spec file first when given) from this version's install under the
    state directory; where it is missing, through the stage one SSH calls run, which installs it. Raises
    ``AgentError`` when the monitor did not start."""
    import subprocess

    if spec is not None:
        files.write_atomic(os.path.join(run_dir, SPEC), json.dumps(spec).encode("utf-8"), replace=False, mode=0o600)
    argv, installed = _argv(run_dir)
    log_path = os.path.join(run_dir, LOG)
    try:
        with open(log_path, "ab") as log:
            child = subprocess.Popen([sys.executable, "-I", "-S"] + argv,
                                     stdin=subprocess.DEVNULL if installed else subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=log, cwd=run_dir, env=_environment(),
                                     start_new_session=True, close_fds=True)
    except OSError as exc:
        raise AgentError("cannot start the run monitor: %s" % (exc.strerror or exc)) from None
    try:
        child.communicate(None if installed else _payload(), timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise AgentError("the run monitor did not start within %d s" % START_TIMEOUT_S) from None
    if child.returncode != 0:
        said = (files.read_small(log_path, 1024 * 1024) or "").strip().splitlines()
        raise AgentError("the run monitor did not start (exit %s): %s" % (
            child.returncode, scanner.clip(said[-1] if said else "no message", 300)))


def _lock_free(run_dir: str) -> bool:
    """Whether no monitor holds the run's lock (it is dead, or none was ever started)."""
    import fcntl

    try:
        fd = os.open(os.path.join(run_dir, LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the lock if this test took it
    return True


def read_findings(run_dir: str) -> dict[str, Any] | None:
    text = files.read_small(os.path.join(run_dir, FINDINGS), 16 * 1024 * 1024)
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == FORMAT else None


def monitored(run_dir: str) -> bool:
    """Whether the run was launched with a monitor (runs from before it have none)."""
    return os.path.isfile(os.path.join(run_dir, SPEC))


def ensure_running(run_dir: str, doc: Mapping[str, Any] | None) -> bool:
    """Whether the run's monitor lives; a monitored run whose monitor died before its end gets a new one (at most
    one start per ``RESTART_EVERY_S``), which resumes from the last findings. A Slurm run's monitor runs in its
    job (on the filesystem the nodes share, its lock says whether it lives): it is never started here."""
    if doc is not None and doc.get("ended"):
        return False
    if not _lock_free(run_dir):
        return True
    if in_job(run_dir):
        return False
    marker = os.path.join(run_dir, RESTARTED)
    try:
        if time.time() - os.stat(marker).st_mtime < RESTART_EVERY_S:
            return False
    except OSError:
        pass
    try:
        files.write_atomic(marker, b"", replace=True, mode=0o600)
        start(run_dir)
    except AgentError:
        return False
    return True


def attempts_after(run_dir: str) -> list[dict[str, Any]]:
    """The attempts a resume policy started after this run, in order (each one's ``policy.NEXT_ATTEMPT`` record,
    followed from run directory to run directory)."""
    chain: list[dict[str, Any]] = []
    here = run_dir
    while len(chain) < 50:
        text = files.read_small(os.path.join(here, policy.NEXT_ATTEMPT), 1024 * 1024)
        try:
            record = json.loads(text) if text else None
        except ValueError:
            record = None
        if not isinstance(record, dict):
            break
        launch = record.get("launch")
        if not isinstance(launch, dict) or not isinstance(launch.get("run_dir"), str):
            break
        chain.append(record)
        here = launch["run_dir"]
    return chain


def _role_of(doc: Mapping[str, Any] | None, role: str) -> dict[str, Any] | None:
    found = ((doc or {}).get("roles") or {}).get(role)
    return found if isinstance(found, dict) else None


def _drained(run_dir: str, role: str) -> dict[str, Any] | None:
    """The findings once the monitor has read ``role``'s log to its end (None: not within ``DRAIN_WAIT_S``)."""
    end = time.monotonic() + DRAIN_WAIT_S
    while time.monotonic() < end:
        time.sleep(0.05)
        doc = read_findings(run_dir)
        found = _role_of(doc, role)
        if doc is not None and (doc.get("ended") or (found is not None and found.get("drained"))):
            return doc
    return None


def report(run_dir: str, role: str, *, final: bool, cache: dict[str, Any]) -> dict[str, Any] | None:
    """What the run's monitor found for ``role`` (None: the run has no monitor), for an observation, as of the
    bytes the log holds now. An ended process: the observation waits (``DRAIN_WAIT_S`` at most) for the
    monitor to read its log to the end, so the answer that first says "ended" has its last lines and
    points. A running one: what was written since the monitor's last look (a quarter second, at most
    ``CATCH_UP_BYTES``) is read here by the same rules (``catch_up``), without writing anything."""
    if run_dir not in cache:
        if not monitored(run_dir):
            cache[run_dir] = None
        else:
            doc = read_findings(run_dir)
            cache[run_dir] = {"doc": doc, "alive": ensure_running(run_dir, doc)}
    entry = cache[run_dir]
    if entry is None:
        return None
    found = _role_of(entry["doc"], role)
    if final and entry["alive"] and not (found is not None and found.get("drained")):
        fresh = _drained(run_dir, role)
        if fresh is not None:
            entry["doc"], found = fresh, _role_of(fresh, role)
    doc = entry["doc"] or {}
    out = dict(found) if found is not None else {}
    if found is not None and not found.get("drained") and not doc.get("ended"):
        out = catch_up(run_dir, doc, role, final) or out
    out["run"] = {"alive": entry["alive"], "ended": bool(doc.get("ended")), "clock_s": doc.get("clock_s"),
                  "timed_out": bool(doc.get("timed_out")), "internal_errors": doc.get("internal_errors", 0),
                  "stall": doc.get("stall") or {}, "actions": doc.get("actions") or [],
                  "notify": doc.get("notify") or {}, "pending_resume": doc.get("pending_resume") or None}
    if doc.get("ended") and doc.get("actions"):  # a resume policy may have started attempts after this one
        if "attempts" not in entry:
            entry["attempts"] = attempts_after(run_dir)
        if entry["attempts"]:
            out["run"]["attempts"] = entry["attempts"]
    return out


#: spec file -> (its modification time, the spec, its compiled table): an observation compiles a run's table once.
_SPECS: dict[str, tuple[int, dict[str, Any], scanner.Table]] = {}


def catch_up(run_dir: str, doc: Mapping[str, Any], role: str, final: bool) -> dict[str, Any] | None:
    """``role``'s findings with what its log gained since the monitor's last look folded in (None: nothing to
    add, or more than ``CATCH_UP_BYTES``, which the monitor reads itself)."""
    path = os.path.join(run_dir, SPEC)
    try:
        mtime = os.stat(path).st_mtime_ns
        cached = _SPECS.get(path)
        if cached is None or cached[0] != mtime:
            spec = json.loads(files.read_small(path, 16 * 1024 * 1024) or "")
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
            return r.found.to_json()
    return None


# --------------------------------------------------------------------------------------------------
# the program


def _detach() -> None:
    """Leave the launcher (it waits for this first process only) and every terminal: fork once more; the child
    is adopted by init and reads nothing from the launcher's pipe."""
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.close(null)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _hold_lock(run_dir: str) -> int | None:
    """The run's lock, held for this process's life; None when another monitor holds it (an observation
    testing the lock holds it for an instant only, hence the retries)."""
    import fcntl

    fd = os.open(os.path.join(run_dir, LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    for _ in range(50):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            time.sleep(0.02)
    os.close(fd)
    return None


def main(argv: list[str]) -> int:
    """``monitor RUN_DIR``: check the spec, detach, then watch the run until it has ended on this host."""
    if len(argv) != 1:
        sys.stderr.write("usage: monitor RUN_DIR\n")
        return 2
    run_dir = argv[0]
    text = files.read_small(os.path.join(run_dir, SPEC), 16 * 1024 * 1024)
    try:
        spec = json.loads(text or "")
        if not isinstance(spec, dict) or spec.get("format") != FORMAT or not isinstance(spec.get("roles"), list):
            raise ValueError("not a monitor spec")
        run = Run(run_dir, spec, read_findings(run_dir))
    except (ValueError, KeyError, TypeError) as exc:
        sys.stderr.write("cannot read %s: %s\n" % (os.path.join(run_dir, SPEC), exc))
        return 2
    _detach()
    lock = _hold_lock(run_dir)
    if lock is None:
        return 0  # another monitor already watches this run
    stop: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        del frame
        stop.append(signum)
        run.finished = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rules = policy.Policy(run)
    try:
        save(run, ended=False)
        run_loop(run, rules)
        if stop:  # stopped from outside before the run ended: keep what was found; an observation resumes it
            save(run, ended=False)
        else:
            finish(run, rules)
    finally:
        os.close(lock)
    return 0
