"""Ending the processes that hold GPU memory on this host, and only those this user owns.

The pids come from nvidia-smi, which may report pids of another PID namespace (a container), where the
same number is another process. So a pid is ended only if it is alive here, owned by the user the
agent runs as, and holds an open descriptor on a character device named ``nvidia*`` (what every CUDA
process has). Then SIGTERM, the grace period, SIGKILL, and a last look; every other pid is listed as
skipped, with the reason. Identity is pid plus start time (``procs``), so a reused pid is never hit.
"""

from __future__ import annotations

import os
import signal
import stat
import time

from . import procs
from .files import AgentError
from .protocol import KILL_WAIT_S, TYPE_CHECKING
from .request import need, number

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    from .protocol import Ended, ReclaimReply

    class _Process(TypedDict):
        pid: int
        start: str | None
        name: str

    class _Target(_Process, total=False):
        signal: str  # the last signal sent

MAX_PIDS = 4096


def _holds_nvidia_device(pid: int) -> bool:
    """Whether ``pid`` has an ``nvidia*`` character device open (raises OSError when its fds are unreadable)."""
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
            if os.path.basename(target).startswith("nvidia") and stat.S_ISCHR(os.stat(target).st_mode):
                return True
        except OSError:
            continue
    return False


def _why_not(pid: int, start: str | None, me: int) -> str | None:
    """Why ``pid`` (started at ``start``) is not a GPU process of this user on this host; None when it is one."""
    if not procs.USE_PROC:
        return "this host has no /proc to check the pid"
    if start is None:
        return "no such process on this host (it may run in another container or PID namespace)"
    try:
        owner = os.stat("/proc/%d" % pid).st_uid
    except OSError:
        owner = None
    if owner != me:
        return "owned by uid %s, not by the ssh user (uid %d)" % (owner, me)
    try:
        if not _holds_nvidia_device(pid):
            return "holds no nvidia device here (the pid nvidia-smi reported may belong to another container)"
    except OSError as exc:
        return "cannot read its open files: %s" % exc
    return None


def _signal_and_wait(targets: list[_Target], sig: int, label: str, wait_s: float) -> None:
    for t in targets:
        if procs.alive(t["pid"], t["start"]):
            try:
                os.kill(t["pid"], sig)
                t["signal"] = label
            except OSError:
                pass
    end = time.monotonic() + wait_s
    while time.monotonic() < end and any(procs.alive(t["pid"], t["start"]) for t in targets):
        time.sleep(procs.POLL_S)


def op_reclaim_gpus(req: Mapping[str, object]) -> ReclaimReply:
    """End the GPU processes ``pids`` this user owns here: SIGTERM, ``grace_s``, SIGKILL; report each pid."""
    given = need(req, "pids", list)
    pids = [p for p in given if isinstance(p, int) and not isinstance(p, bool) and p > 0]
    if len(given) > MAX_PIDS or len(pids) != len(given):
        raise AgentError("bad request: 'pids' must be at most %d positive integers" % MAX_PIDS, "pids")
    grace = max(0.0, min(number(req, "grace_s", 10), 600.0))
    me = os.getuid()
    out: ReclaimReply = {"killed": [], "survivors": [], "skipped": []}
    targets: list[_Target] = []
    for pid in sorted(set(pids)):
        start = procs.start_time(pid) if procs.USE_PROC else None
        why = _why_not(pid, start, me)
        name = procs.cmdline(pid) if procs.USE_PROC else ""
        if why is not None:
            out["skipped"].append({"pid": pid, "name": name, "reason": why})
        else:
            targets.append({"pid": pid, "start": start, "name": name})
    _signal_and_wait(targets, signal.SIGTERM, "SIGTERM", grace)
    _signal_and_wait(targets, signal.SIGKILL, "SIGKILL", KILL_WAIT_S)
    for t in targets:
        entry: Ended = {"pid": t["pid"], "name": t["name"], "signal": t.get("signal", "")}
        (out["survivors"] if procs.alive(t["pid"], t["start"]) else out["killed"]).append(entry)
    return out

