"""Ending the processes that hold GPU memory on a host, and only those the ssh user owns.

Used by ``ray_cluster stop`` with ``kill_gpu_processes``. The pids come from nvidia-smi, which may
report pids of another PID namespace (a container), where the same number is another process. So a
pid is ended only if, on the host, it is alive, owned by the user the host agent runs as, and holds an
open descriptor on a character device named ``nvidia*`` (what every CUDA process has). Then SIGTERM,
a grace period, SIGKILL, and a last look; everything else is listed as skipped, with the reason.

The work runs on the host as one small stdlib-only program (``PROGRAM``) in a single ``run`` op, so a
reclaim is one round trip per host.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from skill_server.hosts import LOCAL

KILL_WAIT_S = 3.0

PROGRAM = r'''
import json, os, signal, stat, sys, time

req = json.loads(sys.argv[1])
me = os.getuid()


def start(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def name(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read(300).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def holds_gpu(pid):
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
            if os.path.basename(target).startswith("nvidia") and stat.S_ISCHR(os.stat(target).st_mode):
                return True
        except OSError:
            continue
    return False


out = {"killed": [], "survivors": [], "skipped": []}
targets = []
for pid in req["pids"]:
    if not os.path.isdir("/proc/self"):
        out["skipped"].append({"pid": pid, "name": "", "reason": "this host has no /proc to check the pid"})
        continue
    began = start(pid)
    if began is None:
        out["skipped"].append({"pid": pid, "name": "", "reason": "no such process on this host (it may run in "
                               "another container or PID namespace)"})
        continue
    try:
        owner = os.stat("/proc/%d" % pid).st_uid
    except OSError:
        owner = None
    if owner != me:
        out["skipped"].append({"pid": pid, "name": name(pid), "reason": "owned by uid %s, not by the ssh user "
                               "(uid %d)" % (owner, me)})
        continue
    try:
        gpu = holds_gpu(pid)
    except OSError as exc:
        out["skipped"].append({"pid": pid, "name": name(pid), "reason": "cannot read its open files: %s" % exc})
        continue
    if not gpu:
        out["skipped"].append({"pid": pid, "name": name(pid), "reason": "holds no nvidia device here (the pid "
                               "nvidia-smi reported may belong to another container)"})
        continue
    targets.append({"pid": pid, "start": began, "name": name(pid)})


def alive(t):
    return start(t["pid"]) == t["start"]


def signal_all(sig, label, wait):
    for t in targets:
        if alive(t):
            try:
                os.kill(t["pid"], sig)
                t["signal"] = label
            except OSError:
                pass
    end = time.monotonic() + wait
    while time.monotonic() < end and any(alive(t) for t in targets):
        time.sleep(0.1)


signal_all(signal.SIGTERM, "SIGTERM", float(req["grace_s"]))
signal_all(signal.SIGKILL, "SIGKILL", float(req["kill_wait_s"]))
for t in targets:
    entry = {"pid": t["pid"], "name": t["name"], "signal": t.get("signal", "")}
    out["survivors" if alive(t) else "killed"].append(entry)
print(json.dumps(out))
'''


def _python(host: str) -> str:
    """The interpreter that runs the program on ``host``: this one here, the agent's choice over ssh."""
    if host == LOCAL:
        return sys.executable
    from skill_server.hosts.ssh import REMOTE_PYTHON_ENV

    return os.environ.get(REMOTE_PYTHON_ENV) or "python3"


def reclaim_op(host: str, pids: list[int], grace_s: float) -> dict[str, Any]:
    """The ``run`` op that ends the GPU processes ``pids`` on ``host`` (see the module docstring)."""
    request = json.dumps({"pids": sorted(set(pids)), "grace_s": grace_s, "kill_wait_s": KILL_WAIT_S})
    return {"op": "run", "argv": [_python(host), "-c", PROGRAM, request],
            "timeout_s": grace_s + KILL_WAIT_S + 30, "max_output": 1024 * 1024}


def read_result(result: dict[str, Any] | None) -> tuple[dict[str, list[dict[str, Any]]] | None, str | None]:
    """(report, None) from the op's result, or (None, why it failed)."""
    if result is None:
        return None, "no answer"
    if not result.get("ok"):
        return None, str(result.get("error") or "the host could not run the program")
    if result.get("error") or result.get("returncode") != 0:
        detail = result.get("error") or (str(result.get("stderr") or "").strip().splitlines() or ["no message"])[-1]
        return None, f"the kill program failed: {detail}"
    try:
        report = json.loads(str(result.get("stdout") or ""))
    except ValueError:
        return None, "the kill program answered something unreadable"
    if not isinstance(report, dict):
        return None, "the kill program answered something unreadable"
    return {k: list(report.get(k) or []) for k in ("killed", "survivors", "skipped")}, None
