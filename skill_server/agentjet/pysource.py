"""Facts read from AgentJet's Python source with ``ast``; nothing is imported or executed.

* ``ajet/copilot/job.py``: ``AgentJetJob.__init__``'s signature and its ``overrides`` table.
* ``ajet/default_config/ajet_config_schema.py``: the config dataclass tree rooted at ``Config``.
* ``ajet/task_rollout/native_parallel_worker.py``: whether ``rollout_swarm`` rounds task groups up or down.
* ``ajet/__init__.py`` / ``pyproject.toml``: the version.

Each reader returns data or raises :class:`SourceUnreadable` saying what it could not read exactly.
"""

from __future__ import annotations

import ast
import re
from typing import Any

DATACLASS_MARK = "__dataclass__"
MAX_SCHEMA_DEPTH = 16


class SourceUnreadable(ValueError):
    """The source does not state the fact in a form this reader can take exactly."""


class NoOverridesTable(SourceUnreadable):
    """``AgentJetJob.__init__`` sets no kwarg -> key table: an AgentJet from before swarm mode."""


def _parse(source: str, what: str) -> ast.Module:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise SourceUnreadable(f"{what} does not parse: {type(exc).__name__}") from None


# --- job.py --------------------------------------------------------------------------------------


def read_job_source(source: str) -> tuple[list[tuple[str, Any]], list[tuple[str, str]], bool]:
    """``(signature, rows, takes_any_kwarg)``: ``__init__``'s keyword parameters with their defaults in
    signature order, and the ``overrides`` table as (kwarg, dotted key) rows in table order."""
    tree = _parse(source, "job.py")
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "AgentJetJob"]
    if not classes:
        raise NoOverridesTable("job.py defines no AgentJetJob class")
    if len(classes) > 1:
        raise SourceUnreadable(f"job.py defines {len(classes)} AgentJetJob classes, expected one")
    init = next((n for n in classes[0].body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        raise SourceUnreadable("AgentJetJob has no __init__")
    signature = _signature(init)
    names = {name for name, _ in signature}
    rows: list[tuple[str, str]] | None = None
    for node in ast.walk(init):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_names_overrides(t) for t in targets) and isinstance(node.value, ast.Dict):
                rows = _table_rows(node.value, names)
                break
    if rows is None:
        raise NoOverridesTable("AgentJetJob.__init__ has no overrides table (a dict literal of kwarg -> ajet.* key)")
    return signature, rows, init.args.kwarg is not None


def _names_overrides(target: ast.expr) -> bool:
    return (isinstance(target, ast.Name) and target.id == "overrides") or (
        isinstance(target, ast.Attribute) and target.attr == "overrides")


def _signature(init: ast.FunctionDef) -> list[tuple[str, Any]]:
    args = init.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out: list[tuple[str, Any]] = []
    for arg, default in [*zip(positional, defaults), *zip(args.kwonlyargs, args.kw_defaults)]:
        if arg.arg == "self":
            continue
        if default is None:
            raise SourceUnreadable(f"AgentJetJob.__init__ parameter {arg.arg!r} has no default")
        try:
            out.append((arg.arg, ast.literal_eval(default)))
        except (ValueError, SyntaxError, TypeError, RecursionError):
            raise SourceUnreadable(f"the default of AgentJetJob.__init__ parameter {arg.arg!r} is not a "
                                   "literal") from None
    return out


def _table_rows(node: ast.Dict, params: set[str]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for key_node, value_node in zip(node.keys, node.values):
        key = key_node.value if isinstance(key_node, ast.Constant) and isinstance(key_node.value, str) else None
        if key is None:
            raise SourceUnreadable("the overrides table has a key that is not a string literal")
        if isinstance(value_node, ast.Constant) and isinstance(value_node.value, str):
            value = value_node.value
        elif isinstance(value_node, ast.Name) and value_node.id in params:
            value = value_node.id  # {"ajet.x.y": x_kwarg}: the value is the parameter itself
        else:
            raise SourceUnreadable(f"the overrides table entry {key!r} is neither a string nor a parameter name")
        if key.startswith("ajet.") and not value.startswith("ajet."):
            rows.append((value, key))
        elif value.startswith("ajet.") and not key.startswith("ajet."):
            rows.append((key, value))
        else:
            raise SourceUnreadable(f"the overrides table entry {key!r}: {value!r} pairs no kwarg with an ajet.* key")
    return rows


# --- the config dataclasses ----------------------------------------------------------------------------

_NO_DEFAULT = object()


def read_schema_source(source: str) -> dict[str, Any]:
    """The tree ``Config()`` builds: every dataclass node is a dict with ``__dataclass__`` (its class name)
    first and its fields in declaration order (inherited fields first), leaves holding the defaults."""
    tree = _parse(source, "the schema module")
    classes = {n.name: n for n in tree.body
               if isinstance(n, ast.ClassDef) and any(_is_dataclass(d) for d in n.decorator_list)}
    if "Config" not in classes:
        raise SourceUnreadable("the schema module has no @dataclass Config")

    def fields_of(name: str, seen: tuple[str, ...]) -> dict[str, ast.AnnAssign]:
        """Field name -> its annotated assignment, inherited fields first (as dataclasses order them)."""
        if name in seen:
            raise SourceUnreadable(f"dataclass {name} inherits from itself")
        cls = classes[name]
        inherited: dict[str, ast.AnnAssign] = {}
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                inherited.update(fields_of(base.id, (*seen, name)))
            elif not (isinstance(base, ast.Name) and base.id == "object"):
                raise SourceUnreadable(f"dataclass {name} derives from {ast.unparse(base)}, which is not read")
        for item in cls.body:
            if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    and not _is_classvar(item.annotation)):
                inherited[item.target.id] = item  # an override keeps the inherited position
        return inherited

    def build(name: str, depth: int) -> dict[str, Any]:
        if depth > MAX_SCHEMA_DEPTH:
            raise SourceUnreadable(f"dataclasses nest deeper than {MAX_SCHEMA_DEPTH} levels at {name}")
        node: dict[str, Any] = {DATACLASS_MARK: name}
        for field_name, stmt in fields_of(name, ()).items():
            value = _field_default(stmt.value, classes)
            if value is _NO_DEFAULT:
                raise SourceUnreadable(f"the default of {name}.{field_name} is not stated as a literal, a dataclass "
                                       "or a dict/list factory")
            node[field_name] = build(value[1], depth + 1) if isinstance(value, _ClassRef) else value
        return node

    return build("Config", 0)


class _ClassRef(tuple[str, str]):  # ("class", name)
    pass


def _is_dataclass(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass")


def _is_classvar(annotation: ast.expr) -> bool:
    target = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return (isinstance(target, ast.Name) and target.id == "ClassVar") or (
        isinstance(target, ast.Attribute) and target.attr == "ClassVar")


def _field_default(node: ast.expr | None, classes: dict[str, ast.ClassDef]) -> Any:
    if node is None:
        return _NO_DEFAULT
    if isinstance(node, ast.Call) and _callee(node) == "field":
        for keyword in node.keywords:
            if keyword.arg == "default":
                return _literal(keyword.value)
            if keyword.arg == "default_factory":
                return _factory(keyword.value, classes)
        return _NO_DEFAULT
    made = _instantiated(node, classes)
    if made is not None:
        return _ClassRef(("class", made))
    return _literal(node)


def _factory(node: ast.expr, classes: dict[str, ast.ClassDef]) -> Any:
    if isinstance(node, ast.Name):
        if node.id in classes:
            return _ClassRef(("class", node.id))
        return {"dict": {}, "list": []}.get(node.id, _NO_DEFAULT)
    if isinstance(node, ast.Lambda):
        body = node.body
        made = _instantiated(body, classes)
        if made is not None:
            return _ClassRef(("class", made))
        if isinstance(body, ast.Call) and _callee(body) in ("dict", "list") and not body.args and not body.keywords:
            return {} if _callee(body) == "dict" else []
        return _literal(body)
    return _NO_DEFAULT


def _instantiated(node: ast.expr, classes: dict[str, ast.ClassDef]) -> str | None:
    """The schema dataclass ``node`` instantiates without arguments (``Rollout()``), else None."""
    if not isinstance(node, ast.Call) or node.args or node.keywords:
        return None
    callee = _callee(node)
    return callee if callee is not None and callee in classes else None


def _callee(node: ast.Call) -> str | None:
    return node.func.id if isinstance(node.func, ast.Name) else None


def _literal(node: ast.expr) -> Any:
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, RecursionError):
        return _NO_DEFAULT
    if isinstance(value, (set, frozenset, bytes, complex)):
        return _NO_DEFAULT
    if isinstance(value, tuple):
        return list(value)
    return value


# --- the swarm thread rule -------------------------------------------------------------------------------


def read_thread_rule(source: str) -> tuple[str | None, str]:
    """How ``rollout_swarm`` rounds ``max_env_worker / num_repeat``: ("ceil" | "floor" | None, evidence).

    Decided from the code only: a ``ceil(...)`` call means ceil, a ``//`` operator means floor. Text inside
    strings (an assertion message may still show ``//``) does not count."""
    tree = _parse(source, "the rollout module")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "rollout_swarm":
            calls_ceil = any(isinstance(n, ast.Call) and (
                (isinstance(n.func, ast.Attribute) and n.func.attr == "ceil")
                or (isinstance(n.func, ast.Name) and n.func.id == "ceil")) for n in ast.walk(node))
            if calls_ceil:
                return "ceil", "ceil() in rollout_swarm"
            if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv) for n in ast.walk(node)):
                return "floor", "floor division (//) in rollout_swarm"
            return None, "rollout_swarm shows neither ceil() nor //"
    return None, "no rollout_swarm function (an engine without swarm mode)"


# --- version -----------------------------------------------------------------------------------------------

_PYPROJECT_VERSION = re.compile(r"""^\s*version\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def read_init_version(source: str) -> str | None:
    """``__version__ = "x"`` at module level of ``ajet/__init__.py``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return None


def read_pyproject_version(source: str) -> str | None:
    match = _PYPROJECT_VERSION.search(source)
    return match.group(1) if match else None
