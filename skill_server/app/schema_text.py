"""Plain-text help for one tool, written from its published JSON schema (``call TOOL --help``).

It reads the schema manifest only, so it needs neither the tool's module nor the MCP SDK.
"""

from __future__ import annotations

import json
import textwrap
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skill_server.app.table import ToolSpec

WIDTH = 100


def tool_help(spec: ToolSpec, *, prog: str) -> str:
    schema = spec.input_schema
    lines = [f"usage: {prog} call {spec.name} [--json '{{...}}'] [key=value ...]", ""]
    lines += textwrap.wrap(spec.description, WIDTH)
    lines += ["", "arguments:", *_argument_lines(schema)]
    for title, model in schema.get("$defs", {}).items():  # object types the arguments use, each once
        if isinstance(model, dict) and "properties" in model:
            lines += ["", f"{title} (an object):", *_argument_lines(model)]
    lines += ["", "Values of key=value are parsed as JSON unless the argument takes only text; "
                  "null means not given.", "Every argument and result field in full: references/tools.md."]
    return "\n".join(lines) + "\n"


def _argument_lines(model: dict[str, Any]) -> list[str]:
    """Each property of an object schema: name, type, default, then its description, indented."""
    required = set(model.get("required", ()))
    lines: list[str] = []
    for name, prop in model.get("properties", {}).items():
        lines.append(f"  {name}: {describe_type(prop)}" + _default_text(name, prop, required))
        if prop.get("description"):
            lines += textwrap.wrap(prop["description"], WIDTH, initial_indent="      ", subsequent_indent="      ")
    return lines


def _default_text(name: str, prop: dict[str, Any], required: set[str]) -> str:
    if name in required:
        return " (required)"
    if "default" in prop and prop["default"] is not None:
        return f" (default {json.dumps(prop['default'])})"
    return " (optional)"


def describe_type(prop: dict[str, Any]) -> str:
    """``{"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}`` -> ``integer >= 1``."""
    branches = prop.get("anyOf")
    if isinstance(branches, list):
        texts = [describe_type(b) for b in branches if b.get("type") != "null"]
        return " or ".join(texts) if texts else "null"
    ref = prop.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1] + " object"
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    kind = prop.get("type", "any JSON value")
    if kind == "array":
        items = prop.get("items")
        text = f"list of {describe_type(items)}" if isinstance(items, dict) else "list"
        return text + _bounds(prop, "minItems", "maxItems", "items")
    if kind == "object":
        values = prop.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"object of {describe_type(values)}"
        return "object"
    if kind == "string":
        extra = f" matching {prop['pattern']}" if "pattern" in prop else ""
        return "string" + extra + _bounds(prop, "minLength", "maxLength", "characters")
    if kind in ("integer", "number"):
        return f"{kind}{_numeric_bounds(prop)}"
    return str(kind)


def _bounds(prop: dict[str, Any], low: str, high: str, unit: str) -> str:
    if low in prop and high in prop:
        return f", {prop[low]} to {prop[high]} {unit}"
    if high in prop:
        return f", at most {prop[high]} {unit}"
    if low in prop and prop[low] > 0:
        return f", at least {prop[low]} {unit}"
    return ""


def _numeric_bounds(prop: dict[str, Any]) -> str:
    parts = []
    for key, symbol in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")):
        if key in prop:
            parts.append(f"{symbol} {prop[key]:g}" if isinstance(prop[key], float) else f"{symbol} {prop[key]}")
    return (" " + ", ".join(parts)) if parts else ""
