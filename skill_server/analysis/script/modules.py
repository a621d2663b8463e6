"""Reading Python modules statically: the client script and the modules next to it.

``parse_module`` reads and parses one file into a ``model.ModuleInfo`` and fills its symbol tables (scopes,
functions, classes, imports: ``walk_module``); what a ``class`` statement binds its name to is asked of the
evaluator's units (``registry.CLASSES``).
``ModuleLoader`` finds ``from cfg import X`` / ``import cfg`` targets next to the script and reads them
with ``ast`` only, on demand and at most ``MAX_MODULES`` of them. Nothing is imported or executed.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import skill_server.analysis.script.registry as registry
from skill_server.analysis.script.model import Binding, ImportedModule, ImportedName, ModuleInfo, Opaque, Scope
from skill_server.core.errors import ToolInputError
from skill_server.core.fsutil import read_text_bounded

MAX_SCRIPT_BYTES = 2 * 1024 * 1024
MAX_MODULES = 16  # sibling modules read per scan
MAX_PACKAGE_LEVELS = 8  # folders above the script looked at for the package its imports name


def parse_module(path: Path, *, field: str, name: str = "__main__") -> ModuleInfo:
    """Read and parse a script; every failure is a ``ToolInputError`` naming ``field``."""
    p, source = read_text_bounded(path, field=field, max_bytes=MAX_SCRIPT_BYTES, what="a client script",
                                  encoding="utf-8-sig")
    try:
        tree = ast.parse(source, filename=str(p))
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "") if exc.lineno else ""
        raise ToolInputError(f"{p} is not valid Python{where}: {exc.msg}", field=field) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ToolInputError(f"{p} cannot be parsed: {type(exc).__name__}", field=field) from None
    info = ModuleInfo(p.resolve(), source, tree, name)
    info.effect_nodes = walk_module(info)
    return info


class ModuleLoader:
    """Modules next to the script, parsed on first use; anything else is not read."""

    def __init__(self, script_dir: Path) -> None:
        self.script_dir = script_dir
        self.loaded: dict[Path, ModuleInfo | None] = {}
        self.notes: list[str] = []

    def find(self, module: str, level: int, importer: ModuleInfo) -> ModuleInfo | None:
        if not module and level == 0:
            return None
        base = importer.path.parent if level > 0 else self.script_dir
        for _ in range(max(0, level - 1)):
            base = base.parent
        parts = [p for p in module.split(".") if p]
        if level == 0 and (not parts or parts[0] == "ajet"):
            return None
        for folder in [base] + (self.package_roots(parts[0]) if level == 0 else []):
            for candidate in (folder.joinpath(*parts).with_suffix(".py") if parts else None,
                              folder.joinpath(*parts, "__init__.py")):
                if candidate is not None and candidate.is_file():  # FIFOs and devices are never opened
                    return self._load(candidate, module or candidate.parent.name, root=folder)
        return None

    def package_roots(self, top: str) -> list[Path]:
        """Folders above the script whose child ``top`` holds the script: ``from tutorial.x.cfg import C`` in
        ``<root>/tutorial/x/run.py`` names ``<root>/tutorial/x/cfg.py``, as when the script is run with
        ``python -m tutorial.x.run`` from ``<root>`` (AgentJet runs its tutorials so)."""
        chain = [self.script_dir, *list(self.script_dir.parents)[:MAX_PACKAGE_LEVELS]]
        return [folder.parent for folder in chain if folder.name == top and folder.parent != folder]

    def _load(self, path: Path, name: str, root: Path | None = None) -> ModuleInfo | None:
        path = path.resolve()
        if path in self.loaded:
            return self.loaded[path]
        if len(self.loaded) >= MAX_MODULES:
            self.notes.append(f"more than {MAX_MODULES} modules next to the script are imported; {path.name} and "
                              "later ones were not read")
            self.loaded[path] = None
            return None
        self.loaded[path] = None  # a cycle reads as "not available" while this one is being built
        try:
            info = parse_module(path, field="script", name=name)
        except ToolInputError as exc:
            self.notes.append(f"{path.name} (imported by the script) was not read: {exc.message}")
            return None
        self.loaded[path] = info
        if root is None or root == self.script_dir:
            self.notes.append(f"{path.name} (next to the script) was read for the names the script imports from it")
        else:
            self.notes.append(f"{name} was read from {path} for the names the script imports from it, as when the "
                              f"script runs with python -m from {root}")
        return info

    @property
    def modules(self) -> list[ModuleInfo]:
        """Every module read so far (in the order they were read)."""
        return [info for info in self.loaded.values() if info is not None]


# --- symbol tables ---------------------------------------------------------------------------------


#: The only nodes the scan's passes look at (constructions, job variables, writes, freezes, returns).
EFFECT_NODES = (ast.Call, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)
_OWN_SCOPE = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
#: Fields that hold only an operator or an expression context (``Add``, ``Load``, ``Store`` ...), and nodes
#: without children that matter: the walk binds and lists nothing there (a third of a script's nodes).
_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops"})
_LEAVES = frozenset({ast.Name, ast.Constant})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes`` of ``node``, in order, less what no pass looks into (``_SKIPPED_FIELDS``, ``_LEAVES``):
    a third of the nodes, and no call, definition or statement among them."""
    fields = _CHILD_FIELDS.get(type(node))
    if fields is None:
        fields = _CHILD_FIELDS[type(node)] = tuple(f for f in node._fields if f not in _SKIPPED_FIELDS)
    out: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            if type(value) not in _LEAVES:
                out.append(value)
        elif isinstance(value, list):
            out += [item for item in value if isinstance(item, ast.AST) and type(item) not in _LEAVES]
    return out


def walk_module(module: ModuleInfo) -> list[tuple[ast.AST, Scope]]:
    """One iterative walk (deep code cannot overflow): bind every simple name in the scope it belongs to,
    and list the nodes the passes read, in source order, each with the scope it runs in."""
    effects: list[tuple[ast.AST, Scope]] = []
    scopes: list[Scope] = [module.scope]
    # (node, scope, binds): names bound inside lambdas and comprehensions stay in their own scopes
    stack: list[tuple[ast.AST, Scope, bool]] = [(stmt, module.scope, True) for stmt in reversed(module.tree.body)]
    pending: list[tuple[ast.AST, Scope, bool]]
    while stack:
        node, scope, binds = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = Scope(node.name, scope, node)
            scopes.append(inner)
            module.functions.setdefault(node.name, inner)
            if binds:
                scope.assign(node.name, node.lineno, inner)
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]:
                inner.params[arg.arg] = arg.annotation
            pending = [(d, scope, binds) for d in node.decorator_list] + [(b, inner, True) for b in node.body]
        elif isinstance(node, ast.ClassDef):
            if binds:
                _bind_class(node, scope, module)
            # methods get their own scopes, parented to the enclosing scope (self.x is script-wide);
            # class-level assignments are attributes, not names of the enclosing scope
            pending = [(d, scope, binds) for d in node.decorator_list]
            pending += [(item, scope, binds and isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))
                        for item in node.body]
        else:
            if isinstance(node, EFFECT_NODES):
                effects.append((node, scope))
            if binds:
                _bind(node, scope, module)
            inner_binds = binds and not isinstance(node, _OWN_SCOPE)
            pending = [(child, scope, inner_binds) for child in child_nodes(node)]
        stack.extend(reversed(pending))
    for scope in scopes:  # source order, whatever order the walk met them in
        for entries in scope.assigned.values():
            entries.sort(key=lambda e: e[0])
    return effects


def _bind_class(node: ast.ClassDef, scope: Scope, module: ModuleInfo) -> None:
    for unit in registry.CLASSES:
        made = unit(node, module)
        if made is not None:
            module.classes.setdefault(node.name, made)
            scope.assign(node.name, node.lineno, made)
            return
    scope.assign(node.name, node.lineno, Opaque(f"{node.name} is a class"))


def _bind(node: ast.AST, scope: Scope, module: ModuleInfo) -> None:
    """Bind the names a statement (or a walrus, an except clause) binds, in the scope it runs in."""
    binder = _BINDERS.get(type(node))
    if binder is not None:
        binder(node, scope, module, getattr(node, "lineno", 0) or 0)


def _bind_import(node: ast.Import | ast.ImportFrom, scope: Scope, module: ModuleInfo, line: int) -> None:
    module.imports.append((node, scope))
    if isinstance(node, ast.ImportFrom):
        for alias in node.names:
            if alias.name != "*":
                scope.assign(alias.asname or alias.name, line, ImportedName(node.module or "", alias.name,
                                                                              node.level or 0))
        return
    for alias in node.names:
        if alias.asname:
            scope.assign(alias.asname, line, ImportedModule(alias.name))
        else:
            top = alias.name.split(".")[0]
            scope.assign(top, line, ImportedModule(top))


def _bind_assign(node: ast.Assign, scope: Scope, module: ModuleInfo, line: int) -> None:
    for target in node.targets:
        bind_target(target, node.value, line, scope)


def _bind_annotated(node: ast.AnnAssign | ast.NamedExpr, scope: Scope, module: ModuleInfo, line: int) -> None:
    if isinstance(node.target, ast.Name):
        scope.assign(node.target.id, line, node.value)


def _bind_augmented(node: ast.AugAssign, scope: Scope, module: ModuleInfo, line: int) -> None:
    if isinstance(node.target, ast.Name):
        scope.assign(node.target.id, line, Opaque(f"{node.target.id} is changed in place at line {line}"))


def _bind_loop(node: ast.For | ast.AsyncFor, scope: Scope, module: ModuleInfo, line: int) -> None:
    for name in target_names(node.target):
        scope.assign(name, line, Opaque(f"{name} is a loop variable (line {line})"))


def _bind_with(node: ast.With | ast.AsyncWith, scope: Scope, module: ModuleInfo, line: int) -> None:
    for item in node.items:
        if item.optional_vars is not None:
            for name in target_names(item.optional_vars):
                scope.assign(name, line, Opaque(f"{name} is bound by a with statement (line {line})"))


def _bind_handler(node: ast.ExceptHandler, scope: Scope, module: ModuleInfo, line: int) -> None:
    if node.name:
        scope.assign(node.name, line, Opaque(f"{node.name} is an exception"))


#: How each kind of statement binds names (functions and classes are bound by the walk itself).
_BINDERS: dict[type, Callable[[Any, Scope, ModuleInfo, int], None]] = {
    ast.Import: _bind_import, ast.ImportFrom: _bind_import, ast.Assign: _bind_assign,
    ast.AnnAssign: _bind_annotated, ast.NamedExpr: _bind_annotated, ast.AugAssign: _bind_augmented,
    ast.For: _bind_loop, ast.AsyncFor: _bind_loop, ast.With: _bind_with, ast.AsyncWith: _bind_with,
    ast.ExceptHandler: _bind_handler,
}


def bind_target(target: ast.expr, value: ast.expr, line: int, scope: Scope) -> None:
    if isinstance(target, ast.Name):
        scope.assign(target.id, line, value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        elements = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
        same_shape = elements is not None and len(elements) == len(target.elts)
        for i, t in enumerate(target.elts):
            if not isinstance(t, ast.Name):
                continue
            if same_shape and elements is not None:
                scope.assign(t.id, line, elements[i])
            else:  # args, rest = parser.parse_known_args(): element i of the value
                item = ast.Subscript(value=value, slice=ast.Constant(i), ctx=ast.Load())
                ast.copy_location(item, value)
                scope.assign(t.id, line, item)


def bind_arguments(fnode: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, *, skip_first: bool = False
                   ) -> dict[str, ast.expr] | None:
    """Parameter -> the argument ``call`` passes for it (parameters it leaves to their defaults are absent);
    None when ``*`` or ``**`` arguments make that unknowable. ``skip_first``: the call binds the first
    parameter itself (``self`` of a constructor or a bound method)."""
    args = fnode.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)][1 if skip_first else 0:]
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    if len(call.args) > len(positional) and args.vararg is None:
        return None
    out = dict(zip(positional, call.args))
    out.update({k.arg: k.value for k in call.keywords if k.arg})
    return out


def default_argument(fnode: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> ast.expr | None:
    """The default of parameter ``name`` as written (None: it has none)."""
    args = fnode.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    defaults = dict(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    defaults.update({a.arg: v for a, v in zip(args.kwonlyargs, args.kw_defaults) if v is not None})
    return defaults.get(name)


def class_of_methods(module: ModuleInfo) -> dict[int, ast.ClassDef]:
    """``id(FunctionDef)`` -> the class whose body defines it, for every method of the module."""
    out: dict[int, ast.ClassDef] = {}
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[id(item)] = node
    return out


def target_names(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]


def dotted(node: ast.AST | None) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


__all__ = ["Binding", "ModuleLoader", "parse_module", "walk_module", "child_nodes", "dotted", "bind_target",
           "target_names", "bind_arguments", "default_argument", "class_of_methods", "MAX_SCRIPT_BYTES"]
