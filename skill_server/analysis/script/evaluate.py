"""Static values of expressions: what a script's expression is before anything runs, or why it is unknown.

Resolved: literals and arithmetic on them, names assigned before use (function scope, then module
scope), constants of modules next to the script, dataclass field defaults and arguments, functions
called once (their parameters) or returning one expression, ``__file__``-relative paths, environment
defaults (``os.getenv("X", "4")``: the value when X is unset, an ``env`` assumption) and argparse
defaults reached through ``args.x`` (the value when the option is not given, a ``cli`` assumption).
Anything else raises ``NoValue`` with the reason. Integers stay exact and bounded; nesting is bounded.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skill_server.analysis.script import paths
from skill_server.analysis.script.argparse_defaults import (
    OPAQUE_ITEM,
    PARSER_CALLS,
    ArgParser,
    ParsedArgs,
    option_default,
)
from skill_server.analysis.script.model import (
    Assumption,
    ImportedModule,
    ImportedName,
    Opaque,
    PathRef,
    Prov,
    Scope,
    Value,
    combine,
)
from skill_server.analysis.script.modules import DataclassDef, ModuleInfo, ModuleLoader, dotted
from skill_server.analysis.script.static import NoValue, arith, as_str, bounded, hashable, is_number, path_join, plain

MAX_DEPTH = 24
END = 10 ** 9  # "after every line": the value a module name has once the module has run
LITERAL = Prov("literal")
IMPORTED_AS_CONSTANT = ("literal", "constant", "arithmetic", "imported constant")  # a module's own computed constant

ENV_GET = ("os.getenv", "getenv", "os.environ.get", "environ.get")
PATH_CALLS = ("os.path.abspath", "os.path.realpath", "os.path.normpath", "os.path.expanduser", "os.fspath",
              "abspath", "realpath", "normpath", "expanduser", "Path", "pathlib.Path", "PurePath", "str")


@dataclass(eq=False)
class Instance:
    """A dataclass object created in the script (``cfg = CocktailConfig(grpo_n=4)``)."""

    cls: DataclassDef
    overrides: dict[str, ast.expr]
    scope: Scope | None
    line: int


class Evaluator:
    """Evaluates expressions of the script (and of modules next to it) statically."""

    def __init__(self, main: ModuleInfo, loader: ModuleLoader, note: Callable[[str], None]) -> None:
        self.main = main
        self.loader = loader
        self.note = note
        self._parsers: dict[int, ArgParser] = {}

    # -- public

    def resolve(self, node: ast.expr, scope: Scope | None, line: int) -> Value:
        module: ModuleInfo = scope.module if scope is not None and scope.module is not None else self.main
        text = module.text(node)
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
            return paths.literal_path(value)
        return None

    # -- the evaluator

    def eval(self, node: ast.expr, scope: Scope | None, line: int, depth: int) -> tuple[Any, Prov]:
        if depth > MAX_DEPTH:
            raise NoValue(f"the expression nests deeper than {MAX_DEPTH} levels")
        d = depth + 1
        if isinstance(node, ast.Constant):
            return bounded(node.value), LITERAL
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
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
        if isinstance(node, ast.Dict):
            return self._dict(node, scope, line, d)
        if isinstance(node, ast.UnaryOp):
            v, p = self.eval(node.operand, scope, line, d)
            if isinstance(node.op, ast.USub) and is_number(v):
                return -v, p
            if isinstance(node.op, ast.UAdd) and is_number(v):
                return +v, p
            if isinstance(node.op, ast.Not) and plain(v):
                return (not v), p
            raise NoValue("an operation on a value known only at run time")
        if isinstance(node, ast.BinOp):
            left, pl = self.eval(node.left, scope, line, d)
            right, pr = self.eval(node.right, scope, line, d)
            if isinstance(left, PathRef) and isinstance(node.op, ast.Div):
                return path_join(left, right), combine([pl, pr], "path")
            return arith(node.op, left, right), combine([pl, pr], "arithmetic")
        if isinstance(node, ast.BoolOp):
            return self._boolop(node, scope, line, d)
        if isinstance(node, ast.IfExp):
            test, pt = self.eval(node.test, scope, line, d)
            if not plain(test):
                raise NoValue("a condition known only at run time")
            v, p = self.eval(node.body if test else node.orelse, scope, line, d)
            return v, combine([pt, p])
        if isinstance(node, ast.Compare):
            return self._compare(node, scope, line, d)
        if isinstance(node, ast.JoinedStr):
            return self._fstring(node, scope, line, d)
        if isinstance(node, ast.Name):
            return self._name(node.id, scope, line, d)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, scope, line, d)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, scope, line, d)
        if isinstance(node, ast.Call):
            return self._call(node, scope, line, d)
        raise NoValue(f"{type(node).__name__.lower()} expressions are not read statically")

    def _dict(self, node: ast.Dict, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
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

    def _boolop(self, node: ast.BoolOp, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
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

    def _compare(self, node: ast.Compare, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
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

    def _fstring(self, node: ast.JoinedStr, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
        """f"{HERE}/x.yaml" (a path placeholder first) or an f-string of resolvable pieces."""
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
            return path_join(base, "".join(parts).lstrip("/")), combine(provs, "path")
        return "".join(parts), combine(provs)

    # -- names and bindings

    def _name(self, name: str, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
        if name == "__file__":
            module = scope.module if scope is not None and scope.module is not None else self.main
            return PathRef("script_file", str(module.path)), Prov("path")
        if scope is None:
            raise NoValue(f"{name} is not assigned in the script")
        param = self._parameter(name, scope, d)
        if param is not None:
            return param
        found = scope.lookup(name, line)
        if found is None:
            raise NoValue(f"{name} is not assigned a static value before line {line}")
        owner, binding = found
        return self._binding(binding, owner, name, d)

    def _binding(self, binding: Any, owner: Scope, name: str, d: int) -> tuple[Any, Prov]:
        if isinstance(binding, ast.expr):
            v, p = self.eval(binding, owner, getattr(binding, "lineno", END), d)
            imported = owner.module is not self.main
            if p.how == "literal" or (imported and p.how in IMPORTED_AS_CONSTANT):
                p = Prov("imported constant" if imported else "constant", p.assumes)
            return v, p
        if isinstance(binding, ImportedName):
            module = self._module(binding.module, binding.level, owner)
            found = module.scope.lookup(binding.name, END)
            if found is None:
                raise NoValue(f"{binding.name} is not assigned a static value in {module.path.name}")
            v, p = self._binding(found[1], found[0], binding.name, d + 1)
            return v, (Prov("imported constant", p.assumes) if p.how in IMPORTED_AS_CONSTANT else p)
        if isinstance(binding, ImportedModule):
            if self.loader.find(binding.module, 0, owner.module or self.main) is None:
                raise NoValue(f"{name} is the imported module {binding.module}, which is not read statically")
            return self._module(binding.module, 0, owner), LITERAL
        if isinstance(binding, (DataclassDef, Scope)):
            return binding, LITERAL
        if isinstance(binding, Opaque):
            raise NoValue(binding.why)
        raise NoValue(f"{name} has no static value")

    def _module(self, module: str, level: int, owner: Scope) -> ModuleInfo:
        importer = owner.module if owner.module is not None else self.main
        found = self.loader.find(module, level, importer)
        if found is None:
            raise NoValue(f"{'.' * level}{module} is not a module next to the script (only those are read)")
        return found

    def _parameter(self, name: str, scope: Scope, d: int) -> tuple[Any, Prov] | None:
        """A parameter's value: what the function's single call passes (or its default), or, for a parameter
        typed with a dataclass, that dataclass's defaults. None: ``name`` is not a parameter here."""
        current: Scope | None = scope
        while current is not None:
            if name in current.params:
                if current.assigned.get(name):
                    return None
                passed = self._single_call_argument(current, name, d)
                if passed is not None:
                    return passed
                ann = current.params[name]
                ann_name = dotted(ann) if ann is not None else None
                if ann_name is None and isinstance(ann, ast.Constant) and isinstance(ann.value, str):
                    ann_name = ann.value
                definition = self._dataclass_named(ann_name.split(".")[-1], current) if ann_name else None
                if definition is not None:
                    self.note(f"parameter {name} of {current.name}() is read with the dataclass defaults of "
                              f"{definition.name} (callers may pass other values)")
                    return Instance(definition, {}, None, 0), Prov("dataclass default")
                raise NoValue(f"{name} is a parameter of {current.name}(), set by its callers")
            if current.assigned.get(name):
                return None
            current = current.parent
        return None

    def _single_call_argument(self, fscope: Scope, pname: str, d: int) -> tuple[Any, Prov] | None:
        """A function called exactly once: the value its call passes for ``pname`` (or the default)."""
        fnode = fscope.node
        if len(fscope.call_nodes) != 1 or not isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        caller, call = fscope.call_nodes[0]
        args = fnode.args
        positional = [a.arg for a in (*args.posonlyargs, *args.args)]
        arg = next((k.value for k in call.keywords if k.arg == pname), None)
        owner, at = caller, call.lineno
        if arg is None and pname in positional and positional.index(pname) < len(call.args):
            arg = call.args[positional.index(pname)]
            if any(isinstance(a, ast.Starred) for a in call.args[:positional.index(pname) + 1]):
                return None
        if arg is None:  # not passed: the parameter's default, evaluated where the function is defined
            defaults = dict(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            defaults.update({a.arg: v for a, v in zip(args.kwonlyargs, args.kw_defaults) if v is not None})
            if pname not in defaults or any(k.arg is None for k in call.keywords):
                return None
            arg, owner, at = defaults[pname], fscope.parent or fscope, fnode.lineno
        try:
            return self.eval(arg, owner, at, d)
        except NoValue:
            return None

    def _dataclass_named(self, name: str, scope: Scope) -> DataclassDef | None:
        found = scope.lookup(name, None)
        if found is not None:
            try:
                value, _ = self._binding(found[1], found[0], name, 1)
            except NoValue:
                value = None
            if isinstance(value, DataclassDef):
                return value
        module = scope.module if scope.module is not None else self.main
        return module.dataclasses.get(name)

    # -- attributes, items, calls

    def _attribute(self, node: ast.Attribute, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
        owner, prov = self.eval(node.value, scope, line, d)
        if isinstance(owner, Instance):
            return self._field(owner, node.attr, d)
        if isinstance(owner, DataclassDef):  # Cfg.field: the class attribute is the default
            return self._field(Instance(owner, {}, None, line), node.attr, d)
        if isinstance(owner, ModuleInfo):
            found = owner.scope.lookup(node.attr, END)
            if found is None:
                raise NoValue(f"{node.attr} is not assigned a static value in {owner.path.name}")
            v, p = self._binding(found[1], found[0], node.attr, d)
            return v, (Prov("imported constant", p.assumes) if p.how in IMPORTED_AS_CONSTANT else p)
        if isinstance(owner, ParsedArgs):
            return option_default(self, owner.parser, node.attr, d)
        if isinstance(owner, PathRef) and node.attr == "parent":
            return paths.parent(owner), prov
        raise NoValue(f"attribute .{node.attr} of a value known only at run time")

    def _subscript(self, node: ast.Subscript, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
        if dotted(node.value) == "sys.argv":
            raise NoValue("a command-line argument (sys.argv), known only at run time")
        if dotted(node.value) in ("os.environ", "environ"):
            name = self._env_name(node.slice, scope, line, d)
            raise NoValue(f"environment variable {name} (read with os.environ[...], which has no default)")
        base, pb = self.eval(node.value, scope, line, d)
        key, pk = self.eval(node.slice, scope, line, d)
        try:
            item = base[key]
        except (KeyError, IndexError, TypeError):
            raise NoValue("an item that is not there statically") from None
        if item is OPAQUE_ITEM:
            raise NoValue("the list of command-line arguments argparse did not recognise")
        return item, combine([pb, pk])

    def _field(self, inst: Instance, attr: str, d: int) -> tuple[Any, Prov]:
        fields = inst.cls.fields
        if attr in inst.overrides:
            v, p = self.eval(inst.overrides[attr], inst.scope, inst.line, d)
            return v, combine([p], "dataclass argument")
        if attr not in fields:
            raise NoValue(f"{inst.cls.name} has no field {attr}")
        default = fields[attr]
        if default is None:
            raise NoValue(f"{inst.cls.name}.{attr} has no default")
        home = inst.cls.module.scope
        if isinstance(default, ast.Call) and dotted(default.func) in ("field", "dataclasses.field"):
            for kw in default.keywords:
                if kw.arg == "default":
                    v, p = self.eval(kw.value, home, END, d)
                    return v, combine([p], "dataclass default")
                if kw.arg == "default_factory":
                    factory = kw.value
                    if isinstance(factory, ast.Lambda):
                        v, p = self.eval(factory.body, home, END, d)
                        return v, combine([p], "dataclass default")
                    made, _ = self.eval(factory, home, END, d)
                    if isinstance(made, DataclassDef):
                        return Instance(made, {}, None, 0), Prov("dataclass default")
                    if dotted(factory) in ("list", "dict"):
                        return ([] if dotted(factory) == "list" else {}), Prov("dataclass default")
            raise NoValue(f"{inst.cls.name}.{attr} has no static default")
        v, p = self.eval(default, home, END, d)
        return v, combine([p], "dataclass default")

    def _env_name(self, node: ast.expr, scope: Scope | None, line: int, d: int) -> str:
        try:
            name, _ = self.eval(node, scope, line, d)
        except NoValue:
            raise NoValue("an environment variable whose name is computed at run time") from None
        if not isinstance(name, str):
            raise NoValue("an environment variable whose name is not a string")
        return name

    def _call(self, node: ast.Call, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
        name = dotted(node.func)
        args = node.args
        if name in ENV_GET and args and not node.keywords:
            var = self._env_name(args[0], scope, line, d)
            module = scope.module if scope is not None and scope.module is not None else self.main
            if len(args) > 1:
                value, p = self.eval(args[1], scope, line, d)
                default_text = module.text(args[1])
            else:
                value, p, default_text = None, LITERAL, "None"
            return value, combine([p, Prov("env-default", (Assumption("env", var, default_text),))])
        if name in ("os.path.join", "path.join") and args:
            out, p = self.eval(args[0], scope, line, d)
            out = out if isinstance(out, PathRef) else paths.literal_path(as_str(out))
            provs = [p]
            for a in args[1:]:
                part, pa = self.eval(a, scope, line, d)
                out = path_join(out, part)
                provs.append(pa)
            return out, combine(provs, "path")
        if name in ("os.path.dirname", "path.dirname", "dirname") and len(args) == 1:
            v, p = self.eval(args[0], scope, line, d)
            return paths.parent(v if isinstance(v, PathRef) else paths.literal_path(as_str(v))), combine([p], "path")
        if name in PATH_CALLS and args:
            return self._path_call(name, node, scope, line, d)
        if name in ("int", "float", "bool") and len(args) == 1 and not node.keywords:
            v, p = self.eval(args[0], scope, line, d)
            if not plain(v) or isinstance(v, (list, dict)):
                raise NoValue(f"{name}() of a value known only at run time")
            try:
                return bounded({"int": int, "float": float, "bool": bool}[name](v)), p
            except (TypeError, ValueError, OverflowError):
                raise NoValue(f"{name}({v!r}) fails at run time") from None
        if name == "dict" and not args:
            out_d: dict[str, Any] = {}
            provs = []
            for kw in node.keywords:
                if kw.arg is None:
                    raise NoValue("dict(**...) of a value known only at run time")
                v, p = self.eval(kw.value, scope, line, d)
                out_d[kw.arg] = v.path if isinstance(v, PathRef) else v
                provs.append(p)
            return out_d, combine(provs)
        if name in ("min", "max") and args and not node.keywords:
            values, provs = [], []
            for a in args:
                v, p = self.eval(a, scope, line, d)
                values.append(v)
                provs.append(p)
            if all(is_number(v) for v in values):
                return (min if name == "min" else max)(values), combine(provs, "arithmetic")
            raise NoValue(f"{name}() of values known only at run time")
        if name in PARSER_CALLS:
            return self._parsers.setdefault(id(node), ArgParser(node.lineno)), LITERAL
        if isinstance(node.func, ast.Attribute):
            return self._method(node, scope, line, d)
        try:
            callee, _ = self.eval(node.func, scope, line, d)
        except NoValue:
            raise NoValue(f"{_short(node.func)}(...) is computed at run time") from None
        return self._call_value(callee, node, scope, line, d)

    def _path_call(self, name: str, node: ast.Call, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
        short = name.split(".")[-1]
        v, p = self.eval(node.args[0], scope, line, d)
        provs = [p]
        if isinstance(v, PathRef) or short in ("Path", "PurePath"):
            ref = v if isinstance(v, PathRef) else paths.literal_path(as_str(v))
            for a in node.args[1:]:
                part, pa = self.eval(a, scope, line, d)
                ref = path_join(ref, part)
                provs.append(pa)
            if short == "str" and len(node.args) > 1:
                raise NoValue("str() with several arguments")
            return ref, combine(provs, "path")
        if short == "str" and len(node.args) == 1 and plain(v):
            return str(v), p
        if len(node.args) == 1 and isinstance(v, str):
            return paths.literal_path(v), combine(provs, "path")
        raise NoValue(f"{name}() of a value known only at run time")

    def _method(self, node: ast.Call, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
        func = node.func
        assert isinstance(func, ast.Attribute)
        owner, p = self.eval(func.value, scope, line, d)
        attr = func.attr
        if isinstance(owner, PathRef):
            if attr in ("resolve", "absolute", "expanduser"):
                return owner, p
            if attr == "joinpath":
                out = owner
                provs = [p]
                for a in node.args:
                    part, pa = self.eval(a, scope, line, d)
                    out = path_join(out, part)
                    provs.append(pa)
                return out, combine(provs, "path")
        if isinstance(owner, str) and attr in ("lower", "upper", "strip") and not node.args:
            return getattr(owner, attr)(), p
        if isinstance(owner, dict) and attr == "get" and 1 <= len(node.args) <= 2:
            key, pk = self.eval(node.args[0], scope, line, d)
            if not hashable(key):
                raise NoValue("a dict key known only at run time")
            if key in owner:
                return owner[key], combine([p, pk])
            if len(node.args) == 2:
                v, pv = self.eval(node.args[1], scope, line, d)
                return v, combine([p, pk, pv])
            return None, combine([p, pk])
        if isinstance(owner, ArgParser):
            if attr in ("add_argument_group", "add_mutually_exclusive_group"):
                return owner, p
            if attr in ("parse_args", "parse_known_args"):
                given = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "args"), None)
                if given is not None and not (isinstance(given, (ast.List, ast.Tuple)) and not given.elts):
                    raise NoValue(f"{attr}() is given an explicit argument list")
                parsed = ParsedArgs(owner)
                return (parsed if attr == "parse_args" else (parsed, OPAQUE_ITEM)), p
        if isinstance(owner, ModuleInfo):
            found = owner.scope.lookup(attr, END)
            if found is not None:
                callee, _ = self._binding(found[1], found[0], attr, d)
                return self._call_value(callee, node, scope, line, d)
        raise NoValue(f".{attr}() is computed at run time")

    def _call_value(self, callee: Any, node: ast.Call, scope: Scope | None, line: int, d: int) -> tuple[Any, Prov]:
        if isinstance(callee, DataclassDef):
            overrides = {k.arg: k.value for k in node.keywords if k.arg}
            if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
                raise NoValue(f"{callee.name}(...) with ** or * arguments")
            names = list(callee.fields)
            overrides.update({names[i]: a for i, a in enumerate(node.args) if i < len(names)})
            return Instance(callee, overrides, scope, line), Prov("dataclass default")
        if isinstance(callee, Scope) and isinstance(callee.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return self._function_result(callee, node, d)
        raise NoValue(f"{_short(node.func)}(...) is computed at run time")

    def _function_result(self, fscope: Scope, call: ast.Call, d: int) -> tuple[Any, Prov]:
        """A function of the script without arguments at this call and one ``return EXPR``: that EXPR."""
        fnode = fscope.node
        assert isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef))
        if call.args or call.keywords or isinstance(fnode, ast.AsyncFunctionDef):
            raise NoValue(f"the result of {fnode.name}(...) is computed at run time")
        returns = [n for n in _own_nodes(fnode) if isinstance(n, ast.Return)]
        if len(returns) != 1 or returns[0].value is None:
            raise NoValue(f"the result of {fnode.name}() is computed at run time")
        return self.eval(returns[0].value, fscope, returns[0].lineno, d + 1)


# --- helpers ---------------------------------------------------------------------------------------

_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b, ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}


def _own_nodes(fnode: ast.AST) -> list[ast.AST]:
    """Nodes of a function body, not those of functions, classes or lambdas defined inside it."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(fnode))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _short(node: ast.AST) -> str:
    return dotted(node) or type(node).__name__


def _kind(value: Any) -> str:
    if isinstance(value, Instance):
        return f"a {value.cls.name} object"
    if isinstance(value, ParsedArgs):
        return "the parsed command line"
    if isinstance(value, ModuleInfo):
        return f"the module {value.name}"
    if isinstance(value, DataclassDef):
        return f"the class {value.name}"
    return f"a {type(value).__name__}"


