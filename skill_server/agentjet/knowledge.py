"""AgentJet facts as data: the overrides table and the config schema, from an install or the snapshot.

With an AgentJet install present, ``job.py`` and the schema module are parsed with ``ast`` (never
imported), so older and newer versions stay right. Without one, the bundled ``snapshot.json`` answers.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skill_server.agentjet.locate import JOB_MODULE, SCHEMA_MODULE, AgentJetInstall, read_source

SNAPSHOT_PATH = Path(__file__).with_name("snapshot.json")
DATACLASS_MARK = "__dataclass__"
LENGTH_KWARGS = ("max_prompt_length", "max_response_length", "max_model_len", "max_response_length_in_one_turn")


@functools.lru_cache(maxsize=1)
def _snapshot() -> dict[str, Any]:
    with SNAPSHOT_PATH.open(encoding="utf-8") as handle:
        return json.load(handle)


def snapshot() -> dict[str, Any]:
    """A private deep copy of the bundled snapshot (callers may mutate it)."""
    return copy.deepcopy(_snapshot())


def bundled_layer(name: str) -> dict[str, Any] | None:
    layer = _snapshot()["layers"].get(name)
    return copy.deepcopy(layer) if layer is not None else None


@dataclass(frozen=True)
class OverridesTable:
    """AgentJetJob's kwarg -> dotted YAML key rows, in source order, plus the constructor's control kwargs."""

    rows: tuple[tuple[str, str], ...]
    control_kwargs: tuple[str, ...]
    source: str  # "bundled" or the path of the job.py it was read from
    constructor_kwargs: tuple[str, ...] | None = None  # every __init__ kwarg, when read from source

    @property
    def kwargs(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.rows)

    def key_for(self, kwarg: str) -> str | None:
        for name, key in self.rows:
            if name == kwarg:
                return key
        return None

    def kwarg_for(self, key: str) -> str | None:
        for name, k in self.rows:
            if k == key:
                return name
        return None

    def accepts(self, kwarg: str) -> bool:
        if self.constructor_kwargs is not None:
            return kwarg in self.constructor_kwargs
        return kwarg in self.kwargs or kwarg in self.control_kwargs


def bundled_overrides() -> OverridesTable:
    snap = _snapshot()
    return OverridesTable(
        rows=tuple((k, v) for k, v in snap["overrides"]),
        control_kwargs=tuple(snap["control_kwargs"]),
        source="bundled",
    )


def parse_overrides_source(source: str) -> tuple[list[tuple[str, str]], list[str] | None] | None:
    """Find the ``overrides`` dict literal of ``AgentJetJob.__init__`` and the constructor's kwargs.

    The dict maps dotted ``ajet.*`` keys to kwarg names (either orientation is accepted). Returns
    None when the source has no such table (very old versions set a handful of keys by hand).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    init_kwargs: list[str] | None = None
    rows: list[tuple[str, str]] | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "AgentJetJob":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    init_kwargs = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg != "self"]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and rows is None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)} | {
                t.attr for t in targets if isinstance(t, ast.Attribute)
            }
            if "overrides" in names and isinstance(node.value, ast.Dict):
                parsed = _string_pairs(node.value)
                if parsed:
                    rows = parsed
    if rows is None:
        return None
    return rows, init_kwargs


def _string_pairs(node: ast.Dict) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for k, v in zip(node.keys, node.values):
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            return []
        if not (isinstance(v, ast.Constant) and isinstance(v.value, str)):
            return []
        key, value = k.value, v.value
        if key.startswith("ajet.") and not value.startswith("ajet."):
            pairs.append((value, key))
        elif value.startswith("ajet.") and not key.startswith("ajet."):
            pairs.append((key, value))
        else:
            return []
    return pairs


def overrides_for(install: AgentJetInstall | None) -> tuple[OverridesTable, list[str]]:
    """The table of the detected install (read statically), else the bundled one; plus warnings."""
    bundled = bundled_overrides()
    if install is None:
        return bundled, []
    path = install.file(JOB_MODULE)
    source = read_source(path)
    if source is None:
        return bundled, [f"{path} not found; using the bundled overrides table"]
    parsed = parse_overrides_source(source)
    if parsed is None:
        return bundled, [f"no overrides table found in {path}; using the bundled one"]
    rows, init_kwargs = parsed
    control = tuple(k for k in bundled.control_kwargs if init_kwargs is None or k in init_kwargs)
    return OverridesTable(rows=tuple(rows), control_kwargs=control, source=str(path),
                          constructor_kwargs=tuple(init_kwargs) if init_kwargs is not None else None), []


# --- schema -------------------------------------------------------------------------------------


@dataclass
class Schema:
    """The config dataclass tree. ``tree`` marks each dataclass node with ``__dataclass__``."""

    tree: dict[str, Any]
    source: str
    warnings: list[str] = field(default_factory=list)

    def defaults(self) -> dict[str, Any]:
        """The tree without dataclass marks: what ``Config()`` holds before any YAML is applied."""
        return _strip_marks(self.tree)

    def dataclass_paths(self) -> set[str]:
        out: set[str] = set()

        def walk(node: dict[str, Any], prefix: str) -> None:
            for key, value in node.items():
                if isinstance(value, dict) and DATACLASS_MARK in value:
                    path = f"{prefix}{key}"
                    out.add(path)
                    walk(value, path + ".")

        walk(self.tree, "")
        return out

    def field_paths(self) -> set[str]:
        out: set[str] = set()

        def walk(node: dict[str, Any], prefix: str) -> None:
            for key, value in node.items():
                if key == DATACLASS_MARK:
                    continue
                out.add(f"{prefix}{key}")
                if isinstance(value, dict) and DATACLASS_MARK in value:
                    walk(value, f"{prefix}{key}.")

        walk(self.tree, "")
        return out


def _strip_marks(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_marks(v) for k, v in node.items() if k != DATACLASS_MARK}
    if isinstance(node, list):
        return [_strip_marks(v) for v in node]
    return node


def bundled_schema() -> Schema:
    return Schema(tree=copy.deepcopy(_snapshot()["schema"]), source="bundled")


_NO_DEFAULT = object()


def parse_schema_source(source: str) -> dict[str, Any] | None:
    """Rebuild the dataclass tree rooted at ``Config`` from the schema module's source, statically."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    classes: dict[str, ast.ClassDef] = {
        n.name: n for n in tree.body if isinstance(n, ast.ClassDef) and any(_is_dataclass_decorator(d) for d in n.decorator_list)
    }
    if "Config" not in classes:
        return None

    def build(name: str, depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {DATACLASS_MARK: name}
        if depth > 12:
            return node
        for stmt in classes[name].body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            nested = _annotation_class(stmt.annotation, classes)
            value = _field_default(stmt.value, classes)
            if isinstance(value, tuple) and value and value[0] == "class":
                node[stmt.target.id] = build(value[1], depth + 1)
            elif value is _NO_DEFAULT and nested is not None:
                node[stmt.target.id] = build(nested, depth + 1)
            elif value is not _NO_DEFAULT:
                node[stmt.target.id] = value
        return node

    return build("Config", 0)


def _is_dataclass_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass"
    )


def _annotation_class(node: ast.expr | None, classes: dict[str, ast.ClassDef]) -> str | None:
    if isinstance(node, ast.Name) and node.id in classes:
        return node.id
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in classes:
        return node.value
    return None


def _field_default(node: ast.expr | None, classes: dict[str, ast.ClassDef]) -> Any:
    if node is None:
        return _NO_DEFAULT
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "field":
        for kw in node.keywords:
            if kw.arg == "default":
                return _literal(kw.value)
            if kw.arg == "default_factory":
                factory = kw.value
                if isinstance(factory, ast.Name):
                    if factory.id in classes:
                        return ("class", factory.id)
                    return {"dict": {}, "list": [], "set": [], "tuple": []}.get(factory.id, _NO_DEFAULT)
                if isinstance(factory, ast.Lambda):
                    body = factory.body
                    if isinstance(body, ast.Call) and isinstance(body.func, ast.Name) and body.func.id in classes:
                        return ("class", body.func.id)
                    return _literal(body)
        return _NO_DEFAULT
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes:
        return ("class", node.func.id)
    return _literal(node)


def _literal(node: ast.expr) -> Any:
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return _NO_DEFAULT
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, set):
        return sorted(value, key=repr)
    return value


def schema_for(install: AgentJetInstall | None) -> Schema:
    """The install's dataclass tree when its schema module parses, else the bundled one."""
    if install is None:
        return bundled_schema()
    path = install.file(SCHEMA_MODULE)
    source = read_source(path)
    if source is not None:
        parsed = parse_schema_source(source)
        if parsed is not None and isinstance(parsed.get("ajet"), dict):
            return Schema(tree=parsed, source=str(path))
    fallback = bundled_schema()
    fallback.warnings.append(f"could not read the config dataclasses from {path}; using the bundled schema")
    return fallback
