"""SSH hosts: the system ``ssh`` client, one multiplexed connection per host, the agent shipped per call.

Each call runs ``ssh [-F $SKILL_SERVER_SSH_CONFIG] -o BatchMode=yes -o ConnectTimeout=.. -o ControlMaster=auto
-o ControlPath=<dir>/%C -o ControlPersist=.. -T -- <dest> python3 -I -S -c <bootstrap>`` and writes the
compressed agent program and the JSON request to its stdin. The user's ssh config, agent, keys and jump
hosts apply as in their terminal; host-key checking is never weakened. BatchMode turns a password or
host-key prompt into an error, which becomes one line naming the host and ssh's own message.

The control socket lives under the state directory when the path fits a Unix socket (about 100 bytes,
counting the 40-character ``%C`` hash and the 17-character suffix ssh adds while binding), else in a
private ``/tmp/ajs-ssh-<uid>`` directory; if neither is usable, calls go without multiplexing.

A long-lived process (the MCP server) keeps one *agent session* per host: the same invocation with
``serve``, answering framed requests over the open channel, so a warm call costs one round trip and no
process start on either side. A session serves one call at a time; a call that finds it busy, a large
request, or a session that broke, goes the one-shot way. Sessions end when their host connection
drops, after the agent's idle time, or with this process.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
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
from skill_server.hosts.base import Host, HostUnreachable, tmux_attach_argv
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


@functools.cache
def _program() -> bytes:
    """What every call writes to ssh's stdin before its request (built once per process)."""
    return program.ssh_payload()


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


#: Requests larger than this go one-shot (a session's pipe is written without a writer thread).
SESSION_MAX_REQUEST = 48 * 1024
_SESSIONS: dict[tuple[str, ...], _Session] = {}
_SESSIONS_LOCK = threading.Lock()


def _python() -> str:
    return os.environ.get(REMOTE_PYTHON_ENV) or "python3"


def _remote_command(*args: str) -> str:
    return " ".join([shlex.quote(_python()), "-I", "-S", "-c", shlex.quote(program.BOOTSTRAP), *args])


def _failure(host: str, returncode: int | None, stderr: str) -> HostUnreachable | None:
    """The error an ssh exit status means, or None when it says nothing about the connection."""
    if returncode == 255:
        return HostUnreachable(host, describe_ssh_error(stderr))
    if returncode == 127:
        return HostUnreachable(host, f"{_python()} was not found there (the host agent needs Python 3.8 or newer; "
                               f"set {REMOTE_PYTHON_ENV} to its path): {describe_ssh_error(stderr)}")
    return None


class _Broken(Exception):
    """The session cannot be used (ended, or never answered ready)."""


class _Session:
    """One serving agent on a host, over the multiplexed connection."""

    def __init__(self, host: str, argv: list[str], timeout_s: float) -> None:
        self.host = host
        self.lock = threading.Lock()
        # ssh's stderr for the session's whole life (read when it breaks while connecting): no with-block.
        self.err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     start_new_session=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.buf = b""
        self.ready = False
        try:
            self.stdin.write(_program())
            self.stdin.flush()
        except OSError:
            raise self._broken() from None
        if self._line(time.monotonic() + timeout_s) != b"ready":
            raise self._broken()
        self.ready = True

    def _broken(self) -> Exception:
        """Close the session. While connecting: the error its ssh exit status means (the host is
        unreachable). Once it had served: ``_Broken``, so the call is retried one-shot on a new connection
        (a dropped master ends every session on it; that alone says nothing about the host)."""
        self.close()
        if self.ready:
            return _Broken()
        self.err.seek(0)
        failure = _failure(self.host, self.proc.returncode, self.err.read(64 * 1024).decode("utf-8", "replace"))
        return failure if failure is not None else _Broken()

    def _fill(self, deadline: float) -> None:
        fd = self.stdout.fileno()
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            self.close()
            raise HostUnreachable(self.host, "no answer in time")
        try:
            chunk = os.read(fd, 1024 * 1024)
        except OSError:
            chunk = b""
        if not chunk:
            raise self._broken()
        self.buf += chunk

    def _line(self, deadline: float) -> bytes:
        while b"\n" not in self.buf:
            self._fill(deadline)
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def ask(self, request: bytes, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        try:
            self.stdin.write(str(len(request)).encode("ascii") + b"\n" + request)
            self.stdin.flush()
        except OSError:
            raise self._broken() from None
        size = int(self._line(deadline))
        while len(self.buf) < size:
            self._fill(deadline)
        body, self.buf = self.buf[:size], self.buf[size:]
        return json.loads(body.decode("utf-8"))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.stdin.close()
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


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

    def _argv(self, *args: str) -> list[str]:
        try:
            return ssh_options() + ["-T", "--", self.name, _remote_command(*args)]
        except ToolFailure as exc:
            raise HostUnreachable(self.name, exc.message) from None

    def call(self, ops: Sequence[Op[Any]], *, timeout_s: float = 60.0, deadline: Deadline | None = None
             ) -> list[Result]:
        bound = bounded(deadline, timeout_s)
        request = json.dumps(self._request(ops, bound), separators=(",", ":")).encode("utf-8")
        if len(request) <= SESSION_MAX_REQUEST:
            reply = self._ask_session(request, bound.remaining())
            if reply is not None:
                return self._results(reply, len(ops))
        return self._results(self._one_shot(request, bound.remaining()), len(ops))

    def _ask_session(self, request: bytes, timeout_s: float) -> Any | None:
        """The reply through this host's session; None when it is busy or broke (go one-shot)."""
        argv = self._argv("serve")
        key = tuple(argv)
        with _SESSIONS_LOCK:
            session = _SESSIONS.get(key)
            if session is not None and not session.alive():
                session = None
            if session is None:
                for old_key in [k for k in _SESSIONS if k[-2] == self.name]:  # settings changed: replace
                    _SESSIONS.pop(old_key).close()
        if session is None:
            try:
                fresh = _Session(self.name, argv, timeout_s)
            except _Broken:
                return None
            with _SESSIONS_LOCK:  # another thread may have opened one meanwhile: keep one per host
                session = _SESSIONS.get(key)
                if session is None or not session.alive():
                    session = _SESSIONS[key] = fresh
            if session is not fresh:
                fresh.close()
        if not session.lock.acquire(blocking=False):
            return None
        try:
            return session.ask(request, timeout_s)
        except _Broken:
            return None
        except (ValueError, OSError):
            session.close()
            return None
        finally:
            session.lock.release()

    def _one_shot(self, request: bytes, timeout_s: float) -> Any:
        argv = self._argv()
        with tempfile.TemporaryFile() as err:
            try:
                done = subprocess.run(argv, input=_program() + request, stdout=subprocess.PIPE, stderr=err,
                                      timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired:
                raise HostUnreachable(self.name, f"no answer within {timeout_s:.0f} s") from None
            except OSError as exc:
                raise HostUnreachable(self.name, f"cannot run ssh: {exc.strerror or exc}") from None
            err.seek(0)
            stderr = err.read(64 * 1024).decode("utf-8", "replace")
        failure = _failure(self.name, done.returncode, stderr)
        if failure is not None:
            raise failure
        try:
            return json.loads(done.stdout.decode("utf-8"))
        except ValueError:
            detail = describe_ssh_error(stderr) if stderr.strip() else f"exit {done.returncode}, no reply"
            raise HostUnreachable(self.name, f"the host agent failed: {detail}") from None

    def attach_command(self, socket_path: str, session: str) -> str:
        """``ssh -t [-F <absolute config>] <dest> 'tmux ... attach'``: it works from any directory."""
        argv = ["ssh", "-t", *config_arguments(), self.name]
        return shlex.join(argv + [shlex.join(tmux_attach_argv(socket_path, session))])


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
