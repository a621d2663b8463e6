"""MCP front end: an ``MCPServer`` whose tools are generated from the table in ``skill_server.app.table``.

Each tool gets a flat signature derived from its input model (so clients send plain top-level
arguments), returns its pydantic output model (so the server publishes an output schema), and carries
the table's hints as MCP annotations. Domain errors become ``ToolError`` with their one-line message.
The domain function runs on a worker thread; its progress callback is bridged to MCP progress
notifications. A result holding ``ImageAttachment`` pictures also gets one image content block per
picture. This module is the only one that imports the MCP SDK.
"""

from __future__ import annotations

import base64
import functools
import hmac
import json
import logging
import os
import re
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

import anyio.from_thread
import anyio.to_thread
import pydantic_core
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations

from skill_server import __version__
from skill_server.app.table import TOOLS, ToolSpec, schema_manifest
from skill_server.core.errors import SkillError, internal_error_message
from skill_server.core.models import attached_images

log = logging.getLogger("skill_server.mcp")

SERVER_NAME = "agentjet-swarm-skill"
INSTRUCTIONS = (
    "Tools for operating AgentJet swarm-mode RL training. episode_cap: the exact ceiling of overwatch's "
    "'Running Episodes' gauge and which knob lifts it. build_config: the YAML AgentJetJob hands to the engine. "
    "check_config: static lint of a swarm client script and YAML. swarm_status: live swarm servers (by url or "
    "experiment id). "
    "blueprint, launch_experiment, wait_experiment (bounded, use next_wait_s), experiment_status (progress, ETA, "
    "checkpoints, metrics_history), compare_experiments, stop_experiment, collect_results (results.md and a "
    "metrics plot): experiments in tmux, on this machine or ssh hosts. gpu_status and ray_cluster: GPU hosts and "
    "the Ray cluster multi-node training needs. Arguments are strict JSON (unknown names are "
    "refused, null means not given). Without MCP, the same tools run as "
    "`python -m skill_server call TOOL --json '{...}'` (`call TOOL --help` lists a tool's arguments)."
)


class _RawArguments(FuncMetadata):
    """Hands the client's arguments to the handler exactly as sent.

    The SDK would otherwise validate them against a signature first: unknown names dropped, JSON in
    strings parsed. The tool table validates instead (``ToolSpec.invoke``), so a bad argument gets
    the same one-line message over MCP as from the CLI.
    """

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        return {"arguments": dict(arguments_to_validate)}


def _handler_for(spec: ToolSpec) -> Any:
    """``async def <tool>(arguments, ctx) -> dict`` for one table entry."""

    async def handler(arguments: dict[str, Any], ctx: Context) -> dict[str, Any]:
        progress = None
        if spec.reports_progress:

            def progress(done: float, total: float | None = None, message: str | None = None) -> None:
                try:
                    anyio.from_thread.run(functools.partial(ctx.report_progress, done, total, message))
                except Exception:  # progress is best effort; never fail the tool over it
                    log.debug("progress notification failed", exc_info=True)

        try:
            result = await anyio.to_thread.run_sync(functools.partial(spec.invoke, arguments, progress))
            return _with_images(result, spec.dump(result))
        except SkillError as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # an unexpected bug: say what it was instead of a generic failure
            log.exception("tool %s failed", spec.name)
            raise ToolError(internal_error_message(exc)) from None

    handler.__name__ = spec.name
    handler.__qualname__ = spec.name
    handler.__doc__ = spec.description
    return handler


def _with_images(result: Any, dumped: dict[str, Any]) -> Any:
    """The structured result, plus an image content block per picture the tool attached (``ImageAttachment``):
    the text block is the same JSON the SDK would have made."""
    images = attached_images(result)
    if not images:
        return dumped
    text = pydantic_core.to_json(dumped, fallback=str, indent=2).decode()
    blocks: list[Any] = [TextContent(type="text", text=text)]
    blocks += [ImageContent(type="image", data=base64.b64encode(image.data).decode("ascii"), mime_type=image.mime_type)
               for image in images]
    return CallToolResult(content=blocks, structured_content=dumped)


def build_server() -> MCPServer:
    """The MCP server with every tool of the table registered."""
    server = MCPServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS)
    manifest = schema_manifest()
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
        _publish_schemas(server, spec.name, manifest[spec.name])
    _register_resources_and_prompts(server)
    return server


def _publish_schemas(server: MCPServer, name: str, schemas: dict[str, Any]) -> None:
    """Advertise the models' own schemas (from the manifest) and pass arguments through untouched.

    The handler returns the output model dumped to JSON types, validated by the SDK as a plain
    mapping, while clients see the output model's schema. ``Tool.run`` reads ``fn_metadata`` live.
    """
    tool = server._tool_manager.get_tool(name)  # the SDK has no public setter for a tool's schemas
    if tool is None:  # pragma: no cover - registered just above
        raise RuntimeError(f"tool {name} was not registered")
    sdk = tool.fn_metadata
    tool.parameters = schemas["input"]
    tool.fn_metadata = _RawArguments(arg_model=sdk.arg_model, output_schema=schemas["output"],
                                     output_model=sdk.output_model, wrap_output=sdk.wrap_output)


# --- resources and prompts ---------------------------------------------------------------------

REFERENCE_DIRS = (
    Path(__file__).resolve().parents[1] / "references",  # a symlink in a checkout; real files in an installed wheel
    Path(__file__).resolve().parents[2] / "references",  # the skill folder / checkout
)
_REFERENCE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def reference_dir() -> Path | None:
    return next((d for d in REFERENCE_DIRS if d.is_dir()), None)


def list_references() -> list[str]:
    directory = reference_dir()
    return sorted(p.stem for p in directory.glob("*.md")) if directory else []


def read_reference(name: str) -> str:
    """One reference page by name (``episode-cap``, ``overlay-config``, ...)."""
    name = name.removesuffix(".md")
    directory = reference_dir()
    if not _REFERENCE_NAME.match(name) or directory is None or not (directory / f"{name}.md").is_file():
        raise ValueError(f"no reference page {name!r}; available: {', '.join(list_references()) or 'none'}")
    return (directory / f"{name}.md").read_text(encoding="utf-8")


def overrides_json() -> str:
    """AgentJetJob's kwarg -> YAML key table (the detected install's, else the bundled one) as JSON."""
    from skill_server.agentjet.release import newest_bundled, select_agentjet

    warnings: list[str] = []
    try:
        release = select_agentjet()
    except SkillError as exc:
        warnings.append(f"the AgentJet found through AJET_ROOT / the Python path is not used: {exc}")
        release = newest_bundled()
    table = release.overrides
    return json.dumps({
        "agentjet": release.ref.model_dump(),
        "source": release.ref.source,
        "control_kwargs": list(table.control_kwargs),
        "rows": [{"kwarg": kwarg, "key": key} for kwarg, key in table.rows],
        "warnings": warnings,
    }, indent=1)


RUN_BLUEPRINT = """Run the AgentJet experiment described by the blueprint {blueprint}.
1. blueprint(action="validate", path=...) and fix every problem it reports before launching.
2. check_config on the client script / YAML it names; fix errors (warnings: say why you keep them).
3. launch_experiment(blueprint=...) returns at once with an id, the log path and the attach command.
4. wait_experiment(id, until="first_step"): the first step (the first step:N line) must appear within
   the blueprint's first-step deadline (20 min by default). Then wait_experiment(id) repeatedly, sleeping as
   long as each result's next_wait_s says (30 s, 1, 2, 4, 8, 16 min); never poll in a tight loop.
5. On an error signature, read its hint, fix the cause, record the attempt in the result directory, relaunch.
6. When the run ends (or plateaus late in training), collect_results(id): it writes results.md, a metrics plot
   and finish.flag. compare_experiments(ids=[...]) puts it next to earlier attempts.
"""

EXPLAIN_GAUGE = """Explain why overwatch's "Running Episodes" gauge sits where it does for the swarm server at {url}.
1. swarm_status(url=..., yaml=<the dumped config the engine runs, if known>) for the live numbers; add
   watch_s=30 to see the gauge move.
2. episode_cap with the ENGINE's max_env_worker, num_repeat and train_batch_size (and each client's
   concurrency as client_parallelism) for the exact ceiling and the bound that binds.
3. Say which knob lifts it. More clients or a larger client-side max_env_worker never raise the engine cap;
   the engine's config changes only after a restart of the engine.
"""


def _register_resources_and_prompts(server: MCPServer) -> None:
    @server.resource("agentjet://reference/{name}", name="reference", mime_type="text/markdown",
                     description="A reference page of this skill: " + ", ".join(list_references()))
    def reference(name: str) -> str:
        return read_reference(name)

    @server.resource("agentjet://overrides", name="overrides", mime_type="application/json",
                     description="AgentJetJob kwarg -> YAML key overrides table (detected install or bundled).")
    def overrides() -> str:
        return overrides_json()

    @server.prompt(name="run-blueprint", description="Run an AgentJet experiment blueprint end to end.")
    def run_blueprint(blueprint: str) -> str:
        return RUN_BLUEPRINT.format(blueprint=blueprint)

    @server.prompt(name="explain-gauge", description="Explain the overwatch Running Episodes gauge of a swarm server.")
    def explain_gauge(url: str = "http://localhost:10086") -> str:
        return EXPLAIN_GAUGE.format(url=url)


# --- transports ---------------------------------------------------------------------------------

LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Open streams get this long to finish when the HTTP server is told to stop.
GRACEFUL_SHUTDOWN_S = 3


class BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``, else 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = b'{"error": "unauthorized: send Authorization: Bearer <SKILL_SERVER_TOKEN>"}'
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="skill_server"'),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, *, host: str, token: str, allowed_hosts: list[str] | None = None) -> Any:
    """The streamable-HTTP app behind bearer auth, with DNS-rebinding protection on."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    if host not in LOOPBACK:
        hosts.append(f"{host}:*")
    hosts.extend(f"{h}:*" if ":" not in h else h for h in (allowed_hosts or []))
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts],
    )
    return BearerAuth(server.streamable_http_app(transport_security=security, host=host), token)


def resolve_token(host: str) -> tuple[str, bool]:
    """The bearer token from ``SKILL_SERVER_TOKEN``, else a generated one (loopback binds only)."""
    token = os.environ.get("SKILL_SERVER_TOKEN", "").strip()
    if token:
        return token, False
    if host not in LOOPBACK:
        raise SystemExit(
            f"refusing to bind {host} without a token: set SKILL_SERVER_TOKEN (a generated token is only "
            "allowed on a loopback address)"
        )
    return secrets.token_urlsafe(32), True


SMOKE_TEST = "python -m skill_server call episode_cap max_env_worker=128 num_repeat=6"


def _stop_on_signals() -> None:
    """Ctrl-C (SIGINT) and SIGTERM end the server at once: exit 130 / 0, one line on stderr, no traceback.

    Without this, stdio needs EOF to end (its stdin reader blocks in a worker thread that a cancelled
    event loop waits for) and a second Ctrl-C prints a traceback. Over HTTP, uvicorn installs its own
    handlers while it serves, shuts down (bounded), then re-raises the signal, which lands here.
    """

    def stop(signum: int, frame: Any) -> None:
        try:
            sys.stderr.write(f"skill_server: stopped by {signal.Signals(signum).name}\n")
            sys.stderr.flush()
        finally:
            os._exit(130 if signum == signal.SIGINT else 0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def _announce_on_terminal() -> None:
    """A person who runs the server by hand sees what it is and how to leave, on one stderr line."""
    try:
        interactive = sys.stdin.isatty()
    except (AttributeError, ValueError, OSError):
        interactive = False
    if interactive:
        sys.stderr.write(
            f"{SERVER_NAME} {__version__}: MCP server speaking JSON-RPC on stdin/stdout, started by an MCP client "
            f"(nothing to type here). Stop: Ctrl-D or Ctrl-C. Smoke test: {SMOKE_TEST}\n")
        sys.stderr.flush()


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765,
          allowed_hosts: list[str] | None = None) -> int:
    """Run the server until the client disconnects (stdio EOF) or a signal stops it."""
    _stop_on_signals()
    server = build_server()
    if transport == "stdio":
        _announce_on_terminal()
        server.run()
        return 0
    import uvicorn

    token, generated = resolve_token(host)
    if generated:
        sys.stderr.write(f"skill_server: bearer token for this run (set SKILL_SERVER_TOKEN to choose one): {token}\n")
    sys.stderr.write(f"skill_server: streamable HTTP on http://{host}:{port}/mcp (Ctrl-C stops it)\n")
    sys.stderr.flush()
    app = http_app(server, host=host, token=token, allowed_hosts=allowed_hosts)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    return 0
