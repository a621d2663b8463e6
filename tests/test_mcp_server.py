"""The MCP front end: a real client over a real stdio subprocess, and in-process."""

from __future__ import annotations

import sys

import pytest
from mcp import Client, StdioServerParameters

from skill_server.app.mcp_server import build_server
from skill_server.app.table import TOOLS, model_schema
from tests.conftest import REPO, call_cli, cli_env

pytestmark = pytest.mark.anyio


def stdio_params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "skill_server"], cwd=str(REPO), env=cli_env())


async def test_stdio_lists_tools_with_schemas_and_annotations():
    async with Client(stdio_params()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {spec.name for spec in TOOLS}
    for spec in TOOLS:
        tool = tools[spec.name]
        assert tool.output_schema and tool.output_schema.get("type") == "object"
        # flat top-level arguments, exactly the input model's fields
        assert set(tool.input_schema["properties"]) == set(spec.input_type.model_fields)
        assert tool.output_schema == model_schema(spec.output_type)
        assert tool.input_schema == model_schema(spec.input_type)
        ann = tool.annotations
        assert (ann.read_only_hint, ann.destructive_hint, ann.idempotent_hint, ann.open_world_hint) == (
            spec.read_only, spec.destructive, spec.idempotent, spec.open_world)
    cap_schema = tools["episode_cap"].input_schema
    # max_env_worker is required unless an artifact (yaml, script, url, id) holds it: the model says so
    assert "required" not in cap_schema and {"yaml", "script", "url", "id"} <= set(cap_schema["properties"])
    worker = cap_schema["properties"]["max_env_worker"]
    assert (worker["type"], worker["minimum"]) == ("integer", 1) and "anyOf" not in worker  # optional: no null branch


async def test_stdio_episode_cap_golden_cases():
    async with Client(stdio_params()) as client:
        r = await client.call_tool("episode_cap", {"max_env_worker": 128, "num_repeat": 6, "train_batch_size": 32})
        assert not r.is_error
        assert (r.structured_content["episode_cap"], r.structured_content["worker_loops"]) == (128, 132)
        assert r.structured_content["divisible"] is False
        r = await client.call_tool("episode_cap", {"max_env_worker": 512, "grpo_n": 8, "train_batch_size": 32})
        assert r.structured_content["episode_cap"] == 256 and r.structured_content["binding"] == ["train_batch_size"]
        r = await client.call_tool(
            "episode_cap", {"max_env_worker": 128, "num_repeat": 6, "train_batch_size": 32, "thread_rule": "floor"})
        assert r.structured_content["episode_cap"] == 126


async def test_errors_are_clear_tool_errors_in_process():
    async with Client(build_server()) as client:
        r = await client.call_tool("episode_cap", {"max_env_worker": 0, "num_repeat": 4})
        assert r.is_error
        text = r.content[0].text
        assert "max_env_worker: Input should be greater than or equal to 1" in text and "\n" not in text
        r = await client.call_tool("episode_cap", {"max_env_worker": 8})
        assert r.is_error and "num_repeat (or its alias grpo_n) is required" in r.content[0].text
        r = await client.call_tool("episode_cap", {"num_repeat": 8})
        assert r.is_error and "max_env_worker" in r.content[0].text


@pytest.mark.parametrize("arguments", [
    {"max_env_worker": 512, "grpo_n": 8, "train_batch_sise": 32},   # misspelt: refused, not dropped
    {"max_env_worker": "512", "num_repeat": 8},                      # a string is not an integer
    {"max_env_worker": 512, "num_repeat": 8, "thread_rule": "round"},
    {"max_env_worker": 512, "num_repeat": True},
    {"max_env_worker": 512, "num_repeat": 8.0},
    {"max_env_worker": 2**53, "num_repeat": 8},
    {"max_env_worker": 512},
])
async def test_mcp_and_cli_refuse_the_same_argument_with_the_same_words(arguments):
    code, _, stderr = call_cli("episode_cap", arguments)
    assert code == 1 and stderr.startswith("episode_cap: ") and stderr.count("\n") == 1
    cli_message = stderr.removeprefix("episode_cap: ").strip()
    async with Client(stdio_params()) as client:
        r = await client.call_tool("episode_cap", arguments)
        assert r.is_error and r.content[0].text == f"Error executing tool episode_cap: {cli_message}"
        # the server answers the next call normally
        ok = await client.call_tool("episode_cap", {"max_env_worker": 512, "grpo_n": 8, "train_batch_size": 32})
        assert not ok.is_error and ok.structured_content["episode_cap"] == 256


async def test_misspelt_argument_names_the_closest_valid_one():
    async with Client(build_server()) as client:
        r = await client.call_tool("episode_cap", {"max_env_worker": 512, "grpo_n": 8, "train_batch_sise": 32})
    assert r.is_error and "train_batch_sise: unknown argument; did you mean train_batch_size?" in r.content[0].text
    code, _, stderr = call_cli("episode_cap", {"max_env_worker": 8, "num_repeat": 2, "zzz": 1})
    assert code == 1 and "zzz: unknown argument (valid: max_env_worker, num_repeat, grpo_n" in stderr


async def test_null_means_not_given_through_both_front_ends():
    arguments = {"max_env_worker": 128, "num_repeat": 6, "train_batch_size": None, "thread_rule": None}
    code, out, _ = call_cli("episode_cap", arguments)
    async with Client(build_server()) as client:
        r = await client.call_tool("episode_cap", arguments)
    assert code == 0 and not r.is_error
    assert out == r.structured_content and out["episode_cap"] == 128 and out["thread_rule"] == "ceil"


async def test_json_text_in_a_string_is_not_parsed_for_the_caller():
    """The SDK would turn '[4, 4]' into a list; the table treats it as what it is, a string."""
    async with Client(build_server()) as client:
        r = await client.call_tool("episode_cap", {"max_env_worker": 8, "num_repeat": 2,
                                                   "client_parallelism": "[4, 4]"})
    assert r.is_error and "client_parallelism:" in r.content[0].text and "'[4, 4]' (str)" in r.content[0].text


def test_cli_path_never_imports_mcp():
    import subprocess

    code = (
        "import sys; from skill_server.app import cli\n"
        "rc = cli.main(['call', 'episode_cap', 'max_env_worker=128', 'num_repeat=6'])\n"
        "rc2 = cli.main(['tools'])\n"
        "bad = sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types')))\n"
        "sys.stderr.write(repr((rc, rc2, bad)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env(),
                          check=False)
    assert proc.stderr.strip() == "(0, 0, [])", proc.stderr


async def test_resources_and_prompts():
    async with Client(build_server()) as client:
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        assert "agentjet://reference/{name}" in templates
        page = await client.read_resource("agentjet://reference/episode-cap")
        assert "ceil(max_env_worker / num_repeat)" in page.contents[0].text
        table = await client.read_resource("agentjet://overrides")
        import json

        data = json.loads(table.contents[0].text)
        assert len(data["rows"]) == 37 and data["source"] == "bundled" and data["agentjet"]["version"] == "0.1.0"
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert {"run-blueprint", "explain-gauge"} <= prompts
        got = await client.get_prompt("explain-gauge", {"url": "http://gpu-head:10086"})
        assert "http://gpu-head:10086" in got.messages[0].content.text


def test_reference_pages_document_the_real_table():
    from skill_server.agentjet.release import newest_bundled

    text = (REPO / "references" / "overlay-config.md").read_text()
    for kwarg, key in newest_bundled().overrides.rows:
        assert f"| {kwarg} | {key} |" in text
