"""The static evaluator's core: what an expression of the script is before anything runs, or why it is unknown.

The core reads the language: literals and containers, operators and conditions, f-strings, names assigned
before use (function scope, then module scope), constants of modules next to the script, a function's
parameter as every call of the function passes it (all callers agreeing; a default where a call leaves it
out), or as the call being followed binds it (``call_with``), and the result of a script function called
without arguments that returns one expression. What a library gives a meaning to (environment reads,
paths, builtins, argparse, dataclasses, ...) the core asks of the registered units (``registry``; the
units are the files of ``units/``). Anything else raises ``NoValue`` with the reason. Integers stay exact
and bounded; nesting is bounded.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any, TypeVar

import skill_server.analysis.script.registry as registry
from skill_server.analysis.script.model import (
    END,
    LITERAL,
    Binding,
    ImportedModule,
    ImportedName,
    ModuleInfo,
    Opaque,
    PathRef,
    Prov,
    Scope,
    Value,
    combine,
)
from skill_server.analysis.script.modules import ModuleLoader, bind_arguments, default_argument, dotted
from skill_server.analysis.script.paths import join, literal_path
from skill_server.analysis.script.registry import Result, Site, by_type
from skill_server.analysis.script.static import (
    OPAQUE_ITEM,
    NoValue,
    agree,
    arith,
    bounded,
    hashable,
    is_number,
    own_nodes,
    plain,
)

MAX_DEPTH = 24
IMPORTED_AS_CONSTANT = ("literal", "constant", "arithmetic", "imported constant")  # a module's own computed constant

T = TypeVar("T")


class Evaluator:
    """Evaluates expressions of the script (and of modules next to it) statically; implements
    ``registry.Evaluation``, the face the units see."""

    def __init__(self, main: ModuleInfo, loader: ModuleLoader, note: Callable[[str], None]) -> None:
        self.main = main
        self.loader = loader
        self._note = note
        self._made: dict[int, Any] = {}
        #: id(function scope) -> the calls being evaluated into it, innermost last: parameter -> (argument, where)
        self._frames: dict[int, list[dict[str, tuple[ast.expr, Scope | None, int]]]] = {}

    # -- public

    def resolve(self, node: ast.expr, scope: Scope | None, line: int) -> Value:
        text = self.module_of(scope).text(node)
        try:
            value, prov = self.eval(node, scope, line, 0)
        except NoValue as exc:
            return Value(None, False, text, "unresolved", why=exc.why)
        except (RecursionError, MemoryError):
            return Value(None, False, text, "unresolved", why="too deeply nested to read statically")
        if isinstance(value, PathRef):
            return Value(value.path, True, text, f"path ({value.anchor})", prov.assumes)
        if not plain(value):
            return Value(None, False, text, "unresolved", why=f"{_kind(value)}, not a plain value")
        return Value(value, True, text, prov.how, prov.assumes)

    def resolve_path(self, node: ast.expr, scope: Scope, line: int) -> PathRef | None:
        try:
            value, _ = self.eval(node, scope, line, 0)
        except (NoValue, RecursionError, MemoryError):
            return None
        if isinstance(value, PathRef):
            return value
        if isinstance(value, str):
            return literal_path(value)
        return None

    # -- registry.Evaluation

    def eval(self, node: ast.expr, scope: Scope | None, line: int, depth: int) -> Result:
        if depth > MAX_DEPTH:
            raise NoValue(f"the expression nests deeper than {MAX_DEPTH} levels")
        read = _NODES.get(type(node))
        if read is None:
            raise NoValue(f"{type(node).__name__.lower()} expressions are not read statically")
        return read(self, node, scope, line, depth + 1)

    def binding(self, binding: Binding, owner: Scope, name: str, depth: int) -> Result:
        if isinstance(binding, ast.expr):
            v, p = self.eval(binding, owner, getattr(binding, "lineno", END), depth)
            imported = owner.module is not self.main
            if p.how == "literal" or (imported and p.how in IMPORTED_AS_CONSTANT):
                p = Prov("imported constant" if imported else "constant", p.assumes)
            return v, p
        if isinstance(binding, ImportedName):
            module = self._module(binding.module, binding.level, owner)
            found = module.scope.lookup(binding.name, END)
            if found is None:
                raise NoValue(f"{binding.name} is not assigned a static value in {module.path.name}")
            v, p = self.binding(found[1], found[0], binding.name, depth + 1)
            return v, (Prov("imported constant", p.assumes) if p.how in IMPORTED_AS_CONSTANT else p)
        if isinstance(binding, ImportedModule):
            if self.loader.find(binding.module, 0, self.module_of(owner)) is None:
                raise NoValue(f"{name} is the imported module {binding.module}, which is not read statically")
            return self._module(binding.module, 0, owner), LITERAL
        if isinstance(binding, Opaque):
            raise NoValue(binding.why)
        if binding is None:
            raise NoValue(f"{name} has no static value")
        return binding, LITERAL  # a function (its Scope) or what a unit made of a class statement

    def module_of(self, scope: Scope | None) -> ModuleInfo:
        return scope.module if scope is not None and scope.module is not None else self.main

    def made(self, node: ast.AST, make: Callable[[], T]) -> T:
        if id(node) not in self._made:
            self._made[id(node)] = make()
        made: T = self._made[id(node)]
        return made

    def note(self, text: str) -> None:
        self._note(text)

    def modules(self) -> list[ModuleInfo]:
        return [self.main, *(m for m in self.loader.modules if m is not self.main)]

    def call_with(self, frames: list[tuple[Scope, dict[str, tuple[ast.expr, Scope | None, int]]]], node: ast.expr,
                  scope: Scope, line: int, depth: int) -> Result:
        for function, arguments in frames:
            self._frames.setdefault(id(function), []).append(arguments)
        try:
            return self.eval(node, scope, line, depth)
        finally:
            for function, _ in reversed(frames):
                self._frames[id(function)].pop()

    # -- literals, operators, conditions

    def _constant(self, node: ast.Constant, scope: Scope | None, line: int, d: int) -> Result:
        return bounded(node.value), LITERAL

    def _sequence(self, node: ast.List | ast.Tuple | ast.Set, scope: Scope | None, line: int, d: int) -> Result:
        items, provs = [], []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                raise NoValue("a starred element")
            v, p = self.eval(elt, scope, line, d)
            items.append(v)
            provs.append(p)
        if isinstance(node, ast.Tuple) and any(i is OPAQUE_ITEM for i in items):
            return tuple(items), combine(provs)
        return items, combine(provs)

    def _dict(self, node: ast.Dict, scope: Scope | None, line: int, d: int) -> Result:
        out: dict[Any, Any] = {}
        provs: list[Prov] = []
        for k, v in zip(node.keys, node.values):
            if k is None:
                inner, p = self.eval(v, scope, line, d)
                if not isinstance(inner, dict):
                    raise NoValue("a ** splat of something other than a dict")
                out.update(inner)
                provs.append(p)
                continue
            kk, pk = self.eval(k, scope, line, d)
            vv, pv = self.eval(v, scope, line, d)
            if isinstance(vv, PathRef):
                vv = vv.path
            if not hashable(kk):
                raise NoValue("a dict key known only at run time")
            out[kk] = vv
            provs += [pk, pv]
        return out, combine(provs)

    def _unary(self, node: ast.UnaryOp, scope: Scope | None, line: int, d: int) -> Result:
        v, p = self.eval(node.operand, scope, line, d)
        if isinstance(node.op, ast.USub) and is_number(v):
            return -v, p
        if isinstance(node.op, ast.UAdd) and is_number(v):
            return +v, p
        if isinstance(node.op, ast.Not) and plain(v):
            return (not v), p
        raise NoValue("an operation on a value known only at run time")

    def _binary(self, node: ast.BinOp, scope: Scope | None, line: int, d: int) -> Result:
        left, pl = self.eval(node.left, scope, line, d)
        right, pr = self.eval(node.right, scope, line, d)
        for unit in by_type(registry.OPERATORS, left):
            result = unit(node.op, left, pl, right, pr)
            if result is not None:
                return result
        return arith(node.op, left, right), combine([pl, pr], "arithmetic")

    def _boolop(self, node: ast.BoolOp, scope: Scope | None, line: int, d: int) -> Result:
        provs: list[Prov] = []
        value: Any = None
        for operand in node.values:
            value, p = self.eval(operand, scope, line, d)
            if not plain(value):
                raise NoValue("a condition known only at run time")
            provs.append(p)
            if isinstance(node.op, ast.Or) and value:
                break
            if isinstance(node.op, ast.And) and not value:
                break
        return value, combine(provs)

    def _ifexp(self, node: ast.IfExp, scope: Scope | None, line: int, d: int) -> Result:
        test, pt = self.eval(node.test, scope, line, d)
        if not plain(test):
            raise NoValue("a condition known only at run time")
        v, p = self.eval(node.body if test else node.orelse, scope, line, d)
        return v, combine([pt, p])

    def _compare(self, node: ast.Compare, scope: Scope | None, line: int, d: int) -> Result:
        left, p = self.eval(node.left, scope, line, d)
        provs = [p]
        result = True
        for op, right_node in zip(node.ops, node.comparators):
            right, pr = self.eval(right_node, scope, line, d)
            provs.append(pr)
            if not (plain(left) and plain(right)):
                raise NoValue("a comparison of values known only at run time")
            try:
                ok = _COMPARE[type(op)](left, right)
            except (TypeError, KeyError):
                raise NoValue("a comparison that is not read statically") from None
            result = result and bool(ok)
            left = right
        return result, combine(provs)

    def _fstring(self, node: ast.JoinedStr, scope: Scope | None, line: int, d: int) -> Result:
        """f"{HERE}/x.yaml" (a path placeholder first: a path) or an f-string of resolvable pieces."""
        base: PathRef | None = None
        parts: list[str] = []
        provs: list[Prov] = []
        for i, piece in enumerate(node.values):
            if isinstance(piece, ast.Constant):
                parts.append(str(piece.value))
                continue
            if not (isinstance(piece, ast.FormattedValue) and piece.format_spec is None and piece.conversion == -1):
                raise NoValue("a formatted f-string field")
            v, p = self.eval(piece.value, scope, line, d)
            provs.append(p)
            if isinstance(v, PathRef) and i == 0:
                base = v
                continue
            if not plain(v) or isinstance(v, (list, dict)):
                raise NoValue("an f-string field known only at run time")
            parts.append(str(v))
        if base is not None:
            return join(base, "".join(parts).lstrip("/")), combine(provs, "path")
        return "".join(parts), combine(provs)

    # -- names and bindings

    def _name(self, node: ast.Name, scope: Scope | None, line: int, d: int) -> Result:
        name = node.id
        for unit in registry.NAMES.get(name, ()):
            result = unit(Site(self, scope, line, d))
            if result is not None:
                return result
        if scope is None:
            raise NoValue(f"{name} is not assigned in the script")
        param = self._parameter(name, scope, d)
        if param is not None:
            return param
        found = scope.lookup(name, line)
        if found is None:
            raise NoValue(f"{name} is not assigned a static value before line {line}")
        owner, binding = found
        return self.binding(binding, owner, name, d)

    def _module(self, module: str, level: int, owner: Scope) -> ModuleInfo:
        found = self.loader.find(module, level, self.module_of(owner))
        if found is None:
            raise NoValue(f"{'.' * level}{module} is not a module next to the script (only those are read)")
        return found

    def _parameter(self, name: str, scope: Scope, d: int) -> Result | None:
        """A parameter's value: what the call being evaluated passes (``call_with``), else what every call of
        the function passes (they must agree; a default counts where a call leaves it out), else what a unit
        reads from the parameter's annotation when nothing calls the function. None: not a parameter here."""
        current: Scope | None = scope
        while current is not None:
            if name in current.params:
                if current.assigned.get(name):
                    return None
                framed = self._framed(current, name, d)
                if framed is not None:
                    return framed
                passed = self._from_callers(current, name, d)
                if passed is not None:
                    return passed
                ann = current.params[name]
                ann_name = dotted(ann) if ann is not None else None
                if ann_name is None and isinstance(ann, ast.Constant) and isinstance(ann.value, str):
                    ann_name = ann.value
                if ann_name:
                    for unit in registry.ANNOTATIONS:
                        result = unit(self, ann_name, current, name)
                        if result is not None:
                            return result
                raise NoValue(f"{name} is a parameter of {current.name}(), set by its callers")
            if current.assigned.get(name):
                return None
            current = current.parent
        return None

    def _framed(self, fscope: Scope, pname: str, d: int) -> Result | None:
        """The parameter's value in the call ``call_with`` is evaluating into ``fscope`` (its default when the
        call leaves it out); None when no such call is being evaluated."""
        frames = self._frames.get(id(fscope))
        if not frames:
            return None
        passed = frames[-1].get(pname)
        if passed is not None:
            return self.eval(passed[0], passed[1], passed[2], d)
        fnode = fscope.node
        default = default_argument(fnode, pname) if isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if default is None:
            raise NoValue(f"{pname} is not passed to {fscope.name}() and has no default")
        return self.eval(default, fscope.parent or fscope, getattr(fnode, "lineno", END), d)

    def _from_callers(self, fscope: Scope, pname: str, d: int) -> Result | None:
        """What every call of the function passes for ``pname`` (or the default it leaves in place), when they
        all agree; None when nothing calls it. A caller whose value is known only at run time, or callers that
        disagree, leave it unknown (raise)."""
        fnode = fscope.node
        if not fscope.call_nodes or not isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        found: list[tuple[Any, Prov, int]] = []
        for caller, call in fscope.call_nodes:
            bound = bind_arguments(fnode, call)
            if bound is None:
                raise NoValue(f"{pname} of {fscope.name}() is passed through * or ** at line {call.lineno}")
            if pname in bound:
                arg, owner, at = bound[pname], caller, call.lineno
            else:
                default = default_argument(fnode, pname)
                if default is None:
                    raise NoValue(f"the call of {fscope.name}() at line {call.lineno} does not pass {pname}")
                arg, owner, at = default, fscope.parent or fscope, fnode.lineno
            try:
                v, p = self.eval(arg, owner, at, d)
            except NoValue as exc:
                raise NoValue(f"{pname} of {fscope.name}() is {self.module_of(owner).text(arg)} at line {at}: "
                              f"{exc.why}") from None
            found.append((v, p, call.lineno))
        first = found[0]
        for other in found[1:]:
            if not agree(first[0], other[0]):
                raise NoValue(f"the callers of {fscope.name}() pass different values for {pname} (lines "
                              f"{first[2]} and {other[2]})")
        return first[0], combine([p for _, p, _ in found])

    # -- attributes, items, calls

    def _attribute(self, node: ast.Attribute, scope: Scope | None, line: int, d: int) -> Result:
        owner, prov = self.eval(node.value, scope, line, d)
        if isinstance(owner, ModuleInfo):
            found = owner.scope.lookup(node.attr, END)
            if found is None:
                raise NoValue(f"{node.attr} is not assigned a static value in {owner.path.name}")
            v, p = self.binding(found[1], found[0], node.attr, d)
            return v, (Prov("imported constant", p.assumes) if p.how in IMPORTED_AS_CONSTANT else p)
        for unit in by_type(registry.ATTRIBUTES, owner):
            result = unit(Site(self, scope, line, d), owner, prov, node.attr)
            if result is not None:
                return result
        raise NoValue(f"attribute .{node.attr} of a value known only at run time")

    def _subscript(self, node: ast.Subscript, scope: Scope | None, line: int, d: int) -> Result:
        name = dotted(node.value)
        for unit in registry.ITEMS.get(name, ()) if name else ():
            result = unit(Site(self, scope, line, d), node)
            if result is not None:
                return result
        base, pb = self.eval(node.value, scope, line, d)
        key, pk = self.eval(node.slice, scope, line, d)
        try:
            item = base[key]
        except (KeyError, IndexError, TypeError):
            raise NoValue("an item that is not there statically") from None
        if item is OPAQUE_ITEM:
            raise NoValue("the list of command-line arguments argparse did not recognise")
        return item, combine([pb, pk])

    def _call(self, node: ast.Call, scope: Scope | None, line: int, d: int) -> Result:
        name = dotted(node.func)
        for unit in registry.CALLS.get(name, ()) if name else ():
            result = unit(Site(self, scope, line, d), node)
            if result is not None:
                return result
        if isinstance(node.func, ast.Attribute):
            return self._method(node, node.func, scope, line, d)
        try:
            callee, _ = self.eval(node.func, scope, line, d)
        except NoValue:
            raise NoValue(f"{_short(node.func)}(...) is computed at run time") from None
        return self._call_value(callee, node, scope, line, d)

    def _method(self, node: ast.Call, func: ast.Attribute, scope: Scope | None, line: int, d: int) -> Result:
        owner, p = self.eval(func.value, scope, line, d)
        if isinstance(owner, ModuleInfo):
            found = owner.scope.lookup(func.attr, END)
            if found is not None:
                callee, _ = self.binding(found[1], found[0], func.attr, d)
                return self._call_value(callee, node, scope, line, d)
        for unit in by_type(registry.METHODS, owner):
            result = unit(Site(self, scope, line, d), owner, p, func.attr, node)
            if result is not None:
                return result
        raise NoValue(f".{func.attr}() is computed at run time")

    def _call_value(self, callee: Any, node: ast.Call, scope: Scope | None, line: int, d: int) -> Result:
        if isinstance(callee, Scope) and isinstance(callee.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return self._function_result(callee, node, d)
        for unit in by_type(registry.CALLABLES, callee):
            result = unit(Site(self, scope, line, d), callee, node)
            if result is not None:
                return result
        raise NoValue(f"{_short(node.func)}(...) is computed at run time")

    def _function_result(self, fscope: Scope, call: ast.Call, d: int) -> Result:
        """A function of the script without arguments at this call and one ``return EXPR``: that EXPR."""
        fnode = fscope.node
        assert isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef))
        if call.args or call.keywords or isinstance(fnode, ast.AsyncFunctionDef):
            raise NoValue(f"the result of {fnode.name}(...) is computed at run time")
        returns = [n for n in own_nodes(fnode) if isinstance(n, ast.Return)]
        if len(returns) != 1 or returns[0].value is None:
            raise NoValue(f"the result of {fnode.name}() is computed at run time")
        return self.eval(returns[0].value, fscope, returns[0].lineno, d + 1)


# --- helpers ---------------------------------------------------------------------------------------

#: How the core reads each kind of expression node (any other kind has no static value).
_NODES: dict[type, Callable[[Evaluator, Any, Scope | None, int, int], Result]] = {
    ast.Constant: Evaluator._constant,
    ast.List: Evaluator._sequence,
    ast.Tuple: Evaluator._sequence,
    ast.Set: Evaluator._sequence,
    ast.Dict: Evaluator._dict,
    ast.UnaryOp: Evaluator._unary,
    ast.BinOp: Evaluator._binary,
    ast.BoolOp: Evaluator._boolop,
    ast.IfExp: Evaluator._ifexp,
    ast.Compare: Evaluator._compare,
    ast.JoinedStr: Evaluator._fstring,
    ast.Name: Evaluator._name,
    ast.Attribute: Evaluator._attribute,
    ast.Subscript: Evaluator._subscript,
    ast.Call: Evaluator._call,
}

_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b, ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}


def _short(node: ast.AST) -> str:
    return dotted(node) or type(node).__name__


def _kind(value: Any) -> str:
    """How a message names a value that is not a plain config value."""
    if isinstance(value, ModuleInfo):
        return f"the module {value.name}"
    for cls in type(value).__mro__:
        describe = registry.KINDS.get(cls)
        if describe is not None:
            return describe(value)
    return f"a {type(value).__name__}"
