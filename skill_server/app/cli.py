"""Command-line front end: ``serve`` (the MCP server), ``tools``, ``call``, ``watch`` and ``schemas``.

``tools``, ``call`` and ``watch`` never import the ``mcp`` package: they are how an assistant without MCP
registration uses the skill from a shell, so they must start fast. Exit codes of ``call``: 0 with one
JSON object on stdout; 1 for a tool error (one line on stderr naming the field); 2 for a usage error;
3 when a package the skill needs is not installed in this interpreter. ``watch`` prints one line per
event of a run and exits with a code that says how the run ended (``experiments.watch``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from skill_server.core.text import one_line

if TYPE_CHECKING:
    from collections.abc import Callable

    from skill_server.app.table import ToolSpec

EXIT_OK, EXIT_TOOL_ERROR, EXIT_USAGE, EXIT_MISSING_PACKAGE = 0, 1, 2, 3
EXIT_PIPE_CLOSED = 141  # the shell's code for a reader that went away (128 + SIGPIPE)


class _StdoutClosed(BrokenPipeError):
    """The reader of our stdout went away (``| head``): not a bug, and nothing is left to say to it.
    A BrokenPipeError, so ``watch``'s own handling of a closed pipe applies to it unchanged."""


class _StdoutFailed(Exception):
    """Writing our stdout failed for another reason (a full disk behind a redirect): the result is lost."""


PROG = "python -m skill_server"
#: Largest ``--json`` text accepted (Linux caps one argv string at 128 KiB anyway).
MAX_JSON_ARGUMENT_BYTES = 1024 * 1024

#: Import name -> what to install, for the one-line message when a dependency is missing.
REQUIREMENTS = {"pydantic": "pydantic>=2", "pydantic_core": "pydantic>=2", "yaml": "pyyaml",
                "mcp": "mcp>=2.3,<3", "anyio": "mcp>=2.3,<3", "uvicorn": "mcp>=2.3,<3"}
SHELL_REQUIREMENTS = ("pyyaml", "pydantic>=2")


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would exit 2 with a multi-line usage; keep it one line
        raise _UsageError(message)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="AgentJet swarm skill: MCP server and CLI.")
    parser.add_argument("--version", action="store_true", help="the version, and the folder the server runs from")
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="run the MCP server (default: stdio)")
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--allowed-host", action="append", default=[], metavar="HOST",
                       help="extra Host header value accepted over HTTP (DNS-rebinding protection); repeatable")

    tools = sub.add_parser("tools", help="list the tools")
    tools.add_argument("--json", action="store_true", help="print a JSON list")

    schemas = sub.add_parser("schemas", help="check (default) or rewrite the tool schema manifest")
    schemas.add_argument("--write", action="store_true", help="regenerate skill_server/app/tool_schemas.json")

    snapshot = sub.add_parser("snapshot", help="maintainers: bundle an AgentJet release read from a checkout")
    snapshot.add_argument("--from", dest="checkout", required=True, metavar="CHECKOUT",
                          help="an AgentJet checkout (a folder containing ajet/)")
    snapshot.add_argument("--write", action="store_true", help="write skill_server/agentjet/releases/<commit8>/")
    snapshot.add_argument("--commit", default=None, help="the checkout's commit, when it is not a git checkout")
    snapshot.add_argument("--date", default=None, help="the commit date (ISO 8601), when it is not a git checkout")
    snapshot.add_argument("--repo", default=None, help="owner/name of the repository (default: the origin remote)")
    snapshot.add_argument("--releases-dir", default=None, help=argparse.SUPPRESS)

    watch = sub.add_parser("watch", help="print one line per event of a run until it ends (exit code: how it ended)")
    watch.add_argument("id", help="experiment id or session name")
    watch.add_argument("--every", type=_positive_int, default=10, metavar="K",
                       help="a step line every K global steps (default 10)")
    watch.add_argument("--interval", type=_interval, default=5.0, metavar="SECONDS",
                       help="seconds between looks at the run (default 5, at least 0.2)")
    watch.add_argument("--metrics", default=None, metavar="GLOBS",
                       help="comma-separated metric names or globs shown on step lines (default: reward, loss ...)")
    watch.add_argument("--json", action="store_true", help="one JSON object per line instead of text")
    watch.add_argument("--max-time", type=_interval, default=None, metavar="SECONDS",
                       help="give up after this long (exit 124)")
    watch.add_argument("--until", type=_until, default=(), metavar="EVENTS",
                       help="also end at the first of these (comma-separated): first_step (exit 20), error (21), "
                            "stall (22), end; the run's end always ends it")
    watch.add_argument("--stall", type=_interval, default=None, metavar="SECONDS",
                       help="say 'stalled' once the run is quiet this long (default 600 with --until stall)")

    call = sub.add_parser("call", help="run one tool and print its result as JSON (call TOOL --help: its arguments)")
    call.add_argument("tool")
    call.add_argument("--json", dest="json_args", default=None, help="arguments as one JSON object")
    call.add_argument("pairs", nargs="*", help="arguments as key=value (values parsed as JSON when they parse)")
    return parser


# ------------------------------------------------------------------------------------------- watch

def _positive_int(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to 999999999")
    return int(text)


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.2 <= value <= 366 * 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not between 0.2 and {366 * 86400} seconds")
    return value


def _until(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    wrong = [n for n in names if n not in ("first_step", "error", "stall", "end")]
    if not names or wrong:
        raise argparse.ArgumentTypeError(f"{text!r}: give first_step, error, stall and/or end, comma-separated")
    return names


def _watch(args: argparse.Namespace) -> int:
    from skill_server.experiments.watch import watch

    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    if metrics is not None and (not metrics or any(len(m) > 200 for m in metrics)):
        raise _UsageError("--metrics needs comma-separated names or globs of at most 200 characters")
    code = _one_line_errors("watch", lambda: watch(
        args.id, lambda line: _write_stdout(line + "\n"), every=args.every, interval_s=args.interval,
        metrics=metrics, as_json=args.json, max_time_s=args.max_time, until=args.until,
        stall_s=args.stall if args.stall is not None else (600.0 if "stall" in args.until else None)))
    if code == EXIT_PIPE_CLOSED:  # watch ends itself on a closed pipe; its unwritten bytes must stay unwritten
        _discard_stdout()
    return code


def _one_line_errors(prefix: str, run: Callable[[], int]) -> int:
    """Run a command body; a tool error or a bug becomes one line on stderr and exit 1 (a missing
    requirement goes on up to ``main``'s install message; SKILL_SERVER_DEBUG=1 shows a bug's traceback)."""
    from skill_server.core.errors import SkillError, internal_error_message

    try:
        return run()
    except _StdoutClosed:
        _discard_stdout()
        return EXIT_PIPE_CLOSED
    except _StdoutFailed as exc:
        sys.stderr.write(f"{prefix}: cannot write the result to stdout: {one_line(str(exc))}\n")
    except SkillError as exc:
        sys.stderr.write(f"{prefix}: {exc}\n")  # one line by construction (SkillError escapes breaks)
    except ModuleNotFoundError as exc:
        if _is_requirement(exc):
            raise
        sys.stderr.write(f"{prefix}: {internal_error_message(exc)}\n")
    except Exception as exc:  # a bug: one line, the traceback only on request
        if os.environ.get("SKILL_SERVER_DEBUG"):
            raise
        sys.stderr.write(f"{prefix}: {internal_error_message(exc)}\n")
    return EXIT_TOOL_ERROR


# ------------------------------------------------------------------------------------------- call

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _parse_json_object(text: str) -> dict[str, Any]:
    """``--json`` text -> a dict, or a one-line usage error (bad JSON, too big or deep, not an object)."""
    if len(text.encode("utf-8", errors="surrogateescape")) > MAX_JSON_ARGUMENT_BYTES:
        raise _UsageError(f"--json is larger than {MAX_JSON_ARGUMENT_BYTES // 1024} KiB")
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise _UsageError(f"--json is not valid JSON: {exc}") from None
    except RecursionError:
        raise _UsageError("--json is nested too deeply") from None
    except ValueError as exc:  # NaN/Infinity, or an integer with thousands of digits
        reason = "an integer has too many digits" if "digits" in str(exc) else str(exc)
        raise _UsageError(f"--json is not usable JSON: {reason}") from None
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")
        raise _UsageError(f"--json must be a JSON object, got {kind}")
    return value


def _string_only(schema: dict[str, Any] | None) -> bool:
    """True when a property accepts text and nothing JSON would parse a bare word into."""
    if not isinstance(schema, dict):
        return False
    branches = schema.get("anyOf", [schema])
    types = {b.get("type") for b in branches if isinstance(b, dict)}
    return "string" in types and types <= {"string", "null"}


def _parse_pairs(pairs: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    """``key=value`` arguments: a text-only field takes the value as written, others parse it as JSON."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise _UsageError(f"argument {pair!r} is not key=value")
        if _string_only(properties.get(key)):
            out[key] = raw
            continue
        try:
            out[key] = json.loads(raw, parse_constant=_reject_constant)
        except RecursionError:
            raise _UsageError(f"argument {key} is nested too deeply") from None
        except ValueError:
            out[key] = raw
    return out


def _spec(tool_name: str) -> ToolSpec:
    """The table entry of a tool, or a usage error listing the known ones."""
    from skill_server.app.table import TOOLS_BY_NAME

    spec = TOOLS_BY_NAME.get(tool_name)
    if spec is None:
        raise _UsageError(f"unknown tool {tool_name!r}; known: {', '.join(sorted(TOOLS_BY_NAME))}")
    return spec


def _call(tool_name: str, json_args: str | None, pairs: list[str]) -> int:
    spec = _spec(tool_name)
    arguments: dict[str, Any] = {} if json_args is None else _parse_json_object(json_args)
    arguments.update(_parse_pairs(pairs, spec.input_schema.get("properties", {})))

    def run() -> int:  # a parsed but unusable value (too deep, out of range, a lone surrogate) is a bad argument
        from skill_server.app.table import refusal
        from skill_server.core.errors import ToolFailure

        refused = refusal(spec)  # read-only mode and a tool that changes things
        if refused is not None:
            raise ToolFailure(refused)
        result = spec.invoke(arguments)
        _write_stdout(json.dumps(spec.dump(result), separators=(",", ":"), ensure_ascii=False) + "\n")
        return EXIT_OK

    return _one_line_errors(tool_name, run)


def _write_stdout(text: str) -> None:
    """UTF-8 whatever the locale: JSON consumers expect it, and an ASCII terminal must not crash the call."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # stdout replaced by a text stream (an embedding caller): it takes str
        sys.stdout.write(text)
        return
    try:
        sys.stdout.flush()
        buffer.write(text.encode("utf-8"))
        buffer.flush()
    except BrokenPipeError as exc:
        raise _StdoutClosed(*exc.args) from None
    except OSError as exc:
        raise _StdoutFailed(str(exc)) from None


def _discard_stdout() -> None:
    """Point fd 1 at the null device so the interpreter's final flush of the unwritten bytes cannot fail
    again and print a traceback after we have already exited cleanly."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # no real fd 1 (an embedding caller): nothing to protect
        pass


def _tool_help(tool_name: str) -> int:
    from skill_server.app.schema_text import tool_help

    sys.stdout.write(tool_help(_spec(tool_name), prog=PROG))
    return EXIT_OK


# ------------------------------------------------------------------------------------------- tools

def _list_tools(as_json: bool) -> int:
    """The published tools (in read-only mode only those that change nothing), as text or JSON."""
    from skill_server.app.table import published_tools, schema_manifest

    _require_shell_packages()
    tools = published_tools()
    if as_json:
        manifest = schema_manifest()
        listing = [
            {
                "name": t.name,
                "title": t.title,
                "description": t.description,
                "read_only": t.read_only,
                "destructive": t.destructive,
                "idempotent": t.idempotent,
                "open_world": t.open_world,
                "input_schema": manifest[t.name]["input"],
                "output_schema": manifest[t.name]["output"],
            }
            for t in tools
        ]
        sys.stdout.write(json.dumps(listing) + "\n")
    else:
        width = max(len(t.name) for t in tools)
        for t in tools:
            sys.stdout.write(f"{t.name.ljust(width)}  {t.title}\n")
        sys.stdout.write(f"\n{PROG} call TOOL --help  shows a tool's arguments\n")
    return EXIT_OK


def _require_shell_packages() -> None:
    """Fail as an import would when a package the tools need is missing, without importing it: the listing
    needs none of them (it stays fast), but a Python that cannot run the tools must say so here too."""
    from importlib.util import find_spec

    for name, requirement in REQUIREMENTS.items():
        if requirement in SHELL_REQUIREMENTS and find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def _schemas(write: bool) -> int:
    """Developer command: the manifest the MCP server publishes must equal the models' schemas."""
    from skill_server.app.table import build_schema_manifest, schema_manifest, write_schema_manifest

    if write:
        sys.stdout.write(f"wrote {write_schema_manifest()}\n")
        return EXIT_OK
    stale = sorted(name for name, schemas in build_schema_manifest().items() if schema_manifest().get(name) != schemas)
    if stale:
        sys.stderr.write(f"tool_schemas.json is stale for: {', '.join(stale)}; run {PROG} schemas --write\n")
        return EXIT_TOOL_ERROR
    sys.stdout.write("tool_schemas.json is up to date\n")
    return EXIT_OK


def _snapshot(args: argparse.Namespace) -> int:
    """Maintainer command: regenerate a bundled AgentJet release from a checkout (see agentjet/snapshot.py)."""
    from skill_server.agentjet import snapshot
    from skill_server.core.errors import SkillError

    try:
        return snapshot.run(args.checkout, write=args.write, commit=args.commit, date=args.date, repo=args.repo,
                            releases_dir=args.releases_dir, out=sys.stdout)
    except SkillError as exc:
        sys.stderr.write(f"snapshot: {one_line(str(exc))}\n")
        return EXIT_TOOL_ERROR


# ------------------------------------------------------------------------------------------- serve

def _serve(transport: str, host: str, port: int, allowed_hosts: list[str]) -> int:
    import logging  # the server's alone: no tool the CLI calls logs (5 ms of every call's start-up)

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # the only path that imports the MCP SDK; without it (or its anyio) the import names the missing package
    from skill_server.app.mcp_server import serve

    return serve(transport=transport, host=host, port=port, allowed_hosts=allowed_hosts)


# ------------------------------------------------------------------------------------------- main

def _wants_tool_help(args: list[str]) -> str | None:
    """``call TOOL --help`` (or ``-h``): the tool's own arguments instead of the generic usage."""
    if len(args) >= 3 and args[0] == "call" and not args[1].startswith("-") and \
            any(a in ("--help", "-h") for a in args[2:]):
        return args[1]
    return None


#: Where the README's Quick start puts its venv; offered to interpreters that refuse pip installs.
QUICKSTART_VENV = "~/.venvs/agentjet-swarm-skill"


def _externally_managed() -> bool:
    """A system Python that refuses ``pip install`` (PEP 668: Debian 12, Ubuntu 23.04 and later), ``--user``
    too: outside a venv, with the EXTERNALLY-MANAGED marker beside its standard library."""
    import sysconfig

    return sys.prefix == sys.base_prefix and os.path.isfile(
        os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))


def _missing_package_message(exc: ModuleNotFoundError, serving: bool) -> str:
    needed = list(SHELL_REQUIREMENTS) + (["mcp>=2.3,<3"] if serving else [])
    quoted = " ".join(f"'{r}'" if any(c in r for c in "<>=,") else r for r in needed)
    head = (f"{PROG}: this Python ({sys.executable}) lacks the package {exc.name!r}; the skill needs "
            f"{', '.join(needed)}.")
    if _externally_managed():
        return (f"{head} This Python is managed by the system and refuses pip installs (PEP 668), --user too: "
                f"make a venv for them: python3 -m venv {QUICKSTART_VENV} && {QUICKSTART_VENV}/bin/pip install "
                f"{quoted}, then run {QUICKSTART_VENV}/bin/python -m skill_server")
    return (f"{head} Install them with: {sys.executable} -m pip install {quoted} "
            "(or pip install <skill folder>, which also installs the command)")


def _is_requirement(exc: ModuleNotFoundError) -> bool:
    return exc.name is not None and exc.name.split(".")[0] in REQUIREMENTS


class _Terminated(BaseException):
    """SIGTERM arrived during a command: it unwinds the call as Ctrl-C does (a launch rolls back what it
    started), then the process ends by the signal, as it always did."""


def _unwind_on_sigterm() -> None:
    import signal

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        raise _Terminated()

    if _on_main_thread():
        signal.signal(signal.SIGTERM, handler)


def _on_main_thread() -> bool:
    """Whether this is the main thread (only it may install signal handlers; tests call ``main`` from others)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _end_by_sigterm() -> NoReturn:
    import signal

    sys.stdout.flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    raise SystemExit(128 + signal.SIGTERM)  # not reached: the default action ends the process


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except _Terminated:
        _end_by_sigterm()
    finally:
        if argv is None:  # this process's own command line: the process ends when main returns
            _skip_final_collection()


#: Allocations between young-generation collections while a command-line call runs (Python's default: 700).
CALL_GC_THRESHOLD = 10_000


def _collect_less_often() -> None:
    """This process runs one tool call and ends: collect garbage less often meanwhile. Each older-generation
    collection walks everything alive (every imported module, a checked script's hundred thousand syntax-tree
    nodes); a young generation of 10,000 keeps at most that many unreachable cycles waiting."""
    import gc

    gc.set_threshold(CALL_GC_THRESHOLD, *gc.get_threshold()[1:])


def _skip_final_collection() -> None:
    """The process is about to end and free everything: move what is alive to the collector's permanent
    generation, so that the interpreter's collections at exit do not walk it all once more (atexit handlers
    still run and streams are still flushed): a seventh of the CPU time of checking a 5,000-line script."""
    import gc

    gc.freeze()


def _version() -> int:
    """``--version``: the version and the folder this server's code is read from (one line)."""
    import skill_server

    _write_stdout(f"agentjet-swarm-skill {skill_server.__version__} "
                  f"({os.path.dirname(os.path.abspath(skill_server.__file__))})\n")
    return EXIT_OK


def _check_read_only_setting() -> None:
    """SKILL_SERVER_READ_ONLY must say on or off: a usage error otherwise, before anything runs."""
    from skill_server.app.table import read_only_mode
    from skill_server.core.errors import ToolInputError

    try:
        read_only_mode()
    except ToolInputError as exc:
        raise _UsageError(str(exc)) from None


def _main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    serving = not args_list or args_list[0] == "serve"
    try:
        tool = _wants_tool_help(args_list)
        if tool is not None:
            return _tool_help(tool)
        args, extra = _build_parser().parse_known_args(args_list)
        if extra:  # argparse ends a positional list at an option: `call T --json '{..}' k=v` leaves k=v over
            if args.command != "call" or any(e.startswith("-") for e in extra):
                raise _UsageError(f"unrecognized arguments: {' '.join(extra)}")
            args.pairs += extra
        if args.version:
            return _version()
        if args.command in (None, "serve", "tools", "call"):
            _check_read_only_setting()
        if args.command in (None, "serve"):
            return _serve(getattr(args, "transport", "stdio"), getattr(args, "host", "127.0.0.1"),
                          getattr(args, "port", 8765), getattr(args, "allowed_host", []))
        if args.command == "tools":
            return _list_tools(args.json)
        if args.command == "schemas":
            return _schemas(args.write)
        if args.command == "snapshot":
            return _snapshot(args)
        _unwind_on_sigterm()
        if args.command == "watch":
            return _watch(args)
        if argv is None:
            _collect_less_often()
        return _call(args.tool, args.json_args, args.pairs)
    except _UsageError as exc:
        sys.stderr.write(f"usage error: {one_line(str(exc))} (see {PROG} --help)\n")
        return EXIT_USAGE
    except ModuleNotFoundError as exc:
        if _is_requirement(exc):
            sys.stderr.write(_missing_package_message(exc, serving) + "\n")
            return EXIT_MISSING_PACKAGE
        sys.stderr.write(f"{PROG}: cannot import {exc.name!r}: {exc}\n")
        return EXIT_TOOL_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
