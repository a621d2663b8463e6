"""The host interface: one round trip to a host's agent, and the small operations built on it.

``Host.call(ops)`` sends a batch of agent operations (see ``agent.ops``) and returns one result per op;
it raises ``HostUnreachable`` when the host could not be asked at all (connection, authentication,
no Python, no answer in time). A failed op is a result with ``ok: false``; :func:`expect` turns it
into the tool error it deserves. The convenience methods (``run``, ``read_range``, ``write_file``,
``list_dir``) are one call each; code that needs several things from one host should batch them into
one ``call``.
"""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from skill_server.errors import ToolFailure, ToolInputError
from skill_server.hosts.agent import PROTOCOL_VERSION

LOCAL = "local"


class HostUnreachable(ToolFailure):
    """The host could not be asked (ssh failed, no Python there, no answer in time)."""

    def __init__(self, host: str, reason: str, *, field: str | None = None) -> None:
        super().__init__(f"host {host!r} is unreachable: {reason}", field=field)
        self.host = host
        self.reason = reason


@dataclass(frozen=True)
class CommandResult:
    """What ``Host.run`` saw: ``returncode`` is None when the command could not start or timed out."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    error: str | None


def expect(result: dict[str, Any], *, field: str | None = None) -> dict[str, Any]:
    """The result of a successful op, else raise: ``ToolInputError`` when the host names an argument."""
    if result.get("ok"):
        return result
    message = str(result.get("error") or "operation failed")
    named = result.get("field")
    if named is not None or (field is not None and result.get("kind") in ("not_found", "not_regular")):
        raise ToolInputError(message, field=str(named) if named is not None else field)
    raise ToolFailure(message, field=field)


class Host(ABC):
    """Where processes run and files live: this machine, or one reached over SSH."""

    name: str

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL

    @abstractmethod
    def call(self, ops: list[dict[str, Any]], *, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Run ``ops`` in one agent invocation on the host; one result per op."""

    @abstractmethod
    def attach_command(self, socket_path: str, session: str) -> str:
        """The shell command a user types to watch a session of this host's tmux server."""

    def _request(self, ops: list[dict[str, Any]]) -> dict[str, Any]:
        return {"v": PROTOCOL_VERSION, "ops": ops}

    def _results(self, reply: Any, count: int) -> list[dict[str, Any]]:
        if not isinstance(reply, dict) or reply.get("v") != PROTOCOL_VERSION:
            raise HostUnreachable(self.name, "the host agent answered with an unexpected protocol")
        if "error" in reply:
            raise HostUnreachable(self.name, f"the host agent refused the request: {reply['error']}")
        results = reply.get("results")
        if not isinstance(results, list) or len(results) != count:
            raise HostUnreachable(self.name, "the host agent's reply is incomplete")
        return results

    # ---- one-op conveniences
    def run(self, argv: list[str], *, timeout_s: float = 30.0, stdin: str | None = None, cwd: str | None = None,
            env: dict[str, str] | None = None, max_output: int = 1024 * 1024) -> CommandResult:
        """Run ``argv`` (no shell: each element reaches the program unchanged) with a time bound."""
        op = {"op": "run", "argv": list(argv), "timeout_s": timeout_s, "stdin": stdin, "cwd": cwd,
              "env": env or {}, "max_output": max_output}
        r = expect(self.call([op], timeout_s=timeout_s + 30.0)[0])
        return CommandResult(r["returncode"], r["stdout"], r["stderr"], r["timed_out"], r["truncated"], r["error"])

    def read_range(self, path: str, offset: int, length: int, *, field: str | None = None) -> tuple[int, bytes]:
        """(file size, bytes) of one range of a regular file; a negative offset counts from the end."""
        r = expect(self.call([{"op": "read", "path": path, "offset": offset, "length": length}])[0], field=field)
        return int(r["size"]), base64.b64decode(r["data"])

    def write_file(self, path: str, data: bytes | str, *, replace: bool, mode: int = 0o644,
                   field: str | None = None) -> str:
        """Atomically create ``path``, or (``replace``) replace a regular file there; returns the path."""
        op: dict[str, Any] = {"op": "write", "path": path, "replace": replace, "mode": mode}
        if isinstance(data, str):
            op["text"] = data
        else:
            op["data"] = base64.b64encode(data).decode("ascii")
        return str(expect(self.call([op])[0], field=field)["path"])

    def list_dir(self, path: str, *, limit: int = 1000, field: str | None = None) -> list[dict[str, Any]]:
        return list(expect(self.call([{"op": "list_dir", "path": path, "limit": limit}])[0], field=field)["entries"])
