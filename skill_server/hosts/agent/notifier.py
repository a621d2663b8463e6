"""Telling the user: each happening (``phases.HAPPENINGS``) as one line in the run's ``notify_file`` and as one JSON
object to its ``notify_command``.

The file gets ``<UTC time> <run id> <kind>: <text>`` at once, appended (created 0600 if missing; only ever a regular
file), so it never waits for anything and never loses a line the monitor lived to write. The command runs by
``/bin/sh -c`` with one happening as one JSON line on stdin (``kind`` and the kind's fields, the run's id, lineage
and attempt; ``AJS_KIND`` and ``AJS_EXP_ID`` in its environment), in a process group of its own, at most
``NOTIFY_TIMEOUT_S`` (then killed), one at a time in the happenings' order, reaped by later ticks so it never
blocks another watcher. Its output goes to ``notify.log`` in the run's folder, bounded: ``OUTPUT_KEPT`` bytes kept
per happening, at most ``OUTPUT_READ`` read (a command that floods waits on its full pipe until its time bound),
and the log itself is rotated once it passes ``LOG_MAX``.

Failures (the file not writable, the command failing, killed, not started) are counted in the tally
(``NotifyTally``, ``notify`` in ``monitor.json``), never retried. When the monitor ends, what is still queued is
delivered within a bound, the ``end`` first (the happening an unattended user waits for); what is not delivered
by then is counted ``lost`` with its kinds. A monitor that dies or freezes with happenings still owed to the
command leaves them to its replacement (``policy.Policy.owed``: told again, marked ``retold``; the command may
get one twice rather than not at all). The happening reaches the command through a pipe, so telling needs no disk space.
Stdlib only, Python 3.8.
"""

from __future__ import annotations

import json
import os
import signal
import time

from . import files
from .protocol import TYPE_CHECKING
from .rundir import NOTIFY_LOG

if TYPE_CHECKING:
    from typing import Any

    from .protocol import NotifyTally
    from .runstate import Run

NOTIFY_TIMEOUT_S = 10.0
#: One at a time, so the user's channel gets the happenings in their order.
NOTIFY_AT_ONCE = 1
NOTIFY_QUEUE = 50
#: Of a command's output per happening: bytes kept in notify.log, and bytes read at most (then its pipe fills).
OUTPUT_KEPT = 8 * 1024
OUTPUT_READ = 4 * 1024 * 1024
#: notify.log is moved to notify.log.1 (replacing it) once it is this large: both together stay under 2 x this.
LOG_MAX = 1024 * 1024
#: Longest a monitor that is about to end waits for queued happenings to be delivered.
FINAL_WAIT_S = 60.0
#: Longest line written to the notify file.
LINE_MAX = 2000
#: Largest JSON object given to the command (a pipe holds 64 KiB); a larger one is cut to ``_ESSENTIAL``.
PAYLOAD_MAX = 32 * 1024
_ESSENTIAL = ("kind", "text", "exp_id", "experiment", "attempt", "host", "time", "seq")


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class _Child:
    """One run of the notify command: the process, its output pipe, when it started, what it was told."""

    def __init__(self, process: Any, kind: str, seq: int) -> None:
        self.process = process
        self.kind = kind
        self.seq = seq  # the event's number
        self.started = time.monotonic()
        self.read = 0  # bytes of output read so far
        self.kept = 0  # ... of which written to notify.log
        self.fd: int | None = process.stdout.fileno() if process.stdout is not None else None
        if self.fd is not None:
            os.set_blocking(self.fd, False)

    def drain(self, log_path: str) -> None:
        """Read what the command printed (never blocking), keep the first ``OUTPUT_KEPT`` bytes in notify.log."""
        while self.fd is not None and self.read < OUTPUT_READ:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.close()
                return
            self.read += len(data)
            keep = data[:max(0, OUTPUT_KEPT - self.kept)]
            if keep:
                self.kept += len(keep)
                _append(log_path, keep)

    def close(self) -> None:
        if self.fd is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self.fd = None


def _append(path: str, data: bytes) -> None:
    """Append to notify.log, moving it to notify.log.1 first once it passed ``LOG_MAX``."""
    try:
        if (files.file_size(path) or 0) >= LOG_MAX:
            os.replace(path, path + ".1")
        with open(path, "ab") as log:
            log.write(data)
    except OSError:
        pass


class Notifier:
    """Tells each happening to the notify file at once and to the notify command without waiting for it."""

    def __init__(self, command: str | None, file_path: str | None, tally: NotifyTally) -> None:
        self.command = command if isinstance(command, str) and command.strip() else None
        self.file_path = file_path if isinstance(file_path, str) and file_path.strip() else None
        self.tally = tally
        self.queue: list[dict[str, Any]] = []
        self.children: list[_Child] = []

    def tell(self, run: Run, event: dict[str, Any], happening: dict[str, Any], to_file: bool = True) -> None:
        """One happening of ``event``: a line in the file (unless not ``to_file``), a JSON object queued for the
        command."""
        policy = run.spec.get("policy") or {}
        payload: dict[str, Any] = {
            "kind": happening["kind"], "exp_id": run.exp_id, "experiment": str(policy.get("lineage") or run.exp_id),
            "attempt": int(policy.get("attempt") or 1), "host": os.uname()[1], "time": _stamp(),
            "at": event.get("at"), "seq": event.get("seq")}
        payload.update(happening)
        if self.file_path is not None and to_file:
            self.write_line(run, payload)
        if self.command is None:
            return
        if len(self.queue) >= NOTIFY_QUEUE:
            self.lost(run, [payload["kind"]], "the queue was full (%d waiting)" % NOTIFY_QUEUE)
            return
        self.queue.append(payload)

    def write_line(self, run: Run, payload: dict[str, Any]) -> None:
        line = "%s %s %s: %s" % (payload["time"], payload["exp_id"], payload["kind"], payload["text"])
        data = (" ".join(line.split())[:LINE_MAX] + "\n").encode("utf-8", "replace")
        assert self.file_path is not None
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(self.file_path, flags, 0o600)
            try:
                import stat

                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError("not a regular file")
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            self.failed(run, payload["kind"], "notify_file %s: %s" % (self.file_path, exc.strerror or exc))
            return
        self.tally["written"] = int(self.tally.get("written") or 0) + 1

    def pump(self, run: Run) -> bool:
        """Read what the commands printed, reap what ended, kill what ran too long, start what waits (at most
        ``NOTIFY_AT_ONCE`` at a time); whether the tally changed."""
        before = dict(self.tally)
        log_path = run.files.file(NOTIFY_LOG)
        still = []
        for child in self.children:
            child.drain(log_path)
            code = child.process.poll()
            if code is None and time.monotonic() - child.started >= NOTIFY_TIMEOUT_S:
                try:
                    os.killpg(child.process.pid, signal.SIGKILL)
                except OSError:
                    pass
                child.process.wait()
                self.tally["killed"] = int(self.tally.get("killed") or 0) + 1
                self.failed(run, child.kind, "killed after %d s" % NOTIFY_TIMEOUT_S)
            elif code is None:
                still.append(child)
                continue
            elif code != 0:
                self.failed(run, child.kind, "exit code %d" % code)
            else:
                self.tally["sent"] = int(self.tally.get("sent") or 0) + 1
            child.drain(log_path)
            child.close()
        self.children = still
        while self.queue and len(self.children) < NOTIFY_AT_ONCE:
            self.start(run, self.queue.pop(0))
        return self.tally != before

    def start(self, run: Run, payload: dict[str, Any]) -> None:
        """Run the command with ``payload`` on its stdin: a pipe filled before it starts (a happening is far below
        a pipe's capacity), so that telling needs no disk space and leaves no file behind."""
        import subprocess

        kind = str(payload.get("kind"))
        data = (json.dumps(payload) + "\n").encode("utf-8")
        if len(data) > PAYLOAD_MAX:
            data = (json.dumps({k: payload.get(k) for k in _ESSENTIAL}) + "\n").encode("utf-8")[:PAYLOAD_MAX]
        assert self.command is not None
        try:
            read_end, write_end = os.pipe()
            try:
                os.write(write_end, data)
            finally:
                os.close(write_end)
            try:
                env = dict(os.environ, AJS_KIND=kind, AJS_EVENT=kind, AJS_EXP_ID=run.exp_id)
                process = subprocess.Popen(["/bin/sh", "-c", self.command], stdin=read_end, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, cwd=run.dir, env=env, start_new_session=True,
                                           close_fds=True)
            finally:
                os.close(read_end)
        except OSError as exc:
            self.failed(run, kind, "cannot start: %s" % (exc.strerror or exc))
            return
        _append(run.files.file(NOTIFY_LOG), ("%s %s:\n" % (_stamp(), kind)).encode("utf-8"))
        self.children.append(_Child(process, kind, int(payload.get("seq") or 0)))

    def failed(self, run: Run, kind: str, why: str) -> None:
        self.tally["failed"] = int(self.tally.get("failed") or 0) + 1
        self.tally["last_failure"] = {"at": round(run.clock(), 3), "event": kind, "error": why}
        run.changed(urgent=True)

    def lost(self, run: Run, kinds: list[str], why: str) -> None:
        """Happenings the command was never told (the file has them): counted, with their kinds."""
        self.tally["lost"] = int(self.tally.get("lost") or 0) + len(kinds)
        self.tally["lost_kinds"] = (list(self.tally.get("lost_kinds") or []) + kinds)[-20:]
        self.failed(run, kinds[-1], "%d not told: %s" % (len(kinds), why))

    def idle(self) -> bool:
        return not self.queue and not self.children

    def owed_from(self) -> int | None:
        """The number of the oldest event whose happening the command has not been told yet (None: all told)."""
        owed = [c.seq for c in self.children] + [int(p.get("seq") or 0) for p in self.queue]
        return min(owed) if owed else None

    def settle(self, run: Run, within_s: float) -> None:
        """Wait (at most ``within_s``) until what was queued has been told, losing nothing: before a relaunch, so
        the new attempt's happenings come after this attempt's."""
        end = time.monotonic() + within_s
        self.pump(run)
        while not self.idle() and time.monotonic() < end:
            time.sleep(0.05)
            self.pump(run)

    def flush(self, run: Run, within_s: float = FINAL_WAIT_S) -> None:
        """Deliver what waits, the ``end`` first, for at most ``within_s`` and at most one time bound per waiting
        happening (the monitor is about to end); what is left is counted lost."""
        ends = [p for p in self.queue if p.get("kind") == "end"]
        self.queue = ends + [p for p in self.queue if p.get("kind") != "end"]
        bound = min(within_s, (NOTIFY_TIMEOUT_S + 1.0) * (len(self.queue) + len(self.children)))
        end = time.monotonic() + bound
        self.pump(run)
        while not self.idle() and time.monotonic() < end:
            time.sleep(0.05)
            self.pump(run)
        for child in self.children:  # the time bound of each was longer than what was left
            try:
                os.killpg(child.process.pid, signal.SIGKILL)
            except OSError:
                pass
            child.process.wait()
            child.close()
        left = [c.kind for c in self.children] + [str(p.get("kind")) for p in self.queue]
        self.children, self.queue = [], []
        if left:
            self.lost(run, left, "the monitor ended after waiting %d s for them" % int(bound))
