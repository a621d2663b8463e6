"""The run monitor's scheduler: runs each watcher when it is due, sleeps until the next one is.

A watcher says when it wants to run again; it is also run at once when what it waits for happened
(``Watcher.wakes_on``: a new event, a change of what the document keeps, something urgent). While the run's
logs and processes do not change, the cheap ``Probe`` is the only watcher that runs often (a ``stat`` per log,
a signal 0 per wrapper), so an idle run costs little; a change wakes the watchers that act on it within one
probe. A bug in one watcher never ends the monitor (it enforces the max time): it is counted, logged to
``monitor.log`` and the watcher runs again a little later. Stdlib only, Python 3.8.
"""

from __future__ import annotations

import sys
import time

from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .runstate import Run
    from .watchers import Watcher

#: A watcher that failed runs again after this long.
RETRY_S = 5.0
#: At most this many failures are written to the monitor's log.
LOGGED_FAILURES = 20


def _tick(run: Run, watcher: Watcher, now: float) -> float | None:
    """One watcher's tick; a bug in one never ends the monitor."""
    try:
        return watcher.tick(run, now)
    except Exception as exc:  # noqa: BLE001 - logged to monitor.log, counted in monitor.json
        run.internal_errors += 1
        run.changed()
        if run.internal_errors <= LOGGED_FAILURES:
            sys.stderr.write("%s %s failed: %s: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), type(watcher).__name__,
                                                        type(exc).__name__, exc))
            sys.stderr.flush()
        return RETRY_S


def _marks(run: Run, watcher: Watcher) -> int:
    """What ``watcher`` wakes on, as a count that only grows (0 for what it does not wait for)."""
    if watcher.wakes_on == "events":
        return run.life.seq
    if watcher.wakes_on == "changes":
        return run.changes
    return 0


def _woken(run: Run, watcher: Watcher) -> bool:
    if watcher.wakes_on == "urgent":
        return run.urgent
    return bool(watcher.wakes_on) and _marks(run, watcher) != watcher.seen


def run(run: Run, watchers: Sequence[Watcher], until: Callable[[], bool]) -> None:
    """Run the watchers until ``until()`` (the run ended here, was discarded, or the monitor was told to stop)."""
    while not until():
        for watcher in watchers:
            now = run.clock()
            if now >= watcher.due or _woken(run, watcher):
                watcher.seen = _marks(run, watcher)
                wait = _tick(run, watcher, now)
                watcher.due = run.clock() + (watcher.pace_s if wait is None else wait)
            if until():
                return
        if any(_woken(run, w) for w in watchers):
            continue
        time.sleep(max(0.0, min(w.due for w in watchers) - run.clock()))
