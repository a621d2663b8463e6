"""Checking the fields of one operation of a request (types only; meaning is checked by each op)."""

from __future__ import annotations

from .files import AgentError


def need(req: dict, key: str, kind: type | tuple, default: object = ..., field: str | None = None) -> object:
    if key not in req or req[key] is None:
        if default is ...:
            raise AgentError("bad request: %r is required" % key, field or key)
        return default
    value = req[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise AgentError("bad request: %r has the wrong type" % key, field or key)
    return value


def str_list(req: dict, key: str) -> list[str]:
    value = need(req, key, list)
    if not value or not all(isinstance(v, str) for v in value):
        raise AgentError("bad request: %r must be a non-empty list of strings" % key, key)
    return value
