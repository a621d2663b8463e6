"""SSH hosts: the system ``ssh`` client, one multiplexed connection per host, the agent shipped per call.

Each call runs ``ssh [-F $SKILL_SERVER_SSH_CONFIG] -o BatchMode=yes -o ConnectTimeout=.. -o ControlMaster=auto
-o ControlPath=<dir>/%C -o ControlPersist=.. -T -- <dest> python3 -I -S -c <bootstrap>`` and writes the
compressed agent program and the JSON request to its stdin. The user's ssh config, agent, keys and jump
hosts apply as in their terminal; host-key checking is never weakened. BatchMode turns a password or
host-key prompt into an error, which becomes one line naming the host and ssh's own message.

The control socket lives under the state directory when the path fits a Unix socket (about 100 bytes,
counting the 40-character ``%C`` hash and the 17-character suffix ssh adds while binding), else in a
private ``/tmp/ajs-ssh-<uid>`` directory; if neither is usable, calls go without multiplexing.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from skill_server.errors import ToolFailure
from skill_server.hosts.agent import program
from skill_server.hosts.agent.files import state_dir
from skill_server.hosts.base import Host, HostUnreachable

log = logging.getLogger(__name__)

SSH_CONFIG_ENV = "SKILL_SERVER_SSH_CONFIG"
REMOTE_PYTHON_ENV = "SKILL_SERVER_REMOTE_PYTHON"
CONNECT_TIMEOUT_S = 10
CONTROL_PERSIST_S = 600
SOCKET_PATH_LIMIT = 100
_CONTROL_NAME_LEN = 40 + 17  # "%C" expands to 40 hex characters; ssh binds "<path>.<16 random>" first
_PROGRAM: bytes | None = None


def _program() -> bytes:
    global _PROGRAM
    if _PROGRAM is None:
        _PROGRAM = program.ssh_payload()
    return _PROGRAM


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
    for candidate in (os.path.join(state_dir(), "ssh"), f"/tmp/ajs-ssh-{os.getuid()}"):
        if len(os.fsencode(candidate)) + 1 + _CONTROL_NAME_LEN > SOCKET_PATH_LIMIT:
            continue
        if _private_dir(candidate):
            return candidate
    return None


def ssh_config() -> str | None:
    value = os.environ.get(SSH_CONFIG_ENV)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise ToolFailure(f"{SSH_CONFIG_ENV}={value!r}: no such file", field=SSH_CONFIG_ENV)
    return str(path.absolute())


def ssh_options() -> list[str]:
    """Everything before the destination, shared by every call (and by tests that manage masters)."""
    exe = shutil.which("ssh")
    if exe is None:
        raise ToolFailure("the ssh client is not installed on this machine (remote hosts need OpenSSH's ssh)")
    argv = [exe]
    config = ssh_config()
    if config:
        argv += ["-F", config]
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


class SshHost(Host):
    def __init__(self, destination: str) -> None:
        self.name = destination

    def _python(self) -> str:
        return os.environ.get(REMOTE_PYTHON_ENV) or "python3"

    def call(self, ops: list[dict[str, Any]], *, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        python = self._python()
        remote = f"{shlex.quote(python)} -I -S -c {shlex.quote(program.BOOTSTRAP)}"
        try:
            argv = ssh_options() + ["-T", "--", self.name, remote]
        except ToolFailure as exc:
            raise HostUnreachable(self.name, exc.message) from None
        payload = _program() + json.dumps(self._request(ops), separators=(",", ":")).encode("utf-8")
        with tempfile.TemporaryFile() as err:
            try:
                done = subprocess.run(argv, input=payload, stdout=subprocess.PIPE, stderr=err, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise HostUnreachable(self.name, f"no answer within {timeout_s:.0f} s") from None
            except OSError as exc:
                raise HostUnreachable(self.name, f"cannot run ssh: {exc.strerror or exc}") from None
            err.seek(0)
            stderr = err.read(64 * 1024).decode("utf-8", "replace")
        if done.returncode == 255:
            raise HostUnreachable(self.name, describe_ssh_error(stderr))
        if done.returncode == 127:
            raise HostUnreachable(self.name, f"{python} was not found there (the host agent needs Python 3.8 or "
                                  f"newer; set {REMOTE_PYTHON_ENV} to its path): {describe_ssh_error(stderr)}")
        try:
            reply = json.loads(done.stdout.decode("utf-8"))
        except ValueError:
            detail = describe_ssh_error(stderr) if stderr.strip() else f"exit {done.returncode}, no reply"
            raise HostUnreachable(self.name, f"the host agent failed: {detail}") from None
        return self._results(reply, len(ops))

    def attach_command(self, socket_path: str, session: str) -> str:
        argv = ["ssh", "-t"]
        config = os.environ.get(SSH_CONFIG_ENV)
        if config:
            argv += ["-F", config]
        return shlex.join(argv + [self.name, shlex.join(["tmux", "-S", socket_path, "attach", "-t", session])])


def close_masters() -> int:
    """Ask every control master under our control directory to exit; returns how many answered."""
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
                              timeout=15)
        closed += done.returncode == 0
    return closed
