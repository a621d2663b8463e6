"""Objects of the script's own classes: ``runner = Runner(cfg)``, ``self`` inside a method, their attributes.

A plain class (not a dataclass) binds its name to a ``ClassInfo``; calling it makes an ``Object`` of that call.
``obj.attr`` is what the class, or a base in method resolution order, assigns to ``self.attr`` in its
``__init__``, with the constructor's arguments bound to the parameters (through ``super().__init__(...)``),
else a class attribute. ``self`` inside a method stands for every object the code read makes of that class
or a subclass: ``self.attr`` is known when all of them agree. An attribute also assigned outside
``__init__``, objects that disagree, or a class nothing instantiates leave it unknown.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from skill_server.analysis.script.model import END, Prov, Scope, UnitObject, combine
from skill_server.analysis.script.modules import class_of_methods, dotted
from skill_server.analysis.script.registry import (
    Evaluation,
    Result,
    Site,
    attribute,
    callable_value,
    class_binding,
    kind,
    name,
)
from skill_server.analysis.script.static import NoValue, agree, own_nodes

if TYPE_CHECKING:
    from skill_server.analysis.script.model import ModuleInfo

MAX_BASES = 16  # classes followed up a method resolution order
INIT = "__init__"


@dataclass(eq=False)
class ClassInfo(UnitObject):
    """A plain ``class`` statement of the script or a module it imports."""

    node: ast.ClassDef
    module: ModuleInfo
    #: (modules read when found, the objects made of it): found once per set of modules read
    objects: tuple[int, list[Object]] | None = None

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(eq=False)
class Object(UnitObject):
    """An object the code makes of a plain class: ``Runner(cfg)`` at one call site."""

    cls: ClassInfo
    call: ast.Call
    scope: Scope | None  # where the constructor's arguments are evaluated
    line: int


@dataclass(eq=False)
class SelfOf(UnitObject):
    """``self`` inside a method of ``cls``: any object of ``cls`` or of a subclass."""

    cls: ClassInfo


@class_binding
def plain_class(node: ast.ClassDef, module: ModuleInfo) -> UnitObject | None:
    return ClassInfo(node, module)


@callable_value(ClassInfo)
def construct(site: Site, callee: ClassInfo, node: ast.Call) -> Result | None:
    return _object(site.ev, callee, node, site.scope), Prov("constant")


@name("self")
def self_in_a_method(site: Site) -> Result | None:
    cls = _enclosing_method(site.ev, site.scope)
    if cls is None:
        return None

    def make() -> SelfOf:
        return SelfOf(cls)

    return site.ev.made(cls.node, make), Prov("constant")


@attribute(Object)
def object_attribute(site: Site, owner: Object, prov: Prov, attr: str) -> Result | None:
    return attribute_of(site.ev, owner, attr, site.depth)


@attribute(SelfOf)
def self_attribute(site: Site, owner: SelfOf, prov: Prov, attr: str) -> Result | None:
    objects = objects_of(site.ev, owner.cls)
    if not objects:
        raise NoValue(f"self.{attr}: no {owner.cls.name} object is made in the code read, so its value is unknown")
    results = []
    for obj in objects:
        try:
            results.append((attribute_of(site.ev, obj, attr, site.depth), obj.line))
        except NoValue as exc:
            raise NoValue(f"self.{attr} of the {obj.cls.name} made at line {obj.line}: {exc.why}") from None
    (first, p), line = results[0]
    for (value, _), other in results[1:]:
        if not agree(first, value):
            raise NoValue(f"self.{attr} differs between the {owner.cls.name} objects made at lines {line} and {other}")
    return first, combine([r[0][1] for r in results])


@kind(ClassInfo)
def class_kind(value: ClassInfo) -> str:
    return f"the class {value.name}"


@kind(Object, SelfOf)
def object_kind(value: Object | SelfOf) -> str:
    return f"a {value.cls.name} object"


# --- the pieces ---------------------------------------------------------------------------------------


def attribute_of(ev: Evaluation, obj: Object, attr: str, depth: int) -> Result:
    """``obj.attr``: assigned to ``self.attr`` by an ``__init__`` of the class's method resolution order (and
    nowhere else), else a class attribute."""
    mro = method_resolution(ev, obj.cls)
    elsewhere = [(c, m) for c in mro for m in _methods(c) if m.name != INIT and _assigns(m, attr)]
    if elsewhere:
        cls, method = elsewhere[0]
        raise NoValue(f"self.{attr} is also set in {cls.name}.{method.name}(), so it depends on what ran before")
    value = _from_initialisers(ev, obj, mro, attr, depth)
    if value is not None:
        return value
    for cls in mro:
        for stmt in cls.node.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and _targets(stmt, attr) and stmt.value is not None:
                v, p = ev.eval(stmt.value, cls.module.scope, END, depth)
                return v, combine([p], "constant")
    raise NoValue(f"{obj.cls.name} objects have no attribute {attr} that is set statically")


Argument = tuple[ast.expr, "Scope | None", int]  # an argument expression, and the scope and line it is read at


def _from_initialisers(ev: Evaluation, obj: Object, mro: list[ClassInfo], attr: str, depth: int) -> Result | None:
    """Follow the constructor call through the ``__init__`` methods, ``super().__init__(...)`` from one to
    the next, to the first that assigns ``self.attr``: its value with every call on the way binding its
    function's parameters."""
    call = _arguments(obj.call, obj.scope, obj.line)
    frames: list[tuple[Scope, dict[str, Argument]]] = []
    for cls in mro:
        init = _method(cls, INIT)
        if init is None:
            continue  # no __init__ here: the same arguments go to the next class
        fscope = _scope_of(cls, init)
        bound = _bind(init, *call) if call is not None else None
        if fscope is None or bound is None:
            raise NoValue(f"the arguments {cls.name}.__init__() gets are not known statically")
        frames.append((fscope, bound))
        assigned = [s for s in own_nodes(init) if isinstance(s, (ast.Assign, ast.AnnAssign)) and _self_target(s, attr)]
        if len(assigned) > 1:
            raise NoValue(f"self.{attr} is set {len(assigned)} times in {cls.name}.__init__()")
        if assigned and assigned[0].value is not None:
            return ev.call_with(frames, assigned[0].value, fscope, assigned[0].lineno, depth)
        upward = _super_init(init)
        if upward is None:
            return None
        call = _arguments(upward, fscope, upward.lineno)
    return None


def _arguments(call: ast.Call, scope: Scope | None, line: int
               ) -> tuple[list[Argument], dict[str, Argument]] | None:
    """A call's arguments (positional, then by keyword), each with where it is read; None with * or **."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    return [(a, scope, line) for a in call.args], {k.arg: (k.value, scope, line) for k in call.keywords if k.arg}


def _bind(init: ast.FunctionDef | ast.AsyncFunctionDef, positional: list[Argument], keywords: dict[str, Argument]
          ) -> dict[str, Argument] | None:
    """The parameters of ``init`` (after ``self``) these arguments bind; None when they do not fit."""
    names = [a.arg for a in (*init.args.posonlyargs, *init.args.args)][1:]
    if len(positional) > len(names) and init.args.vararg is None:
        return None
    return {**dict(zip(names, positional)), **keywords}


def method_resolution(ev: Evaluation, cls: ClassInfo) -> list[ClassInfo]:
    """The class, then its bases depth first as written (a simplified MRO: single inheritance is exact)."""
    out: list[ClassInfo] = []
    stack = [cls]
    while stack and len(out) < MAX_BASES:
        current = stack.pop(0)
        if any(c.node is current.node for c in out):
            continue
        out.append(current)
        for base in current.node.bases:
            found = _class_named(ev, base, current.module)
            if found is not None:
                stack.append(found)
    return out


def objects_of(ev: Evaluation, cls: ClassInfo) -> list[Object]:
    """Every object the code read makes of ``cls`` or a subclass of it (one per constructor call site): calls
    of a class by its name (``Runner(...)``, ``module.Runner(...)``), never through ``self``."""
    modules = ev.modules()
    if cls.objects is not None and cls.objects[0] == len(modules):
        return cls.objects[1]
    out: list[Object] = []
    for module in modules:
        for node, scope in module.effect_nodes:
            if not isinstance(node, ast.Call):
                continue
            callee = dotted(node.func)
            if callee is None or callee.split(".")[0] in ("self", "cls", "super"):
                continue
            made = _class_named(ev, node.func, module, scope, node.lineno)
            if made is not None and any(c.node is cls.node for c in method_resolution(ev, made)):
                out.append(_object(ev, made, node, scope))
    cls.objects = (len(modules), out)
    return out


def _object(ev: Evaluation, cls: ClassInfo, call: ast.Call, scope: Scope | None) -> Object:
    """The one object a constructor call makes (however often it is evaluated)."""
    def make() -> Object:
        return Object(cls, call, scope, call.lineno)

    return ev.made(call, make)


def _class_named(ev: Evaluation, node: ast.expr, module: ModuleInfo, scope: Scope | None = None,
                 line: int = END) -> ClassInfo | None:
    try:
        value, _ = ev.eval(node, scope or module.scope, line, 1)
    except NoValue:
        return None
    return value if isinstance(value, ClassInfo) else None


def _enclosing_method(ev: Evaluation, scope: Scope | None) -> ClassInfo | None:
    """The class of the innermost method around ``scope``, when its first parameter is ``self``."""
    current = scope
    while current is not None:
        fnode = current.node
        if isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module = ev.module_of(current)
            owner = _methods_by_class(ev, module).get(id(fnode))
            params = [a.arg for a in (*fnode.args.posonlyargs, *fnode.args.args)]
            if owner is not None and params[:1] == ["self"]:
                cls = _class_named(ev, ast.Name(owner.name, ast.Load()), module)
                return cls if cls is not None and cls.node is owner else None
        current = current.parent
    return None


def _methods_by_class(ev: Evaluation, module: ModuleInfo) -> dict[int, ast.ClassDef]:
    """Which class defines each method of the module (found once per module)."""
    def find() -> dict[int, ast.ClassDef]:
        return class_of_methods(module)

    return ev.made(module.tree, find)


def _methods(cls: ClassInfo) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [s for s in cls.node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _method(cls: ClassInfo, wanted: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    return next((m for m in _methods(cls) if m.name == wanted), None)


def _scope_of(cls: ClassInfo, method: ast.AST) -> Scope | None:
    """The scope the module's walk made for ``method``."""
    for _, scope in cls.module.effect_nodes:
        current: Scope | None = scope
        while current is not None:
            if current.node is method:
                return current
            current = current.parent
    return None


def _targets(stmt: ast.Assign | ast.AnnAssign, attr: str) -> bool:
    """A class-body statement assigns the class attribute ``attr``."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    return any(isinstance(t, ast.Name) and t.id == attr for t in targets)


def _assigns(method: ast.AST, attr: str) -> bool:
    return any(isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and _self_target(s, attr)
               for s in own_nodes(method))


def _self_target(stmt: ast.Assign | ast.AnnAssign | ast.AugAssign, attr: str) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    return any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
               and t.value.id == "self" for t in targets)


def _super_init(init: ast.AST) -> ast.Call | None:
    """The ``super().__init__(...)`` call of an ``__init__``, if it makes one."""
    for node in own_nodes(init):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == INIT:
            owner = node.func.value
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                return node
    return None


