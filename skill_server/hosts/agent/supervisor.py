"""Supervision: no single process watches a run. The run monitor and its supervisor, one each per run per host,
each keep the other running.

* The **supervisor** (``main``, a small second process started by the monitor) replaces the monitor when it is
  dead (its lock is free before the run ended here: killed, out of memory, a bug, a full disk), frozen (its
  heartbeat is older than ``heartbeat.STALE_S``: SIGSTOPped, stuck on a hung filesystem), or late (the run's
  max time passed ``MAX_TIME_SLACK_S`` ago and it has not ended the run). ``replace_monitor`` ends the old one by
  its recorded identity (SIGKILL ends a stopped process too), fences its lock if it would not die
  (``heartbeat.fence``), records why (``monitor.replaced``, which status reports) and starts a new monitor, which
  takes up the last ``monitor.json``: its phase, a resume waiting for its backoff, the notifications still owed.
  It sleeps until the monitor's process ends (a pidfd), its heartbeat would turn stale, or the max time falls due,
  so an idle run costs it a wake every ``CHECK_S``; replacements that die young are spaced out (up to
  ``RESTART_MAX_S``). It ends when the run has ended here (or was rolled back).
* The **monitor's half** (``Keeper``, one of its watchers) beats and starts the supervisor when none runs (at the
  monitor's start, and after the supervisor died), or replaces a frozen one the same way.

Under a batch scheduler both run inside the job, on its first node: a monitor killed there is replaced there.
A status call that finds both gone starts a monitor again itself (``observer.ensure_running``). Stdlib only,
Python 3.8.
"""

from __future__ import annotations

import sys
import time

from . import daemon, heartbeat, phases, procs
from .files import AgentError
from .protocol import TYPE_CHECKING
from .rundir import BEAT, DISCARDED, LOCK, REPLACED, SPEC, SUPERVISOR_BEAT, SUPERVISOR_LOCK, RunDir
from .watchers import Watcher

if TYPE_CHECKING:
    from typing import Any

    from .runstate import Run
    from .waker import Waker

#: The supervisor looks at least this often.
CHECK_S = 30.0
#: A monitor that has not ended the run this long after its max time is replaced.
MAX_TIME_SLACK_S = 10.0
#: Replacements whose monitor dies within ``HEALTHY_S`` are spaced out, doubling from the first to the last.
RESTART_MIN_S, RESTART_MAX_S, HEALTHY_S = 5.0, 300.0, 60.0
#: How long a replacement waits for an ended process to let go of its lock before it fences it.
LET_GO_S = 3.0
#: Replacements kept in ``monitor.replaced``.
KEEP_REPLACED = 20


def replacements(where: RunDir) -> list[dict[str, Any]]:
    """The monitor's replacements, oldest first: when (wall clock), why, by whom, which process."""
    kept = where.read_json_list(REPLACED)
    return [r for r in kept if isinstance(r, dict)]


def _note(where: RunDir, why: str, by: str, record: dict[str, Any] | None, fenced: bool) -> None:
    entry = {"wall": time.time(), "why": why, "by": by, "pid": (record or {}).get("pid"), "fenced": fenced}
    daemon.log("the run monitor %sis replaced by %s: %s" % (
        "(pid %s) " % entry["pid"] if entry["pid"] else "", by, why))
    try:
        where.write_json(REPLACED, (replacements(where) + [entry])[-KEEP_REPLACED:], replace=True)
    except AgentError:
        pass  # a full disk: the log line above is what is left (if even that)


def _let_go(lock_path: str, record: dict[str, Any] | None) -> bool:
    """End the process a beat record names and wait for its lock to be free; fence the lock when it would not die
    (stuck in the kernel). Whether it had to be fenced."""
    if heartbeat.lock_free(lock_path):
        return False
    heartbeat.end(record)
    end = time.monotonic() + LET_GO_S
    while time.monotonic() < end:
        if heartbeat.lock_free(lock_path):
            return False
        time.sleep(0.05)
    heartbeat.fence(lock_path)
    return True


def replace_monitor(where: RunDir, why: str, by: str) -> str | None:
    """End the run's monitor if one lives (see the module's doc), record why, start a new one; None when it
    started, else why not."""
    record, _ = heartbeat.read(where.file(BEAT))
    fenced = _let_go(where.file(LOCK), record)
    _note(where, why, by, record, fenced)
    try:
        daemon.start(where.path, "monitor")
    except AgentError as exc:
        daemon.log("the run monitor could not be started again: %s" % exc.message)
        return exc.message
    return None


class Supervisor:
    """The supervisor's judgement of the monitor, one look at a time (``check``)."""

    def __init__(self, where: RunDir) -> None:
        self.where = where
        self.next_try = float("-inf")  # this process's monotonic clock: no replacement before
        self.gap = RESTART_MIN_S
        self.started = float("-inf")

    def check(self, woken: Waker | None = None) -> float | None:
        """Replace the monitor when it is dead, frozen or late; the seconds until the next look (None: the run has
        ended here, nothing is left to watch)."""
        where = self.where
        if not where.has(SPEC) or where.has(DISCARDED):
            return None
        if heartbeat.lock_free(where.file(LOCK)):
            if (where.findings() or {}).get("ended"):
                return None
            return self.replace("its process ended before the run did")
        record, beat_at = heartbeat.read(where.file(BEAT))
        if woken is not None and record is not None and isinstance(record.get("pid"), int):
            woken.watch_pid(record["pid"])  # wake at its end
        age = heartbeat.age(beat_at)
        if age is not None and age > heartbeat.STALE_S:
            return self.replace("it gave no sign of life for %d s (stopped, or stuck in the kernel)" % age)
        late = self.late(record)
        if late is not None:
            return self.replace(late)
        waits = [CHECK_S]
        if age is not None:
            waits.append(heartbeat.STALE_S - age + 1.0)
        due = self.deadline(record)
        if due is not None:
            waits.append(due - procs.uptime() + 0.5)
        return max(1.0, min(waits))

    @staticmethod
    def deadline(record: dict[str, Any] | None) -> float | None:
        """When (boot clock) the monitor is late if the run still runs: its max time plus ``MAX_TIME_SLACK_S``;
        None when no max time binds it (none set, or reached already, or the run's processes ended)."""
        if not record or record.get("timed_out") or record.get("phase") not in phases.LIVE:
            return None
        deadline = record.get("deadline")
        if not isinstance(deadline, (int, float)) or isinstance(deadline, bool):
            return None
        return float(deadline) + MAX_TIME_SLACK_S

    def late(self, record: dict[str, Any] | None) -> str | None:
        due = self.deadline(record)
        if due is None or procs.uptime() < due:
            return None
        doc = self.where.findings() or {}
        if doc.get("timed_out") or doc.get("phase") not in phases.LIVE:
            return None  # it did (its heartbeat record is behind)
        return "the run's max time passed %d s ago and it had not ended the run" % (procs.uptime() - due
                                                                                   + MAX_TIME_SLACK_S)

    def replace(self, why: str) -> float:
        """Replace the monitor now, unless the last replacement was too recent (one that died young doubles the
        wait for the next); the seconds until the next look."""
        now = time.monotonic()
        if now < self.next_try:
            return max(1.0, self.next_try - now)
        self.gap = min(RESTART_MAX_S, self.gap * 2) if now - self.started < HEALTHY_S else RESTART_MIN_S
        self.next_try, self.started = now + self.gap, now
        replace_monitor(self.where, why, "its supervisor")
        return 1.0


def main(argv: list[str]) -> int:
    """``supervisor RUN_DIR``: detach, then watch the run's monitor until the run has ended here."""
    from . import waker

    if len(argv) != 1:
        sys.stderr.write("usage: supervisor RUN_DIR\n")
        return 2
    where = RunDir(argv[0])
    if where.spec() is None:
        sys.stderr.write("cannot read %s: not a monitor spec\n" % where.file(SPEC))
        return 2
    daemon.detach()
    lock = heartbeat.Lock(where.file(SUPERVISOR_LOCK))
    if not lock.acquire():
        return 0  # another supervisor already watches this run
    flag: dict[str, Any] = {}
    daemon.on_term(flag)
    heart = heartbeat.Beat(where.file(SUPERVISOR_BEAT))
    heart.start(role="supervisor")
    watch = Supervisor(where)
    woken = waker.Waker(())
    try:
        while not flag.get("stop") and not lock.superseded():
            heart.beat(force=True)
            pause = watch.check(woken)
            if pause is None:
                break
            woken.wait(pause)
    finally:
        woken.close()
        lock.release()
    return 0


class Keeper(Watcher):
    """The monitor's half of supervision: its heartbeat's record kept current, its supervisor running (started
    when none runs) and not frozen (replaced when its heartbeat is stale)."""

    pace_s = heartbeat.BEAT_S

    def __init__(self) -> None:
        super().__init__()
        self.started = float("-inf")  # this process's monotonic clock

    def tick(self, run: Run, now: float) -> float | None:
        run.beat()
        where = run.files
        lock = where.file(SUPERVISOR_LOCK)
        if not heartbeat.lock_free(lock):
            record, beat_at = heartbeat.read(where.file(SUPERVISOR_BEAT))
            age = heartbeat.age(beat_at)
            if age is None or age <= heartbeat.STALE_S:
                return None
            daemon.log("the run's supervisor (pid %s) gave no sign of life for %d s: replacing it" % (
                (record or {}).get("pid"), age))
            _let_go(lock, record)
        if time.monotonic() - self.started < RESTART_MIN_S * 6:
            return RESTART_MIN_S * 6
        self.started = time.monotonic()
        try:
            daemon.start(run.dir, "supervisor")
        except AgentError as exc:
            daemon.log("the run's supervisor did not start: %s" % exc.message)
        return None


def state(where: RunDir, alive: bool, ended: bool) -> dict[str, Any]:
    """What an observation says of the watchers of a run on this host: the monitor's heartbeat age (None: not
    comparable here, or none yet), whether its supervisor runs, and the replacements so far."""
    out: dict[str, Any] = {"replaced": replacements(where)[-3:]}
    if ended:
        return out
    record, beat_at = heartbeat.read(where.file(BEAT))
    age = heartbeat.age(beat_at) if alive and record is not None else None
    out["beat_age_s"] = None if age is None else round(age, 1)
    out["supervised"] = not heartbeat.lock_free(where.file(SUPERVISOR_LOCK))
    if record is not None and record.get("resume_failed"):  # what a monitor could not write into monitor.json
        out["resume_failed"] = {"failed": str(record["resume_failed"]), "tries": record.get("resume_tries")}
    return out
