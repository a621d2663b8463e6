"""This machine as a host: the agent runs in-process (no subprocess, no serialisation)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from skill_server.core.deadline import Deadline, bounded
from skill_server.hosts.agent import ops as agent_ops
from skill_server.hosts.base import LOCAL, Host
from skill_server.hosts.client import Op, Result


class LocalHost(Host):
    name = LOCAL

    def call(self, ops: Sequence[Op[Any]], *, timeout_s: float = 60.0, deadline: Deadline | None = None
             ) -> list[Result]:
        return self._results(agent_ops.handle(self._request(ops, bounded(deadline, timeout_s))), len(ops))

    def terminal_command(self, argv: Sequence[str]) -> str:
        return shlex.join(argv)
