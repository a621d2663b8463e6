"""Command-line front end: ``serve`` (the MCP server), ``tools`` and ``call``.

``tools`` and ``call`` never import the ``mcp`` package: they are how an assistant without MCP
registration uses the skill from a shell, so they must start fast. Exit codes of ``call``: 0 with one
JSON object on stdout; 1 for a tool error (one line on stderr naming the field); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

EXIT_OK, EXIT_TOOL_ERROR, EXIT_USAGE = 0, 1, 2


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would exit 2 with a multi-line usage; keep it one line
        raise _UsageError(message)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m skill_server", description="AgentJet swarm skill: MCP server and CLI.")
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
    schemas.add_argument("--write", action="store_true", help="regenerate skill_server/tool_schemas.json")

    snapshot = sub.add_parser("snapshot", help="maintainers: bundle an AgentJet release read from a checkout")
    snapshot.add_argument("--from", dest="checkout", required=True, metavar="CHECKOUT",
                          help="an AgentJet checkout (a folder containing ajet/)")
    snapshot.add_argument("--write", action="store_true", help="write skill_server/agentjet/releases/<commit8>/")
    snapshot.add_argument("--commit", default=None, help="the checkout's commit, when it is not a git checkout")
    snapshot.add_argument("--date", default=None, help="the commit date (ISO 8601), when it is not a git checkout")
    snapshot.add_argument("--repo", default=None, help="owner/name of the repository (default: the origin remote)")
    snapshot.add_argument("--releases-dir", default=None, help=argparse.SUPPRESS)

    call = sub.add_parser("call", help="run one tool and print its result as JSON")
    call.add_argument("tool")
    call.add_argument("--json", dest="json_args", default=None, help="arguments as one JSON object")
    call.add_argument("pairs", nargs="*", help="arguments as key=value (values parsed as JSON when they parse)")
    return parser


def _parse_pairs(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise _UsageError(f"argument {pair!r} is not key=value")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _call(tool_name: str, json_args: str | None, pairs: list[str]) -> int:
    from skill_server.errors import SkillError
    from skill_server.tools import TOOLS_BY_NAME

    spec = TOOLS_BY_NAME.get(tool_name)
    if spec is None:
        raise _UsageError(f"unknown tool {tool_name!r}; known: {', '.join(sorted(TOOLS_BY_NAME))}")
    arguments: dict[str, Any] = {}
    if json_args is not None:
        try:
            arguments = json.loads(json_args)
        except json.JSONDecodeError as exc:
            raise _UsageError(f"--json is not valid JSON: {exc}") from None
        if not isinstance(arguments, dict):
            raise _UsageError("--json must be a JSON object")
    arguments.update(_parse_pairs(pairs))
    try:
        result = spec.invoke(arguments)
    except SkillError as exc:
        sys.stderr.write(f"{tool_name}: {_one_line(str(exc))}\n")
        return EXIT_TOOL_ERROR
    sys.stdout.write(result.model_dump_json() + "\n")
    return EXIT_OK


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _list_tools(as_json: bool) -> int:
    from skill_server.tools import TOOLS, schema_manifest

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
            for t in TOOLS
        ]
        sys.stdout.write(json.dumps(listing) + "\n")
    else:
        width = max(len(t.name) for t in TOOLS)
        for t in TOOLS:
            sys.stdout.write(f"{t.name.ljust(width)}  {t.title}\n")
    return EXIT_OK


def _schemas(write: bool) -> int:
    """Developer command: the manifest the MCP server publishes must equal the models' schemas."""
    from skill_server.tools import build_schema_manifest, schema_manifest, write_schema_manifest

    if write:
        sys.stdout.write(f"wrote {write_schema_manifest()}\n")
        return EXIT_OK
    stale = sorted(name for name, schemas in build_schema_manifest().items() if schema_manifest().get(name) != schemas)
    if stale:
        sys.stderr.write(f"tool_schemas.json is stale for: {', '.join(stale)}; run python -m skill_server schemas --write\n")
        return EXIT_TOOL_ERROR
    sys.stdout.write("tool_schemas.json is up to date\n")
    return EXIT_OK


def _snapshot(args: argparse.Namespace) -> int:
    """Maintainer command: regenerate a bundled AgentJet release from a checkout (see agentjet/snapshot.py)."""
    from skill_server.agentjet import snapshot
    from skill_server.errors import SkillError

    try:
        return snapshot.run(args.checkout, write=args.write, commit=args.commit, date=args.date, repo=args.repo,
                            releases_dir=args.releases_dir, out=sys.stdout)
    except SkillError as exc:
        sys.stderr.write(f"snapshot: {_one_line(str(exc))}\n")
        return EXIT_TOOL_ERROR


def _serve(transport: str, host: str, port: int, allowed_hosts: list[str]) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from skill_server.mcp_app import serve  # the only path that imports the MCP SDK

    return serve(transport=transport, host=host, port=port, allowed_hosts=allowed_hosts)


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    try:
        args = _build_parser().parse_args(args_list)
        if args.command in (None, "serve"):
            return _serve(getattr(args, "transport", "stdio"), getattr(args, "host", "127.0.0.1"),
                          getattr(args, "port", 8765), getattr(args, "allowed_host", []))
        if args.command == "tools":
            return _list_tools(args.json)
        if args.command == "schemas":
            return _schemas(args.write)
        if args.command == "snapshot":
            return _snapshot(args)
        return _call(args.tool, args.json_args, args.pairs)
    except _UsageError as exc:
        sys.stderr.write(f"usage error: {_one_line(str(exc))} (see python -m skill_server --help)\n")
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
