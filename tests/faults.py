"""Faults to inject in tests, built from real parts; each helper says what it stands in for.

- ``clock_step_env``: a process whose wall clock is stepped (NTP correcting a drifted clock, a VM resumed
  from a snapshot, an administrator's ``date -s``) while its monotonic clock runs on: Debian's libfaketime.
- ``FrozenProxy``: a TCP proxy between ssh and a node's sshd; ``freeze()`` SIGSTOPs it, so connections
  stay open and silent, as on a network partition (a switch gone, a cable pulled) rather than a refused
  connection.
- ``FullDisk``: a small tmpfs mounted under a temp dir and filled to the last byte, as a disk that ran full
  while a run wrote its checkpoints.
- ``noisy_bashrc`` and friends: login-shell start-up files that print (a banner, conda's ``(base)`` line,
  as RHEL-style ``.bashrc`` files without an interactive guard do) or read stdin (``read -r x``), or a
  shell that never starts Python.
- ``ReadOnlyBind``: a directory made read-only by a read-only bind mount over it, as a registry on a
  filesystem remounted read-only after an error (or an immutable file) would be.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def have_faketime() -> bool:
    return Path(LIBFAKETIME).is_file()


def clock_step_env(env: dict[str, str], offset: str) -> dict[str, str]:
    """``env`` for a process whose wall clock is ``offset`` away from the real one (libfaketime's relative
    form: ``"+25h"``, ``"-2d"``, ``"+30m"``), as after a step that happened before it started.

    Its monotonic clock is shifted by the same constant, which no duration inside the process can see
    (``FAKETIME_DONT_FAKE_MONOTONIC=1`` would leave it alone, but then libfaketime's translation of
    CPython's absolute ``clock_nanosleep`` fails with EINVAL: ``time.sleep`` raises). What the product
    must not be fooled by is the wall clock disagreeing with the other processes and with ``/proc``."""
    return {**env, "LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset, "FAKETIME_NO_CACHE": "1"}


# ---- a network partition ----------------------------------------------------------------------------

#: The proxy as its own process (so SIGSTOP freezes it and nothing else): accept on 127.0.0.1:<listen>,
#: relay every connection to 127.0.0.1:<target>, byte for byte, until either side closes.
_PROXY = r"""
import select, socket, sys
listen, target = int(sys.argv[1]), int(sys.argv[2])
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", listen))
server.listen(64)
pairs = {}
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    ready, _, _ = select.select([server] + list(pairs), [], [])
    for s in ready:
        if s is server:
            client, _ = server.accept()
            upstream = socket.create_connection(("127.0.0.1", target))
            pairs[client], pairs[upstream] = upstream, client
            continue
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        other = pairs.get(s)
        if not data or other is None:
            for x in (s, other):
                if x is not None:
                    pairs.pop(x, None)
                    x.close()
            continue
        try:
            other.sendall(data)
        except OSError:
            pass
"""


class FrozenProxy:
    """A TCP relay from a free loopback port to ``target``; ``freeze``/``thaw`` stand for a partition
    beginning and ending (open connections hang instead of failing)."""

    def __init__(self, target: int) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, "-c", _PROXY, str(self.port), str(target)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        ready = select.select([self.proc.stdout], [], [], 20)[0]
        if not ready or self.proc.stdout.readline().strip() != b"ready":
            self.stop()
            raise RuntimeError("the proxy did not start")

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=10)


def freeze_process(pid: int) -> None:
    """SIGSTOP one process (a tmux server that hangs: swapped out, stuck on a dead NFS mount)."""
    os.kill(pid, signal.SIGSTOP)


def thaw_process(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


def tmux_server_pid(socket_path: str) -> int:
    """The pid of the tmux server listening at ``socket_path``."""
    out = subprocess.run(["tmux", "-S", socket_path, "display-message", "-p", "#{pid}"], capture_output=True,
                         text=True, timeout=10, check=True)
    return int(out.stdout.strip())


# ---- a full disk ------------------------------------------------------------------------------------

class FullDisk:
    """A tmpfs of ``size`` (e.g. ``"2m"``) mounted at ``path`` (root only); ``fill()`` takes every free
    byte, ``free()`` gives it back, ``unmount()`` ends it."""

    def __init__(self, path: Path, size: str = "2m") -> None:
        if os.getuid() != 0:
            raise RuntimeError("mounting a tmpfs needs root")
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True,
                       timeout=20)
        self.filler = path / ".filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (65536, 4096, 512, 1):  # down to the last partial block
                block = b"\0" * size
                try:
                    while True:
                        os.write(fd, block)
                except OSError:
                    pass
        finally:
            os.close(fd)

    def free(self) -> None:
        try:
            self.filler.unlink()
        except FileNotFoundError:
            pass

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, timeout=20)


class ReadOnlyBind:
    """``path`` bind-mounted read-only over itself (root only): its files are there, nothing is writable."""

    def __init__(self, path: Path) -> None:
        if os.getuid() != 0:
            raise RuntimeError("a bind mount needs root")
        self.path = path
        subprocess.run(["mount", "--bind", str(path), str(path)], check=True, timeout=20)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True, timeout=20)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, timeout=20)


# ---- login shells -----------------------------------------------------------------------------------

#: What RHEL-style ``.bashrc`` files do without an interactive guard: a banner, and conda's prompt line.
NOISY_BASHRC = "echo 'Welcome to the GPU cluster (maintenance on Friday)'\necho '(base) '\n"
#: A start-up file that reads a line from stdin (a prompt someone left in it).
READING_BASHRC = "read -r answer\necho \"got: $answer\"\n"
#: A start-up file that never lets the command run and prints binary junk on the way out.
JUNK_BASHRC = "printf 'module: command not found\\n\\033[31m\\001\\002junk\\n'\nexit 3\n"


def write_bashrc(home: Path, text: str) -> None:
    """``text`` as the login user's ``~/.bashrc`` (bash runs it for an ssh command on Debian and RHEL)."""
    (home / ".bashrc").write_text(text)


def clear_bashrc(home: Path) -> None:
    try:
        (home / ".bashrc").unlink()
    except FileNotFoundError:
        pass


def timed(fn, *args, **kwargs):
    """(result or the exception raised, seconds taken)."""
    start = time.monotonic()
    try:
        out = fn(*args, **kwargs)
    except Exception as exc:  # the test asserts on it
        out = exc
    return out, time.monotonic() - start


def have_root_mounts() -> bool:
    return os.getuid() == 0 and shutil.which("mount") is not None

