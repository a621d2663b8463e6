"""The run monitor's watchers: each a job with its own pace, run by the scheduler (``scheduler``).

* ``Probe``: looks, cheaply and often, whether anything changed (a log's size, a wrapper gone, a pid written),
  and makes the watchers that must act on it due at once; the others then sleep long while nothing happens.
* ``LogTail`` (one per role): every new byte of the role's log goes through the error scanner, the step parser
  and the first-step rule (``findings.fold``); step lines become metric points (``points``); it notes when the
  log last grew and the step last moved (the stall clock).
* ``Processes``: the wrappers' liveness and exit codes; a role whose wrapper ended has its log read to the end.
  A wrapper that vanished without an exit code may leave processes carrying the run marker behind; they are
  watched until they are gone (and ended at the max time). Once every process ended and every log was read,
  the run's end is handed to ``on_done``.
* ``MaxTime``: at the run's max time every live process is stopped as ``stop_experiment`` stops it, after
  marking it ``timedout`` and saying so in its log.
* ``StopAsked``: a stop asked of the monitor itself (its job's scheduler could not be asked), done here;
* ``Persist``: the document (``monitor.json``) when something changed: at most every ``PERSIST_S``, and at once
  when a waiting caller wants it (a new event, a role's end).

A watcher with nothing to do sleeps long (``IDLE_S``, or until what it waits for happens: ``scheduler``).

Stdlib only, Python 3.8.
"""

from __future__ import annotations

import os

from . import files, findings, phases, points, procs, scanner
from .files import AgentError
from .protocol import TYPE_CHECKING
from .rundir import EXIT, PID, POINTS, SPEC, STOP_HERE

if TYPE_CHECKING:
    import re
    from collections.abc import Callable

    from .runstate import Role, Run

#: While something changes, the log tails and the process watch look this often.
TICK_S = 0.25
#: The environment variable that sets ``IDLE_S`` (``TICK_S`` makes every watcher look as often as the probe, as
#: monitors did before it: what ``bench/unattended.py`` compares an idle monitor's cost against).
IDLE_ENV = "SKILL_SERVER_MONITOR_IDLE_S"


def _idle_s() -> float:
    try:
        value = float(os.environ.get(IDLE_ENV) or 15.0)
    except ValueError:
        value = 15.0
    return min(60.0, max(TICK_S, value))


#: While nothing changes they look this rarely (the probe, or the kernel's word, wakes them at once on a change:
#: this only bounds what both would miss, a write from another machine of a shared filesystem, say).
IDLE_S = _idle_s()
PERSIST_S = 2.0
ORPHAN_CHECK_S = 10.0
#: Most bytes of one log read in one look (a longer backlog is read in further looks right away).
CHUNK = 4 * 1024 * 1024
#: With more than this waiting after a look, only the first and last step line of a chunk are parsed for
#: metrics (errors are still scanned in every byte).
SAMPLE_BACKLOG = 64 * 1024 * 1024


class Watcher:
    """One job of the monitor. The scheduler calls ``tick`` when it is due, or earlier when it wakes on what it
    waits for (``wakes_on``: ``events``, a new event; ``changes``, anything the document keeps changed;
    ``urgent``, something a waiting caller wants now); ``tick`` returns the seconds until it wants to run again
    (None: its ``pace_s``)."""

    pace_s = 1.0
    wakes_on: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.due = 0.0
        self.seen = (0, 0)  # the run's events and changes as of this watcher's last tick

    def tick(self, run: Run, now: float) -> float | None:
        raise NotImplementedError


class LogTail(Watcher):
    """Reads one role's log as it grows and folds every new byte into the role's findings."""

    pace_s = IDLE_S

    def __init__(self, run: Run, role: Role, keep_points: bool = True) -> None:
        super().__init__()
        self.role = role
        #: The run clock of the previous look at the log (bytes or not): a first step seen now was printed after it.
        self.previous_look = run.resumed_at
        #: The log's size at the last look (the probe compares it with the size now).
        self.looked_size = -1
        self.points: points.PointsFile | None = None
        if keep_points:  # an observation reading ahead of the monitor writes no points
            self.points = points.PointsFile(run.files.of(role.name, POINTS))
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
        run.changed(urgent=True)

    def read(self, run: Run, now: float, final: bool) -> bool:
        """One look: fold what was appended since the last one (whole lines, unless ``final``); True when a
        full chunk was read and more is waiting."""
        found = self.role.found
        looked, self.previous_look = self.previous_look, now
        try:
            fd, size = files.open_regular(self.role.log_path)
        except (OSError, AgentError):
            return False  # no log yet (or it is not a regular file): nothing to read
        self.looked_size = size
        try:
            if size < found.offset:  # rotated or truncated: this run's output starts again at 0
                found.offset, found.resets = 0, found.resets + 1
                run.changed(urgent=True)
            want = min(size - found.offset, CHUNK)
            if want <= 0:
                return False
            try:
                data = os.pread(fd, want, found.offset)
            except OSError:
                found.unscannable += want
                found.offset += want
                run.changed()
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
        run.changed()
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
        new_step = found.first_step_seen and not seen
        new_errors = [name for name in found.errors if name not in before]
        step_first = new_step and not _printed_before_the_step(
            text, [str(found.errors[n].get("first_line") or "") for n in new_errors], run.first_step_re)
        if step_first:  # the events in the log's order (the happenings' order follows them)
            self.first_step(run, looked)
        for name, hit in found.errors.items():
            if name in new_errors:
                hit["first_at"] = now
                run.emit("error", role=self.role.name, signature=name, severity=run.severity.get(name, "error"),
                         line=hit.get("first_line", ""))
            if int(hit.get("count", 0)) != before.get(name):
                hit["last_at"] = now
        if new_step and not step_first:
            self.first_step(run, looked)
        if found.global_step != step:
            found.stepped_at = now
        if lines and self.points is not None:
            self.points.append((line.step, line.metrics) for line in lines)
            found.points = [self.points.seq, self.points.count, self.points.dropped]


    def first_step(self, run: Run, looked: float) -> None:
        found = self.role.found
        found.first_step_not_before = looked
        run.emit("first_step", role=self.role.name, step=found.first_step)
        if run.phase == phases.STARTING:
            run.move(phases.RUNNING)


def _printed_before_the_step(text: str, error_lines: list[str], first_step_re: re.Pattern[str] | None) -> bool:
    """Whether one of a chunk's new error lines comes before its first step line (else the step is told first)."""
    found = first_step_re.search(text) if first_step_re is not None else None
    step_at = found.start() if found is not None else text.find("step:")
    if step_at < 0:
        return True
    return any(0 <= text.find(line.strip()) < step_at for line in error_lines if line.strip())


class Processes(Watcher):
    """The wrappers: which ended, with which exit code; what a vanished wrapper left behind."""

    pace_s = IDLE_S

    def __init__(self, tails: dict[str, LogTail], on_done: Callable[[Run], None],
                 watch_pid: Callable[[int], bool] | None = None) -> None:
        super().__init__()
        self.tails = tails
        self.on_done = on_done
        #: Told each wrapper's pid once it is known (the scheduler then wakes when that process ends).
        self.watch_pid = watch_pid

    def tick(self, run: Run, now: float) -> float | None:
        if not run.files.has(SPEC):  # the run was discarded (rolled back): leave nothing behind
            run.discarded = run.finished = True
            return None
        for role in run.roles:
            if not role.ended:
                self.check(run, role, now)
        if all(r.ended and r.found.drained for r in run.roles) and run.phase not in (phases.BACKOFF, phases.ENDED):
            self.on_done(run)
        busy = any(not r.ended and (r.pid is None or r.orphans_checked > float("-inf") or run.files.has_exit(r.name))
                   for r in run.roles)
        return TICK_S if busy else None  # not started yet, ending, or orphans left: looked at often

    def check(self, run: Run, role: Role, now: float) -> None:
        if role.pid is None:  # launched without a pid (inside a scheduler's job): known once its wrapper wrote it
            pid = run.files.pid(role.name)
            if pid is not None:
                role.pid, role.start = pid, procs.start_time(pid)
                if self.watch_pid is not None:
                    self.watch_pid(pid)
            elif not run.files.has_exit(role.name) and not run.backend.started(run.dir, role.name):
                return
        wrapper = role.wrapper()
        if wrapper is not None and procs.alive(wrapper["pid"], wrapper["start"]):
            return
        code = run.files.exit_code(role.name)
        if code is None and now - role.orphans_checked >= ORPHAN_CHECK_S:
            role.orphans_checked = now
            if procs.marked("%s/%s" % (run.exp_id, role.name)):
                return  # the wrapper vanished, something it started still runs: keep watching it
            code = run.files.exit_code(role.name)
        elif code is None:
            return
        role.ended, role.exit_code = True, code
        if not role.found.drained:
            self.tails[role.name].drain(run)
        run.emit("process_ended", role=role.name, exit_code=code)


class Probe(Watcher):
    """Whether anything changed since the last look, at the cost of a ``stat`` per log and a signal 0 per wrapper
    (no /proc read): a log whose size moved wakes its tail, a wrapper gone or a pid or exit code written wakes
    the process watch. Every tick, or (``woken``: the kernel tells the scheduler when the run's files change)
    when the files changed and otherwise every ``IDLE_S``."""

    def __init__(self, tails: dict[str, LogTail], processes: Processes,
                 quiet_until: Callable[[], float] | None = None) -> None:
        super().__init__()
        self.tails = tails
        self.processes = processes
        #: Until when (run clock) the kernel says the logs did not change (None: it says nothing; this probe
        #: looks every tick instead).
        self.quiet_until = quiet_until
        self.pace_s = IDLE_S if quiet_until is not None else TICK_S

    def tick(self, run: Run, now: float) -> float | None:
        for role in run.roles:
            tail = self.tails[role.name]
            if not role.found.drained and tail.due > now:
                try:
                    size = os.stat(role.log_path).st_size
                except OSError:
                    size = -1
                if size == tail.looked_size:
                    tail.previous_look = now  # looked: nothing new (a first step printed later is after it)
                else:
                    if self.quiet_until is not None:  # the kernel said when it was still unchanged
                        tail.previous_look = max(tail.previous_look, self.quiet_until())
                    tail.due = now
            if role.ended or self.processes.due <= now:
                continue
            if self._moved(run, role):
                self.processes.due = now
        return None

    @staticmethod
    def _moved(run: Run, role: Role) -> bool:
        if files.exists(run.files.of(role.name, EXIT)):
            return True
        if isinstance(role.pid, int):
            try:
                os.kill(role.pid, 0)
            except ProcessLookupError:
                return True
            except OSError:
                pass
            return False
        return files.exists(run.files.of(role.name, PID))


class MaxTime(Watcher):
    """Ends the run at its max time, as ``stop_experiment`` would, and marks what it ended ``timed_out``."""

    def tick(self, run: Run, now: float) -> float | None:
        limit = float(run.spec.get("max_time_s") or 0)
        if run.timed_out or limit <= 0 or run.phase in (phases.BACKOFF, phases.ENDED):
            return 3600.0
        if now < limit:
            return limit - now
        run.timed_out = True
        wrappers = []
        for role in run.roles:
            if role.ended or (run.files.has_exit(role.name) and not procs.marked("%s/%s" % (run.exp_id, role.name))):
                continue
            run.files.mark(role.name, "timedout")
            run.note(role, "max time of %d s reached: stopping %s" % (int(limit), role.name))
            wrapper = role.wrapper()
            if wrapper is not None:
                wrappers.append(wrapper)
        run.move(phases.STOPPING, "timed_out", max_time_s=limit)
        report = procs.terminate(wrappers, run.exp_id + "/", float(run.spec.get("grace_s") or 5))
        if report["survivors"]:
            for role in run.roles:
                left = [str(p["pid"]) for p in report["survivors"] if p["role"] == role.name]
                if left:
                    run.note(role, "still alive after SIGKILL: " + ", ".join(left))
        return 3600.0


class StopAsked(Watcher):
    """``stop_experiment`` asked this monitor to stop the run where it runs (``rundir.STOP_HERE``: the host that
    submitted the run's job could not get its scheduler to end it): every live process here is stopped as a
    policy's stop does it (marked ``stopped``, Ctrl-C, its grace, SIGTERM, SIGKILL, verified), and what was done is
    recorded as an action (``stop_experiment -> stop``), which that stop reads back."""

    pace_s = IDLE_S

    def __init__(self, record: Callable[[Run, str, str, str], None]) -> None:
        super().__init__()
        self.record = record
        self.done = False

    def tick(self, run: Run, now: float) -> float | None:
        if self.done or not run.files.has(STOP_HERE):
            return None
        self.done = True
        live = [r for r in run.roles if not r.ended]
        run.files.mark_stopped([r.name for r in live])
        for role in live:
            run.note(role, "stop_experiment: stopping %s here (its scheduler could not be asked)" % role.name)
        if run.phase in phases.LIVE:
            run.move(phases.STOPPING)
        try:  # the stop's own grace, as it asked
            grace = float((files.read_small(run.files.file(STOP_HERE), 64) or "").strip())
        except ValueError:
            grace = float(run.spec.get("grace_s") or 5)
        run.beat(busy_s=grace + 30)
        report = procs.terminate([w for w in (r.wrapper() for r in live) if w is not None], run.exp_id + "/", grace)
        said = ["SIGINT to %s" % ", ".join(report["interrupted"]) if report["interrupted"] else "nothing was running"]
        for key, word in (("terminated", "SIGTERM"), ("killed", "SIGKILL")):
            if report[key]:  # type: ignore[literal-required]  # StopReport's lists
                said.append("%s to %d process(es)" % (word, len(report[key])))  # type: ignore[literal-required]
        if report["survivors"]:
            said.append("%d survived SIGKILL" % len(report["survivors"]))
        self.record(run, "stop_experiment", "stop", "on %s: %s" % (os.uname()[1], ", ".join(said)))
        run.persist()
        return None


class Persist(Watcher):
    """Writes ``monitor.json`` when the findings changed: at most every ``PERSIST_S``, at once when urgent."""

    pace_s = 3600.0
    wakes_on = ("urgent", "changes")

    def __init__(self) -> None:
        super().__init__()
        self.written = float("-inf")

    def tick(self, run: Run, now: float) -> float | None:
        if not run.dirty and not run.urgent:
            return None  # nothing changed: the next change wakes it
        if not run.urgent and now - self.written < PERSIST_S:
            return PERSIST_S - (now - self.written)
        run.save(ended=False, only_if_changed=True)
        self.written = now
        return None
