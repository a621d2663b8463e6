"""Dataclasses: a ``@dataclass`` config class, the objects the script makes of it, and their fields.

``cfg = RunConfig(grpo_n=4)`` is an object whose fields are the arguments given, else the class's
defaults (``field(default=...)`` and ``default_factory`` included); ``RunConfig.batch`` is the default. A
parameter annotated with a dataclass, whose callers do not say what they pass, is read with that
dataclass's defaults (and a note says so).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skill_server.analysis.script.model import END, Prov, Scope, UnitObject, combine
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
    from skill_server.analysis.script.modules import ModuleInfo


@dataclass
class DataclassDef(UnitObject):
    """A ``@dataclass`` class: its fields in order, each with its default expression (None: no default)."""

    name: str
    fields: dict[str, ast.expr | None]
    module: ModuleInfo


@dataclass(eq=False)
class Instance(UnitObject):
    """A dataclass object created in the script (``cfg = CocktailConfig(grpo_n=4)``)."""

    cls: DataclassDef
    overrides: dict[str, ast.expr]  # field -> the argument given for it
    scope: Scope | None  # where the arguments are evaluated
    line: int


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
    return Instance(callee, overrides, site.scope, site.line), Prov("dataclass default")


@attribute(Instance)
def instance_field(site: Site, owner: Instance, prov: Prov, attr: str) -> Result | None:
    return field_value(site.ev, owner, attr, site.depth)


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
