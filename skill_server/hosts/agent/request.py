"""Reading the fields of one op of a request: each field's type is checked where it is read (what it means
is checked by the op). ``need`` is a field without a default (missing or null: a "required" error that
names it); ``need_or`` one with a default. The request types in ``protocol`` say which fields each op has."""

from __future__ import annotations

from .files import AgentError
from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypeVar

    T = TypeVar("T")
    D = TypeVar("D")


def _given(req: Mapping[str, object], key: str) -> bool:
    return key in req and req[key] is not None


def _checked(req: Mapping[str, object], key: str, kind: type[T]) -> T:
    value = req[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):  # a bool is not an int here
        raise AgentError("bad request: %r has the wrong type" % key, key)
    return value


def need(req: Mapping[str, object], key: str, kind: type[T]) -> T:
    """``req[key]``, which must be there and be a ``kind``."""
    if not _given(req, key):
        raise AgentError("bad request: %r is required" % key, key)
    return _checked(req, key, kind)


def need_or(req: Mapping[str, object], key: str, kind: type[T], default: D) -> T | D:
    """``req[key]`` if it is given (it must then be a ``kind``), else ``default``."""
    return _checked(req, key, kind) if _given(req, key) else default


def number(req: Mapping[str, object], key: str, default: float) -> float:
    """A number (int or float) as a float, ``default`` when not given."""
    if not _given(req, key):
        return default
    value = req[key]
    if not isinstance(value, (int, float)):
        raise AgentError("bad request: %r has the wrong type" % key, key)
    return float(value)


def str_list(req: Mapping[str, object], key: str) -> list[str]:
    """A non-empty list of strings (an argv)."""
    value = need(req, key, list)
    if not value or not all(isinstance(v, str) for v in value):
        raise AgentError("bad request: %r must be a non-empty list of strings" % key, key)
    return [str(v) for v in value]


def strings(req: Mapping[str, object], key: str) -> list[str]:
    """A list of strings, empty when not given."""
    value = need_or(req, key, list, [])
    if not all(isinstance(v, str) for v in value):
        raise AgentError("bad request: %r must be a list of strings" % key, key)
    return [str(v) for v in value]


def objects(req: Mapping[str, object], key: str, required: bool = True) -> list[Mapping[str, object]]:
    """A list of objects (the processes of a launch, the reads of a process); empty when not given and not
    ``required``."""
    value = need(req, key, list) if required else need_or(req, key, list, [])
    out: list[Mapping[str, object]] = []
    for item in value:
        if not isinstance(item, dict):
            raise AgentError("bad request: %r must be a list of objects" % key, key)
        out.append(item)
    return out


def str_map(req: Mapping[str, object], key: str) -> dict[str, str]:
    """An object mapping strings to strings (an environment), empty when not given."""
    value = need_or(req, key, dict, {})
    out = {}
    for name, text in value.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise AgentError("bad request: %s must map strings to strings" % key, key)
        out[name] = text
    return out
