"""Waking the run monitor when something changes, instead of looking at everything often.

On Linux the kernel says when a run's file changes (inotify, through ``ctypes``: the standard library has no
binding): a log grew (``IN_MODIFY`` of the log's name in its folder), a wrapper wrote its pid or its exit code,
or ``stop_experiment`` asked for a stop (a file of those names created or moved into the run directory); and
when a wrapper ends (a pidfd of it becomes readable; Linux 5.3). The scheduler sleeps until its next watcher is
due or such an event arrives, whichever comes first, so a monitor whose run prints nothing wakes a few times a
minute and one whose run prints an error, or ends, acts at once. While events keep coming they wake it at most
every ``MIN_GAP_S`` (as often as it looked before).

Where inotify cannot be had (no Linux, no watch left for this user, a folder that does not exist yet) the
monitor looks at its files every tick instead (``available`` is False). What inotify misses (a write on
another machine of a shared filesystem, a wrapper killed without a word) the watchers' own slow looks catch.
Stdlib only, Python 3.8.
"""

from __future__ import annotations

import os
import select
import struct
import time

from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE = 0x2, 0x4, 0x8, 0x80, 0x100
IN_Q_OVERFLOW, IN_NONBLOCK, IN_CLOEXEC = 0x4000, 0o4000, 0o2000000
#: ``pidfd_open``'s number (the same on every architecture since Linux 5.1 numbered new calls alike).
SYS_PIDFD_OPEN = 434
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then the name, NUL-padded to len
#: While events keep coming, at most one wake per this many seconds.
MIN_GAP_S = 0.25


class Waker:
    """The events of some files (by folder and name) as one file descriptor the scheduler can wait on."""

    def __init__(self, watched: Iterable[tuple[str, str, int]]) -> None:
        """``watched``: (folder, file name, the events of it that matter)."""
        self.fd = -1
        self.names: dict[int, dict[str, int]] = {}
        self.pids: dict[int, int] = {}  # pidfd -> the pid it watches
        self.last = float("-inf")
        #: Until when (``time.monotonic``) the watched files are known not to have changed: the end of the last
        #: wait (an event ends it as it happens), or its start when events came during a pause of the wait.
        self.quiet_until = float("-inf")
        self._returned = time.monotonic()
        self.libc: Any = None
        try:
            import ctypes

            libc = self.libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                return
            folders: dict[str, dict[str, int]] = {}
            for folder, name, mask in watched:
                names = folders.setdefault(folder, {})
                names[name] = names.get(name, 0) | mask
            for folder, names in folders.items():
                mask = 0
                for wanted in names.values():
                    mask |= wanted
                wd = libc.inotify_add_watch(fd, os.fsencode(folder), mask)
                if wd < 0:
                    os.close(fd)
                    return
                self.names[wd] = names
        except (OSError, AttributeError, ImportError):
            return
        self.fd = fd

    @property
    def available(self) -> bool:
        return self.fd >= 0

    def watch_pid(self, pid: int) -> bool:
        """Wake when process ``pid`` ends; whether the kernel can say so (else the watchers look for it)."""
        if not self.available or pid in self.pids.values():
            return self.available
        try:
            opener = getattr(os, "pidfd_open", None)
            fd = opener(pid) if opener is not None else self.libc.syscall(SYS_PIDFD_OPEN, pid, 0)
        except (OSError, AttributeError):
            return False
        if fd < 0:
            return False
        self.pids[fd] = pid
        return True

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds or until an event that matters; whether one came."""
        previous = self._returned
        gap = MIN_GAP_S - (time.monotonic() - self.last)
        if gap > 0:  # events keep coming: no more often than the ticks of a monitor that looks each time
            time.sleep(min(gap, timeout))
            timeout -= min(gap, timeout)
        try:
            ready, _, _ = select.select([self.fd, *self.pids], [], [], max(0.0, timeout))
        except (OSError, ValueError):
            time.sleep(max(0.0, timeout))
            ready = []
        self._returned = time.monotonic()
        # listening, an event ends the wait as it happens; one during the pause before may be from any time in it
        self.quiet_until = previous if gap > 0 and ready else self._returned
        ended = [fd for fd in ready if fd in self.pids]
        for fd in ended:  # a process ended: its pidfd stays readable, so it is closed
            os.close(fd)
            del self.pids[fd]
        relevant = bool(ended)
        if self.fd in ready and self._relevant():
            relevant = True
        if relevant:
            self.last = self._returned
        return relevant

    def _relevant(self) -> bool:
        """Read every pending event; whether one is about a watched name (or the queue overflowed)."""
        found = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return found
            except OSError:
                return True
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size:offset + _EVENT.size + size].rstrip(b"\0").decode(
                    "utf-8", "surrogateescape")
                offset += _EVENT.size + size
                if mask & IN_Q_OVERFLOW or mask & self.names.get(wd, {}).get(name, 0):
                    found = True

    def close(self) -> None:
        for fd in list(self.pids):
            os.close(fd)
        self.pids.clear()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
