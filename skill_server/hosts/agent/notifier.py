"""Telling the user: the run's ``notify_command``, run once per event the policy tells it about.

Run by ``/bin/sh -c`` with one event as a JSON object on stdin, in a process group of its own, at most
``NOTIFY_TIMEOUT_S`` (then killed), one at a time in the events' order, reaped by later ticks so it never blocks
another watcher. Failures are counted in the tally (``NotifyTally``, ``notify`` in ``monitor.json``), never
retried. Stdlib only, Python 3.8.
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


class Notifier:
    """Runs the notify command once per event, bounded in time, without waiting for it."""

    def __init__(self, command: str, tally: NotifyTally) -> None:
        self.command = command
        self.tally = tally
        self.queue: list[dict[str, Any]] = []
        self.children: list[tuple[Any, float, str]] = []  # (Popen, started on the monotonic clock, event kind)

    def send(self, run: Run, event: MonitorEvent) -> None:
        if len(self.queue) >= NOTIFY_QUEUE:
            self.tally["dropped"] = int(self.tally.get("dropped") or 0) + 1
            return
        payload: dict[str, Any] = {"exp_id": run.exp_id, "host": os.uname()[1], "time": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": event.get("kind")}
        payload.update({k: v for k, v in event.items() if k != "kind"})
        self.queue.append(payload)

    def pump(self, run: Run) -> bool:
        """Reap what ended, kill what ran too long, start what waits (at most ``NOTIFY_AT_ONCE`` at a time);
        whether the tally changed."""
        before = dict(self.tally)
        still = []
        for child, started, kind in self.children:
            code = child.poll()
            if code is None and time.monotonic() - started >= NOTIFY_TIMEOUT_S:
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except OSError:
                    pass
                child.wait()
                self.tally["killed"] = int(self.tally.get("killed") or 0) + 1
                self.failed(run, kind, "killed after %d s" % NOTIFY_TIMEOUT_S)
            elif code is None:
                still.append((child, started, kind))
            elif code != 0:
                self.failed(run, kind, "exit code %d" % code)
            else:
                self.tally["sent"] = int(self.tally.get("sent") or 0) + 1
        self.children = still
        while self.queue and len(self.children) < NOTIFY_AT_ONCE:
            self.start(run, self.queue.pop(0))
        return self.tally != before

    def start(self, run: Run, payload: dict[str, Any]) -> None:
        import subprocess

        kind = str(payload.get("event"))
        path = run.files.file("notify.%d.json" % os.getpid())
        try:
            files.write_atomic(path, (json.dumps(payload) + "\n").encode("utf-8"), replace=True, mode=0o600)
            with open(path, "rb") as stdin, open(run.files.file(NOTIFY_LOG), "ab") as log:
                os.unlink(path)  # the child reads the open file; nothing is left behind
                env = dict(os.environ, AJS_EVENT=kind, AJS_EXP_ID=run.exp_id)
                child = subprocess.Popen(["/bin/sh", "-c", self.command], stdin=stdin, stdout=log, stderr=log,
                                         cwd=run.dir, env=env, start_new_session=True, close_fds=True)
        except (OSError, files.AgentError) as exc:
            self.failed(run, kind, "cannot start: %s" % (getattr(exc, "strerror", None) or exc))
            return
        self.children.append((child, time.monotonic(), kind))

    def failed(self, run: Run, kind: str, why: str) -> None:
        self.tally["failed"] = int(self.tally.get("failed") or 0) + 1
        self.tally["last_failure"] = {"at": round(run.clock(), 3), "event": kind, "error": why}
        run.changed(urgent=True)

    def idle(self) -> bool:
        return not self.queue and not self.children

    def flush(self, run: Run, within_s: float) -> None:
        """Deliver what waits, for at most ``within_s`` (the monitor is about to end)."""
        end = time.monotonic() + within_s
        while not self.idle() and time.monotonic() < end:
            time.sleep(0.05)
            self.pump(run)
