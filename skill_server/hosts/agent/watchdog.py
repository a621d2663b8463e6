"""The watchdog: enforces one process's max time where the run lives.

Started by the wrapper (``python <run_dir>/agent.py watchdog RUN_DIR ROLE EXP_ID MAX_TIME_S GRACE_S``)
without the run marker, it leaves the wrapper's session at once, so neither a stop nor a closed pane
takes it down. It sleeps until the max time, checking once a second that the wrapper still runs:

* the wrapper ended normally (exit file written): nothing to do, exit;
* the wrapper vanished without an exit code (killed): keep watching the marked processes it left
  behind and end them at the deadline too (exit early once none is left);
* the deadline came: write ``<role>.timedout`` (so the exit code reads as ``timed_out``), note it in
  the log, then stop the process exactly like ``stop_experiment`` (Ctrl-C, grace, SIGTERM, SIGKILL).
"""

from __future__ import annotations

import os
import shlex
import time

from . import files, procs
from .protocol import LOG_MARK

ORPHAN_CHECK_S = 10.0


def _note(log_path: str | None, text: str) -> None:
    if not log_path:
        return
    try:
        with open(log_path, "a", encoding="utf-8") as handle:
            handle.write("%s %s\n" % (LOG_MARK, text))
    except OSError:
        pass


def _log_path(run_dir: str, role: str) -> str | None:
    """The log named in the wrapper script (its third line), so notes land beside the run's output."""
    text = files.read_small(os.path.join(run_dir, role + ".sh"), 64 * 1024) or ""
    for line in text.splitlines()[:5]:
        if line.startswith("__ajs_log="):
            try:
                return shlex.split(line[len("__ajs_log="):])[0]
            except (ValueError, IndexError):
                return None
    return None


def run(run_dir: str, role: str, exp_id: str, max_time_s: float, grace_s: float) -> int:
    wrapper_pid = os.getppid()
    wrapper_start = procs.start_time(wrapper_pid)
    try:
        os.setsid()
    except OSError:
        pass
    deadline = time.monotonic() + max_time_s
    exit_file = os.path.join(run_dir, role + ".exit")
    prefix = "%s/%s" % (exp_id, role)
    wrappers: list[procs.Wrapper] = [{"role": role, "pid": wrapper_pid, "start": wrapper_start}]
    orphan_mode = False
    next_orphan_check = 0.0
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        if not orphan_mode and not procs.alive(wrapper_pid, wrapper_start):
            if files.exists(exit_file):
                return 0
            orphan_mode = True
        if orphan_mode and now >= next_orphan_check:
            if not procs.marked(prefix):
                return 0
            next_orphan_check = now + ORPHAN_CHECK_S
        time.sleep(min(1.0, max(0.05, deadline - now)))
    if files.exists(exit_file) and not procs.marked(prefix):
        return 0
    try:
        files.touch(os.path.join(run_dir, role + ".timedout"))
    except OSError:
        pass
    log_path = _log_path(run_dir, role)
    _note(log_path, "max time of %d s reached: stopping %s" % (int(max_time_s), role))
    report = procs.terminate(wrappers, prefix, grace_s)
    if report["survivors"]:
        _note(log_path, "still alive after SIGKILL: %s" % ", ".join(str(p["pid"]) for p in report["survivors"]))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        return 2
    run_dir, role, exp_id, max_time, grace = argv
    try:
        return run(run_dir, role, exp_id, float(max_time), float(grace))
    except KeyboardInterrupt:
        return 130
