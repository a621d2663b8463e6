"""The host interface: one round trip to a host's agent, and the small operations built on it.

``Host.call(ops)`` sends a batch of agent operations (built by ``client``) and returns one result per op;
it raises ``HostUnreachable`` when the host could not be asked at all (connection, authentication,
no Python, no answer in time). A failed op is a result with ``ok: false``; ``op.expect`` turns it
into the tool error it deserves. ``run`` is one call for one command; code that needs several things
from one host batches them into one ``call``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolFailure
from skill_server.hosts.agent.protocol import PROTOCOL_VERSION
from skill_server.hosts.client import Op, Result
from skill_server.hosts.client import run as run_op

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import Envelope

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


class Host(ABC):
    """Where processes run and files live: this machine, or one reached over SSH."""

    name: str

    @property
    def is_local(self) -> bool:
        return self.name == LOCAL

    @abstractmethod
    def call(self, ops: Sequence[Op[Any]], *, timeout_s: float = 60.0, deadline: Deadline | None = None
             ) -> list[Result]:
        """Run ``ops`` in one agent invocation on the host; one result per op. The call ends by
        ``deadline`` (when given) and within ``timeout_s``; the agent is told what is left."""

    @abstractmethod
    def terminal_command(self, argv: Sequence[str]) -> str:
        """The shell command a user types, here, to run ``argv`` on this host in their terminal (what a run's
        backend says attaches to it, say)."""

    def _request(self, ops: Sequence[Op[Any]], deadline: Deadline | None = None) -> Envelope:
        envelope: Envelope = {"v": PROTOCOL_VERSION, "ops": [op.request for op in ops]}
        if deadline is not None:
            envelope["budget_s"] = round(deadline.remaining(), 3)
        return envelope

    def _results(self, reply: Any, count: int) -> list[Result]:
        if not isinstance(reply, dict) or reply.get("v") != PROTOCOL_VERSION:
            raise HostUnreachable(self.name, "the host agent answered with an unexpected protocol")
        if "error" in reply:
            raise HostUnreachable(self.name, f"the host agent refused the request: {reply['error']}")
        results = reply.get("results")
        if not isinstance(results, list) or len(results) != count:
            raise HostUnreachable(self.name, "the host agent's reply is incomplete")
        return results

    # ---- a one-op convenience
    def run(self, argv: list[str], *, timeout_s: float = 30.0, stdin: str | None = None, cwd: str | None = None,
            env: dict[str, str] | None = None, max_output: int = 1024 * 1024) -> CommandResult:
        """Run ``argv`` (no shell: each element reaches the program unchanged) with a time bound."""
        op = run_op(argv, timeout_s=timeout_s, stdin=stdin, cwd=cwd, env=env, max_output=max_output)
        r = op.expect(self.call([op], timeout_s=timeout_s + 30.0)[0])
        return CommandResult(r["returncode"], r["stdout"], r["stderr"], r["timed_out"], r["truncated"], r["error"])
