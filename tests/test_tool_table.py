"""The tool table: manifest freshness, lazy imports, CLI listing and help, one strict rule, usage errors."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys

import pytest

from skill_server.app.table import TOOLS, TOOLS_BY_NAME, build_schema_manifest, schema_manifest
from skill_server.core.errors import ToolInputError
from skill_server.core.models import MAX_JSON_INT
from tests.conftest import REPO, cli_env, run_cli, run_cli_to_closed_pipe
from tests.schema_walk import _type_of, branches, input_fields, place, untyped_nodes


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
        "import sys; from skill_server.app import cli; cli.main(['tools']); "
        "sys.stderr.write(repr(sorted(m for m in sys.modules if m in "
        "('skill_server.tools.build_config.tool', 'skill_server.tools.episode_cap.tool', "
        "'skill_server.tools.swarm_status.tool', 'mcp'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env(),
                          check=False)
    assert proc.stderr.strip() == "[]", proc.stderr
    assert all(t.name in proc.stdout for t in TOOLS)


def test_listing_tools_imports_no_heavy_package():
    code = ("import sys; from skill_server.app import cli; cli.main(['tools', '--json']); "
            "sys.stderr.write(repr(sorted(m for m in sys.modules if m in ('pydantic', 'yaml', 'matplotlib', 'mcp'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env(),
                          check=False)
    assert proc.stderr.strip() == "[]", proc.stderr


#: The MCP server run as ``python -m skill_server`` does, telling on its way out which plot modules it imported.
SERVER_TELLS_ITS_IMPORTS = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: sys.stderr.write('PLOT MODULES %r\\n' % sorted(m for m in sys.modules\n"
    "    if m.split('.')[0] in ('matplotlib', 'numpy', 'PIL'))))\n"
    "runpy.run_module('skill_server', run_name='__main__')\n")


def test_the_mcp_servers_start_up_imports_no_plotting():
    """matplotlib is a plot's, imported when one is drawn: a server that starts, answers initialize and lists its
    tools has not imported it (nor numpy, which it brings)."""
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    proc = subprocess.Popen([sys.executable, "-c", SERVER_TELLS_ITS_IMPORTS], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=cli_env())
    try:  # stdin stays open until the listing came back: a server at EOF may drop a request still under way
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        proc.stdin.flush()
        replies = [json.loads(proc.stdout.readline()) for _ in range(2)]
        proc.stdin.close()
        proc.wait(timeout=120)
        err = proc.stderr.read() if proc.stderr is not None else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [r.get("id") for r in replies] == [1, 2] and replies[1]["result"]["tools"], err[-2000:]
    assert "PLOT MODULES []" in err, err[-2000:]


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


def test_json_and_key_value_pairs_mix_in_any_order():
    """Pairs after ``--json`` count too (argparse alone would refuse them); a pair wins over the JSON."""
    for args in (["--json", '{"num_repeat": 2, "max_env_worker": 9}', "max_env_worker=3"],
                 ["max_env_worker=3", "--json", '{"num_repeat": 2, "max_env_worker": 9}']):
        proc = run_cli("call", "episode_cap", *args)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["bounds"]["max_env_worker"] == 3
    proc = run_cli("call", "episode_cap", "--json", "{}", "--bogus")
    assert proc.returncode == 2 and "unrecognized arguments: --bogus" in proc.stderr


def test_schemas_command_reports_fresh_manifest():
    proc = run_cli("schemas")
    assert proc.returncode == 0 and "up to date" in proc.stdout


# --- one strict rule for every field of every tool (generic: new tools and fields are covered) ----

#: For each JSON type a field accepts, values a lax validator would coerce into it.
COERCIBLE = {
    "integer": ["3", 3.0, True],
    "number": ["1.5", True],
    "boolean": ["yes", "true", 1],
    "string": [5, True],
}


def _strict_cases():
    for spec in TOOLS:
        for field in input_fields(spec.input_schema):
            for json_type, wrong_values in COERCIBLE.items():
                if json_type not in field.types:
                    continue
                for wrong in wrong_values:
                    if json_type == "number" and "integer" in field.types and isinstance(wrong, int):
                        continue
                    if _type_of(wrong) in field.types or (wrong is not True and isinstance(wrong, float)
                                                          and "number" in field.types):
                        continue  # the field legitimately accepts this JSON type too
                    yield pytest.param(spec.name, field.path, wrong, id=f"{spec.name}.{field.name}={wrong!r}")


@pytest.mark.parametrize("tool, path, wrong", list(_strict_cases()))
def test_no_field_coerces_a_wrong_json_type(tool, path, wrong):
    spec = TOOLS_BY_NAME[tool]
    with pytest.raises(ToolInputError) as err:
        spec.validate(place(path, wrong))
    dotted = ".".join(str(p) for p in path)
    assert f"{dotted}: " in str(err.value), str(err.value)


def test_the_strict_walk_covers_nested_fields():
    names = {f.name for spec in TOOLS for f in input_fields(spec.input_schema)}
    assert {"max_env_worker", "timeout_s"} <= names
    assert sum(1 for _ in _strict_cases()) > 50


def test_every_integer_argument_has_an_upper_bound():
    unbounded = []
    for spec in TOOLS:
        defs = spec.input_schema.get("$defs", {})
        for field in input_fields(spec.input_schema):
            for branch in branches(field.schema, defs):
                if branch.get("type") == "integer" and branch.get("maximum", MAX_JSON_INT + 1) > MAX_JSON_INT:
                    unbounded.append(f"{spec.name}.{field.name}")
                items = branch.get("items")
                if branch.get("type") == "array" and isinstance(items, dict) and items.get("type") == "integer" \
                        and items.get("maximum", MAX_JSON_INT + 1) > MAX_JSON_INT:
                    unbounded.append(f"{spec.name}.{field.name}[]")
    assert not unbounded


def test_every_schema_node_declares_a_type():
    problems = {spec.name + ":" + kind: untyped_nodes(schema_manifest()[spec.name][kind])
                for spec in TOOLS for kind in ("input", "output")}
    assert not {k: v for k, v in problems.items() if v}


def test_arguments_beyond_json_are_refused_by_name():
    spec = TOOLS_BY_NAME["episode_cap"]
    for arguments, needle in (
        ({"max_env_worker": float("nan"), "num_repeat": 2}, "max_env_worker: must be a finite number"),
        ({"max_env_worker": 8, "client_parallelism": [1, 10**400]}, "client_parallelism.1: integer out of range"),
        ({"max_env_worker": 8, "agentjet_root": "/x\udcff"}, "agentjet_root: text is not valid Unicode"),
        ({"max_env_worker": 8, "client_parallelism": json.loads("[" * 40 + "]" * 40)},
         "client_parallelism: nested deeper than 32 levels"),
        ({"max_env_worker": 8, "\ud800": 1}, "not valid Unicode"),
        ([1, 2], "arguments must be a JSON object, got an array"),
    ):
        with pytest.raises(ToolInputError) as err:
            spec.validate(arguments)
        assert needle in str(err.value) and "\n" not in str(err.value)


# --- call TOOL --help ---------------------------------------------------------------------------------

def test_call_tool_help_lists_every_argument_with_type_default_and_description():
    for spec in TOOLS:
        proc = run_cli("call", spec.name, "--help")
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        text = proc.stdout
        assert text.startswith(f"usage: python -m skill_server call {spec.name} ")
        for name, prop in spec.input_schema["properties"].items():
            assert f"\n  {name}: " in text, (spec.name, name)
            if prop.get("description"):
                assert prop["description"].split()[0] in text
    cap = run_cli("call", "episode_cap", "-h").stdout
    assert "  max_env_worker: integer >= 1, <= 9007199254740991 (optional)" in cap  # an artifact may hold it
    assert '  thread_rule: one of "ceil", "floor", "auto" (default "auto")' in cap


def test_call_help_imports_neither_mcp_nor_the_tool_module():
    code = ("import sys; from skill_server.app import cli; cli.main(['call', 'swarm_status', '--help']); "
            "sys.stderr.write(repr(sorted(m for m in sys.modules "
            "if m in ('skill_server.tools.swarm_status.tool', 'mcp'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env(),
                          check=False)
    assert proc.stderr.strip() == "[]" and "watch_s" in proc.stdout


# --- hostile command lines: one-line usage errors ----------------------------------------------------

def _call_episode_cap_with_json(json_text: str) -> subprocess.CompletedProcess[str]:
    """``call episode_cap --json TEXT``, the text passed through stdin (it may exceed argv's limit)."""
    code = ("import sys; from skill_server.app import cli; "
            "raise SystemExit(cli.main(['call', 'episode_cap', '--json', sys.stdin.read()]))")
    return subprocess.run([sys.executable, "-c", code], input=json_text, capture_output=True, text=True,
                          cwd=REPO, env=cli_env(), timeout=60, check=False)


@pytest.mark.parametrize("json_text, needle", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"max_env_worker": 1' + "0" * 5000 + "}", "too many digits"),
    ('{"max_env_worker": NaN}', "NaN is not a JSON number"),
    ('"just a string"', "must be a JSON object, got a string"),
    ("null", "must be a JSON object, got null"),
    ("{" + '"k": 1, ' * 200_000 + '"z": 1}', "larger than 1024 KiB"),
], ids=["deep", "digits", "nan", "string", "null", "huge"])
def test_hostile_json_is_a_one_line_usage_error(json_text, needle):
    proc = _call_episode_cap_with_json(json_text)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("usage error: ") and proc.stderr.count("\n") == 1 and needle in proc.stderr, \
        proc.stderr[:300]


@pytest.mark.parametrize("json_text, needle", [
    ('{"max_env_worker": ' + "[" * 40 + "]" * 40 + "}", "max_env_worker: nested deeper than 32 levels"),
    ('{"max_env_worker": 8, "agentjet_root": "\\ud800"}', "agentjet_root: text is not valid Unicode"),
    ('{"max_env_worker": 1' + "0" * 400 + ', "num_repeat": 4}', "max_env_worker: integer out of range"),
], ids=["deep-field", "surrogate", "huge-int"])
def test_parsed_but_unusable_values_are_bad_arguments_like_over_mcp(json_text, needle):
    """JSON that parses but holds a value no tool takes is a bad argument (exit 1, the field named), the
    same message MCP gives; only text that cannot be read as arguments is a usage error (exit 2)."""
    proc = _call_episode_cap_with_json(json_text)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("episode_cap: ") and proc.stderr.count("\n") == 1 and needle in proc.stderr, \
        proc.stderr[:300]


def test_undecodable_bytes_in_argv_are_a_bad_argument():
    proc = subprocess.run([sys.executable.encode(), b"-m", b"skill_server", b"call", b"episode_cap",
                           b"max_env_worker=8", b"agentjet_root=/tmp/\xff"], capture_output=True, cwd=REPO,
                          env=cli_env(), timeout=60, check=False)
    assert proc.returncode == 1 and b"agentjet_root: text is not valid Unicode" in proc.stderr
    assert proc.stderr.count(b"\n") == 1


def test_key_value_pairs_keep_text_fields_as_written():
    """`name=123` is the text 123 for a text-only field; numbers still parse for numeric fields."""
    from skill_server.app.cli import _parse_pairs

    props = TOOLS_BY_NAME["episode_cap"].input_schema["properties"]
    assert _parse_pairs(["agentjet_root=123", "max_env_worker=8", "client_parallelism=[1,2]"], props) == {
        "agentjet_root": "123", "max_env_worker": 8, "client_parallelism": [1, 2]}
    assert _parse_pairs(["num_repeat=four"], props) == {"num_repeat": "four"}


def test_an_unexpected_exception_is_one_line(monkeypatch, capsys):
    """A bug in a tool still gives one line on stderr and exit 1, never a traceback."""
    from skill_server.app import cli
    from skill_server.app import table as tools

    def boom(model):
        raise ZeroDivisionError("division by zero\nsecond line")

    spec = dataclasses.replace(TOOLS_BY_NAME["episode_cap"], run=boom)
    monkeypatch.setitem(tools.TOOLS_BY_NAME, "episode_cap", spec)
    code = cli.main(["call", "episode_cap", "max_env_worker=8", "num_repeat=2"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("episode_cap: internal error: ZeroDivisionError: division by zero second line")


def test_main_called_with_arguments_leaves_the_garbage_collector_alone(capsys):
    """Only a process running one call from its own command line collects less often and freezes what is alive
    before it ends; a caller of main(argv) (an embedder, these tests) keeps its collector as it was."""
    import gc

    from skill_server.app import cli

    before = (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled())
    code = cli.main(["call", "episode_cap", "max_env_worker=8", "num_repeat=2"])
    assert code == 0 and json.loads(capsys.readouterr().out)["episode_cap"] == 8
    assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == before


def test_a_python_without_the_dependencies_says_what_to_install(tmp_path):
    """A bare interpreter (a venv without packages) gets one line naming what to install, exit 3."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONHOME",)}
    for args in (["tools"], ["call", "episode_cap", "max_env_worker=8", "num_repeat=2"], []):
        proc = subprocess.run([str(python), "-m", "skill_server", *args], capture_output=True, text=True,
                              cwd=REPO, env=env, timeout=60, input="", check=False)
        assert proc.returncode == 3, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert "lacks the package" in proc.stderr and "pip install pyyaml 'pydantic>=2'" in proc.stderr
    assert "'mcp>=2.3,<3'" in proc.stderr  # the server needs the SDK too


SYSTEM_PYTHON = "/usr/bin/python3"
_MANAGED = ("import sys, sysconfig, os, importlib.util; sys.exit(0 if sys.prefix == sys.base_prefix and "
            "os.path.isfile(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')) and "
            "importlib.util.find_spec('pydantic') is None else 1)")


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON) or subprocess.run(
    [SYSTEM_PYTHON, "-c", _MANAGED], capture_output=True, check=False).returncode != 0,
    reason="needs a system Python that refuses pip installs (PEP 668) and has no pydantic, as Debian 12's")
def test_a_system_python_that_refuses_pip_is_told_to_make_a_venv():
    """Debian 12's python3 refuses `pip install` and `pip install --user`: the advice is a venv, not pip."""
    env = {k: v for k, v in cli_env().items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    proc = subprocess.run([SYSTEM_PYTHON, "-m", "skill_server", "tools"], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=60, check=False)
    assert proc.returncode == 3 and proc.stderr.count("\n") == 1, proc.stderr
    assert "refuses pip installs (PEP 668)" in proc.stderr and f"{SYSTEM_PYTHON} -m pip" not in proc.stderr
    assert "python3 -m venv ~/.venvs/agentjet-swarm-skill && ~/.venvs/agentjet-swarm-skill/bin/pip install " \
           "pyyaml 'pydantic>=2'" in proc.stderr


def test_a_reader_that_goes_away_ends_the_call_quietly_with_141():
    """``call ... | head -c 0``: a closed pipe is the reader's choice, not a bug; no line on stderr."""
    proc = run_cli_to_closed_pipe("call", "build_config")
    assert proc.returncode == 141 and proc.stderr == ""


def test_a_stdout_that_cannot_take_the_result_is_one_line_not_a_bug(tmp_path):
    """A full disk behind ``> file`` loses the result: say so on one line, exit 1, without calling it a bug."""
    full = tmp_path / "full"
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # the full device's numbers, under a temp dir
    with open(full, "wb") as stdout:
        proc = subprocess.run([sys.executable, "-m", "skill_server", "call", "build_config"], stdout=stdout,
                              stderr=subprocess.PIPE, text=True, cwd=REPO, env=cli_env(), timeout=60, check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("build_config: cannot write the result to stdout:")
    assert "No space left" in proc.stderr and "internal error" not in proc.stderr
