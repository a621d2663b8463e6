"""Base classes and small helpers for tool input/output models (pydantic, no I/O framework)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    Strict,
    ValidationError,
    WithJsonSchema,
    model_serializer,
)

from skill_server.core.errors import ToolInputError
from skill_server.core.text import shorten

#: ``progress(done, total, message)``: how a long tool reports progress. The MCP adapter forwards it
#: as progress notifications; the CLI ignores it.
Progress = Callable[[float, "float | None", "str | None"], None]

#: Largest integer a JSON client (JavaScript numbers) holds exactly; the default upper bound of every
#: integer argument, so arithmetic on inputs stays exact and nothing overflows a float.
MAX_JSON_INT = 2**53 - 1

# Strict numbers: a JSON string "128" or a boolean is a mistake worth naming, not something to coerce.
# Every integer input has an upper bound (tool-specific bounds may be tighter).
PositiveInt = Annotated[int, Strict(), Field(ge=1, le=MAX_JSON_INT)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0, le=MAX_JSON_INT)]

#: Schema of an arbitrary JSON value, spelled so that every MCP client can map it: one ``type`` per
#: ``anyOf`` branch (a bare ``{}`` or a ``type`` array is flagged by the MCP Inspector's portability check).
JSON_VALUE_SCHEMA: dict[str, Any] = {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"},
                                               {"type": "null"}, {"type": "array"}, {"type": "object"}]}
#: Use for any field (input or output) whose value is free-form JSON; never a bare ``Any``.
JsonValue = Annotated[Any, WithJsonSchema(JSON_VALUE_SCHEMA)]


class ToolInput(BaseModel):
    """Input of a tool: unknown arguments are rejected by name, floats must be finite.

    The front ends validate arguments as JSON in strict mode (``ToolSpec.validate``), so ``"3"`` is not
    an integer and ``"yes"`` is not a boolean in any tool, whatever its field annotations say.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ToolOutput(BaseModel):
    """Output of a tool (published as the MCP output schema)."""

    model_config = ConfigDict(extra="forbid")


def _optional_fields_without_null(schema: dict[str, Any], cls: type[BaseModel] | None = None) -> None:
    """Schema side of ``SparseOutput``: an optional field is absent when unknown, never ``null``."""
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        if name in required:
            continue
        branches = prop.get("anyOf")
        if isinstance(branches, list) and {"type": "null"} in branches:
            rest = [b for b in branches if b != {"type": "null"}]
            del prop["anyOf"]
            if len(rest) == 1:
                prop.update(rest[0])
            else:
                prop["anyOf"] = rest
        if "default" in prop and prop["default"] is None:
            del prop["default"]


class SparseOutput(ToolOutput):
    """An output whose optional fields are left out when their value is unknown (None).

    The published schema says so: such fields are not ``required`` and carry no ``null`` branch. Only
    this model's own fields are pruned; nested models keep their own rule.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=_optional_fields_without_null)

    @model_serializer(mode="wrap")
    def _omit_unknown(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        required = {name for name, info in type(self).model_fields.items() if info.is_required()}
        return {key: value for key, value in data.items() if value is not None or key in required}


class ImageAttachment(ToolOutput):
    """A picture a tool made. Over MCP its bytes go to the client as an image content block next to the
    structured result (``mcp_app``); the structured result itself (and the CLI's JSON) carries where it
    was written and, only when the caller asked, the bytes as base64. Clients that pass only the structured
    result to the model (Claude Code, Codex) drop image blocks, so a copy is also kept on the machine that
    runs the tools (``local_path``, to open with a file-reading tool) and served as an MCP resource (``uri``)."""

    mime_type: str = Field(description="Always image/png.")
    title: str
    width: int = Field(description="Pixels.")
    height: int = Field(description="Pixels.")
    size_bytes: int
    path: str | None = Field(default=None, description="Where the PNG was written (on host), if it was.")
    host: str | None = Field(default=None, description="'local' or the ssh destination holding path.")
    local_path: str | None = Field(default=None, description="A copy on the machine running the tools: open it "
                                   "with a file-reading tool to see the picture (Claude Code's Read shows PNGs).")
    uri: str | None = Field(default=None, description="The copy as an MCP resource (resources/read).")
    data_base64: str | None = Field(default=None, description="The PNG as base64, only when asked for.")
    _data: bytes = PrivateAttr(default=b"")

    @classmethod
    def of(cls, data: bytes, **fields: Any) -> ImageAttachment:
        image = cls(size_bytes=len(data), **fields)
        image._data = data
        return image

    @property
    def data(self) -> bytes:
        return self._data


def attached_images(model: BaseModel) -> list[ImageAttachment]:
    """Every ``ImageAttachment`` in a result (fields, lists, dicts, nested models), in field order."""
    found: list[ImageAttachment] = []
    stack: list[Any] = [model]
    while stack:
        item = stack.pop(0)
        if isinstance(item, ImageAttachment):
            if item.data:
                found.append(item)
        elif isinstance(item, BaseModel):
            stack[:0] = [getattr(item, name) for name in type(item).model_fields]
        elif isinstance(item, (list, tuple)):
            stack[:0] = list(item)
        elif isinstance(item, dict):
            stack[:0] = list(item.values())
    return found


def describe_validation_error(exc: ValidationError, schema: dict[str, Any] | None = None) -> ToolInputError:
    """Condense a pydantic error into one line that names each offending field.

    With the model's JSON ``schema``, an unknown argument gets the closest valid name as a suggestion
    (or the list of valid names when none is close).
    """
    parts: list[str] = []
    fields: list[str] = []
    for err in exc.errors(include_url=False):
        path = tuple(err.get("loc", ()))
        loc = ".".join(str(p) for p in path)
        msg = str(err.get("msg", "invalid value"))
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            msg = "unknown argument" + _suggestion(schema, path)
        elif kind == "value_error":
            msg = msg.removeprefix("Value error, ")
        shown = ""
        if kind not in ("missing", "extra_forbidden", "value_error"):
            shown = f" (got {shorten(repr(err.get('input')), 60)})"
        if loc:
            fields.append(loc)
            parts.append(f"{loc}: {msg}{shown}")
        else:
            parts.append(f"{msg}{shown}")
    error = ToolInputError("; ".join(parts))
    error.field = fields[0] if fields else None
    return error


def _suggestion(schema: dict[str, Any] | None, path: Sequence[Any]) -> str:
    if schema is None or not path:
        return ""
    valid = property_names_at(schema, path[:-1])
    if not valid:
        return ""
    import difflib  # only when a name is misspelt

    close = difflib.get_close_matches(str(path[-1]), valid, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]}?"
    return f" (valid: {', '.join(valid)})"


def property_names_at(schema: dict[str, Any], path: Sequence[Any]) -> list[str]:
    """The property names an object at ``path`` (keys and list indexes) may have, per the JSON schema."""
    defs = schema.get("$defs", {})
    nodes = [schema]
    for step in path:
        following: list[dict[str, Any]] = []
        for node in _expand(nodes, defs):
            if isinstance(step, int) and isinstance(node.get("items"), dict):
                following.append(node["items"])
            elif isinstance(step, str) and isinstance(node.get("properties"), dict) and step in node["properties"]:
                following.append(node["properties"][step])
            elif isinstance(step, str) and isinstance(node.get("additionalProperties"), dict):
                following.append(node["additionalProperties"])
        nodes = following
    names: list[str] = []
    for node in _expand(nodes, defs):
        names.extend(name for name in node.get("properties", {}) if name not in names)
    return names


def _expand(nodes: list[dict[str, Any]], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """Follow ``$ref`` and ``anyOf``/``oneOf``/``allOf`` to the concrete schemas."""
    out: list[dict[str, Any]] = []
    stack = list(nodes)
    while stack:
        node = stack.pop(0)
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs:
            stack.append(defs[ref[8:]])
        for key in ("anyOf", "oneOf", "allOf"):
            stack.extend(b for b in node.get(key, ()) if isinstance(b, dict))
        out.append(node)
    return out
