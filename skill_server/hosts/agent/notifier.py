"""Telling the user: the run's ``notify_command``, run once per event the policy tells it about.

Run by ``/bin/sh -c`` with one event as a JSON object on stdin, in a process group of its own, at most
``NOTIFY_TIMEOUT_S`` (then killed), one at a time in the events' order, reaped by later ticks so it never blocks
another watcher. Failures are counted in the tally (``NotifyTally``, ``notify`` in ``monitor.json``), never
retried. Its output (stdout and stderr) comes through a pipe the monitor drains: at most ``OUTPUT_BYTES`` of each
run are kept in ``notify.log`` (the rest is counted there), and a ``notify.log`` past ``LOG_BYTES`` is moved to
``notify.log.1`` first, so a command that floods its output cannot fill the disk.

When the monitor is about to end (``flush``), what is still queued is delivered in order within ``FLUSH_S``;
once one notification is killed at its time bound there (the command hangs), or when time is left for one more
at most, the run's end goes first (the ``ended`` event, then what the end's action did) and, after a hang, the
rest is not sent. Whatever is not sent is recorded (``dropped`` and ``lost`` in the tally, which status shows),
as are events past ``NOTIFY_QUEUE`` waiting. Stdlib only, Python 3.8.
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

    from .protocol import MonitorEvent, NotifyTally
    from .runstate import Run

NOTIFY_TIMEOUT_S = 10.0
#: One at a time, so the user's channel gets the events in their order.
NOTIFY_AT_ONCE = 1
NOTIFY_QUEUE = 50
#: The longest the monitor delivers what is still queued before it ends (a 3 s command: about 10 events).
FLUSH_S = 3 * NOTIFY_TIMEOUT_S
#: What ``notify.log`` keeps of one run of the command, and its size before it is moved to ``notify.log.1``.
OUTPUT_BYTES, LOG_BYTES = 64 * 1024, 1024 * 1024
#: The most one look reads from a command's output (the rest waits in the pipe, the command with it).
READ_BYTES = 8 * 1024 * 1024


class _Child:
    """One run of the notify command: its process, when it started (monotonic clock), the event's kind, the read
    end of its output pipe and how much of that output was kept and left out."""

    def __init__(self, proc: Any, kind: str, fd: int) -> None:
        self.proc, self.kind, self.fd = proc, kind, fd
        self.started = time.monotonic()
        self.kept = self.over = 0


def _end_first(payload: dict[str, Any]) -> int:
    """The order of what waits when the monitor is about to end: its ``ended`` event, the end's action, the rest."""
    if payload.get("event") == "ended":
        return 0
    return 1 if payload.get("event") == "action" and str(payload.get("trigger") or "").startswith("end:") else 2


class Notifier:
    """Runs the notify command once per event, bounded in time and output, without waiting for it."""

    def __init__(self, command: str, tally: NotifyTally, queue: list[dict[str, Any]]) -> None:
        self.command = command
        self.tally = tally
        #: What waits, oldest first: the policy's state keeps it (changed in place), so that a monitor that
        #: replaces this one sends what this one could not.
        self.queue = queue
        self.children: list[_Child] = []
        self.flushing = self.hung = False

    def send(self, run: Run, event: MonitorEvent) -> None:
        payload: dict[str, Any] = {"exp_id": run.exp_id, "host": os.uname()[1], "time": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": event.get("kind")}
        payload.update({k: v for k, v in event.items() if k != "kind"})
        if len(self.queue) >= NOTIFY_QUEUE:
            self.lost(run, [payload], "%d notifications were already waiting" % NOTIFY_QUEUE)
            return
        self.queue.append(payload)

    def pump(self, run: Run) -> bool:
        """Read what the commands wrote, reap what ended, kill what ran too long, start what waits (at most
        ``NOTIFY_AT_ONCE`` at a time); whether the tally or the queue changed."""
        before = dict(self.tally)
        still = []
        for child in self.children:
            self.drain(run, child)
            code = child.proc.poll()
            if code is None and time.monotonic() - child.started >= NOTIFY_TIMEOUT_S:
                try:
                    os.killpg(child.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                child.proc.wait()
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
            self.close(run, child)
        self.children = still
        started = False
        while self.queue and len(self.children) < NOTIFY_AT_ONCE:
            self.start(run, self.queue.pop(0))
            started = True
        return started or self.tally != before

    def start(self, run: Run, payload: dict[str, Any]) -> None:
        import subprocess

        kind = str(payload.get("event"))
        path = run.files.file("notify.%d.json" % os.getpid())
        out = -1
        try:
            files.write_atomic(path, (json.dumps(payload) + "\n").encode("utf-8"), replace=True, mode=0o600)
            out, into = os.pipe()
            os.set_blocking(out, False)
            with open(path, "rb") as stdin:
                os.unlink(path)  # the child reads the open file; nothing is left behind
                env = dict(os.environ, AJS_EVENT=kind, AJS_EXP_ID=run.exp_id)
                try:
                    child = subprocess.Popen(["/bin/sh", "-c", self.command], stdin=stdin, stdout=into, stderr=into,
                                             cwd=run.dir, env=env, start_new_session=True, close_fds=True)
                finally:
                    os.close(into)
        except (OSError, files.AgentError) as exc:
            if out >= 0:
                os.close(out)
            self.failed(run, kind, "cannot start: %s" % (getattr(exc, "strerror", None) or exc))
            return
        self.children.append(_Child(child, kind, out))
        self.roll(run)

    @staticmethod
    def roll(run: Run) -> None:
        """Move a ``notify.log`` past ``LOG_BYTES`` to ``notify.log.1`` (replacing the one before)."""
        log = run.files.file(NOTIFY_LOG)
        if (files.file_size(log) or 0) >= LOG_BYTES:
            try:
                os.replace(log, log + ".1")
            except OSError:
                pass

    def drain(self, run: Run, child: _Child, most: int = READ_BYTES) -> None:
        """Read what the command wrote so far (up to ``most`` bytes); keep up to ``OUTPUT_BYTES`` of it."""
        got: list[bytes] = []
        read = 0
        while read < most:
            try:
                data = os.read(child.fd, 65536)
            except OSError:  # nothing more for now (or the pipe is gone)
                break
            if not data:
                break
            read += len(data)
            keep = max(0, min(len(data), OUTPUT_BYTES - child.kept))
            child.kept += keep
            child.over += len(data) - keep
            if keep:
                got.append(data[:keep])
        if got:
            self.log(run, b"".join(got))

    @staticmethod
    def log(run: Run, data: bytes) -> None:
        try:
            with open(run.files.file(NOTIFY_LOG), "ab") as log:
                log.write(data)
        except OSError:
            pass  # a full disk: the output is lost, the notification is not

    def close(self, run: Run, child: _Child) -> None:
        """The command ended: the rest of its output read, how much was left out said, the pipe closed."""
        self.drain(run, child, most=64 * READ_BYTES)
        os.close(child.fd)
        if child.over:
            self.log(run, ("\n[notify %s: %d more bytes of output not kept]\n" % (child.kind, child.over)).encode())

    def failed(self, run: Run, kind: str, why: str) -> None:
        self.tally["failed"] = int(self.tally.get("failed") or 0) + 1
        self.tally["last_failure"] = {"at": round(run.clock(), 3), "event": kind, "error": why}
        run.changed(urgent=True)

    def lost(self, run: Run, left: list[dict[str, Any]], why: str) -> None:
        """Record that ``left`` will not be sent, and why (``lost``: the last such loss)."""
        if not left:
            return
        self.tally["dropped"] = int(self.tally.get("dropped") or 0) + len(left)
        self.tally["lost"] = {"at": round(run.clock(), 3), "events": [str(p.get("event")) for p in left][:10],
                              "why": why}
        run.changed(urgent=True)

    def idle(self) -> bool:
        return not self.queue and not self.children

    def flush(self, run: Run, within_s: float = FLUSH_S) -> None:
        """Deliver what waits for at most ``within_s`` (the monitor is about to end): in order while there is
        time, the end first once time is short or the command hung (then only the end); what is left then is
        recorded lost, and a notification still running is killed (and counted failed)."""
        end = time.monotonic() + within_s
        self.flushing = True
        try:
            while not self.idle() and time.monotonic() < end:
                if self.hung or end - time.monotonic() < NOTIFY_TIMEOUT_S:
                    self.queue.sort(key=_end_first)
                if self.hung:
                    self.lost(run, [p for p in self.queue if _end_first(p) > 1], "the notify command hung")
                    self.queue[:] = [p for p in self.queue if _end_first(p) <= 1]
                time.sleep(0.05)
                self.pump(run)
        finally:
            self.flushing = False
        for child in self.children:  # cut short: it would outlive the monitor, unbounded
            try:
                os.killpg(child.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            child.proc.wait()
            self.failed(run, child.kind, "killed: the run's monitor was ending")
            self.close(run, child)
        self.children = []
        self.lost(run, self.queue, "the run's monitor ended before there was time to send them")
        del self.queue[:]
