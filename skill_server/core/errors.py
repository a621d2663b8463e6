"""Exceptions shared by every tool, free of any front-end framework.

Both front ends turn these into the same one-line message: the CLI prints it to stderr and exits 1,
the MCP adapter raises it as a ``ToolError`` so the client sees the text instead of a generic failure.
"""

from __future__ import annotations


class SkillError(Exception):
    """Base class: a tool could not do what was asked, for a reason the caller can act on.

    The text is always one line: control characters a value may carry (a newline in a path, ...)
    are shown escaped, so both front ends can print it as is.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = one_line(field) if field else field
        self.message = one_line(message)
        super().__init__(f"{self.field}: {self.message}" if self.field else self.message)


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped (``\\n``, ``\\x07``)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


def utf8_safe(text: str) -> str:
    """``text`` with what UTF-8 cannot carry (lone surrogates, from undecodable file names or a hostile peer)
    shown as backslash escapes, so that it can always be printed or sent."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="backslashreplace").decode("utf-8")


class ToolInputError(SkillError):
    """An argument is invalid; ``field`` names it (dotted for nested values)."""


class ToolFailure(SkillError):
    """The arguments were fine but the operation failed (a file exists, a session is gone, ...)."""


def internal_error_message(exc: BaseException) -> str:
    """One line for an unexpected exception (a bug): its type and text, never a traceback."""
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"internal error: {type(exc).__name__}" + (f": {text}" if text else "") + \
        " (a bug in agentjet-swarm-skill; please report it)"
