"""MCP front end: an ``MCPServer`` whose tools are generated from the table in ``skill_server.tools``.

Each tool gets a flat signature derived from its input model (so clients send plain top-level
arguments), returns its pydantic output model (so the server publishes an output schema), and carries
the table's hints as MCP annotations. Domain errors become ``ToolError`` with their one-line message.
The domain function runs on a worker thread; its progress callback is bridged to MCP progress
notifications. This module is the only one that imports the MCP SDK.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import WithJsonSchema

from skill_server import __version__
from skill_server.errors import SkillError
from skill_server.tools import TOOLS, ToolSpec

log = logging.getLogger("skill_server.mcp")

SERVER_NAME = "agentjet-swarm-skill"
INSTRUCTIONS = (
    "Tools for operating AgentJet swarm-mode RL training. episode_cap explains the overwatch "
    "'Running Episodes' ceiling; build_config reproduces the YAML AgentJetJob hands to the engine. "
    "The same tools run from a shell as `python -m skill_server call TOOL --json '{...}'`."
)


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """Replace ``$ref`` pointers into ``$defs`` so each property schema stands alone."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = dict(defs[ref.rsplit("/", 1)[1]])
            target.update({k: v for k, v in node.items() if k != "$ref"})
            return _inline_refs(target, defs)
        return {k: _inline_refs(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def _flat_parameters(spec: ToolSpec) -> list[inspect.Parameter]:
    """One keyword parameter per input field, publishing the field's own JSON schema.

    The parameters accept any value at the SDK layer (``Any`` with the schema attached), so that
    validation happens once, in the tool's input model, with the same one-line messages as the CLI.
    Optional parameters default to None, which the handler treats as "not given".
    """
    schema = spec.input_model.model_json_schema()
    defs = schema.get("$defs", {})
    properties = schema.get("properties", {})
    parameters = []
    for name, field in spec.input_model.model_fields.items():
        prop = _inline_refs(properties.get(name, {}), defs)
        annotation: Any = Annotated[Any, WithJsonSchema(prop)]
        default = inspect.Parameter.empty if field.is_required() else None
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    return parameters


def _handler_for(spec: ToolSpec) -> Any:
    """Build ``async def <tool>(*, <flat fields>, ctx: Context) -> Output`` for one table entry."""

    async def handler(ctx: Context, **arguments: Any) -> Any:
        progress = None
        if spec.reports_progress:

            def progress(done: float, total: float | None = None, message: str | None = None) -> None:
                try:
                    anyio.from_thread.run(functools.partial(ctx.report_progress, done, total, message))
                except Exception:  # progress is best effort; never fail the tool over it
                    log.debug("progress notification failed", exc_info=True)

        given = {name: value for name, value in arguments.items() if value is not None}
        try:
            return await anyio.to_thread.run_sync(functools.partial(spec.invoke, given, progress))
        except SkillError as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # an unexpected bug: say what it was instead of a generic failure
            log.exception("tool %s failed", spec.name)
            raise ToolError(f"internal error: {type(exc).__name__}: {exc}") from None

    parameters = _flat_parameters(spec)
    parameters.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    handler.__signature__ = inspect.Signature(parameters, return_annotation=spec.output_model)  # type: ignore[attr-defined]
    handler.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": spec.output_model}
    handler.__name__ = spec.name
    handler.__qualname__ = spec.name
    handler.__doc__ = spec.description
    return handler


def build_server() -> MCPServer:
    """The MCP server with every tool of the table registered."""
    server = MCPServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS)
    for spec in TOOLS:
        server.add_tool(
            _handler_for(spec),
            name=spec.name,
            title=spec.title,
            description=spec.description,
            annotations=ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=spec.destructive,
                idempotent_hint=spec.idempotent,
                open_world_hint=spec.open_world,
            ),
            structured_output=True,
        )
    return server


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765) -> int:
    """Run the server until the client disconnects."""
    server = build_server()
    if transport == "stdio":
        server.run()
        return 0
    raise SystemExit(f"transport {transport!r} is not available yet")
