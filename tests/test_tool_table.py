"""The tool table: manifest freshness, lazy imports, CLI listing and usage errors."""

from __future__ import annotations

import json
import subprocess
import sys

from skill_server.tools import TOOLS, build_schema_manifest, schema_manifest
from tests.conftest import REPO, cli_env, run_cli


def test_schema_manifest_matches_the_models():
    stale = [name for name, schemas in build_schema_manifest().items() if schema_manifest().get(name) != schemas]
    assert not stale, f"run `python -m skill_server schemas --write`; stale: {stale}"
    assert set(schema_manifest()) == {t.name for t in TOOLS}


def test_every_tool_has_a_description_and_honest_hints():
    for spec in TOOLS:
        assert spec.description and spec.title and spec.name.isidentifier()
        assert not (spec.read_only and spec.destructive), spec.name
        assert spec.input_type.model_config.get("extra") == "forbid", spec.name


def test_listing_tools_imports_no_tool_module():
    code = (
        "import sys; from skill_server import cli; cli.main(['tools']); "
        "sys.stderr.write(repr(sorted(m for m in sys.modules if m in "
        "('skill_server.overlay', 'skill_server.cap', 'skill_server.swarm', 'mcp'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env())
    assert proc.stderr.strip() == "[]", proc.stderr
    assert all(t.name in proc.stdout for t in TOOLS)


def test_tools_json_lists_schemas():
    proc = run_cli("tools", "--json")
    listing = json.loads(proc.stdout)
    assert proc.returncode == 0 and [t["name"] for t in listing] == [t.name for t in TOOLS]
    cap = next(t for t in listing if t["name"] == "episode_cap")
    assert cap["read_only"] is True and "max_env_worker" in cap["input_schema"]["properties"]


def test_usage_errors_exit_2_with_one_line():
    for args in (["call", "no_such_tool"], ["call", "episode_cap", "--json", "{bad"], ["call", "episode_cap", "oops"],
                 ["call", "episode_cap", "--json", "[1]"], ["frobnicate"]):
        proc = run_cli(*args)
        assert proc.returncode == 2, args
        assert proc.stderr.count("\n") == 1 and proc.stdout == "", args


def test_schemas_command_reports_fresh_manifest():
    proc = run_cli("schemas")
    assert proc.returncode == 0 and "up to date" in proc.stdout
