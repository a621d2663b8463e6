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
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from skill_server import __version__
from skill_server.errors import SkillError
from skill_server.tools import TOOLS, ToolSpec, schema_manifest

log = logging.getLogger("skill_server.mcp")

SERVER_NAME = "agentjet-swarm-skill"
INSTRUCTIONS = (
    "Tools for operating AgentJet swarm-mode RL training. episode_cap explains the overwatch "
    "'Running Episodes' ceiling; build_config reproduces the YAML AgentJetJob hands to the engine. "
    "The same tools run from a shell as `python -m skill_server call TOOL --json '{...}'`."
)


def _flat_parameters(spec: ToolSpec, input_schema: dict[str, Any]) -> list[inspect.Parameter]:
    """One keyword parameter per input property, accepting anything at the SDK layer.

    Validation happens once, in the tool's input model, with the same one-line messages as the CLI;
    the published schema is the model's own (from the manifest). Absent arguments arrive as None,
    which the handler treats as "not given".
    """
    return [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Any)
        for name in input_schema.get("properties", {})
    ]


def _handler_for(spec: ToolSpec, input_schema: dict[str, Any]) -> Any:
    """Build ``async def <tool>(*, <flat fields>, ctx: Context) -> dict`` for one table entry."""

    async def handler(ctx: Context, **arguments: Any) -> dict[str, Any]:
        progress = None
        if spec.reports_progress:

            def progress(done: float, total: float | None = None, message: str | None = None) -> None:
                try:
                    anyio.from_thread.run(functools.partial(ctx.report_progress, done, total, message))
                except Exception:  # progress is best effort; never fail the tool over it
                    log.debug("progress notification failed", exc_info=True)

        given = {name: value for name, value in arguments.items() if value is not None}
        try:
            result = await anyio.to_thread.run_sync(functools.partial(spec.invoke, given, progress))
        except SkillError as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # an unexpected bug: say what it was instead of a generic failure
            log.exception("tool %s failed", spec.name)
            raise ToolError(f"internal error: {type(exc).__name__}: {exc}") from None
        return result.model_dump(mode="json")

    parameters = _flat_parameters(spec, input_schema)
    parameters.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    handler.__signature__ = inspect.Signature(parameters, return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    handler.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": dict[str, Any]}
    handler.__name__ = spec.name
    handler.__qualname__ = spec.name
    handler.__doc__ = spec.description
    return handler


def build_server() -> MCPServer:
    """The MCP server with every tool of the table registered."""
    server = MCPServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS)
    manifest = schema_manifest()
    for spec in TOOLS:
        schemas = manifest[spec.name]
        server.add_tool(
            _handler_for(spec, schemas["input"]),
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
        _publish_schemas(server, spec.name, schemas)
    return server


def _publish_schemas(server: MCPServer, name: str, schemas: dict[str, Any]) -> None:
    """Advertise the models' own schemas (from the manifest) instead of the permissive SDK-side ones.

    The handler returns ``model.model_dump(mode="json")``, validated by the SDK as a plain mapping,
    while clients see the output model's schema. ``FuncMetadata`` reads these fields live.
    """
    tool = server._tool_manager.get_tool(name)  # the SDK has no public setter for a tool's schemas
    if tool is None:  # pragma: no cover - registered just above
        raise RuntimeError(f"tool {name} was not registered")
    tool.parameters = schemas["input"]
    tool.fn_metadata.output_schema = schemas["output"]


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765) -> int:
    """Run the server until the client disconnects."""
    server = build_server()
    if transport == "stdio":
        server.run()
        return 0
    raise SystemExit(f"transport {transport!r} is not available yet")
