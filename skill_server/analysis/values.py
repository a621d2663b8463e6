"""Values of the replayed config: known values, ``Unknown`` ones (with the reason), and small predicates."""

from __future__ import annotations

import math
from typing import Any

from skill_server.core.jsonsafe import json_number
from skill_server.core.text import shorten
from skill_server.core.trees import get_path


class _Missing:
    """The one value of a key the tree does not have; a message that shows it says "not set"."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "not set"

    def __copy__(self) -> _Missing:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Missing:
        return self


MISSING: Any = _Missing()  # a key the tree does not have


class Unknown:
    """A config value that depends on something unresolved; ``reason`` says what."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<unknown: {self.reason}>"

    def __deepcopy__(self, memo: dict[int, Any]) -> Unknown:
        return self


def lookup(tree: Any, dotted: str) -> Any:
    """The value at a dotted key: a value, an ``Unknown`` (the key or a section above it is unknown) or MISSING."""
    return get_path(tree, dotted, MISSING, opaque=Unknown)


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_num(x: Any) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return math.isfinite(x) if isinstance(x, float) else x.bit_length() <= 4096


def same(a: Any, b: Any) -> bool:
    """Equal as config values (1 == 1.0, but True is not 1 and "1" is not 1)."""
    if is_num(a) and is_num(b):
        return bool(a == b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and bool(a == b)


def jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON-safe copy: unknowns become null, non-finite floats null, odd objects their repr."""
    if isinstance(value, Unknown) or value is MISSING:
        return None
    if isinstance(value, float):
        return json_number(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth > 32:
        return repr(value)[:200]
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v, depth + 1) for v in value]
    path = getattr(value, "path", None)
    if isinstance(path, str):
        return path
    return repr(value)[:200]


def show(value: Any) -> str:
    """A value as a message shows it (short)."""
    return shorten(repr(value), 80)


def describe_unknown(pairs: list[tuple[str, Unknown]]) -> str:
    """'a and b are unknown (reason); c is unknown (other reason)': names grouped by what they depend on."""
    groups: dict[str, list[str]] = {}
    for name, value in pairs:
        groups.setdefault(value.reason, []).append(name)
    return "; ".join(f"{_names(names)} {'is' if len(names) == 1 else 'are'} unknown ({reason})"
                     for reason, names in groups.items())


def a_type(value: Any) -> str:
    """'a str', 'an int' (for messages about a value's type)."""
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
