"""The evaluator's table of library knowledge: small registered units, and the questions the core asks them.

The core (``evaluate``) knows the language: literals, operators, names and what they are bound to,
modules next to the script, the script's own functions. What a *library* gives a meaning to is a unit: a
small function in a file under ``units/``, registered here with a decorator naming what it answers for:

===============  ====================================================  ==============================
table            keyed by                                              answers
===============  ====================================================  ==============================
``CALLS``        the dotted callee name (``"os.getenv"``, ``"Path"``)  the value of the call
``NAMES``        a name with a fixed meaning (``"__file__"``)          its value
``ITEMS``        the dotted subscripted name (``"os.environ"``)        the value of ``x[...]``
``ATTRIBUTES``   the type of the owner (a unit's object, ``PathRef``)  the value of ``owner.attr``
``METHODS``      the type of the owner (``str``, ``dict``, ...)        the value of ``owner.m(...)``
``CALLABLES``    the type of a called value (a dataclass)              the value of calling it
``OPERATORS``    the type of the left operand                          the value of ``left <op> right``
``ANNOTATIONS``  (every unit is asked)                                 a parameter's value from its type
``CLASSES``      (every unit is asked)                                 what a ``class`` statement binds
``KINDS``        the type of an object                                 how a message names it
``PREPASSES``    (every unit runs)                                     reads the script's calls once
===============  ====================================================  ==============================

A unit answers ``None`` when the expression is not its case (the next unit, then the core, is asked) and
raises ``NoValue`` with the reason when it is its case but has no static value. Units registered for the
same key are asked in registration order (the import order of ``units/__init__``). A unit sees the
evaluator only through ``Evaluation`` (and ``Site``, where an expression is evaluated) below; units never
import one another or the core.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from skill_server.analysis.script.model import Binding, ModuleInfo, Prov, Scope, UnitObject

#: A static value and how it was obtained.
Result = tuple[Any, Prov]
T = TypeVar("T")


class Evaluation(Protocol):
    """What a unit may ask of the evaluator."""

    def eval(self, node: ast.expr, scope: Scope | None, line: int, depth: int) -> Result:
        """The static value of ``node`` as it is at ``line`` (``depth``: the nesting so far; pass it on)."""

    def binding(self, binding: Binding, owner: Scope, name: str, depth: int) -> Result:
        """The value a name is bound to (``owner``: the scope that binds it)."""

    def module_of(self, scope: Scope | None) -> ModuleInfo:
        """The module a scope belongs to (the script for None)."""

    def made(self, node: ast.AST, make: Callable[[], T]) -> T:
        """The object a unit makes for one call site, made once: every evaluation of that call is the same
        object (the parser an ``ArgumentParser()`` call builds, to which ``add_argument`` calls attach)."""

    def note(self, text: str) -> None:
        """A note for the scan's result (said once)."""

    def modules(self) -> list[ModuleInfo]:
        """The script and every module read so far."""

    def call_with(self, frames: list[tuple[Scope, dict[str, tuple[ast.expr, Scope | None, int]]]], node: ast.expr,
                  scope: Scope, line: int, depth: int) -> Result:
        """``node`` evaluated in ``scope`` at ``line`` while the calls in ``frames`` (outermost first) bind the
        parameters of their functions: parameter -> (the argument expression, the scope and line it is read
        at); a parameter a call leaves out takes its default."""


class Site:
    """Where an expression is evaluated: the evaluator, the scope and line, and the nesting so far."""

    __slots__ = ("ev", "scope", "line", "depth")

    def __init__(self, ev: Evaluation, scope: Scope | None, line: int, depth: int) -> None:
        self.ev = ev
        self.scope = scope
        self.line = line
        self.depth = depth

    def eval(self, node: ast.expr) -> Result:
        """The static value of another expression at this site (an argument, the owner of a method)."""
        return self.ev.eval(node, self.scope, self.line, self.depth)

    def text(self, node: ast.AST) -> str:
        """``node`` as written in its module (for messages and assumptions)."""
        return self.ev.module_of(self.scope).text(node)


CallUnit = Callable[[Site, ast.Call], Result | None]
NameUnit = Callable[[Site], Result | None]
ItemUnit = Callable[[Site, ast.Subscript], Result | None]
AttributeUnit = Callable[[Site, Any, Prov, str], Result | None]
MethodUnit = Callable[[Site, Any, Prov, str, ast.Call], Result | None]
CallableUnit = Callable[[Site, Any, ast.Call], Result | None]
OperatorUnit = Callable[[ast.operator, Any, Prov, Any, Prov], Result | None]
AnnotationUnit = Callable[[Evaluation, str, Scope, str], Result | None]
ClassUnit = Callable[[ast.ClassDef, ModuleInfo], UnitObject | None]
KindUnit = Callable[[Any], str]
Prepass = Callable[[Evaluation, list[tuple[Scope, ast.Call]]], None]

CALLS: dict[str, list[CallUnit]] = {}
NAMES: dict[str, list[NameUnit]] = {}
ITEMS: dict[str, list[ItemUnit]] = {}
ATTRIBUTES: dict[type, list[AttributeUnit]] = {}
METHODS: dict[type, list[MethodUnit]] = {}
CALLABLES: dict[type, list[CallableUnit]] = {}
OPERATORS: dict[type, list[OperatorUnit]] = {}
ANNOTATIONS: list[AnnotationUnit] = []
CLASSES: list[ClassUnit] = []
KINDS: dict[type, KindUnit] = {}
PREPASSES: list[Prepass] = []

F = TypeVar("F", bound=Callable[..., Any])


def _keyed(table: dict[Any, list[F]], keys: tuple[Any, ...]) -> Callable[[F], F]:
    def register(unit: F) -> F:
        for key in keys:
            table.setdefault(key, []).append(unit)
        return unit

    return register


def call(*names: str) -> Callable[[CallUnit], CallUnit]:
    """``unit(site, call)`` answers for calls of these dotted names."""
    return _keyed(CALLS, names)


def name(*names: str) -> Callable[[NameUnit], NameUnit]:
    """``unit(site)`` answers for these names (before the scope's own bindings are looked at)."""
    return _keyed(NAMES, names)


def item(*names: str) -> Callable[[ItemUnit], ItemUnit]:
    """``unit(site, subscript)`` answers for ``X[...]`` where X is one of these dotted names."""
    return _keyed(ITEMS, names)


def attribute(*types: type) -> Callable[[AttributeUnit], AttributeUnit]:
    """``unit(site, owner, owner_prov, attr)`` answers for ``owner.attr`` on these types."""
    return _keyed(ATTRIBUTES, types)


def method(*types: type) -> Callable[[MethodUnit], MethodUnit]:
    """``unit(site, owner, owner_prov, method_name, call)`` answers for ``owner.m(...)`` on these types."""
    return _keyed(METHODS, types)


def callable_value(*types: type) -> Callable[[CallableUnit], CallableUnit]:
    """``unit(site, callee, call)`` answers for calling a value of these types."""
    return _keyed(CALLABLES, types)


def operator(*types: type) -> Callable[[OperatorUnit], OperatorUnit]:
    """``unit(op, left, left_prov, right, right_prov)`` answers for ``left <op> right`` when ``left`` has one of
    these types (before the core's arithmetic)."""
    return _keyed(OPERATORS, types)


def annotation(unit: AnnotationUnit) -> AnnotationUnit:
    """``unit(ev, annotation, function_scope, parameter)``: the value a parameter is read with when its
    function's callers do not say (``annotation``: the annotation as a dotted name)."""
    ANNOTATIONS.append(unit)
    return unit


def class_binding(unit: ClassUnit) -> ClassUnit:
    """``unit(classdef, module)``: what a class's name is bound to (None: not this unit's kind of class)."""
    CLASSES.append(unit)
    return unit


def kind(*types: type) -> Callable[[KindUnit], KindUnit]:
    """``unit(obj)``: how a message names an object of these types ("the parsed command line")."""

    def register(unit: KindUnit) -> KindUnit:
        for t in types:
            KINDS[t] = unit
        return unit

    return register


def prepass(unit: Prepass) -> Prepass:
    """``unit(ev, calls)``: run once over every call of the script, before any value is resolved."""
    PREPASSES.append(unit)
    return unit


def by_type(table: dict[type, list[T]], value: Any) -> list[T]:
    """The units registered for ``value``'s type or one of its bases, the most specific first."""
    out: list[T] = []
    for cls in type(value).__mro__:
        out.extend(table.get(cls, ()))
    return out
