"""Dataclasses: a ``@dataclass`` config class, the objects the script makes of it, and their fields.

``cfg = RunConfig(grpo_n=4)`` is an object whose fields are the arguments given, else the class's
defaults (``field(default=...)`` and ``default_factory`` included); ``RunConfig.batch`` is the default. When
the code that makes the object assigns fields afterwards (a factory applying environment overrides), those
fields are unknown unless assigned once and unconditionally, and every other field's value assumes the
factory changes only those. A parameter annotated with a dataclass, whose function nothing calls, is read
with that dataclass's defaults (and a note says so).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skill_server.analysis.script.model import END, Assumption, Prov, Scope, UnitObject, combine
from skill_server.analysis.script.modules import dotted
from skill_server.analysis.script.registry import (
    Evaluation,
    Result,
    Site,
    annotation,
    attribute,
    callable_value,
    class_binding,
    kind,
)
from skill_server.analysis.script.static import NoValue

if TYPE_CHECKING:
    from skill_server.analysis.script.model import ModuleInfo


@dataclass
class DataclassDef(UnitObject):
    """A ``@dataclass`` class: its fields in order, each with its default expression (None: no default)."""

    name: str
    fields: dict[str, ast.expr | None]
    module: ModuleInfo


@dataclass(frozen=True)
class Change:
    """A later assignment to a field of an object, in the code that made it (``cfg.result_dir = d``)."""

    line: int
    value: ast.expr | None  # None: set in a way not read statically (setattr with a computed name, +=)
    conditional: bool  # inside an if, loop, try or with: it may not run


@dataclass(eq=False)
class Instance(UnitObject):
    """A dataclass object created in the script (``cfg = CocktailConfig(grpo_n=4)``), and the fields the code
    that made it changes afterwards (a factory applying environment overrides, for example)."""

    cls: DataclassDef
    overrides: dict[str, ast.expr]  # field -> the argument given for it
    scope: Scope | None  # where the arguments are evaluated
    line: int
    changes: dict[str, list[Change]] | None = None
    made_in: str = ""  # the function (or module) whose code makes and changes it


def is_dataclass_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass")


@class_binding
def definition(node: ast.ClassDef, module: ModuleInfo) -> UnitObject | None:
    if not any(is_dataclass_decorator(d) for d in node.decorator_list):
        return None
    return DataclassDef(node.name, {s.target.id: s.value for s in node.body
                                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}, module)


@callable_value(DataclassDef)
def construct(site: Site, callee: DataclassDef, node: ast.Call) -> Result | None:
    overrides = {k.arg: k.value for k in node.keywords if k.arg}
    if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
        raise NoValue(f"{callee.name}(...) with ** or * arguments")
    names = list(callee.fields)
    overrides.update({names[i]: a for i, a in enumerate(node.args) if i < len(names)})

    def make() -> Instance:
        made_in, changes = changes_after(node, site.scope)
        return Instance(callee, overrides, site.scope, site.line, changes, made_in)

    return site.ev.made(node, make), Prov("dataclass default")


@attribute(Instance)
def instance_field(site: Site, owner: Instance, prov: Prov, attr: str) -> Result | None:
    changed = [c for c in (owner.changes or {}).get(attr, [])
               if owner.scope is not site.scope or c.line < site.line]  # read where it is made: earlier changes
    if changed:
        only = changed[0]
        if len(changed) > 1 or only.conditional or only.value is None:
            lines = ", ".join(str(c.line) for c in changed)
            raise NoValue(f"{owner.cls.name}.{attr} is changed by {owner.made_in} (line {lines}) when code known "
                          "only at run time says so")
        v, p = site.ev.eval(only.value, owner.scope, only.line, site.depth)
        return v, combine([p], "dataclass argument")
    v, p = field_value(site.ev, owner, attr, site.depth)
    others = sorted(owner.changes or {})
    if others:
        fields = ", ".join(others[:-1]) + " and " + others[-1] if len(others) > 1 else others[0]
        p = combine([p, Prov(p.how, (Assumption("code", owner.made_in, fields),))])
    return v, p


@attribute(DataclassDef)
def class_field(site: Site, owner: DataclassDef, prov: Prov, attr: str) -> Result | None:
    """``Cfg.field``: the class attribute is the default."""
    return field_value(site.ev, Instance(owner, {}, None, site.line), attr, site.depth)


@annotation
def annotated_parameter(ev: Evaluation, annotation_name: str, function: Scope, parameter: str) -> Result | None:
    found = _dataclass_named(ev, annotation_name.split(".")[-1], function)
    if found is None:
        return None
    ev.note(f"parameter {parameter} of {function.name}() is read with the dataclass defaults of {found.name} "
            "(callers may pass other values)")
    return Instance(found, {}, None, 0), Prov("dataclass default")


@kind(Instance)
def instance_kind(value: Instance) -> str:
    return f"a {value.cls.name} object"


@kind(DataclassDef)
def class_kind(value: DataclassDef) -> str:
    return f"the class {value.name}"


def changes_after(node: ast.Call, scope: Scope | None) -> tuple[str, dict[str, list[Change]]]:
    """Where ``node`` is made (a function, or the module), and the fields its code later assigns on the name
    the object is bound to there: ``cfg = Cfg()`` then ``cfg.x = ...`` or ``setattr(cfg, "x", ...)``."""
    body = scope.node if scope is not None else None
    if not isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        return "", {}
    where = f"{body.name}()" if not isinstance(body, ast.Module) else "the module"
    variable = next((t.id for s in _statements(body) if isinstance(s[0], ast.Assign) and s[0].value is node
                     for t in s[0].targets if isinstance(t, ast.Name)), None)
    changes: dict[str, list[Change]] = {}
    for stmt, nested in _statements(body) if variable else ():
        for field_name, value in _field_writes(stmt, variable or ""):
            changes.setdefault(field_name, []).append(Change(stmt.lineno, value, nested))
    return where, changes


def _statements(body: ast.AST) -> list[tuple[ast.stmt, bool]]:
    """The statements of a function or module body, not those of nested functions and classes; each with
    whether it is nested in an if, loop, try or with (so it may not run)."""
    out: list[tuple[ast.stmt, bool]] = []
    stack: list[tuple[ast.stmt, bool]] = [(s, False) for s in reversed(getattr(body, "body", []))]
    while stack:
        stmt, nested = stack.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        out.append((stmt, nested))
        for name in ("body", "orelse", "finalbody", "handlers"):
            for child in reversed(getattr(stmt, name, []) or []):
                if isinstance(child, ast.ExceptHandler):
                    stack.extend((c, True) for c in reversed(child.body))
                elif isinstance(child, ast.stmt):
                    stack.append((child, True))
    return out


def _field_writes(stmt: ast.stmt, variable: str) -> list[tuple[str, ast.expr | None]]:
    """(field, value) for each assignment the statement makes to ``variable.field``."""
    out: list[tuple[str, ast.expr | None]] = []
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == variable:
                out.append((t.attr, None if isinstance(stmt, ast.AugAssign) else stmt.value))
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and dotted(stmt.value.func) == "setattr":
        args = stmt.value.args
        if (len(args) == 3 and isinstance(args[0], ast.Name) and args[0].id == variable
                and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str)):
            out.append((args[1].value, args[2]))
    return out


def field_value(ev: Evaluation, inst: Instance, attr: str, d: int) -> Result:
    """A field of an object: the argument given for it, else its default (evaluated where the class is)."""
    if attr in inst.overrides:
        v, p = ev.eval(inst.overrides[attr], inst.scope, inst.line, d)
        return v, combine([p], "dataclass argument")
    if attr not in inst.cls.fields:
        raise NoValue(f"{inst.cls.name} has no field {attr}")
    default = inst.cls.fields[attr]
    if default is None:
        raise NoValue(f"{inst.cls.name}.{attr} has no default")
    if isinstance(default, ast.Call) and dotted(default.func) in ("field", "dataclasses.field"):
        return _field_call_default(ev, inst, attr, default, d)
    v, p = ev.eval(default, inst.cls.module.scope, END, d)
    return v, combine([p], "dataclass default")


def _field_call_default(ev: Evaluation, inst: Instance, attr: str, default: ast.Call, d: int) -> Result:
    """``field(default=...)`` or ``field(default_factory=...)`` (a lambda, another dataclass, list or dict)."""
    home = inst.cls.module.scope
    for kw in default.keywords:
        if kw.arg == "default":
            v, p = ev.eval(kw.value, home, END, d)
            return v, combine([p], "dataclass default")
        if kw.arg == "default_factory":
            factory = kw.value
            if isinstance(factory, ast.Lambda):
                v, p = ev.eval(factory.body, home, END, d)
                return v, combine([p], "dataclass default")
            made, _ = ev.eval(factory, home, END, d)
            if isinstance(made, DataclassDef):
                return Instance(made, {}, None, 0), Prov("dataclass default")
            if dotted(factory) in ("list", "dict"):
                return ([] if dotted(factory) == "list" else {}), Prov("dataclass default")
    raise NoValue(f"{inst.cls.name}.{attr} has no static default")


def _dataclass_named(ev: Evaluation, name: str, scope: Scope) -> DataclassDef | None:
    """The dataclass a parameter annotation names: as the function sees the name, else by class name."""
    found = scope.lookup(name, None)
    if found is not None:
        try:
            value, _ = ev.binding(found[1], found[0], name, 1)
        except NoValue:
            value = None
        if isinstance(value, DataclassDef):
            return value
    by_name: Any = ev.module_of(scope).classes.get(name)
    return by_name if isinstance(by_name, DataclassDef) else None
