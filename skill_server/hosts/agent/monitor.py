"""The run monitor's daemon: one process per run per host, watching the run where it lives whether or not
anyone asks.

The launch starts it once the run's processes exist (``start``; a batch scheduler's job starts it on its
first node from ``shell_line``): the version-cached agent install (``<state>/agent/<digest>/``, made by the
same stage one that SSH calls run; no per-run copy), in a session of its own, outside the run's process groups
and without the run marker, so a stop, a closed pane or a dropped ssh link never takes it down with the run.
It reads the run's spec (``monitor.spec.json``, ``spec_for``: roles, logs, the wrappers' identities, the run's
backend handle, the max time, the signature table, the policies), puts together the rooms that watch the run
and runs them (``scheduler``):

* ``runstate.Run``: what is known of the run, its clock and its ``phases.Lifecycle`` (the phases and events);
* ``watchers``: the probe, a log tail per role, the process watch, the max time, the document's persistence;
* ``stall.StallWatch``: the stall verdict; ``policy.Policy`` and ``resume.Resume``: the launch's policies;
* ``supervisor.Keeper``: its heartbeat and its supervisor, the second process that replaces it if it dies, freezes
  or misses the max time (and that it starts again if that one dies).

Once every process of the run on this host has ended and every log was read to its end, it releases what held
the run (its tmux session) when every exit code is on disk, hands the end to the policy (a resume waits in the
``backoff`` phase), and ends with the run's last ``monitor.json`` (``ended``). It holds ``monitor.lock`` while
it lives (``heartbeat.Lock``: a replacement that fenced it off makes it end at its next look), so its supervisor
(or an observation) can tell it is gone and start another, which takes up the last document.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from . import daemon, files, heartbeat, phases, policy, resume, scheduler, stall, supervisor, waker, watchers
from .protocol import RUN_MARKER, TYPE_CHECKING
from .rundir import EXIT, FORMAT, LOCK, LOG, PID, SESSION_REMOVED, SPEC, STAGE, STOP_HERE, STOP_REQUESTED, RunDir
from .runstate import Run

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any


def spec_for(exp_id: str, handle: Mapping[str, Any], started: Sequence[Mapping[str, Any]],
             launch: Mapping[str, Any]) -> dict[str, Any]:
    """The monitor's spec file: what a launch decided that the monitor needs (``launch``: the logs' sizes before
    the run, ``max_time_s``, ``grace_s``, the monitor ``config`` and the ``result_dir``)."""
    config = launch.get("config") or {}
    offsets = launch.get("offsets") or {}
    return {"format": FORMAT, "exp_id": exp_id, "handle": dict(handle), "max_time_s": launch["max_time_s"],
            "grace_s": launch["grace_s"], "first_step_pattern": config.get("first_step_pattern"),
            "first_step_s": config.get("first_step_s"), "policy": dict(config.get("policy") or {}),
            "result_dir": launch.get("result_dir") or "", "signatures": list(config.get("signatures") or []),
            "roles": [{"role": p["role"], "log_path": p["log_path"], "start_offset": offsets.get(str(p["role"]), 0),
                       "pid": p["pid"], "start": p["start"], "pane_id": p["pane_id"], "workdir": p.get("workdir")}
                      for p in started]}


def log_sizes(logs: Mapping[str, str]) -> dict[str, int]:
    """Role -> the size its log has before the run starts (what the run did not write), 0 when absent."""
    return {role: files.file_size(path) or 0 for role, path in logs.items()}


def shell_line(run_dir: str, spec: Mapping[str, Any]) -> str:
    """A shell line that starts the run's monitor later, elsewhere (a batch job's script, on its first node;
    ``spec`` is written first): the same program ``start`` runs, with this host's interpreter and state
    directory (both on the filesystem the nodes share); it detaches at once and watches the processes there."""
    import shlex

    from .protocol import STATE_DIR_ENV, state_dir

    files.write_atomic(os.path.join(run_dir, SPEC), json.dumps(spec).encode("utf-8"), replace=False, mode=0o600)
    argv, installed = daemon.argv(run_dir)
    stdin = "/dev/null"
    if not installed:
        stdin = os.path.join(run_dir, STAGE)
        files.write_atomic(stdin, daemon.payload(), replace=True, mode=0o600)
    q = shlex.quote
    return "(cd %s && env -u %s %s=%s %s -I -S %s < %s > /dev/null 2>> %s) || echo 'the run monitor did not start'" % (
        q(run_dir), RUN_MARKER, STATE_DIR_ENV, q(state_dir()), q(sys.executable), " ".join(q(a) for a in argv),
        q(stdin), q(os.path.join(run_dir, LOG)))


def start(run_dir: str, spec: Mapping[str, Any] | None = None) -> None:
    """Start the run's monitor (``daemon.start``), writing its spec file first when given. Raises ``AgentError``
    when the monitor did not start."""
    if spec is not None:
        files.write_atomic(os.path.join(run_dir, SPEC), json.dumps(spec).encode("utf-8"), replace=False, mode=0o600)
    daemon.start(run_dir, "monitor")


def watch(run: Run, previous: Mapping[str, Any]) -> None:
    """Put the rooms together and run them until the run has ended here (or was discarded, or the monitor was
    told to stop: ``run.finished``); then tell what is still to be told and write the last document."""
    rules = policy.Policy(run, previous)
    stalls = stall.StallWatch(run, previous)

    def on_done(run: Run) -> None:
        """Every process ended and every log was read: release what held the run once every exit code is on
        disk, clear the stall verdict, hand the end to the policy."""
        codes = {r.name: run.files.exit_code(r.name) for r in run.roles}
        done = not run.session_removed and all(c is not None for c in codes.values())
        if done and run.backend.release(run.handle, run.exp_id) and run.files.touch(SESSION_REMOVED):
            run.session_removed = True
        stalls.clear(run)
        rules.processes_ended(run, codes)

    tails = {role.name: watchers.LogTail(run, role) for role in run.roles}
    woken = _waker(run)
    processes = watchers.Processes(tails, on_done, woken.watch_pid)
    for role in run.roles:
        if isinstance(role.pid, int):
            woken.watch_pid(role.pid)
    probe = watchers.Probe(tails, processes, (lambda: woken.quiet_until - run.origin) if woken.available else None)
    asked = watchers.StopAsked(rules.record)
    rooms = [probe, processes, *tails.values(), watchers.MaxTime(), stalls, rules, resume.Resume(rules), asked,
             supervisor.Keeper(), watchers.Persist()]
    run.save(ended=False)
    try:
        scheduler.run(run, rooms, lambda: run.finished or run.phase == phases.ENDED, woken, [probe, asked])
    finally:
        woken.close()
    if run.discarded or run.superseded():
        return  # rolled back: leave nothing behind; or replaced: the new monitor writes from now on
    if run.phase != phases.ENDED:  # stopped from outside first: keep what was found; the next monitor resumes it
        run.save(ended=False)
        return
    run.beat(busy_s=policy.FINAL_NOTIFY_WAIT_S + 10)
    rules.flush(run)
    _save_end(run)


#: How often the last document is tried again when it cannot be written (a full disk).
SAVE_RETRY_S = 5.0


def _save_end(run: Run) -> None:
    """Write the last document (``ended``). On a full disk it is tried again until it can be written (the monitor
    beating meanwhile): a monitor that ended without it would be replaced and tell the end again."""
    while not run.save(ended=True):
        if run.discarded or run.superseded() or not run.files.has(SPEC):
            return
        run.beat(force=True)
        time.sleep(SAVE_RETRY_S)


def _waker(run: Run) -> waker.Waker:
    """What wakes the monitor: each log growing (in its folder), a wrapper's pid or exit code written, a stop asked
    for (and each wrapper ending: ``watch_pid``). None of it when watchers are told to look every tick
    (``watchers.IDLE_ENV``)."""
    if watchers.IDLE_S <= watchers.TICK_S:
        return waker.Waker(())
    grew = waker.IN_MODIFY | waker.IN_CREATE | waker.IN_MOVED_TO | waker.IN_CLOSE_WRITE
    made = waker.IN_CREATE | waker.IN_MOVED_TO | waker.IN_CLOSE_WRITE | waker.IN_ATTRIB
    watched = [(os.path.dirname(r.log_path), os.path.basename(r.log_path), grew) for r in run.roles]
    watched += [(run.dir, r.name + suffix, made) for r in run.roles for suffix in (PID, EXIT)]
    watched += [(run.dir, STOP_REQUESTED, made), (run.dir, STOP_HERE, made)]
    return waker.Waker(watched)


def main(argv: list[str]) -> int:
    """``monitor RUN_DIR``: check the spec, detach, then watch the run until it has ended on this host."""
    if len(argv) != 1:
        sys.stderr.write("usage: monitor RUN_DIR\n")
        return 2
    run_dir = argv[0]
    where = RunDir(run_dir)
    try:
        spec = where.spec()
        if spec is None:
            raise ValueError("not a monitor spec")
        previous = where.findings() or {}
        run = Run(run_dir, spec, previous)
    except (ValueError, KeyError, TypeError) as exc:
        sys.stderr.write("cannot read %s: %s\n" % (where.file(SPEC), exc))
        return 2
    daemon.detach()
    lock = heartbeat.Lock(where.file(LOCK))
    if not lock.acquire():
        return 0  # another monitor already watches this run
    run.lock = lock
    run.heart.start(**run.beat_fields())

    def on_signal(signum: int, frame: object) -> None:
        del signum, frame
        run.finished = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        watch(run, run.previous)
    finally:
        lock.release()
    return 0
