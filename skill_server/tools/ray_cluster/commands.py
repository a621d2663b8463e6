"""What runs on the nodes: checked ``ray`` paths and options, the ``ray start`` command lines, run-op argv.

Every value reaches bash shell-quoted. A ``~/`` path means the node's home (``"$HOME"/...`` in a command
line, ``sh -c 'exec "$HOME/$0" ...'`` as argv), because the host agent passes argv unexpanded.

A worker does not run ``ray start --address`` at once: with no head there it hangs for minutes. It
first waits (bounded by ``join_timeout_s``) until the head's port accepts a TCP connection, using
bash's ``/dev/tcp`` (each try bounded by ``timeout`` where coreutils has it), then replaces itself
with ``ray start``. A head that never comes is an exit code 124 and one clear line in the log.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from skill_server.core.errors import ToolInputError
from skill_server.hosts import client
from skill_server.hosts.agent.protocol import LOG_MARK

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import RunReply

DEFAULT_RAY = "ray"
DEFAULT_JOIN_TIMEOUT_S = 300
VERSION_TIMEOUT_S = 60
#: Options the tool sets itself; given again in ray_args or head_args they would contradict it.
MANAGED_OPTIONS = ("--head", "--address", "--port", "--block", "--num-gpus", "--num-cpus")
_COMMAND_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")
_OPTION = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9-]*(=.*)?$", re.DOTALL)
_ADDRESS = re.compile(r"^[A-Za-z0-9._:\[\]-]+$")


def check_ray(value: str | None) -> str:
    """The ``ray`` executable as given: an absolute path, ``~/...`` or a bare command name."""
    ray = DEFAULT_RAY if value is None else value
    if not ray or any(ch in ray for ch in "\x00\n\r"):
        raise ToolInputError("give the path of the ray executable (no NUL or newline)", field="ray")
    if not (ray.startswith(("/", "~/")) or _COMMAND_NAME.match(ray)):
        raise ToolInputError(f"{ray!r} is neither an absolute path, '~/...', nor a command name", field="ray")
    return ray


def check_options(values: list[str] | None, field: str) -> list[str]:
    """``--name=value`` or ``--flag`` options, none of them one the tool manages itself."""
    out = []
    for i, value in enumerate(values or []):
        if not _OPTION.match(value) or any(ch in value for ch in "\x00\n\r"):
            raise ToolInputError(f"{value!r} is not a ray start option ('--name=value' or '--flag')",
                                 field=f"{field}.{i}")
        name = value.split("=", 1)[0]
        if name in MANAGED_OPTIONS:
            raise ToolInputError(f"{name} is set by ray_cluster itself (use head, workers, port, num_gpus, "
                                 "num_cpus)", field=f"{field}.{i}")
        out.append(value)
    return out


def check_address(value: str) -> str:
    if value.startswith("-") or not _ADDRESS.match(value):
        raise ToolInputError(f"{value!r} is not a host name or IP address", field="head_address")
    return value


def ray_word(ray: str) -> str:
    """``ray`` as one word of a bash command line."""
    if ray.startswith("~/"):
        return '"$HOME"/' + shlex.quote(ray[2:])
    return shlex.quote(ray)


def ray_argv(ray: str, *args: str) -> list[str]:
    """argv that runs ``ray args...`` through the host agent (no shell, so ``~`` is expanded here)."""
    if ray.startswith("~/"):
        return ["sh", "-c", 'exec "$HOME/$0" "$@"', ray[2:], *args]
    return [ray, *args]


def version_op(ray: str) -> client.Op[RunReply]:
    """The run op asking ``ray --version`` on a node (bounded)."""
    return client.run(ray_argv(ray, "--version"), timeout_s=VERSION_TIMEOUT_S, max_output=64 * 1024)


def _options(num_gpus: int | None, num_cpus: int | None, extra: list[str]) -> list[str]:
    out = []
    if num_gpus is not None:
        out.append(f"--num-gpus={num_gpus}")
    if num_cpus is not None:
        out.append(f"--num-cpus={num_cpus}")
    return out + extra


def head_command(ray: str, port: int, num_gpus: int | None, num_cpus: int | None, ray_args: list[str],
                 head_args: list[str]) -> str:
    words = ["start", "--head", "--block", f"--port={port}"] + _options(num_gpus, num_cpus, ray_args + head_args)
    return "exec " + ray_word(ray) + " " + " ".join(shlex.quote(w) for w in words)


def worker_command(ray: str, head_host: str, port: int, join_timeout_s: int, num_gpus: int | None,
                   num_cpus: int | None, ray_args: list[str]) -> str:
    host, where = shlex.quote(head_host), shlex.quote(f"{head_host}:{port}")
    words = ["start", f"--address={head_host}:{port}", "--block"] + _options(num_gpus, num_cpus, ray_args)
    gave_up = shlex.quote(f"{LOG_MARK} the head {head_host}:{port} did not answer within {join_timeout_s} s; "
                          "is it running, and can this node reach that address?")
    return "\n".join([
        f"__ajs_until=$((SECONDS + {int(join_timeout_s)}))",
        "__ajs_try=; if command -v timeout >/dev/null 2>&1; then __ajs_try='timeout 5'; fi",
        f"echo {shlex.quote(LOG_MARK)} waiting for the head at {where}",
        f"until $__ajs_try bash -c 'exec 3<>\"/dev/tcp/$0/$1\"' {host} {int(port)} 2>/dev/null; do",
        f'  if [ "$SECONDS" -ge "$__ajs_until" ]; then echo {gave_up}; exit 124; fi',
        "  sleep 1",
        "done",
        "exec " + ray_word(ray) + " " + " ".join(shlex.quote(w) for w in words),
    ])

