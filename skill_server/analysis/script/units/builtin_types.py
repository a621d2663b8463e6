"""Python's builtins on plain values: ``int()``, ``float()``, ``bool()``, ``str()``, ``dict(k=v)``, ``list()``,
``min()``, ``max()``, and the ``str`` and ``dict`` methods scripts use on config values."""

from __future__ import annotations

import ast
from typing import Any

from skill_server.analysis.script.model import PathRef, Prov, combine
from skill_server.analysis.script.modules import dotted
from skill_server.analysis.script.registry import Result, Site, call, method
from skill_server.analysis.script.static import NoValue, bounded, hashable, is_number, plain

_CONVERSIONS = {"int": int, "float": float, "bool": bool}


@call("int", "float", "bool")
def conversion(site: Site, node: ast.Call) -> Result | None:
    if len(node.args) != 1 or node.keywords:
        return None
    name = dotted(node.func) or ""
    v, p = site.eval(node.args[0])
    if not plain(v) or isinstance(v, (list, dict)):
        raise NoValue(f"{name}() of a value known only at run time")
    try:
        return bounded(_CONVERSIONS[name](v)), p
    except (TypeError, ValueError, OverflowError):
        raise NoValue(f"{name}({v!r}) fails at run time") from None


@call("str")
def text_of(site: Site, node: ast.Call) -> Result | None:
    """``str(x)`` of a plain value (``str(path)``: filesystem)."""
    if not node.args:
        return None
    v, p = site.eval(node.args[0])
    if len(node.args) == 1 and plain(v):
        return str(v), p
    raise NoValue("str() of a value known only at run time")


@call("dict")
def mapping(site: Site, node: ast.Call) -> Result | None:
    if node.args:
        return None
    out: dict[str, Any] = {}
    provs = []
    for kw in node.keywords:
        if kw.arg is None:
            raise NoValue("dict(**...) of a value known only at run time")
        v, p = site.eval(kw.value)
        out[kw.arg] = v.path if isinstance(v, PathRef) else v
        provs.append(p)
    return out, combine(provs)


@call("list", "tuple")
def sequence_copy(site: Site, node: ast.Call) -> Result | None:
    """``list(cfg.tags)``: a copy of a plain list or tuple (``list()``: empty)."""
    if len(node.args) > 1 or node.keywords:
        return None
    if not node.args:
        return ([] if dotted(node.func) == "list" else ()), Prov("literal")
    v, p = site.eval(node.args[0])
    if isinstance(v, (list, tuple)) and plain(v):
        return (list(v) if dotted(node.func) == "list" else tuple(v)), p
    raise NoValue(f"{dotted(node.func)}() of a value known only at run time")


@call("min", "max")
def extreme(site: Site, node: ast.Call) -> Result | None:
    if not node.args or node.keywords:
        return None
    name = dotted(node.func)
    values, provs = [], []
    for a in node.args:
        v, p = site.eval(a)
        values.append(v)
        provs.append(p)
    if all(is_number(v) for v in values):
        return (min if name == "min" else max)(values), combine(provs, "arithmetic")
    raise NoValue(f"{name}() of values known only at run time")


@method(str)
def text_method(site: Site, owner: str, prov: Prov, attr: str, node: ast.Call) -> Result | None:
    if attr in ("lower", "upper", "strip") and not node.args:
        return getattr(owner, attr)(), prov
    return None


@method(dict)
def mapping_get(site: Site, owner: dict[Any, Any], prov: Prov, attr: str, node: ast.Call) -> Result | None:
    if attr != "get" or not 1 <= len(node.args) <= 2:
        return None
    key, pk = site.eval(node.args[0])
    if not hashable(key):
        raise NoValue("a dict key known only at run time")
    if key in owner:
        return owner[key], combine([prov, pk])
    if len(node.args) == 2:
        v, pv = site.eval(node.args[1])
        return v, combine([prov, pk, pv])
    return None, combine([prov, pk])
