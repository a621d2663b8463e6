"""Reading the fields of one op of a request: each field's type is checked where it is read (what it means
is checked by the op). A missing or null field is its default, or, without one, a "required" error that
names it. The request types in ``protocol`` say which fields each op has."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar, overload

from .files import AgentError

T = TypeVar("T")
D = TypeVar("D")


class _Required:
    """The default of a field that has none."""


_REQUIRED = _Required()


def _wrong(key: str) -> AgentError:
    return AgentError("bad request: %r has the wrong type" % key, key)


def _given(req: Mapping[str, object], key: str, default: object) -> bool:
    """Whether ``key`` has a value; raise when it has none and no default."""
    if key in req and req[key] is not None:
        return True
    if default is _REQUIRED:
        raise AgentError("bad request: %r is required" % key, key)
    return False


@overload
def need(req: Mapping[str, object], key: str, kind: type[T]) -> T: ...


@overload
def need(req: Mapping[str, object], key: str, kind: type[T], default: D) -> T | D: ...


def need(req: Mapping[str, object], key: str, kind: type[T], default: object = _REQUIRED) -> object:
    """``req[key]`` if it is a ``kind`` (a bool is not an int), else ``default``."""
    if not _given(req, key, default):
        return default
    value = req[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise _wrong(key)
    return value


def number(req: Mapping[str, object], key: str, default: float) -> float:
    """A number (int or float) as a float."""
    if not _given(req, key, default):
        return default
    value = req[key]
    if not isinstance(value, (int, float)):
        raise _wrong(key)
    return float(value)


def str_list(req: Mapping[str, object], key: str) -> list[str]:
    """A non-empty list of strings (an argv)."""
    value = need(req, key, list)
    if not value or not all(isinstance(v, str) for v in value):
        raise AgentError("bad request: %r must be a non-empty list of strings" % key, key)
    return [str(v) for v in value]


def strings(req: Mapping[str, object], key: str) -> list[str]:
    """A list of strings, empty when missing."""
    value = need(req, key, list, [])
    if not all(isinstance(v, str) for v in value):
        raise AgentError("bad request: %r must be a list of strings" % key, key)
    return [str(v) for v in value]


def objects(req: Mapping[str, object], key: str, required: bool = True) -> list[Mapping[str, object]]:
    """A list of objects (the processes of a launch, the reads of a process); empty when missing and not
    ``required``."""
    value = need(req, key, list) if required else need(req, key, list, [])
    out: list[Mapping[str, object]] = []
    for item in value:
        if not isinstance(item, dict):
            raise AgentError("bad request: %r must be a list of objects" % key, key)
        out.append(item)
    return out


def str_map(req: Mapping[str, object], key: str) -> dict[str, str]:
    """An object mapping strings to strings (an environment), empty when missing."""
    value = need(req, key, dict, {})
    out = {}
    for name, text in value.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise AgentError("bad request: %s must map strings to strings" % key, key)
        out[name] = text
    return out
