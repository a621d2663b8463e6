"""What the MCP server answers to requests it cannot serve: a clear invalid-params error naming the thing,
the same in both protocol eras, and the server answers the next request."""

from __future__ import annotations

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from skill_server.app.mcp_server import build_server, list_references

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "auto"]  # the 2025-11-25 handshake, and the 2026-07-28 protocol an in-process client adopts


async def refusal(call) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await call
    assert caught.value.code == INVALID_PARAMS
    return caught.value


@pytest.mark.parametrize("mode", ERAS)
async def test_unknown_resources_and_pages_are_named(mode):
    async with Client(build_server(), mode=mode) as client:
        page = await refusal(client.read_resource("agentjet://reference/no-such-page"))
        assert page.message.startswith("no reference page 'no-such-page'; available: ")
        assert ", ".join(list_references()) in page.message and "\n" not in page.message
        assert page.data == {"uri": "agentjet://reference/no-such-page"}
        for uri in ("agentjet://elsewhere", "agentjet://reference/", "agentjet://reference/a/b"):
            assert (await refusal(client.read_resource(uri))).message == f"Unknown resource: {uri}"
        escaped = await client.read_resource("agentjet://reference/episode%2Dcap")  # percent-encoding is decoded
        assert "ceil(max_env_worker / num_repeat)" in escaped.contents[0].text


@pytest.mark.parametrize("mode", ERAS)
async def test_prompt_arguments_are_checked_by_name(mode):
    async with Client(build_server(), mode=mode) as client:
        missing = await refusal(client.get_prompt("run-blueprint", {}))
        assert missing.message == "Missing required arguments for prompt run-blueprint: blueprint"
        unknown = await refusal(client.get_prompt("explain-gauge", {"url": "http://h:1", "port": "1"}))
        assert unknown.message == "Unknown arguments for prompt explain-gauge: port (valid: url)"
        assert (await refusal(client.get_prompt("no-such-prompt"))).message == "Unknown prompt: no-such-prompt"
        default = await client.get_prompt("explain-gauge")
        assert "http://localhost:10086" in default.messages[0].content.text
        listed = {p.name: [(a.name, a.required) for a in p.arguments] for p in (await client.list_prompts()).prompts}
        assert listed == {"run-blueprint": [("blueprint", True)], "explain-gauge": [("url", False)]}


@pytest.mark.parametrize("mode", ERAS)
async def test_an_unknown_tool_is_an_error_result_and_the_session_goes_on(mode):
    async with Client(build_server(), mode=mode) as client:
        r = await client.call_tool("no_such_tool", {})
        assert r.is_error and r.content[0].text == "Unknown tool: no_such_tool"
        ok = await client.call_tool("episode_cap", {"max_env_worker": 128, "num_repeat": 6})
        assert not ok.is_error and ok.structured_content["episode_cap"] == 128
