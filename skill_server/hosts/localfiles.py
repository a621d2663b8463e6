"""This machine's own files, read the way the host agent reads files on every host: regular files only,
bounded, never blocking on a FIFO or a device (a blueprint given by path, a log on this machine).

The functions are the agent's (``agent.files``), so the server and every host refuse the same things;
server modules use them from here and never import agent internals.
"""

from __future__ import annotations

from skill_server.hosts.agent.files import AgentError, describe, read_appended, read_range

__all__ = ["AgentError", "describe", "read_appended", "read_range"]
