"""This machine as a host: the agent runs in-process (no subprocess, no serialisation)."""

from __future__ import annotations

import shlex
from typing import Any

from skill_server.hosts.agent import ops as agent_ops
from skill_server.hosts.base import LOCAL, Host, tmux_attach_argv


class LocalHost(Host):
    name = LOCAL

    def call(self, ops: list[dict[str, Any]], *, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        return self._results(agent_ops.handle(self._request(ops)), len(ops))

    def attach_command(self, socket_path: str, session: str) -> str:
        return shlex.join(tmux_attach_argv(socket_path, session))
