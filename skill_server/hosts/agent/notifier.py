"""Telling the user: each happening (``phases.HAPPENINGS``) as one line in the run's ``notify_file`` and as one JSON
object to its ``notify_command``.

The file gets ``<UTC time> <run id> <kind>: <text>`` at once, appended (created 0600 if missing; only ever a regular
file), so it never waits for anything and never loses a line the monitor lived to write. The command runs by
``/bin/sh -c`` with one happening as one JSON line on stdin (``kind`` and the kind's fields, the run's id, lineage
and attempt; ``AJS_KIND`` and ``AJS_EXP_ID`` in its environment), in a process group of its own, at most
``NOTIFY_TIMEOUT_S`` (then killed), one at a time in the happenings' order, reaped by later ticks so it never
blocks another watcher. The happening reaches it through a pipe, so telling needs no disk space. Its output
(stdout and stderr) comes through a pipe the monitor drains, at most ``READ_AT_ONCE`` bytes a look: the first
``OUTPUT_KEPT`` bytes of each run are kept in ``notify.log`` (the rest is counted there), and a ``notify.log``
past ``LOG_MAX`` is moved to ``notify.log.1`` first, so a command that floods its output cannot fill the disk.

What waits for the command is the policy's state (``policy.PolicyState.notify_queue`` in ``monitor.json``; the
notifier changes that list in place): a monitor that replaces a dead or frozen one sends what this one had not
started. A notification is taken off the queue as it starts, and that is written at once, so one already
running when its monitor died is not sent twice.

Failures (the file not writable, the command failing, killed, not started) are counted in the tally
(``NotifyTally``, ``notify`` in ``monitor.json``), never retried. When the monitor is about to end (``flush``),
what is still queued is delivered in order within ``FLUSH_S``; once one notification is killed at its time bound
there (the command hangs), or when time is left for one more at most, the ``end`` happening goes first and, after
a hang, nothing else is sent. Whatever is not sent is recorded (``dropped`` and ``lost`` in the tally, which
status shows), as are happenings past ``NOTIFY_QUEUE`` waiting; a notification still running when the monitor
ends is killed and counted failed. Stdlib only, Python 3.8.
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
#: The longest the monitor delivers what is still queued before it ends (a 3 s command: about 10 happenings).
FLUSH_S = 3 * NOTIFY_TIMEOUT_S
#: Of a command's output per happening: bytes kept in notify.log (the rest is read and counted).
OUTPUT_KEPT = 8 * 1024
#: The most one look reads of a command's output (the rest waits in the pipe, the command with it).
READ_AT_ONCE = 8 * 1024 * 1024
#: notify.log is moved to notify.log.1 (replacing it) once it is this large: both together stay under 2 x this.
LOG_MAX = 1024 * 1024
#: Longest line written to the notify file.
LINE_MAX = 2000
#: Largest JSON object given to the command (a pipe holds 64 KiB); a larger one is cut to ``_ESSENTIAL``.
PAYLOAD_MAX = 32 * 1024
_ESSENTIAL = ("kind", "text", "exp_id", "experiment", "attempt", "host", "time", "seq")


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _append(path: str, data: bytes) -> None:
    """Append to notify.log, moving it to notify.log.1 first once it passed ``LOG_MAX``."""
    try:
        if (files.file_size(path) or 0) >= LOG_MAX:
            os.replace(path, path + ".1")
        with open(path, "ab") as log:
            log.write(data)
    except OSError:
        pass  # a full disk: the output is lost, the notification is not


def _is_end(payload: dict[str, Any]) -> bool:
    return payload.get("kind") == "end"


class _Child:
    """One run of the notify command: the process, its output pipe, when it started, what it was told, and how
    much of its output was kept and left out."""

    def __init__(self, process: Any, kind: str) -> None:
        self.process = process
        self.kind = kind
        self.started = time.monotonic()
        self.kept = self.over = 0
        self.fd: int | None = process.stdout.fileno() if process.stdout is not None else None
        if self.fd is not None:
            os.set_blocking(self.fd, False)

    def drain(self, log_path: str) -> None:
        """Read what the command printed so far (never blocking, at most ``READ_AT_ONCE``): the first
        ``OUTPUT_KEPT`` bytes kept in notify.log, the rest counted."""
        got: list[bytes] = []
        read = 0
        while self.fd is not None and read < READ_AT_ONCE:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self.close()
                break
            read += len(data)
            keep = data[:max(0, OUTPUT_KEPT - self.kept)]
            self.kept += len(keep)
            self.over += len(data) - len(keep)
            if keep:
                got.append(keep)
        if got:
            _append(log_path, b"".join(got))

    def done(self, log_path: str) -> None:
        """The command ended: the rest of its output read, how much was left out said, the pipe closed."""
        self.drain(log_path)
        self.close()
        if self.over:
            _append(log_path, ("\n[notify %s: %d more bytes of output not kept]\n" % (self.kind, self.over)).encode())

    def close(self) -> None:
        if self.fd is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self.fd = None

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        self.process.wait()


class Notifier:
    """Tells each happening to the notify file at once and to the notify command without waiting for it."""

    def __init__(self, command: str | None, file_path: str | None, tally: NotifyTally,
                 queue: list[dict[str, Any]] | None = None) -> None:
        self.command = command if isinstance(command, str) and command.strip() else None
        self.file_path = file_path if isinstance(file_path, str) and file_path.strip() else None
        self.tally = tally
        #: What waits, oldest first: the policy's state keeps it (changed in place), so that a monitor that
        #: replaces this one sends what this one could not.
        self.queue: list[dict[str, Any]] = [] if queue is None else queue
        self.children: list[_Child] = []
        self.flushing = self.hung = False

    def tell(self, run: Run, event: dict[str, Any], happening: dict[str, Any]) -> None:
        """One happening of ``event``: a line in the file, a JSON object queued for the command."""
        policy = run.spec.get("policy") or {}
        payload: dict[str, Any] = {
            "kind": happening["kind"], "exp_id": run.exp_id, "experiment": str(policy.get("lineage") or run.exp_id),
            "attempt": int(policy.get("attempt") or 1), "host": os.uname()[1], "time": _stamp(),
            "at": event.get("at"), "seq": event.get("seq")}
        payload.update(happening)
        if self.file_path is not None:
            self.write_line(run, payload)
        if self.command is None:
            return
        if len(self.queue) >= NOTIFY_QUEUE:
            self.lost(run, [payload], "%d notifications were already waiting" % NOTIFY_QUEUE)
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
        ``NOTIFY_AT_ONCE`` at a time); whether the tally or the queue changed."""
        before = dict(self.tally)
        log_path = run.files.file(NOTIFY_LOG)
        still = []
        for child in self.children:
            child.drain(log_path)
            code = child.process.poll()
            if code is None and time.monotonic() - child.started >= NOTIFY_TIMEOUT_S:
                child.kill()
                self.tally["killed"] = int(self.tally.get("killed") or 0) + 1
                self.failed(run, child.kind, "killed after %d s" % NOTIFY_TIMEOUT_S)
                self.hung = self.hung or self.flushing
            elif code is None:
                still.append(child)
                continue
            elif code != 0:
                self.failed(run, child.kind, "exit code %d" % code)
            else:
                self.tally["sent"] = int(self.tally.get("sent") or 0) + 1
            child.done(log_path)
        self.children = still
        if self.hung:  # at the monitor's end: only the end is still sent
            self.lost(run, [p for p in self.queue if not _is_end(p)], "the notify command hung")
            self.queue[:] = [p for p in self.queue if _is_end(p)]
        started = False
        while self.queue and len(self.children) < NOTIFY_AT_ONCE:
            self.start(run, self.queue.pop(0))
            started = True
        return started or self.tally != before

    def start(self, run: Run, payload: dict[str, Any]) -> None:
        """Run the command with ``payload`` on its stdin: a pipe filled before it starts (a happening is far below
        a pipe's capacity), so that telling needs no disk space and leaves no file behind. Taken off the queue,
        which is written at once: a replacement of this monitor does not send it again."""
        import subprocess

        run.changed(urgent=True)
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
        self.children.append(_Child(process, kind))

    def failed(self, run: Run, kind: str, why: str) -> None:
        self.tally["failed"] = int(self.tally.get("failed") or 0) + 1
        self.tally["last_failure"] = {"at": round(run.clock(), 3), "event": kind, "error": why}
        run.changed(urgent=True)

    def lost(self, run: Run, left: list[dict[str, Any]], why: str) -> None:
        """Record that ``left`` will not be sent to the command (the file has them), and why (``lost``: the last
        such loss; ``dropped``: how many so far)."""
        if not left:
            return
        self.tally["dropped"] = int(self.tally.get("dropped") or 0) + len(left)
        self.tally["lost"] = {"at": round(run.clock(), 3), "events": [str(p.get("kind")) for p in left][:10],
                              "why": why}
        run.changed(urgent=True)

    def idle(self) -> bool:
        return not self.queue and not self.children

    def settle(self, run: Run, within_s: float) -> None:
        """Wait (at most ``within_s``) until what was queued has been told, losing nothing: before a relaunch, so
        the new attempt's happenings come after this attempt's."""
        end = time.monotonic() + within_s
        self.pump(run)
        while not self.idle() and time.monotonic() < end:
            time.sleep(0.05)
            self.pump(run)

    def flush(self, run: Run, within_s: float = FLUSH_S) -> None:
        """Deliver what waits for at most ``within_s`` (the monitor is about to end): in order while there is
        time, the ``end`` first once time is short or the command hung (then only the end); what is left then is
        recorded lost, and a notification still running is killed (and counted failed)."""
        end = time.monotonic() + within_s
        self.flushing = True
        try:
            while not self.idle() and time.monotonic() < end:
                if end - time.monotonic() < NOTIFY_TIMEOUT_S:  # time for one more at most: the end first
                    self.queue.sort(key=lambda p: not _is_end(p))  # stable: the rest keep their order
                time.sleep(0.05)
                self.pump(run)
        finally:
            self.flushing = self.hung = False  # a monitor that lives on (its job's cancel failed) tells all again
        log_path = run.files.file(NOTIFY_LOG)
        for child in self.children:  # cut short: it would outlive the monitor, unbounded
            child.kill()
            self.failed(run, child.kind, "killed: the run's monitor was ending")
            child.done(log_path)
        self.children = []
        self.lost(run, list(self.queue), "the run's monitor ended before there was time to send them")
        del self.queue[:]
