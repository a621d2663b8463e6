"""What the tool list publishes of a model's JSON schema: lean enough that a client loading every tool
stays within the token budget (``tests/test_budgets.py``), typed enough that clients can validate.

- Inputs keep their structure, types, bounds, defaults and enums, with each description cut to its first
  sentence, asides in parentheses left out; model and property ``title``s (pydantic's echo of the name),
  ``"default": null`` and the ``null`` branch (every optional argument's: not given is said by its absence
  from ``required``) are dropped.
- Outputs are an outline: every top-level field with its type, enum and whether it is required; an
  object a field holds is published as ``{"type": "object"}`` (open, so every field it may carry is
  allowed); descriptions, titles and defaults are dropped.

The full text, every nested field included, is ``references/tools.md``, rendered from the models
(``skill_server.app.tool_docs``).
"""

from __future__ import annotations

import re
from typing import Any

# keywords whose value is a schema, a list of schemas, or a name -> schema mapping
_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("properties", "$defs", "patternProperties")

# a sentence ends at a full stop followed by a capital, not inside "e.g." or "i.e."
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)\.\s+(?=[A-Z])")


# an aside in parentheses (a default, an example, a reason), followed by a space, punctuation or the end
_ASIDE = re.compile(r" \([^()]*\)(?=[\s.,;:]|$)")


def first_sentence(text: str) -> str:
    """``text`` up to its first full stop (the rest is in references/tools.md)."""
    head = _SENTENCE_END.split(text, 1)[0]
    return head if head == text else head + "."


def published_description(text: str) -> str:
    """What the tool list says of an argument: its first sentence without asides in parentheses (defaults,
    examples, reasons: references/tools.md keeps every word)."""
    return _ASIDE.sub("", first_sentence(text))


def _prune(node: Any, drop: frozenset[str], shorten: bool, open_objects: bool = False) -> Any:
    """``node`` without the keywords in ``drop`` (in itself and every subschema), descriptions shortened,
    and with ``open_objects`` no ``additionalProperties: false``."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in drop or (open_objects and key == "additionalProperties" and value is False):
            continue
        if key in _NAMED and isinstance(value, dict):
            out[key] = {name: _prune(sub, drop, shorten, open_objects) for name, sub in value.items()}
        elif key in _ONE and isinstance(value, dict):
            out[key] = _prune(value, drop, shorten, open_objects)
        elif key in _MANY and isinstance(value, list):
            out[key] = [_prune(sub, drop, shorten, open_objects) for sub in value]
        elif key == "default" and value is None and shorten:
            continue  # not given is the default of every optional argument: said by its absence from required
        elif key == "description" and shorten and isinstance(value, str):
            out[key] = published_description(value)
        else:
            out[key] = value
    return out


def input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The published form of an input model's schema."""
    published: dict[str, Any] = _without_null_branches(_prune(schema, frozenset({"title"}), shorten=True))
    return published


def _without_null_branches(node: Any) -> Any:
    """``node`` with the ``{"type": "null"}`` branch of every optional argument left out, at every level: an
    argument that is not given is left out (the server still takes ``null`` for "not given", as it always has),
    so saying ``anyOf [..., null]`` for each one only costs the assistant tokens."""
    if isinstance(node, list):
        return [_without_null_branches(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _without_null_branches(value) for key, value in node.items()}
    properties = out.get("properties")
    if isinstance(properties, dict):
        required = set(out.get("required", ()))
        out["properties"] = {name: prop if name in required else _drop_null(prop)
                             for name, prop in properties.items()}
    return out


def _drop_null(prop: Any) -> Any:
    branches = prop.get("anyOf") if isinstance(prop, dict) else None
    if not isinstance(branches, list) or {"type": "null"} not in branches:
        return prop
    rest = [branch for branch in branches if branch != {"type": "null"}]
    out = {key: value for key, value in prop.items() if key != "anyOf"}
    if len(rest) == 1 and isinstance(rest[0], dict) and not set(rest[0]) & set(out):
        return {**rest[0], **out}
    return {**out, "anyOf": rest}


def output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The published outline of an output model's schema (see the module docstring)."""
    drop = frozenset({"title", "description", "default", "examples"})
    lean: dict[str, Any] = _prune({k: v for k, v in schema.items() if k != "$defs"}, drop, False, open_objects=True)
    lean_defs = {name: _prune(sub, drop, False) for name, sub in schema.get("$defs", {}).items()}
    lean["properties"] = {name: _outline(prop, lean_defs) for name, prop in lean.get("properties", {}).items()}
    return lean


def _outline(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A field's schema with every object it holds reduced to ``{"type": "object"}``."""
    ref = node.get("$ref")
    if isinstance(ref, str):
        target: dict[str, Any] = defs.get(ref.rsplit("/", 1)[-1], {})
        return {"type": "object"} if target.get("type") == "object" or "properties" in target else target
    out = dict(node)
    if isinstance(node.get("items"), dict):
        out["items"] = _outline(node["items"], defs)
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _outline(node["additionalProperties"], defs)
    if out.get("type") == "object" and "properties" in out:
        return {"type": "object"}
    if isinstance(node.get("anyOf"), list):
        branches: list[dict[str, Any]] = []
        for branch in node["anyOf"]:
            reduced = _outline(branch, defs)
            if reduced not in branches:
                branches.append(reduced)
        del out["anyOf"]
        if len(branches) == 1:
            out.update(branches[0])
        else:
            out["anyOf"] = branches
    return out
