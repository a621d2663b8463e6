"""Folders tests must make directly in /tmp, and the end-of-session check that each is gone again.

Some folders cannot live under pytest's base: Unix socket paths (tmux, ssh control sockets) must stay under
about 100 bytes, and a process dropped to ``nobody`` cannot reach pytest's 0700 base. Each such folder is
made here and remembered, so the session can fail when one is left behind, without mistaking another
session's folders (several pytest runs may share /tmp) for ours.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Where the product puts ssh control sockets when the state directory's path is too long for a socket. A
# test that ends up there has touched the machine's shared state (its state directory was too long).
SSH_FALLBACK = f"/tmp/ajs-ssh-{os.getuid()}"

_made: list[str] = []


def short_tmp_dir(prefix: str = "ajs") -> str:
    """A new private folder directly in /tmp; the caller removes it, the session checks that it did."""
    path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    _made.append(path)
    return path


def process_tmp_dir(prefix: str) -> str:
    """A new private folder in the temp directory that lives as long as this process (data unpacked once for
    every test); removed at exit, so the session check does not count it."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def left_behind(ssh_fallback_existed: bool) -> list[str]:
    """What this session made in /tmp and did not remove."""
    left = [path for path in _made if os.path.lexists(path)]
    if not ssh_fallback_existed and os.path.lexists(SSH_FALLBACK):
        left.append(SSH_FALLBACK)
    return left


# --- what the session must leave as it found it: $HOME and the process table ------------------------------

#: Set in the session's environment (tests/conftest.py): every process a test starts inherits it (the loopback
#: sshd passes it on to what runs "remotely"), so the end-of-session check finds what was left running without
#: mistaking another session's processes, or the user's, for ours.
SESSION_MARKER = "AJS_TEST_SESSION"
#: How deep the $HOME listing goes (``~/a/b/c``): deep enough for ``~/.cache/matplotlib/fontlist.json`` or
#: ``~/auto_agent/ray_cluster/<run>``, shallow enough to stay cheap in a big home.
HOME_DEPTH = 3
HOME_LISTING_MAX = 200_000


def home_listing(root: str, keep_out: str) -> set[str]:
    """Every path under ``root`` up to ``HOME_DEPTH`` levels deep, except ``keep_out`` (the suite's declared
    cache) and what is under it; symbolic links are not followed."""
    found: set[str] = set()
    stack = [(root, 1)]
    while stack and len(found) < HOME_LISTING_MAX:
        folder, level = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(folder, entry.name)
            if path == keep_out:
                continue
            found.add(path)
            try:
                if level < HOME_DEPTH and entry.is_dir(follow_symlinks=False):
                    stack.append((path, level + 1))
            except OSError:
                continue
    return found


def marked_processes(value: str) -> dict[int, str]:
    """Live processes (this one aside) whose environment carries ``SESSION_MARKER=value``: pid -> command line."""
    needle = f"{SESSION_MARKER}={value}".encode()
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[-1].split()[0]
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if state != b"Z" and needle in environ:
            found[int(entry)] = command[:200]
    return found


def end_marked_processes(value: str, grace_s: float = 10.0) -> dict[int, str]:
    """The processes of this session still running at its end (given ``grace_s`` to finish exiting), each
    killed with SIGKILL: pid -> command line."""
    import signal
    import time

    deadline = time.monotonic() + grace_s
    left = marked_processes(value)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = marked_processes(value)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def kill_run_processes(state_dir: str) -> None:
    """End whatever a test's runs left (wrappers, monitors, their children, a double-forked process of their
    own session): processes whose command line names the test's own run directory, or whose environment
    carries the marker of one of its runs (``AGENTJET_SKILL_RUN=<id>/<role>``; every run has a folder
    ``<state>/runs/<id>``)."""
    import signal

    runs_dir = os.path.join(state_dir, "runs")
    try:
        ids = [name for name in os.listdir(runs_dir) if name]
    except OSError:
        return
    runs = (runs_dir + "/").encode()
    markers = tuple(f"AGENTJET_SKILL_RUN={exp_id}/".encode() for exp_id in ids)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                ours = runs in handle.read()
            if not ours and markers:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    ours = any(item.startswith(markers) for item in handle.read().split(b"\0"))
            if ours:
                os.kill(int(entry), signal.SIGKILL)
        except OSError:
            continue
