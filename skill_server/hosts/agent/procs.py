"""Processes of a run: identity (pid plus start time), the run marker, and a stop that verifies.

Every process of a run carries ``AGENTJET_SKILL_RUN=<experiment id>/<role>`` in its environment: it is
set in the wrapper's initial environment, so every descendant inherits it, including processes that
call ``setsid`` or are reparented to init after a double fork. A stop signals the wrapper's process
group (the wrapper is a tmux pane's session leader) and every marked process, escalates from SIGINT
to SIGTERM to SIGKILL, and then looks again: what still lives is reported, never hidden.

A pid alone is not an identity (pids are reused), so a process is "ours" only while its start time
matches the one recorded at launch. Linux answers from ``/proc``; where there is no ``/proc`` (macOS),
``ps`` answers instead (``USE_PROC`` is a module switch so tests can drive that path too).
"""

from __future__ import annotations

import os
import signal
import time

from .protocol import KILL_WAIT_S, RUN_MARKER, TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypedDict

    from .protocol import SeenProc, StopReport

    class Wrapper(TypedDict):
        """A run's wrapper process (a process group leader) as recorded at launch."""

        role: str
        pid: int
        start: str | None

    class Marked(TypedDict):
        """A live process carrying the run marker."""

        pid: int
        pgid: int
        role: str
        start: str | None
        command: str

USE_PROC = os.path.isdir("/proc/self")
POLL_S = 0.2
MARKED_POLL_S = 1.0
TERM_WAIT_S = 3.0
_MARKER_BYTES = RUN_MARKER.encode() + b"="


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, session, ...]."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            raw = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw.rsplit(")", 1)[-1].split()


def _ps(args: list[str]) -> list[str]:
    import subprocess  # only where there is no /proc

    try:
        out = subprocess.run(["ps"] + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=20,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return out.stdout.decode("utf-8", "replace").splitlines()


def start_time(pid: int) -> str | None:
    """An opaque start-time token of a live process; None when it is gone or a zombie."""
    if pid <= 0:
        return None
    if USE_PROC:
        fields = _proc_stat(pid)
        if not fields or fields[0] in ("Z", "X") or len(fields) < 20:
            return None
        return fields[19]
    lines = _ps(["-o", "stat=", "-o", "lstart=", "-p", str(pid)])
    if not lines:
        return None
    parts = lines[0].split(None, 1)
    if not parts or parts[0].startswith("Z") or len(parts) < 2:
        return None
    return " ".join(parts[1].split())


def _proc_uptime() -> float | None:
    try:
        with open("/proc/uptime", "rb") as handle:
            return float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def uptime() -> float:
    """Seconds since this machine booted, as the kernel says it (``/proc/uptime``): one clock for every process
    here, whatever each one's own clocks say (a wall-clock step, libfaketime), so a time one process writes down
    another can compare with its own. Without ``/proc``, this process's monotonic clock."""
    found = _proc_uptime() if USE_PROC else None
    return found if found is not None else time.monotonic()


_SPACE: list[str] = []


def pid_space() -> str:
    """Where this process's pids mean something: the kernel's boot id and its PID namespace ("" when unknown). Two
    machines (or containers) that share a host name, a machine id and a home directory still differ here, and a
    reboot changes it: a pid recorded in another pid space says nothing about the processes of this one."""
    if not USE_PROC:
        return ""
    if not _SPACE:
        try:
            with open("/proc/sys/kernel/random/boot_id", "rb") as handle:
                boot = handle.read(64).decode("ascii", "replace").strip()
            space = os.readlink("/proc/self/ns/pid")
        except OSError:
            return ""
        _SPACE.append("%s/%s" % (boot, space.replace("pid:", "").strip("[]")))
    return _SPACE[0]


def same_boot(space: object) -> bool:
    """Whether a pid space recorded by some process (``pid_space``) is of this boot of this machine (its times on
    ``uptime`` compare with ours); True when either is unknown."""
    mine = pid_space()
    if not isinstance(space, str) or not space or not mine:
        return True
    return space.split("/", 1)[0] == mine.split("/", 1)[0]


def age(pid: int | None, start: str | None) -> float | None:
    """Seconds since ``pid`` started, from the kernel's boot-relative clock (``/proc/uptime`` less the
    process's start in clock ticks), so a wall-clock step changes nothing; None when it does not run with
    that start time, or there is no ``/proc``."""
    if not pid or not USE_PROC or start is None or not start.isdigit() or start_time(pid) != start:
        return None
    up = _proc_uptime()
    if up is None:
        return None
    return max(0.0, up - int(start) / float(os.sysconf("SC_CLK_TCK")))


def alive(pid: int | None, start: str | None) -> bool:
    """True while ``pid`` runs and (when known) still has the recorded start time."""
    if not pid:
        return False
    now = start_time(pid)
    return now is not None and (start is None or now == start)


def _marker_value(environ: bytes) -> str | None:
    for entry in environ.split(b"\0"):
        if entry.startswith(_MARKER_BYTES):
            return entry[len(_MARKER_BYTES):].decode("utf-8", "replace")
    return None


def cmdline(pid: int) -> str:
    """The command line of ``pid`` (its first 400 bytes), "" when it cannot be read."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            raw = handle.read(400)
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def marked(prefix: str) -> list[Marked]:
    """Live processes whose marker starts with ``prefix`` (``<id>/`` for a run, ``<id>/<role>`` for one
    process): pid, pgid, role and command. This process itself is never listed."""
    return _marked_in_proc(prefix) if USE_PROC else _marked_by_ps(prefix)


def _marked_in_proc(prefix: str) -> list[Marked]:
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = []
    found = []
    for entry in entries:
        if entry.isdecimal() and int(entry) != me:
            proc = _marked_pid(int(entry), prefix)
            if proc is not None:
                found.append(proc)
    return found


def _marked_pid(pid: int, prefix: str) -> Marked | None:
    """``pid`` as a marked process (from /proc), or None when it carries no marker with ``prefix``."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            environ = handle.read()
    except OSError:
        return None
    if _MARKER_BYTES not in environ:
        return None
    value = _marker_value(environ)
    if value is None or not value.startswith(prefix):
        return None
    fields = _proc_stat(pid)
    if not fields or fields[0] in ("Z", "X"):
        return None
    return {"pid": pid, "pgid": int(fields[2]), "role": value.split("/", 1)[-1],
            "start": fields[19] if len(fields) > 19 else None, "command": cmdline(pid)[:200]}


def _marked_by_ps(prefix: str) -> list[Marked]:
    """Without /proc: ps prints the environment after the arguments, so the environment of a process is
    what its listing with environment adds to its listing without (a marker in an argument, such as
    tmux's own command line, must not count)."""
    me = os.getpid()
    plain = {}
    for line in _ps(["-A", "-ww", "-o", "pid=", "-o", "pgid=", "-o", "stat=", "-o", "command="]):
        parts = line.split(None, 3)
        if len(parts) == 4 and parts[0].isdecimal():
            plain[int(parts[0])] = parts
    for flags in (["-E"], ["e"]):  # BSD/macOS show the environment with -E, procps with e
        lines = _ps(["-A", "-ww"] + flags + ["-o", "pid=", "-o", "command="])
        if lines:
            found = (_ps_marked(line, plain, prefix, me) for line in lines)
            return [proc for proc in found if proc is not None]
    return []


def _ps_marked(line: str, plain: dict[int, list[str]], prefix: str, me: int) -> Marked | None:
    """One line of ``ps`` with environments as a marked process, or None."""
    parts = line.split(None, 1)
    if len(parts) < 2 or not parts[0].isdecimal():
        return None
    pid = int(parts[0])
    known = plain.get(pid)
    if pid == me or known is None or known[2].startswith("Z") or not parts[1].startswith(known[3]):
        return None
    environment = " " + parts[1][len(known[3]):]
    at = environment.find(" " + RUN_MARKER + "=" + prefix)
    if at < 0:
        return None
    value = environment[at + 1 + len(RUN_MARKER) + 1:].split(" ", 1)[0]
    return {"pid": pid, "pgid": int(known[1]) if known[1].isdecimal() else 0, "role": value.split("/", 1)[-1],
            "start": start_time(pid), "command": known[3][:200]}


def _send(pid: int, sig: int, group: bool) -> bool:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _live(wrappers: list[Wrapper], prefix: str) -> tuple[list[Wrapper], list[Marked]]:
    """(live wrappers, live marked processes)."""
    return [w for w in wrappers if alive(w["pid"], w["start"])], marked(prefix)


def _signal_all(wrappers: list[Wrapper], procs: list[Marked], sig: int) -> None:
    groups = {w["pid"] for w in wrappers} | {p["pgid"] for p in procs if p["pgid"] > 1}
    for pgid in groups:
        _send(pgid, sig, group=True)
    for p in procs:
        _send(p["pid"], sig, group=False)


def _wait_gone(wrappers: list[Wrapper], prefix: str, seconds: float) -> tuple[list[Wrapper], list[Marked]]:
    """Wait until nothing of the run lives, at most ``seconds``. Wrappers are checked every POLL_S; the
    marker scan (it reads every process's environment) at most once per MARKED_POLL_S."""
    end = time.monotonic() + seconds
    live_w, live_p = _live(wrappers, prefix)
    next_scan = time.monotonic() + MARKED_POLL_S
    while (live_w or live_p) and time.monotonic() < end:
        time.sleep(POLL_S)
        had_wrappers = bool(live_w)
        live_w = [w for w in live_w if alive(w["pid"], w["start"])]
        if time.monotonic() >= next_scan or (had_wrappers and not live_w):
            live_p = marked(prefix)
            next_scan = time.monotonic() + MARKED_POLL_S
    return live_w, live_p


def _describe(wrappers: list[Wrapper], procs: list[Marked]) -> list[SeenProc]:
    seen = set()
    out: list[SeenProc] = []
    for w in wrappers:
        seen.add(w["pid"])
        out.append({"pid": w["pid"], "role": w["role"], "start": w["start"], "command": "(wrapper)"})
    for p in procs:
        if p["pid"] not in seen:
            seen.add(p["pid"])
            out.append({"pid": p["pid"], "role": p["role"], "start": p["start"], "command": p["command"]})
    return out


def terminate(wrappers: list[Wrapper], prefix: str, grace_s: float) -> StopReport:
    """Stop every process of a run (or of one role): Ctrl-C, grace, SIGTERM, SIGKILL, verify.

    ``wrappers``: [{role, pid, start}] of the wrapper processes (process group leaders). Returns
    ``interrupted`` (roles that got SIGINT), ``terminated``/``killed`` (processes still alive when
    SIGTERM/SIGKILL were sent) and ``survivors`` (alive even after SIGKILL: never claimed stopped).
    """
    live_w, live_p = _live(wrappers, prefix)
    interrupted = sorted({w["role"] for w in live_w})
    for w in live_w:  # what Ctrl-C in the pane does: SIGINT to the foreground process group
        if not _send(w["pid"], signal.SIGINT, group=True):  # not a group leader (a batch job's): its processes
            for p in live_p:
                if p["role"] == w["role"]:
                    _send(p["pid"], signal.SIGINT, group=False)
    terminated: list[SeenProc] = []
    killed: list[SeenProc] = []
    if live_w or live_p:
        live_w, live_p = _wait_gone(wrappers, prefix, grace_s)
    if live_w or live_p:
        terminated = _describe(live_w, live_p)
        _signal_all(live_w, live_p, signal.SIGTERM)
        live_w, live_p = _wait_gone(wrappers, prefix, TERM_WAIT_S)
    if live_w or live_p:
        killed = _describe(live_w, live_p)
        _signal_all(live_w, live_p, signal.SIGKILL)
        live_w, live_p = _wait_gone(wrappers, prefix, KILL_WAIT_S)
    return {"interrupted": interrupted, "terminated": terminated, "killed": killed,
            "survivors": _describe(live_w, live_p)}
