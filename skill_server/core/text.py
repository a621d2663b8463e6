"""Text as messages and results carry it: on one line, bounded in length, sendable as UTF-8.

One helper per job, each with one rule, so a value reads the same in every message that quotes it.
"""

from __future__ import annotations

#: What marks a cut in shortened text.
ELLIPSIS = "..."


def one_line(text: str) -> str:
    """``text`` on one line: line breaks and other control characters are shown as escapes (``\\n``, ``\\x07``).

    Escaped rather than dropped, so a value quoted in a message (a path with a newline in its name)
    still says exactly what it is.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


def shorten(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: a longer one keeps its start and its end around ``...``.

    Both ends stay because either may be what matters: the start of a value or message, the file name
    at the end of a path, the last words of a server's answer.
    """
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return text[:limit]
    kept = limit - len(ELLIPSIS)
    head = (kept + 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (kept - head):]


def utf8_safe(text: str) -> str:
    """``text`` with what UTF-8 cannot carry (lone surrogates, from undecodable file names or a hostile peer)
    shown as backslash escapes, so that it can always be printed or sent."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="backslashreplace").decode("utf-8")
