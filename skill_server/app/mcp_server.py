"""MCP front end: the SDK's low-level ``Server``, answering every request from the tool table in ``app.table``.

The low-level server takes one handler per MCP method, so what goes on the wire is ours: ``tools/list``
publishes each tool's input and output schema from the committed manifest (``tool_schemas.json``, equal
to the models by test) with the table's hints as annotations, and ``tools/call`` hands the client's
arguments, exactly as sent, to ``ToolSpec.invoke``: the CLI's path, so a bad argument gets the same
one-line message from both. The tool runs on a worker thread; its progress callback becomes MCP progress
notifications. A result is structured content plus the same JSON as a text block, plus per
``ImageAttachment`` picture an image block and a link to the kept copy (``agentjet://plot/{name}``, served
here as a resource: clients that show the model only the structured result drop image blocks). This
module is the only one that imports the MCP SDK.

What a person watching a long call wants to see goes to the client as log messages (MCP's ``logging``
capability, declared: ``notifications/message`` from logger ``agentjet-swarm-skill``): every tool's
progress messages (the waits, and whatever a tool reports through its ``progress`` callback), and for any
call that runs longer than ``LONG_CALL_S`` that it is still running and how it ended. ``logging/setLevel``
sets the least level sent (default ``info``); 2026-07-28 clients opt in per request, as the SDK enforces.
With ``SKILL_SERVER_READ_ONLY=1`` only the tools whose hints say they change nothing are listed and run
(``app.table.published_tools``).
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
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import anyio
import anyio.to_thread
import pydantic_core
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import (
    INVALID_PARAMS,
    BlobResourceContents,
    CallToolRequestParams,
    CallToolResult,
    ContentBlock,
    EmptyResult,
    GetPromptRequestParams,
    GetPromptResult,
    ImageContent,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    LoggingLevel,
    PaginatedRequestParams,
    Prompt,
    PromptArgument,
    PromptMessage,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceLink,
    ResourceTemplate,
    SetLevelRequestParams,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)

from skill_server import __version__
from skill_server.app.table import (
    READ_ONLY_ENV,
    TOOLS_BY_NAME,
    published_tools,
    read_only_mode,
    refusal,
    schema_manifest,
)
from skill_server.core.deadline import CALL_BOUND_S, request_shutdown, shutdown_requested
from skill_server.core.errors import SkillError, internal_error_message

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
    "the Ray cluster multi-node training needs. preflight and install_agentjet: is a host ready, and installing "
    "AgentJet there. Arguments are strict JSON (unknown names are "
    "refused, null means not given). Without MCP, the same tools run as "
    "`python -m skill_server call TOOL --json '{...}'` (`call TOOL --help` lists a tool's arguments)."
)

READ_ONLY_INSTRUCTIONS = (
    f" This server is read-only ({READ_ONLY_ENV}=1): it lists and runs only the tools that change nothing, so "
    "launching, stopping, writing results and starting Ray clusters are not available here."
)

RequestContext = ServerRequestContext[Any]


def build_server() -> Server[Any]:
    """The MCP server: the table's tools (only those that change nothing in read-only mode), the reference
    pages and the overrides table, two prompts, and log messages to the client."""
    read_only = read_only_mode()
    with warnings.catch_warnings():
        # logging/setLevel is deprecated as of 2026-07-28 (SEP-2577), but Claude Code and Codex speak the
        # 2025-11-25 handshake, where the capability is how a client gets a long call's log messages
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return Server(
            SERVER_NAME,
            version=__version__,
            instructions=INSTRUCTIONS + (READ_ONLY_INSTRUCTIONS if read_only else ""),
            get_tool_input_schema=_input_schema,
            on_list_tools=_list_tools,
            on_call_tool=_call_tool,
            on_list_resources=_list_resources,
            on_list_resource_templates=_list_resource_templates,
            on_read_resource=_read_resource,
            on_list_prompts=_list_prompts,
            on_get_prompt=_get_prompt,
            on_set_logging_level=_set_logging_level,
            # nothing is ever published (the lists are fixed); served so that 2026-07-28 clients are offered the
            # same capabilities as from the SDK's high-level server, which serves it by default
            on_subscriptions_listen=ListenHandler(InMemorySubscriptionBus()),
        )


# --- log messages to the client ------------------------------------------------------------------

LOGGER_NAME = SERVER_NAME
_LEVELS: tuple[LoggingLevel, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
DEFAULT_CLIENT_LOG_LEVEL: LoggingLevel = "info"
#: A call running this long is reported as still running (then every ``LONG_CALL_EVERY_S``), and its end too.
LONG_CALL_S = 10.0
LONG_CALL_EVERY_S = 30.0
#: Progress messages become log messages at most this often (the last one of a call always does).
PROGRESS_LOG_EVERY_S = 5.0
#: The least level each connected client asked for (``logging/setLevel``), by connection.
_CLIENT_LEVELS: weakref.WeakKeyDictionary[Any, LoggingLevel] = weakref.WeakKeyDictionary()


def _connection(ctx: RequestContext) -> Any:
    """The client connection a request came on. The SDK (2.3) hands each request a ``ServerSession`` of its own
    and keeps the connection it wraps private; the level a client sets must outlive the request that set it."""
    return getattr(ctx.session, "_connection", ctx.session)


async def _set_logging_level(ctx: RequestContext, params: SetLevelRequestParams) -> EmptyResult:
    _CLIENT_LEVELS[_connection(ctx)] = params.level
    return EmptyResult()


class ClientLog:
    """Log messages about one tool call to the client that made it (best effort: a message that cannot be
    sent never fails the call). ``send`` from the event loop, ``send_from_thread`` from the tool's thread."""

    def __init__(self, ctx: RequestContext, tool: str) -> None:
        self.ctx = ctx
        self.tool = tool

    def wanted(self, level: LoggingLevel) -> bool:
        least = _CLIENT_LEVELS.get(_connection(self.ctx), DEFAULT_CLIENT_LOG_LEVEL)
        return _LEVELS.index(level) >= _LEVELS.index(least)

    async def send(self, level: LoggingLevel, text: str) -> None:
        if not self.wanted(level):
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await self.ctx.session.send_log_message(level, f"{self.tool}: {text}", logger=LOGGER_NAME,
                                                        related_request_id=self.ctx.request_id)
        except Exception:
            log.debug("log message to the client failed", exc_info=True)

    def send_from_thread(self, level: LoggingLevel, text: str) -> None:
        import anyio.from_thread

        try:
            anyio.from_thread.run(self.send, level, text)
        except Exception:
            log.debug("log message to the client failed", exc_info=True)


async def _watched(client_log: ClientLog, run: Callable[[], Any]) -> Any:
    """``run()`` on a worker thread while ``_report_long_call`` watches it; its result, or its exception as is."""
    outcome: dict[str, Any] = {}
    async with anyio.create_task_group() as watch:
        watch.start_soon(_report_long_call, client_log)
        try:
            outcome["result"] = await anyio.to_thread.run_sync(run)
        except Exception as exc:  # raised below, outside the task group (which would wrap it in a group)
            outcome["error"] = exc
        finally:
            watch.cancel_scope.cancel()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


async def _report_long_call(client_log: ClientLog) -> None:
    """While a call runs (this task is cancelled at its end): "still running" after ``LONG_CALL_S``, then
    every ``LONG_CALL_EVERY_S``."""
    started = time.monotonic()
    await anyio.sleep(LONG_CALL_S)
    while True:
        await client_log.send("info", f"still running after {time.monotonic() - started:.0f} s")
        await anyio.sleep(LONG_CALL_EVERY_S)


# --- tools ---------------------------------------------------------------------------------------


def _input_schema(name: str) -> dict[str, Any] | None:
    """A tool's published input schema (the SDK checks ``Mcp-Param-*`` headers of 2026-07-28 HTTP calls by it)."""
    schemas = schema_manifest().get(name)
    return None if schemas is None else schemas["input"]


@functools.lru_cache(maxsize=2)
def _tool_listing(read_only: bool) -> tuple[Tool, ...]:
    """The published tools as ``tools/list`` lists them (built once per mode: the table and the manifest are
    fixed); ``read_only``: only those whose hints say they change nothing."""
    manifest = schema_manifest()
    return tuple(
        Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            input_schema=manifest[spec.name]["input"],
            output_schema=manifest[spec.name]["output"],
            annotations=ToolAnnotations(  # no title here: the tool's own title says it once
                read_only_hint=spec.read_only,
                destructive_hint=spec.destructive,
                idempotent_hint=spec.idempotent,
                open_world_hint=spec.open_world,
            ),
        )
        for spec in published_tools(read_only)
    )


async def _list_tools(ctx: RequestContext, params: PaginatedRequestParams | None) -> ListToolsResult:
    return ListToolsResult(tools=list(_tool_listing(read_only_mode())))


async def _call_tool(ctx: RequestContext, params: CallToolRequestParams) -> CallToolResult:
    """Run one tool; any failure is an ``isError`` result whose text says what went wrong, in one line. A call
    that runs long is reported to the client as log messages while it runs and when it ends."""
    spec = TOOLS_BY_NAME.get(params.name)
    if spec is None:
        return _failed(params.name, f"Unknown tool: {params.name}")
    refused = refusal(spec)
    if refused is not None:
        return _failed(spec.name, f"Error executing tool {spec.name}: {refused}")
    client_log = ClientLog(ctx, spec.name)
    progress = _progress_reporter(ctx, client_log) if spec.reports_progress else None
    if not _IN_FLIGHT.enter():
        return _failed(spec.name, f"Error executing tool {spec.name}: the server is shutting down (a signal "
                                  "stopped it); start it again")
    started = time.monotonic()
    outcome = "failed"
    try:
        result = await _watched(client_log, functools.partial(spec.invoke, params.arguments or {}, progress))
        outcome = "done"
        return _tool_result(result, spec.dump(result))
    except SkillError as exc:
        outcome = f"failed: {exc}"
        return _failed(spec.name, f"Error executing tool {spec.name}: {exc}")
    except Exception as exc:  # a bug: say what it was instead of a generic failure
        log.exception("tool %s failed", spec.name)
        outcome = f"failed: {internal_error_message(exc)}"
        return _failed(spec.name, f"Error executing tool {spec.name}: {internal_error_message(exc)}")
    finally:
        _IN_FLIGHT.leave()
        took = time.monotonic() - started
        if took >= LONG_CALL_S:
            await client_log.send("info" if outcome == "done" else "warning", f"{outcome} after {took:.0f} s")


def _failed(name: str, text: str) -> CallToolResult:
    log.info("tool %s: %s", name, text)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _progress_reporter(ctx: RequestContext, client_log: ClientLog) -> Callable[..., None]:
    """The ``progress`` callback a tool calls from its worker thread: one MCP progress notification a call
    (a no-op when the client asked for no progress: the SDK drops it), and the message as a log message to
    the client, at most every ``PROGRESS_LOG_EVERY_S`` (the last one, ``done == total``, always). Best
    effort: a notification that cannot be sent never fails the tool.
    """
    import anyio.from_thread  # here, not at the top: only a tool that reports progress needs it (start-up time)

    last_logged = [float("-inf")]

    def progress(done: float, total: float | None = None, message: str | None = None) -> None:
        try:
            anyio.from_thread.run(functools.partial(ctx.session.report_progress, done, total, message))
        except Exception:
            log.debug("progress notification failed", exc_info=True)
        now = time.monotonic()
        if message and (now - last_logged[0] >= PROGRESS_LOG_EVERY_S or (total is not None and done >= total)):
            last_logged[0] = now
            client_log.send_from_thread("info", message)

    return progress


def _tool_result(result: Any, dumped: dict[str, Any]) -> CallToolResult:
    """The result as structured content, the same JSON as text (for clients that read only text), and per
    picture the tool attached (``ImageAttachment``) an image block and a link to its kept copy."""
    from skill_server.core.models import attached_images  # here, not at the top: start-up time
    text = pydantic_core.to_json(dumped, fallback=str, indent=2).decode()
    blocks: list[ContentBlock] = [TextContent(type="text", text=text)]
    for image in attached_images(result):
        blocks.append(ImageContent(type="image", data=base64.b64encode(image.data).decode("ascii"),
                                   mime_type=image.mime_type))
        if image.uri is not None:
            blocks.append(ResourceLink(type="resource_link", uri=image.uri, name=image.uri.rsplit("/", 1)[-1],
                                       title=image.title, mime_type=image.mime_type, size=image.size_bytes))
    return CallToolResult(content=blocks, structured_content=dumped)


# --- resources -----------------------------------------------------------------------------------

REFERENCE_DIRS = (
    Path(__file__).resolve().parents[1] / "references",  # an installed wheel (pyproject's force-include)
    Path(__file__).resolve().parents[2] / "references",  # the skill folder / checkout
)
_REFERENCE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
REFERENCE_TEMPLATE = "agentjet://reference/{name}"
_REFERENCE_URI = re.compile(r"agentjet://reference/([^/?#]+)")
OVERRIDES_URI = "agentjet://overrides"
PLOT_TEMPLATE = "agentjet://plot/{name}"  # experiments.plots.PLOT_URI
_PLOT_URI = re.compile(r"agentjet://plot/([^/?#]+)")


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


async def _list_resources(ctx: RequestContext, params: PaginatedRequestParams | None) -> ListResourcesResult:
    return ListResourcesResult(resources=[Resource(
        uri=OVERRIDES_URI, name="overrides", mime_type="application/json",
        description="AgentJetJob kwarg -> YAML key overrides table (detected install or bundled).")])


async def _list_resource_templates(ctx: RequestContext,
                                   params: PaginatedRequestParams | None) -> ListResourceTemplatesResult:
    return ListResourceTemplatesResult(resource_templates=[
        ResourceTemplate(uri_template=REFERENCE_TEMPLATE, name="reference", mime_type="text/markdown",
                         description="A reference page of this skill: " + ", ".join(list_references())),
        ResourceTemplate(uri_template=PLOT_TEMPLATE, name="plot", mime_type="image/png",
                         description="A plot a tool returned (its result's plot.uri), kept for clients that show "
                                     "no image blocks.")])


def read_plot(name: str) -> str:
    """A kept plot as base64 (``agentjet://plot/{name}``); ValueError naming it when it is not kept."""
    from skill_server.experiments.plots import read_kept  # here, not at the top: start-up time

    return base64.b64encode(read_kept(name)).decode("ascii")


async def _read_resource(ctx: RequestContext, params: ReadResourceRequestParams) -> ReadResourceResult:
    """The overrides table, a reference page or a kept plot; any other address, or a page or plot that does
    not exist, is an invalid-params error that says so (a page's error lists the pages there are)."""
    uri = params.uri
    page = _REFERENCE_URI.fullmatch(uri)
    plot = _PLOT_URI.fullmatch(uri)
    try:
        if plot is not None:
            blob = await anyio.to_thread.run_sync(read_plot, unquote(plot.group(1)))
            return ReadResourceResult(contents=[BlobResourceContents(uri=uri, blob=blob, mime_type="image/png")])
        if uri == OVERRIDES_URI:
            text, mime_type = await anyio.to_thread.run_sync(overrides_json), "application/json"
        elif page is not None:
            text = await anyio.to_thread.run_sync(read_reference, unquote(page.group(1)))
            mime_type = "text/markdown"
        else:
            raise ValueError(f"Unknown resource: {uri}")
    except ValueError as exc:
        log.info("resource %s: %s", uri, exc)
        raise MCPError(code=INVALID_PARAMS, message=str(exc), data={"uri": uri}) from None
    return ReadResourceResult(contents=[TextResourceContents(uri=uri, text=text, mime_type=mime_type)])


# --- prompts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptSpec:
    """A prompt: its text with ``{argument}`` fields, the arguments it needs and those it may take."""

    name: str
    description: str
    template: str
    required: tuple[str, ...] = ()
    optional: dict[str, str] = field(default_factory=dict)  # name -> the value used when not given
    #: it asks for tools that change things (not offered in read-only mode)
    changes: bool = False

    def render(self, arguments: dict[str, str]) -> str:
        """The prompt's text; a missing or unknown argument is an error naming it."""
        unknown = sorted(set(arguments) - set(self.required) - set(self.optional))
        if unknown:
            raise ValueError(f"Unknown arguments for prompt {self.name}: {', '.join(unknown)} "
                             f"(valid: {', '.join([*self.required, *self.optional])})")
        missing = [name for name in self.required if name not in arguments]
        if missing:
            raise ValueError(f"Missing required arguments for prompt {self.name}: {', '.join(missing)}")
        return self.template.format(**{**self.optional, **arguments})


RUN_BLUEPRINT = """Run the AgentJet experiment described by the blueprint {blueprint}.
1. blueprint(action="validate", path=...) and fix every problem it reports before launching.
2. check_config on the client script / YAML it names; fix errors (warnings: say why you keep them).
3. launch_experiment(blueprint=...) returns at once with an id, the log path and the attach command. For a
   night away, its policy does the rest with no call (resume a transient failure from the newest checkpoint,
   one line per happening in notify_file, on_end collect): references/monitoring.md.
4. wait_experiment(id, until="first_step"): the first step (the first step:N line) must appear within
   the blueprint's first-step deadline (20 min by default). Then wait_experiment(id) repeatedly, sleeping as
   long as each result's next_wait_s says (its back-off: references/tools.md); never poll in a tight loop.
   For the log lines since a result, experiment_status(id, since=<its cursor>); wait takes since only with
   until="pattern".
5. On an error signature, read its hint, fix the cause, record the attempt in the result directory, relaunch.
6. When the run ends (or plateaus late in training), collect_results(id), any attempt's id: it writes the
   experiment's page (every attempt, a metrics plot), results.md beside finish.flag, and the flag once the
   experiment finished. compare_experiments(ids=[...]) puts it next to earlier runs.
"""

EXPLAIN_GAUGE = """Explain why overwatch's "Running Episodes" gauge sits where it does for the swarm server at {url}.
1. swarm_status(url=..., yaml=<the dumped config the engine runs, if known>) for the live numbers; add
   watch_s=30 to see the gauge move.
2. episode_cap with the ENGINE's max_env_worker, num_repeat and train_batch_size (and each client's
   concurrency as client_parallelism) for the exact ceiling and the bound that binds.
3. Say which knob lifts it. More clients or a larger client-side max_env_worker never raise the engine cap;
   the engine's config changes only after a restart of the engine.
"""

PROMPTS: dict[str, PromptSpec] = {prompt.name: prompt for prompt in (
    PromptSpec("run-blueprint", "Run an AgentJet experiment blueprint end to end.", RUN_BLUEPRINT,
               required=("blueprint",), changes=True),
    PromptSpec("explain-gauge", "Explain the overwatch Running Episodes gauge of a swarm server.", EXPLAIN_GAUGE,
               optional={"url": "http://localhost:10086"}),
)}


def _offered(prompt: PromptSpec) -> bool:
    return not (prompt.changes and read_only_mode())


async def _list_prompts(ctx: RequestContext, params: PaginatedRequestParams | None) -> ListPromptsResult:
    return ListPromptsResult(prompts=[
        Prompt(name=prompt.name, description=prompt.description,
               arguments=[PromptArgument(name=name, required=True) for name in prompt.required]
               + [PromptArgument(name=name, required=False) for name in prompt.optional])
        for prompt in PROMPTS.values() if _offered(prompt)])


async def _get_prompt(ctx: RequestContext, params: GetPromptRequestParams) -> GetPromptResult:
    prompt = PROMPTS.get(params.name)
    try:
        if prompt is None:
            raise ValueError(f"Unknown prompt: {params.name}")
        if not _offered(prompt):
            raise ValueError(f"prompt {params.name} launches experiments, and this server is read-only "
                             f"({READ_ONLY_ENV}=1)")
        text = prompt.render(params.arguments or {})
    except ValueError as exc:
        raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
    return GetPromptResult(description=prompt.description,
                           messages=[PromptMessage(role="user", content=TextContent(type="text", text=text))])


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


def http_app(server: Server[Any], *, host: str, token: str, allowed_hosts: list[str] | None = None) -> Any:
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


class _Calls:
    """The tool calls in flight, so that a signal lets them finish (or roll back) before the exit."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.count = 0
        self.closed = False

    def enter(self) -> bool:
        """Count a call in; False once the server is shutting down (the call is refused)."""
        with self.cond:
            if self.closed:
                return False
            self.count += 1
            return True

    def leave(self) -> None:
        with self.cond:
            self.count -= 1
            self.cond.notify_all()

    def close_and_wait(self, timeout_s: float) -> None:
        """Refuse new calls and wait (at most ``timeout_s``) for those in flight."""
        with self.cond:
            self.closed = True
            self.cond.wait_for(lambda: self.count == 0, timeout=timeout_s)


_IN_FLIGHT = _Calls()
#: How long a signal waits for the calls in flight: a launch finishes or rolls back within its deadline.
SHUTDOWN_WAIT_S = CALL_BOUND_S + 5.0


#: The thread that ends the process after a signal (see ``_stop_on_signals``).
_DRAINERS: list[threading.Thread] = []


def _after_signal() -> None:
    """Once a server loop returns because of a signal, let its drain thread end the process with that signal's
    exit code: returning normally would race it and could exit 0 after a SIGINT."""
    for drainer in list(_DRAINERS):
        drainer.join(SHUTDOWN_WAIT_S + 5.0)


def _stop_on_signals() -> None:
    """Ctrl-C (SIGINT) and SIGTERM end the server: exit 130 / 0, one line on stderr, no traceback.

    New calls are refused at once; the calls in flight get up to ``SHUTDOWN_WAIT_S`` to finish or roll back
    (a launch checks the shutdown flag between its rounds, a wait ends early), then the process exits. A
    second signal exits at once. Without this, stdio needs EOF to end (its stdin reader blocks in a worker
    thread that a cancelled event loop waits for) and a second Ctrl-C prints a traceback. Over HTTP,
    uvicorn installs its own handlers while it serves, shuts down (bounded), then re-raises the signal,
    which lands here.
    """

    def leave(signum: int) -> None:
        try:
            sys.stderr.write(f"skill_server: stopped by {signal.Signals(signum).name}\n")
            sys.stderr.flush()
        finally:
            os._exit(130 if signum == signal.SIGINT else 0)

    def stop(signum: int, frame: Any) -> None:
        if shutdown_requested():
            leave(signum)
        request_shutdown()

        def drain() -> None:
            _IN_FLIGHT.close_and_wait(SHUTDOWN_WAIT_S)
            leave(signum)

        drainer = threading.Thread(target=drain, name="skill_server-shutdown", daemon=True)
        _DRAINERS.append(drainer)
        drainer.start()

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


async def _serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765,
          allowed_hosts: list[str] | None = None) -> int:
    """Run the server until the client disconnects (stdio EOF) or a signal stops it."""
    _stop_on_signals()
    server = build_server()
    if transport == "stdio":
        _announce_on_terminal()
        anyio.run(_serve_stdio, server)
        _after_signal()
        return 0
    import uvicorn

    token, generated = resolve_token(host)
    if generated:
        sys.stderr.write(f"skill_server: bearer token for this run (set SKILL_SERVER_TOKEN to choose one): {token}\n")
    sys.stderr.write(f"skill_server: streamable HTTP on http://{host}:{port}/mcp (Ctrl-C stops it)\n")
    sys.stderr.flush()
    app = http_app(server, host=host, token=token, allowed_hosts=allowed_hosts)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    _after_signal()
    return 0
