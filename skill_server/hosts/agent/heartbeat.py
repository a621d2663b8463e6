"""Signs of life between the two processes that watch a run on its host: the run monitor and its supervisor.

Each holds a ``Lock`` while it lives (an exclusive ``flock``: free means dead) and keeps a ``Beat`` (its heartbeat
file). A beat file holds who beats (a small JSON record: pid, start time, pid space, and what the watcher needs to
judge it, written in place at a fixed size, so that rewriting it needs no new block on a full disk) and when it
last beat: the file's modification time, set with ``os.utime`` to the machine's boot clock (``procs.uptime``: no
data written, one clock for every process of the machine whatever their wall clocks say). A beat can be set
ahead (``busy_s``) before a step that takes long (a policy's stop, a relaunch), so that nothing takes a busy
process for a frozen one; one older than ``STALE_S`` is frozen (SIGSTOPped, stuck on a hung filesystem).

Fencing: a frozen process still holds its lock. Whoever replaces it first ends it (SIGKILL by its recorded
identity, which also ends a stopped process); if it would not die (stuck in the kernel), its lock's name is
removed (``fence``), so the replacement locks a new file and the old process, should it ever run again, finds
its lock is no longer the run's (``Lock.superseded``) and ends before it writes anything. Stdlib only, Python 3.8.
"""

from __future__ import annotations

import json
import os
import time

from . import procs
from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

#: A process beats at least this often while it runs normally.
BEAT_S = 15.0
#: A beat older than this means the process is frozen.
STALE_S = 90.0
#: The size of the record at the start of a beat file (padded with spaces).
RECORD_BYTES = 512


class Lock:
    """An exclusive lock held for this process's life, that a replacement can fence (see the module's doc)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def acquire(self, tries: int = 50) -> bool:
        """Take the lock (retrying a moment: a look that tests it holds it for an instant); False when another
        process holds it."""
        import fcntl

        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return False
        for _ in range(tries):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.fd = fd
                return True
            except OSError:
                time.sleep(0.02)
        os.close(fd)
        return False

    def superseded(self) -> bool:
        """Whether the lock's name now belongs to another file (a replacement fenced this process off)."""
        if self.fd < 0:
            return False
        try:
            mine, now = os.fstat(self.fd), os.stat(self.path)
        except OSError:
            return True
        return (mine.st_dev, mine.st_ino) != (now.st_dev, now.st_ino)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def lock_free(path: str) -> bool:
    """Whether no process holds the lock at ``path`` (it is dead, or none was ever started)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)  # flock needs no write access; a missing lock is held by nobody
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the lock if this test took it
    return True


def fence(path: str) -> None:
    """Remove the lock's name: its holder keeps a lock on a file that is no longer the run's."""
    try:
        os.unlink(path)
    except OSError:
        pass


class Beat:
    """This process's heartbeat file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.last = float("-inf")  # this process's monotonic clock at the last beat written
        self.fields: dict[str, Any] = {}

    def start(self, **fields: Any) -> None:
        """Say who beats (with ``pid``, ``start`` and ``space`` added), and beat."""
        self.fields = dict(fields, pid=os.getpid(), start=procs.start_time(os.getpid()), space=procs.pid_space())
        self.write()
        self.beat(force=True)

    def update(self, **fields: Any) -> None:
        """Change what the record says (a phase, a deadline); written at once when it changed (only once ``start``
        said who beats)."""
        if self.fields and any(self.fields.get(k) != v for k, v in fields.items()):
            self.fields.update(fields)
            self.write()

    def write(self) -> None:
        """The record, in place (a full disk cannot refuse it once the file has its block); best effort."""
        text = json.dumps(self.fields, separators=(",", ":"))
        if len(text) >= RECORD_BYTES:
            return
        data = (text + " " * (RECORD_BYTES - 1 - len(text)) + "\n").encode("utf-8")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError:
            return
        try:
            os.pwrite(fd, data, 0)
        except OSError:
            pass
        finally:
            os.close(fd)

    def beat(self, busy_s: float = 0.0, force: bool = False) -> None:
        """Say this process is alive now (``busy_s``: and busy for that long: not frozen before it is over);
        without ``force`` at most every third of ``BEAT_S``."""
        now = time.monotonic()
        if not force and busy_s <= 0 and now - self.last < BEAT_S / 3:
            return
        self.last = now + busy_s
        at = int((procs.uptime() + busy_s) * 1e9)
        try:
            os.utime(self.path, ns=(at, at))
        except OSError:
            pass


def read(path: str) -> tuple[dict[str, Any] | None, float | None]:
    """(the record, when it last beat on the boot clock) of a beat file; None for what cannot be read. A record
    caught half rewritten is read again once."""
    try:
        beat_at: float | None = os.stat(path).st_mtime_ns / 1e9
    except OSError:
        return None, None
    for _ in range(2):
        try:
            with open(path, "rb") as handle:
                data = json.loads(handle.read(RECORD_BYTES).decode("utf-8", "replace").strip() or "null")
            if isinstance(data, dict):
                if not procs.same_boot(data.get("space")):
                    beat_at = None  # another machine's boot clock (a scheduler's node): its beats say nothing here
                return data, beat_at
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    return None, beat_at


def age(beat_at: float | None) -> float | None:
    """Seconds since a beat read with ``read`` (negative: the process said it is busy until then)."""
    return None if beat_at is None else procs.uptime() - beat_at


def end(record: dict[str, Any] | None) -> bool:
    """SIGKILL the process a beat record names, if it still runs with that identity (a stopped one dies too);
    whether it was sent."""
    import signal

    if not record or not isinstance(record.get("pid"), int) or not procs.same_boot(record.get("space")):
        return False
    if record.get("space") and record.get("space") != procs.pid_space():
        return False  # another pid namespace: not ours to signal
    start = record.get("start")
    if not procs.alive(record["pid"], start if isinstance(start, str) else None):
        return False
    try:
        os.kill(record["pid"], signal.SIGKILL)
    except OSError:
        return False
    return True
