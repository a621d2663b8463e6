"""The time this request may still take on this host.

The caller sends, with every request, how many seconds its own deadline leaves (``budget_s`` in the
envelope); ``ops.handle`` starts the clock here. Everything that can block (a tmux command, a stop's
waits, a lock) asks ``left(cap)`` for its bound, so a hung tmux server or a slow stop ends the request
in time for the reply to reach the caller before it gives up. Without a budget the caps apply as they are.
"""

from __future__ import annotations

import threading
import time

#: What is kept back for the reply to travel (and for the caller's own bookkeeping).
REPLY_MARGIN_S = 1.0
#: The least any bounded step gets, so that even a late request can still answer.
FLOOR_S = 0.2

#: Per thread: the in-process agent (this machine) answers requests of several server threads at once.
_local = threading.local()


def start(budget_s: float | None) -> None:
    """This request may take ``budget_s`` seconds from now (None: no bound but each step's own cap)."""
    _local.end = None if budget_s is None else time.monotonic() + max(0.0, budget_s - REPLY_MARGIN_S)


def remaining() -> float | None:
    """Seconds left for this request; None when the caller set no bound."""
    end = getattr(_local, "end", None)
    return None if end is None else max(0.0, end - time.monotonic())


def left(cap: float) -> float:
    """The bound for one step that alone would take at most ``cap`` seconds."""
    rest = remaining()
    return cap if rest is None else max(FLOOR_S, min(cap, rest))
