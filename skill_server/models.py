"""Base classes and small helpers for tool input/output models (pydantic, no I/O framework)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from skill_server.errors import ToolInputError

#: ``progress(done, total, message)``: how a long tool reports progress. The MCP adapter forwards it
#: as progress notifications; the CLI ignores it.
Progress = Callable[[float, "float | None", "str | None"], None]

# Strict numbers: a JSON string "128" or a boolean is a mistake worth naming, not something to coerce.
PositiveInt = Annotated[int, Strict(), Field(ge=1)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]


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
