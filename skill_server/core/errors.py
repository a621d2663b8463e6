"""Exceptions shared by every tool, free of any front-end framework.

Both front ends turn these into the same one-line message: the CLI prints it to stderr and exits 1,
the MCP front end returns it as an error result, so the client sees the text instead of a generic failure.
"""

from __future__ import annotations

from skill_server.core.text import one_line, shorten


class SkillError(Exception):
    """Base class: a tool could not do what was asked, for a reason the caller can act on.

    The text is always one line: control characters a value may carry (a newline in a path, ...)
    are shown escaped, so both front ends can print it as is.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = one_line(field) if field else field
        self.message = one_line(message)
        super().__init__(f"{self.field}: {self.message}" if self.field else self.message)


class ToolInputError(SkillError):
    """An argument is invalid; ``field`` names it (dotted for nested values)."""


class ToolFailure(SkillError):
    """The arguments were fine but the operation failed (a file exists, a session is gone, ...)."""


def internal_error_message(exc: BaseException) -> str:
    """One line for an unexpected exception (a bug): its type and text, never a traceback.

    The text is prose, so its line breaks and indentation fold into single spaces before it is shortened.
    """
    text = shorten(one_line(" ".join(str(exc).split())), 300)
    return f"internal error: {type(exc).__name__}" + (f": {text}" if text else "") + \
        " (a bug in agentjet-swarm-skill; please report it)"
