"""Base classes and small helpers for tool input/output models (pydantic, no I/O framework)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, WithJsonSchema

from skill_server.errors import ToolInputError

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
    """Input of a tool: unknown arguments are rejected by name."""

    model_config = ConfigDict(extra="forbid")


class ToolOutput(BaseModel):
    """Output of a tool (published as the MCP output schema)."""

    model_config = ConfigDict(extra="forbid")


def describe_validation_error(exc: ValidationError) -> ToolInputError:
    """Condense a pydantic error into one line that names each offending field."""
    parts: list[str] = []
    fields: list[str] = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid value"))
        kind = err.get("type", "")
        if kind == "extra_forbidden":
            msg = "unknown argument"
        elif kind == "value_error":
            msg = msg.removeprefix("Value error, ")
        shown = "" if kind in ("missing", "extra_forbidden", "value_error") else f" (got {_short(err.get('input'))})"
        if loc:
            fields.append(loc)
            parts.append(f"{loc}: {msg}{shown}")
        else:
            parts.append(f"{msg}{shown}")
    error = ToolInputError("; ".join(parts))
    error.field = fields[0] if fields else None
    return error


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
