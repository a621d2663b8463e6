"""Paths: ``__file__``, the ``os.path`` functions, ``pathlib.Path`` (its ``/``, ``.parent`` and methods), and
``str()`` of a path. Values are ``PathRef``: anchored at the script file, absolute, or relative to the
launch directory (``..paths``)."""

from __future__ import annotations

import ast
from typing import Any

import skill_server.analysis.script.paths as paths
from skill_server.analysis.script.model import PathRef, Prov, combine
from skill_server.analysis.script.modules import dotted
from skill_server.analysis.script.registry import Result, Site, attribute, call, method, name, operator
from skill_server.analysis.script.static import NoValue

#: Calls of one path (and, for Path, more parts) that give a path.
PATH_CALLS = ("os.path.abspath", "os.path.realpath", "os.path.normpath", "os.path.expanduser", "os.fspath",
              "abspath", "realpath", "normpath", "expanduser", "Path", "pathlib.Path", "PurePath")


@name("__file__")
def script_file(site: Site) -> Result | None:
    return PathRef("script_file", str(site.ev.module_of(site.scope).path)), Prov("path")


@call("os.path.join", "path.join")
def path_join(site: Site, node: ast.Call) -> Result | None:
    if not node.args:
        return None
    first, p = site.eval(node.args[0])
    return _joined(site, _as_path(first), [p], node.args[1:])


@call("os.path.dirname", "path.dirname", "dirname")
def dirname(site: Site, node: ast.Call) -> Result | None:
    if len(node.args) != 1:
        return None
    v, p = site.eval(node.args[0])
    return paths.parent(_as_path(v)), combine([p], "path")


@call(*PATH_CALLS, "str")
def path_of(site: Site, node: ast.Call) -> Result | None:
    """``Path(x, ...)``, ``os.path.abspath(x)`` and the like; ``str(path)`` (``str`` of anything else: builtins)."""
    if not node.args:
        return None
    callee = dotted(node.func) or ""
    short = callee.split(".")[-1]
    v, p = site.eval(node.args[0])
    if isinstance(v, PathRef) or short in ("Path", "PurePath"):
        ref, prov = _joined(site, _as_path(v), [p], node.args[1:])
        if short == "str" and len(node.args) > 1:
            raise NoValue("str() with several arguments")
        return ref, prov
    if short == "str":
        return None
    if len(node.args) == 1 and isinstance(v, str):
        return paths.literal_path(v), combine([p], "path")
    raise NoValue(f"{callee}() of a value known only at run time")


@method(PathRef)
def path_method(site: Site, owner: PathRef, prov: Prov, attr: str, node: ast.Call) -> Result | None:
    if attr in ("resolve", "absolute", "expanduser"):
        return owner, prov
    if attr == "joinpath":
        return _joined(site, owner, [prov], node.args)
    return None


@attribute(PathRef)
def path_parent(site: Site, owner: PathRef, prov: Prov, attr: str) -> Result | None:
    return (paths.parent(owner), prov) if attr == "parent" else None


@operator(PathRef)
def path_slash(op: ast.operator, left: PathRef, pl: Prov, right: Any, pr: Prov) -> Result | None:
    return (paths.join(left, right), combine([pl, pr], "path")) if isinstance(op, ast.Div) else None


def _as_path(value: Any) -> PathRef:
    return value if isinstance(value, PathRef) else paths.literal_path(paths.as_text(value))


def _joined(site: Site, base: PathRef, provs: list[Prov], parts: list[ast.expr]) -> Result:
    out = base
    for part in parts:
        v, p = site.eval(part)
        out = paths.join(out, v)
        provs.append(p)
    return out, combine(provs, "path")
