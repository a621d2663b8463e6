"""One deadline per tool call, and the process's shutdown flag.

A tool call promises an answer within a bound (``wait_experiment``: its ``timeout_s`` plus a small margin;
every other call: ``CALL_BOUND_S``). The bound is a ``Deadline`` made when the call starts and passed to
every round trip it makes (``call_hosts(..., deadline=...)``), which sends the host agent what is left so
that a hung tmux or a slow stop on the host ends in time too. A step that must leave room for a later
one asks for a ``share`` of what is left. Durations are monotonic: a wall-clock step changes no bound.

``request_shutdown`` is what a signal handler of a front end sets: a launch checks it between its rounds
(and rolls back instead of starting), the MCP server stops taking calls.
"""

from __future__ import annotations

import threading
import time

#: Every tool call but ``wait_experiment`` answers within this many seconds (clients give up near 60).
CALL_BOUND_S = 55.0
#: What ``wait_experiment`` may take beyond its ``timeout_s``.
WAIT_MARGIN_S = 5.0
#: Kept back at each level for the answer to be built and to travel.
ANSWER_MARGIN_S = 1.5


class Deadline:
    """A point in monotonic time by which a call must have answered."""

    def __init__(self, seconds: float, *, end: float | None = None) -> None:
        self.end = time.monotonic() + seconds if end is None else end

    @classmethod
    def call(cls) -> Deadline:
        """The bound of an ordinary tool call, less what its answer needs."""
        return cls(CALL_BOUND_S - ANSWER_MARGIN_S)

    def remaining(self) -> float:
        """Seconds left (0 once passed)."""
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def within(self, seconds: float) -> Deadline:
        """A deadline at most ``seconds`` from now and never after this one (one step's own cap)."""
        return Deadline(0.0, end=min(self.end, time.monotonic() + max(0.0, seconds)))

    def share(self, reserve_s: float) -> Deadline:
        """This deadline less ``reserve_s`` kept for what comes after (never before now)."""
        return Deadline(0.0, end=max(time.monotonic(), self.end - reserve_s))

    def timeout(self, cap: float | None = None) -> float:
        """What one blocking step may wait: what is left, at most ``cap``."""
        left = self.remaining()
        return left if cap is None else min(cap, left)

    def __repr__(self) -> str:
        return f"Deadline({self.remaining():.1f} s left)"


def bounded(deadline: Deadline | None, seconds: float) -> Deadline:
    """``deadline`` capped at ``seconds`` from now, or a new one of ``seconds`` when the caller gave none."""
    return Deadline(seconds) if deadline is None else deadline.within(seconds)


_SHUTDOWN = threading.Event()


def request_shutdown() -> None:
    """A front end was told to stop (SIGTERM, SIGINT): calls in flight finish or roll back, none start."""
    _SHUTDOWN.set()


def shutdown_requested() -> bool:
    return _SHUTDOWN.is_set()
