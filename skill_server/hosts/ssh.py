"""SSH hosts: the system ``ssh`` client, one multiplexed connection per host, the agent shipped per call.

Each call runs ``ssh [-F $SKILL_SERVER_SSH_CONFIG] -o BatchMode=yes -o ConnectTimeout=.. -o ControlMaster=auto
-o ControlPath=<dir>/%C -o ControlPersist=.. -T -- <dest> python3 -I -S -c <bootstrap> AJS-READY <nonce> AJS``.
The user's ssh config, agent, keys and jump hosts apply as in their terminal; host-key checking is never
weakened. BatchMode turns a password or host-key prompt into an error, which becomes one line naming the
host and ssh's own message.

The channel is immune to what the login shell prints or reads: the bootstrap prints ``AJS-READY <nonce>``
first, and until that line the client discards everything on stdout (keeping it, bounded and sanitised,
for an error message) and writes only a bare newline every ``KEEPALIVE_S``; then it sends the program and
framed requests (``AJS <nonce> <length>``), and reads framed replies, skipping any other line. A host
that never says ready gets a message quoting what its shell printed. Every read and write is bounded
by the call's deadline, so a partition or a hung host ends the call in time.

The control socket lives under the state directory when the path fits a Unix socket (about 100 bytes,
counting the 40-character ``%C`` hash and the 17-character suffix ssh adds while binding), else in a
private ``/tmp/ajs-ssh-<uid>`` directory; if neither is usable, calls go without multiplexing.

A long-lived process (the MCP server) keeps one *agent session* per host: a channel that stays open,
answering framed requests, so a warm call costs one round trip and no process start on either side. A
session serves one call at a time; a call that finds it busy, or a session that broke, goes on a channel
of its own (one-shot: one request, then stdin closes). Sessions end when their host connection drops,
after the agent's idle time, or with this process.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import secrets
import select
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from skill_server.core.deadline import Deadline, bounded
from skill_server.core.errors import ToolFailure
from skill_server.hosts.agent import program
from skill_server.hosts.agent.protocol import state_dir
from skill_server.hosts.base import Host, HostUnreachable
from skill_server.hosts.client import Op, Result

log = logging.getLogger(__name__)

SSH_CONFIG_ENV = "SKILL_SERVER_SSH_CONFIG"
REMOTE_PYTHON_ENV = "SKILL_SERVER_REMOTE_PYTHON"
CONNECT_TIMEOUT_S = 10
CONTROL_PERSIST_S = 600
SOCKET_PATH_LIMIT = 100
#: Where control sockets go when the state directory's path is too long for a Unix socket.
FALLBACK_CONTROL_DIR = "/tmp/ajs-ssh-{uid}"
_CONTROL_NAME_LEN = 40 + 17  # "%C" expands to 40 hex characters; ssh binds "<path>.<16 random>" first


def _private_dir(path: str) -> bool:
    """Create (0700) or accept a directory only if it is ours, not a symlink, and closed to others."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return False
        if info.st_mode & 0o077:
            os.chmod(path, 0o700)
        return True
    except OSError:
        return False


def control_dir() -> str | None:
    """Where control sockets go (see the module docstring); None disables multiplexing."""
    for candidate in (os.path.join(state_dir(), "ssh"), FALLBACK_CONTROL_DIR.format(uid=os.getuid())):
        if len(os.fsencode(candidate)) + 1 + _CONTROL_NAME_LEN > SOCKET_PATH_LIMIT:
            continue
        if _private_dir(candidate):
            return candidate
    return None


def ssh_config() -> str | None:
    """``$SKILL_SERVER_SSH_CONFIG`` as an absolute path (checked to exist), or None when it is not set."""
    value = os.environ.get(SSH_CONFIG_ENV)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise ToolFailure(f"{SSH_CONFIG_ENV}={value!r}: no such file", field=SSH_CONFIG_ENV)
    return str(path.absolute())


def config_arguments() -> list[str]:
    """``-F <config>`` for every ssh invocation (calls, attach commands, ``ssh -G``), or nothing."""
    config = ssh_config()
    return ["-F", config] if config else []


def ssh_options() -> list[str]:
    """Everything before the destination, shared by every call (and by tests that manage masters)."""
    exe = shutil.which("ssh")
    if exe is None:
        raise ToolFailure("the ssh client is not installed on this machine (remote hosts need OpenSSH's ssh)")
    argv = [exe, *config_arguments()]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "-o", "ServerAliveInterval=15",
             "-o", "ServerAliveCountMax=3"]
    directory = control_dir()
    if directory is None:
        argv += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
    else:
        argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={directory}/%C",
                 "-o", f"ControlPersist={CONTROL_PERSIST_S}"]
    return argv


_HINTS = (
    ("Permission denied", "ssh may not ask for a password here (BatchMode): load the key into ssh-agent "
     "(ssh-add) or set IdentityFile for this host in ~/.ssh/config"),
    ("Host key verification failed", "the host's key is not in known_hosts: connect once with ssh in a terminal "
     "and check the fingerprint (host-key checking is never turned off)"),
    ("host key is known", "the host's key is not in known_hosts: connect once with ssh in a terminal "
     "and check the fingerprint (host-key checking is never turned off)"),
    ("REMOTE HOST IDENTIFICATION HAS CHANGED", "the host's key changed: find out why before removing the old "
     "entry with ssh-keygen -R"),
)


def describe_ssh_error(stderr: str) -> str:
    """ssh's own message (its last meaningful line) plus what to do about it."""
    lines = [" ".join(x.split()) for x in stderr.splitlines()]
    lines = [x for x in lines if x and not x.startswith(("Warning: Permanently added", "@@@", "debug"))]
    message = lines[-1] if lines else "ssh failed without a message"
    for needle, hint in _HINTS:
        if any(needle in x for x in lines):
            return f"{message} ({hint})"
    return message


_SESSIONS: dict[tuple[str, ...], _Channel] = {}
_SESSIONS_LOCK = threading.Lock()
#: While waiting for the bootstrap's ready line, a bare newline goes out this often (a start-up file
#: that reads a line gets an empty one and goes on; the bootstrap skips blank lines).
KEEPALIVE_S = 0.5
#: What a login shell printed before the ready line: this much is kept for an error message.
PRELUDE_KEPT = 4096
PRELUDE_SHOWN = 200


@functools.cache
def _parts() -> tuple[bytes, bytes]:
    """What every channel writes once the bootstrap is ready: stage one and the sources (built once)."""
    return program.ssh_parts()


def _python() -> str:
    return os.environ.get(REMOTE_PYTHON_ENV) or "python3"


def _remote_command(nonce: str) -> str:
    return " ".join([shlex.quote(_python()), "-I", "-S", "-c", shlex.quote(program.BOOTSTRAP),
                     *program.bootstrap_argv(nonce)])


def _failure(host: str, returncode: int | None, stderr: str) -> HostUnreachable | None:
    """The error an ssh exit status means, or None when it says nothing about the connection."""
    if returncode == 255:
        return HostUnreachable(host, describe_ssh_error(stderr))
    if returncode == 127:
        return HostUnreachable(host, f"{_python()} was not found there (the host agent needs Python 3.8 or newer; "
                               f"set {REMOTE_PYTHON_ENV} to its path): {describe_ssh_error(stderr)}")
    return None


def _shown(data: bytes) -> str:
    """What a login shell printed, for a message: one line, control bytes shown as '?', bounded."""
    text = data.decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else ("?" if c not in "\r\n\t" else " ") for c in text)
    text = " ".join(text.split())
    return text if len(text) <= PRELUDE_SHOWN else text[:PRELUDE_SHOWN] + "..."


class _Broken(Exception):
    """A channel that had served broke (its connection dropped): the call may go again on a new one."""


class _Channel:
    """One agent on a host over ssh: started with the bootstrap, past the login shell's noise, program sent.

    Every read and write is bounded by the caller's deadline (non-blocking pipes and ``select``): a
    partitioned network or a hung host ends the call in time, with the ssh process killed."""

    def __init__(self, host: str, argv: list[str], nonce: str, deadline: Deadline) -> None:
        self.host = host
        self.nonce = nonce
        self.head = f"{program.FRAME} {nonce} ".encode("ascii")
        # ssh's stderr for the channel's whole life (read when it fails): no with-block.
        self.err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                         start_new_session=True)
        except OSError as exc:
            raise HostUnreachable(host, f"cannot run ssh: {exc.strerror or exc}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin.fileno()
        self.stdout = self.proc.stdout.fileno()
        os.set_blocking(self.stdin, False)
        self.buf = b""
        self.served = False
        self.lock = threading.Lock()
        try:
            self._await_ready(deadline)
            stage_one, packed = _parts()
            self._write(program.frame(nonce, stage_one) + packed, deadline)
        except BaseException:
            self.close()
            raise

    # ---- failures
    def _stderr(self) -> str:
        self.err.seek(0)
        return self.err.read(64 * 1024).decode("utf-8", "replace")

    def _ended(self, prelude: bytes | None) -> Exception:
        """What it means that ssh's stdout closed: before the ready line, the host is unreachable (why, from
        ssh's status and what the shell printed); after serving, the connection broke (``_Broken``)."""
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        stderr = self._stderr()
        self.close()
        if prelude is None:
            if self.served:
                return _Broken()
            return _failure(self.host, code, stderr) or HostUnreachable(
                self.host, f"the host agent failed: {describe_ssh_error(stderr) if stderr.strip() else 'no reply'} "
                f"(exit {code})")
        failure = _failure(self.host, code, stderr)
        if failure is not None:
            return failure
        printed = f"it printed: '{_shown(prelude)}'" if prelude.strip() else "it printed nothing"
        said = f"; on stderr: '{_shown(stderr.strip().encode())}'" if stderr.strip() else ""
        return HostUnreachable(self.host, f"the login shell of {self.host} exited (status {code}) before starting "
                               f"the host agent; {printed}{said}")

    def _late(self, deadline: Deadline, waited: float, prelude: bytes | None) -> HostUnreachable:
        self.close(kill=True)  # the deadline has passed: no grace for a connection that hangs
        if prelude is None:
            return HostUnreachable(self.host, f"no answer within {waited:.0f} s")
        if prelude.strip():
            return HostUnreachable(self.host, f"the login shell of {self.host} did not start the host agent within "
                                   f"{waited:.0f} s; it printed: '{_shown(prelude)}'")
        return HostUnreachable(self.host, f"no answer within {waited:.0f} s: the connection, sshd or the login "
                               f"shell of {self.host} hung (it printed nothing; a start-up file may wait for input)")

    # ---- bounded I/O
    def _read_some(self, deadline: Deadline, started: float, prelude: bytes | None) -> None:
        left = deadline.remaining()
        if left <= 0 or not select.select([self.stdout], [], [], left)[0]:
            raise self._late(deadline, time.monotonic() - started, prelude)
        try:
            chunk = os.read(self.stdout, 1024 * 1024)
        except OSError:
            chunk = b""
        if not chunk:
            raise self._ended(prelude)
        self.buf += chunk

    def _write(self, data: bytes, deadline: Deadline) -> None:
        view = memoryview(data)
        started = time.monotonic()
        while view:
            left = deadline.remaining()
            if left <= 0 or not select.select([], [self.stdin], [], left)[1]:
                raise self._late(deadline, time.monotonic() - started, None)
            try:
                view = view[os.write(self.stdin, view):]
            except BlockingIOError:
                continue
            except OSError:
                raise self._ended(None) from None

    def _await_ready(self, deadline: Deadline) -> None:
        """Wait for ``AJS-READY <nonce>``, discarding what the login shell printed before it (kept, bounded,
        for the message), writing a bare newline every ``KEEPALIVE_S`` meanwhile."""
        started = time.monotonic()
        marker = f"{program.READY} {self.nonce}\n".encode("ascii")
        prelude = b""
        next_newline = started
        while True:
            at = self.buf.find(marker)
            if at >= 0:
                self.buf = self.buf[at + len(marker):]
                return
            cut = max(0, len(self.buf) - len(marker))  # keep what could be the start of the marker
            prelude = (prelude + self.buf[:cut])[-PRELUDE_KEPT:]
            self.buf = self.buf[cut:]
            now = time.monotonic()
            if now >= next_newline:
                try:
                    os.write(self.stdin, b"\n")
                except (BlockingIOError, BrokenPipeError):
                    pass
                except OSError:
                    pass
                next_newline = now + KEEPALIVE_S
            step = deadline.within(max(0.01, next_newline - now))
            if deadline.expired():
                raise self._late(deadline, now - started, prelude + self.buf)
            if select.select([self.stdout], [], [], step.remaining())[0]:
                try:
                    chunk = os.read(self.stdout, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise self._ended(prelude + self.buf)
                self.buf += chunk

    # ---- requests
    def ask(self, request: bytes, deadline: Deadline) -> Any:
        """Send one framed request and read its framed reply (other lines, stray output, are skipped)."""
        started = time.monotonic()
        self._write(program.frame(self.nonce, request), deadline)
        while True:
            while b"\n" not in self.buf:
                self._read_some(deadline, started, None)
            line, self.buf = self.buf.split(b"\n", 1)
            size = line[len(self.head):]
            if line.startswith(self.head) and size.isdigit():
                break
        while len(self.buf) < int(size):
            self._read_some(deadline, started, None)
        body, self.buf = self.buf[: int(size)], self.buf[int(size):]
        self.served = True
        return json.loads(body.decode("utf-8"))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, *, kill: bool = False) -> None:
        """End the channel: close stdin (the agent exits) and wait briefly, or (``kill``) end ssh at once."""
        if self.proc.poll() is None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            except OSError:
                pass
            try:
                if kill:
                    raise subprocess.TimeoutExpired(self.proc.args, 0)
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self.err.close()


def close_sessions() -> None:
    with _SESSIONS_LOCK:
        sessions = list(_SESSIONS.values())
        _SESSIONS.clear()
    for session in sessions:
        session.close()


atexit.register(close_sessions)


class SshHost(Host):
    def __init__(self, destination: str) -> None:
        self.name = destination

    def _argv(self, nonce: str) -> list[str]:
        try:
            return ssh_options() + ["-T", "--", self.name, _remote_command(nonce)]
        except ToolFailure as exc:
            raise HostUnreachable(self.name, exc.message) from None

    def call(self, ops: Sequence[Op[Any]], *, timeout_s: float = 60.0, deadline: Deadline | None = None
             ) -> list[Result]:
        """One round trip: on this host's open agent session when it is free, else on a channel of its own
        (one-shot); either way by ``deadline``. A session that breaks after serving is retried one-shot."""
        bound = bounded(deadline, timeout_s)
        request = json.dumps(self._request(ops, bound), separators=(",", ":")).encode("utf-8")
        reply = self._ask_session(request, bound)
        if reply is None:
            channel = self._open(bound)
            try:
                reply = channel.ask(request, bound)
            except _Broken:
                raise HostUnreachable(self.name, "the connection dropped during the call") from None
            finally:
                channel.close()
        return self._results(reply, len(ops))

    def _open(self, deadline: Deadline) -> _Channel:
        nonce = _nonce()
        return _Channel(self.name, self._argv(nonce), nonce, deadline)

    def _ask_session(self, request: bytes, deadline: Deadline) -> Any | None:
        """The reply through this host's session; None when it is busy or broke (go one-shot)."""
        key = tuple(self._argv("-"))  # the settings the session was opened with (its nonce aside)
        with _SESSIONS_LOCK:
            session = _SESSIONS.get(key)
            if session is not None and not session.alive():
                session = None
            if session is None:
                for old_key in [k for k in _SESSIONS if k[-2] == self.name]:  # settings changed: replace
                    _SESSIONS.pop(old_key).close()
        if session is None:
            fresh = self._open(deadline)  # a host that cannot be reached says so here
            with _SESSIONS_LOCK:  # another thread may have opened one meanwhile: keep one per host
                session = _SESSIONS.get(key)
                if session is None or not session.alive():
                    session = _SESSIONS[key] = fresh
            if session is not fresh:
                fresh.close()
        if not session.lock.acquire(blocking=False):
            return None
        try:
            return session.ask(request, deadline)
        except _Broken:
            return None
        except (ValueError, OSError):
            session.close()
            return None
        finally:
            session.lock.release()

    def terminal_command(self, argv: Sequence[str]) -> str:
        """``ssh -t [-F <absolute config>] <dest> '<argv>'``: it works from any directory."""
        return shlex.join(["ssh", "-t", *config_arguments(), self.name, shlex.join(argv)])


def _nonce() -> str:
    return secrets.token_hex(8)


def configured_hostname(destination: str) -> str | None:
    """The host name ``ssh`` connects to for ``destination`` (``ssh -G``: its config applied, no connection);
    None when ssh cannot tell."""
    try:
        done = subprocess.run(["ssh", *config_arguments(), "-G", "--", destination], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "hostname" and value.strip():
            return value.strip()
    return None


def close_masters() -> int:
    """End this process's agent sessions and ask every control master under our control directory to
    exit; returns how many masters answered."""
    close_sessions()
    directory = control_dir()
    if directory is None or shutil.which("ssh") is None:
        return 0
    closed = 0
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        try:
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                continue
        except OSError:
            continue
        done = subprocess.run(["ssh", "-o", f"ControlPath={path}", "-O", "exit", "ajs-control-master"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=15, check=False)
        closed += done.returncode == 0
    return closed
