"""Checks on a raw argument tree before any model sees it: the same for the CLI and for MCP.

Arguments arrive as JSON from a shell or an MCP client. Before validation they are walked once,
without recursion, and refused with a message naming the offending field when they are deeper or
larger than any tool needs, hold text that is not valid Unicode (lone surrogates, which cannot be
written back out as UTF-8) or a NUL character (no path, command or name can hold one), numbers JSON
cannot carry (NaN, infinities) or integers beyond 64 bits (which would overflow a float somewhere
downstream). Standard library only: the CLI imports it.
"""

from __future__ import annotations

import math
from typing import Any

from skill_server.core.errors import ToolInputError
from skill_server.core.text import utf8_safe

MAX_DEPTH = 32
MAX_NODES = 100_000
#: Free-form integers (config values, ...) must fit in 64 bits; typed fields have tighter bounds.
MAX_ABS_INT = 2**63 - 1


def check_argument_tree(arguments: dict[str, Any]) -> None:
    """Raise ``ToolInputError`` (naming the field) for a value no tool should ever receive."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(arguments, ())]
    nodes = 0
    while stack:
        value, path = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ToolInputError(f"arguments hold more than {MAX_NODES} values; nothing here needs that many")
        if len(path) > MAX_DEPTH:
            raise ToolInputError(f"nested deeper than {MAX_DEPTH} levels", field=field_name(_named_prefix(path)))
        if isinstance(value, str):
            _check_text(value, path)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if abs(value) > MAX_ABS_INT:
                raise ToolInputError("integer out of range (more than 64 bits)", field=field_name(path))
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ToolInputError(f"must be a finite number, not {value!r}", field=field_name(path))
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ToolInputError(f"object keys must be strings, got {type(key).__name__}",
                                         field=field_name(path))
                _check_text(key, path + (key,), what="name")
                stack.append((item, path + (key,)))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, path + (index,)) for index, item in enumerate(value))
        else:
            raise ToolInputError(f"not a JSON value ({type(value).__name__})", field=field_name(path))


def _check_text(text: str, path: tuple[Any, ...], what: str = "text") -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolInputError(f"{what} is not valid Unicode (a lone surrogate at position {exc.start})",
                             field=field_name(path)) from None
    if "\x00" in text:  # no path, command, environment value or name can hold one
        raise ToolInputError(f"{what} contains a NUL character", field=field_name(path))


def field_name(path: tuple[Any, ...]) -> str | None:
    """``("processes", 0, "env")`` -> ``"processes.0.env"``; the empty path names no field."""
    if not path:
        return None
    return ".".join(utf8_safe(str(step)) for step in path)


def _named_prefix(path: tuple[Any, ...]) -> tuple[Any, ...]:
    """The object keys leading to a value, up to its first list index: the field a user would name."""
    named: list[Any] = []
    for step in path:
        if not isinstance(step, str):
            break
        named.append(step)
    return tuple(named)
