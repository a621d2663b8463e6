"""Walking the tools' published JSON schemas, for tests that must cover every tool's every field.

Tests built on this need no change when a tool or a field is added: they read the manifest.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Field:
    path: tuple[Any, ...]          # ("processes", 0, "role"): where the value sits in an argument object
    schema: dict[str, Any]         # the property's own schema, $ref resolved
    types: frozenset[str]          # JSON types the property accepts
    required: bool

    @property
    def name(self) -> str:
        return ".".join(str(p) for p in self.path)


def resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return defs[ref[len("#/$defs/"):]]
    return node


def branches(node: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    node = resolve(node, defs)
    if "anyOf" in node:
        out = []
        for b in node["anyOf"]:
            out.extend(branches(b, defs))
        return out
    return [node]


def json_types(node: dict[str, Any], defs: dict[str, Any]) -> frozenset[str]:
    out = set()
    for b in branches(node, defs):
        if "enum" in b:
            out |= {_type_of(v) for v in b["enum"]}
        elif "const" in b:
            out.add(_type_of(b["const"]))
        elif "type" in b:
            out |= set(b["type"]) if isinstance(b["type"], list) else {b["type"]}
        elif "properties" in b:
            out.add("object")
    return frozenset(out)


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "string" if isinstance(value, str) else "object"


def input_fields(schema: dict[str, Any]) -> Iterator[Field]:
    """Every property of an input schema, top-level and inside nested objects and lists of objects."""
    defs = schema.get("$defs", {})

    def walk(obj: dict[str, Any], prefix: tuple[Any, ...], depth: int) -> Iterator[Field]:
        required = set(obj.get("required", ()))
        for name, prop in obj.get("properties", {}).items():
            path = prefix + (name,)
            yield Field(path, prop, json_types(prop, defs), name in required)
            if depth >= 3:
                continue
            for b in branches(prop, defs):
                if "properties" in b:
                    yield from walk(b, path, depth + 1)
                elif b.get("type") == "array" and isinstance(b.get("items"), dict):
                    item = resolve(b["items"], defs)
                    if "properties" in item:
                        yield from walk(item, path + (0,), depth + 1)

    yield from walk(schema, (), 0)


def place(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """The smallest argument object holding ``value`` at ``path``."""
    out: Any = value
    for step in reversed(path):
        out = [out] if isinstance(step, int) else {step: out}
    return out


def untyped_nodes(schema: dict[str, Any]) -> list[str]:
    """Paths of schema nodes that describe a value but declare no type (what portability checks flag)."""
    defs = schema.get("$defs", {})
    problems: list[str] = []

    def check(node: Any, where: str) -> None:
        if not isinstance(node, dict):
            return
        typed = any(k in node for k in ("type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const"))
        if not typed:
            problems.append(where)
        for key in ("anyOf", "oneOf", "allOf"):
            for i, b in enumerate(node.get(key, ())):
                check(b, f"{where}.{key}[{i}]")
        for name, prop in node.get("properties", {}).items():
            check(prop, f"{where}.properties.{name}")
        if isinstance(node.get("items"), dict):
            check(node["items"], f"{where}.items")
        if isinstance(node.get("additionalProperties"), dict):
            check(node["additionalProperties"], f"{where}.additionalProperties")

    check({k: v for k, v in schema.items() if k != "$defs"}, "$")
    for name, definition in defs.items():
        check(definition, f"$defs.{name}")
    return problems
