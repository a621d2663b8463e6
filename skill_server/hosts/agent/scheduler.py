"""The run monitor's scheduler: runs each watcher when it is due, sleeps until the next one is.

A watcher says when it wants to run again; it is also run at once when what it waits for happened
(``Watcher.wakes_on``: a new event, a change of what the document keeps, something urgent). Between rounds it
sleeps until the next watcher is due, or until the run's files change (``waker``: the kernel says so), which
makes the cheap ``Probe`` due (a ``stat`` per log, a signal 0 per wrapper) and through it the watchers that act
on the change. So a run that prints nothing wakes its monitor a few times a minute, and one that prints an
error has it read at once; without the kernel's word the probe looks four times a second. A bug in one watcher
never ends the monitor (it enforces the max time): it is counted, logged to ``monitor.log`` (never fatal, even on a
full disk) and the watcher runs again a little later. Each round also beats the monitor's heartbeat and ends the
monitor if a replacement fenced it off (``heartbeat``). Stdlib only, Python 3.8.
"""

from __future__ import annotations

import time

from . import daemon
from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .runstate import Run
    from .waker import Waker
    from .watchers import Watcher

#: A watcher that failed runs again after this long.
RETRY_S = 5.0
#: Watchers due this soon run with those due now (one wake for both).
SLACK_S = 0.05
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
            daemon.log("%s failed: %s: %s" % (type(watcher).__name__, type(exc).__name__, exc))
        return RETRY_S


def _marks(run: Run) -> tuple[int, int]:
    """What a watcher may wake on, as counts that only grow: the run's events, its changes."""
    return run.life.seq, run.changes


def _woken(run: Run, watcher: Watcher) -> bool:
    wakes = watcher.wakes_on
    if not wakes:
        return False
    seq, changes = watcher.seen
    return (("urgent" in wakes and run.urgent) or ("events" in wakes and run.life.seq != seq)
            or ("changes" in wakes and run.changes != changes))


def run(run: Run, watchers: Sequence[Watcher], until: Callable[[], bool], waker: Waker | None = None,
        woken: Sequence[Watcher] = ()) -> None:
    """Run the watchers until ``until()`` (the run ended here, was discarded, or the monitor was told to stop).
    With a ``waker``, an event of the run's files makes the ``woken`` watchers due at once."""
    while not until():
        if run.superseded():  # a replacement fenced this monitor off (it was frozen): it writes nothing more
            run.finished = True
            return
        run.beat()  # a sign of life for the supervisor (at most every few seconds)
        for watcher in watchers:
            now = run.clock()
            if now + SLACK_S >= watcher.due or _woken(run, watcher):
                watcher.seen = _marks(run)
                wait = _tick(run, watcher, now)
                watcher.due = run.clock() + (watcher.pace_s if wait is None else wait)
            if until():
                return
        if any(_woken(run, w) for w in watchers):
            continue
        pause = max(0.0, min(w.due for w in watchers) - run.clock())
        if waker is not None and waker.available:
            if waker.wait(pause):
                for watcher in woken:
                    watcher.due = run.clock()
        else:
            time.sleep(pause)
