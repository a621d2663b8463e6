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
* ``stall.StallWatch``: the stall verdict; ``policy.Policy`` and ``policy.Resume``: the launch's policies.

Once every process of the run on this host has ended and every log was read to its end, it releases what held
the run (its tmux session) when every exit code is on disk, hands the end to the policy (a resume waits in the
``backoff`` phase), and ends with the run's last ``monitor.json`` (``ended``). It holds ``monitor.lock`` while
it lives, so an observation can tell it is gone and start another (``observer.ensure_running``), which takes
up the last document.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from . import files, phases, policy, scanner, scheduler, stall, waker, watchers
from .files import AgentError
from .protocol import RUN_MARKER, TYPE_CHECKING
from .rundir import EXIT, FORMAT, LOCK, LOG, PID, SESSION_REMOVED, SPEC, STAGE, STOP_REQUESTED, RunDir
from .runstate import Run

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

START_TIMEOUT_S = 20.0


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


#: The channel nonce of a monitor started through stage one (its stdin carries nothing else).
_NONCE = "monitor"
_PAYLOAD: list[bytes] = []


def _payload() -> bytes:
    """What the monitor's interpreter reads on stdin: the stage one and sources SSH ships (built once)."""
    from . import program

    if not _PAYLOAD:
        _PAYLOAD.append(program.ssh_payload(_NONCE))
    return _PAYLOAD[0]


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != RUN_MARKER}
    from .protocol import STATE_DIR_ENV, state_dir

    env[STATE_DIR_ENV] = state_dir()  # the install and the run directory the launch used, whatever HOME says
    return env


#: How a monitor starts from this version's install (``program.install_dir``): nothing else is loaded.
_FROM_INSTALL = ("import sys; sys.path.insert(0, sys.argv[1]); from ajs_agent import monitor; "
                 "sys.exit(monitor.main(sys.argv[2:]))")


def _argv(run_dir: str) -> tuple[list[str], bool]:
    """The monitor's interpreter arguments (after ``python -I -S``), and whether they run this version's install
    (else the stage one SSH calls run, which reads its payload on stdin and installs it)."""
    from . import program

    base = program.install_dir()
    if os.path.isfile(os.path.join(base, program.PACKAGE, "monitor.py")):
        return ["-c", _FROM_INSTALL, base, run_dir], True
    return ["-c", program.BOOTSTRAP, *program.bootstrap_argv(_NONCE), "monitor", run_dir], False


def shell_line(run_dir: str, spec: Mapping[str, Any]) -> str:
    """A shell line that starts the run's monitor later, elsewhere (a batch job's script, on its first node;
    ``spec`` is written first): the same program ``start`` runs, with this host's interpreter and state
    directory (both on the filesystem the nodes share); it detaches at once and watches the processes there."""
    import shlex

    from .protocol import STATE_DIR_ENV, state_dir

    files.write_atomic(os.path.join(run_dir, SPEC), json.dumps(spec).encode("utf-8"), replace=False, mode=0o600)
    argv, installed = _argv(run_dir)
    stdin = "/dev/null"
    if not installed:
        stdin = os.path.join(run_dir, STAGE)
        files.write_atomic(stdin, _payload(), replace=True, mode=0o600)
    q = shlex.quote
    return "(cd %s && env -u %s %s=%s %s -I -S %s < %s > /dev/null 2>> %s) || echo 'the run monitor did not start'" % (
        q(run_dir), RUN_MARKER, STATE_DIR_ENV, q(state_dir()), q(sys.executable), " ".join(q(a) for a in argv),
        q(stdin), q(os.path.join(run_dir, LOG)))


def start(run_dir: str, spec: Mapping[str, Any] | None = None) -> None:
    """Start the run's monitor (writing its spec file first when given) from this version's install under the
    state directory; where it is missing, through the stage one SSH calls run, which installs it. Raises
    ``AgentError`` when the monitor did not start."""
    import subprocess

    if spec is not None:
        files.write_atomic(os.path.join(run_dir, SPEC), json.dumps(spec).encode("utf-8"), replace=False, mode=0o600)
    argv, installed = _argv(run_dir)
    log_path = os.path.join(run_dir, LOG)
    try:
        with open(log_path, "ab") as log:
            child = subprocess.Popen([sys.executable, "-I", "-S"] + argv,
                                     stdin=subprocess.DEVNULL if installed else subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=log, cwd=run_dir, env=_environment(),
                                     start_new_session=True, close_fds=True)
    except OSError as exc:
        raise AgentError("cannot start the run monitor: %s" % (exc.strerror or exc)) from None
    try:
        child.communicate(None if installed else _payload(), timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise AgentError("the run monitor did not start within %d s" % START_TIMEOUT_S) from None
    if child.returncode != 0:
        said = (files.read_small(log_path, 1024 * 1024) or "").strip().splitlines()
        raise AgentError("the run monitor did not start (exit %s): %s" % (
            child.returncode, scanner.clip(said[-1] if said else "no message", 300)))


def _detach() -> None:
    """Leave the launcher (it waits for this first process only) and every terminal: fork once more; the child
    is adopted by init and reads nothing from the launcher's pipe."""
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.close(null)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _hold_lock(run_dir: str) -> int | None:
    """The run's lock, held for this process's life; None when another monitor holds it (an observation
    testing the lock holds it for an instant only, hence the retries)."""
    import fcntl

    fd = os.open(os.path.join(run_dir, LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    for _ in range(50):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            time.sleep(0.02)
    os.close(fd)
    return None


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
    rooms = [probe, processes, *tails.values(), watchers.MaxTime(), stalls, rules, policy.Resume(rules),
             watchers.Persist()]
    run.save(ended=False)
    try:
        scheduler.run(run, rooms, lambda: run.finished or run.phase == phases.ENDED, woken, [probe])
    finally:
        woken.close()
    if run.discarded:
        return  # rolled back: leave nothing behind
    if run.phase != phases.ENDED:  # stopped from outside first: keep what was found; an observation resumes it
        run.save(ended=False)
        return
    rules.flush(run)
    run.save(ended=True)


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
    watched.append((run.dir, STOP_REQUESTED, made))
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
    _detach()
    lock = _hold_lock(run_dir)
    if lock is None:
        return 0  # another monitor already watches this run

    def on_signal(signum: int, frame: object) -> None:
        del signum, frame
        run.finished = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        watch(run, previous)
    finally:
        os.close(lock)
    return 0
