"""Which strings name a host: ``local`` (this machine) or anything the user's ``ssh`` accepts.

``node1`` (an alias from ~/.ssh/config), ``user@10.0.0.5``, ``ssh://user@h:2222``. A destination is passed
to ssh after ``--`` and never through a shell, but one that ssh could read as an option, or that holds
whitespace or control characters, is refused outright.
"""

from __future__ import annotations

import re

from skill_server.core.errors import ToolInputError
from skill_server.hosts.base import LOCAL

MAX_DESTINATION = 255
_SAFE = re.compile(r"^[A-Za-z0-9._@:/\[\]%+~=-]+$")
_SSH_URI = re.compile(r"^ssh://(?:[^@/-][^@/]*@)?(?:\[[0-9A-Fa-f:.]+\]|[^@/:\[\]-][^@/:\[\]]*)(?::\d{1,5})?/?$")


def normalise(value: str | None, *, field: str) -> str:
    """``local`` for None/"local", else a checked SSH destination (returned unchanged)."""
    if value is None or value == LOCAL:
        return LOCAL
    if not value:
        raise ToolInputError("empty host: use 'local' or an ssh destination such as 'node1' or 'user@10.0.0.5'",
                             field=field)
    if len(value) > MAX_DESTINATION:
        raise ToolInputError(f"longer than {MAX_DESTINATION} characters", field=field)
    if value.startswith("-"):
        raise ToolInputError(f"{value!r} would be read by ssh as an option; give a host name or user@host",
                             field=field)
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ToolInputError("a host may not contain whitespace or control characters", field=field)
    if not _SAFE.match(value):
        raise ToolInputError(f"{value!r} is not an ssh destination (letters, digits and . _ @ : / [ ] % + ~ = -)",
                             field=field)
    if value.startswith("ssh://"):
        if not _SSH_URI.match(value):
            raise ToolInputError(f"{value!r} is not an ssh:// URI (ssh://[user@]host[:port])", field=field)
    elif value.startswith("@") or value.endswith("@"):
        raise ToolInputError(f"{value!r} is not a destination (user@host needs both parts)", field=field)
    elif value.rsplit("@", 1)[-1].startswith("-"):
        raise ToolInputError(f"{value!r} is not a destination (a host name may not start with '-')", field=field)
    return value
