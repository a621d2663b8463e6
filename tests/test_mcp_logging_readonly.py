"""What a person watching a long call sees (MCP log messages to the client) and the read-only mode
(``SKILL_SERVER_READ_ONLY=1``), with real MCP clients: in-process, and over stdio in both protocol eras."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning

from skill_server.app import mcp_server
from skill_server.app.mcp_server import LOGGER_NAME, build_server
from skill_server.app.table import READ_ONLY_ENV, TOOLS, published_tools
from tests.conftest import REPO, call_cli, cli_env, run_cli
from tests.experiment_helpers import call

pytestmark = pytest.mark.anyio

READ_ONLY_TOOLS = {spec.name for spec in TOOLS if spec.read_only}


def stdio(**env: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "skill_server"], cwd=str(REPO),
                                 env=cli_env(**env))


class Logs:
    """The log messages a client received: (level, logger, text)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, Any]] = []

    async def __call__(self, params: Any) -> None:
        self.seen.append((params.level, params.logger, params.data))

    def texts(self, level: str | None = None) -> list[str]:
        return [str(data) for lvl, _, data in self.seen if level is None or lvl == level]


def sleeping_run(workdir: Path, seconds: int = 30) -> str:
    return call("launch_experiment", name="sleepy", command=f"sleep {seconds}", workdir=str(workdir))["id"]


async def test_the_server_declares_logging_and_a_wait_reports_to_the_client_as_log_messages(
        private_tmux: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(mcp_server, "LONG_CALL_S", 1.0)  # a "long" call, in a test's time
    exp_id = sleeping_run(tmp_path)
    logs = Logs()
    async with Client(build_server(), mode="legacy", logging_callback=logs) as client:  # Claude Code's and Codex's era
        assert client.server_capabilities.logging is not None
        r = await client.call_tool("wait_experiment", {"id": exp_id, "timeout_s": 3})
        assert not r.is_error and r.structured_content["reason"] == "timeout"
    assert {logger for _, logger, _ in logs.seen} == {LOGGER_NAME}
    texts = logs.texts("info")
    assert texts[0] == "wait_experiment: ajet_sleepy: running", texts  # the first progress message at once
    assert "wait_experiment: still running after 1 s" in texts
    assert texts[-1] == "wait_experiment: done after 3 s", texts
    assert any(t.startswith("wait_experiment: ajet_sleepy: timeout") for t in texts), texts  # its last progress
    assert len(texts) <= 6  # progress every second becomes a log message every PROGRESS_LOG_EVERY_S at most


async def test_set_level_keeps_lower_levels_back_and_a_long_failure_is_a_warning(
        private_tmux: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(mcp_server, "LONG_CALL_S", 0.5)
    exp_id = sleeping_run(tmp_path)
    logs = Logs()
    async with Client(build_server(), mode="legacy", logging_callback=logs) as client:
        with pytest.warns(MCPDeprecationWarning):  # logging/setLevel: deprecated in 2026-07-28, current in 2025-11-25
            await client.set_logging_level("warning")
        r = await client.call_tool("wait_experiment", {"id": exp_id, "timeout_s": 2})
        assert not r.is_error
        assert logs.seen == []  # progress and "still running" are info
        r = await client.call_tool("wait_experiment", {"id": exp_id, "timeout_s": 2, "until": "pattern",
                                                       "pattern": "("})  # refused at once: not long, no log
        assert r.is_error and logs.seen == []


async def test_a_2026_client_gets_log_messages_only_when_it_opts_in(private_tmux: str, tmp_path: Path):
    """Over stdio, the protocol a current SDK negotiates (2026-07-28): log delivery is a per-request opt-in."""
    exp_id = sleeping_run(tmp_path)
    quiet, opted = Logs(), Logs()
    async with Client(stdio(), logging_callback=quiet) as client:
        assert not (await client.call_tool("wait_experiment", {"id": exp_id, "timeout_s": 2})).is_error
    async with Client(stdio(), logging_callback=opted, log_level="info") as client:
        assert not (await client.call_tool("wait_experiment", {"id": exp_id, "timeout_s": 2})).is_error
    assert quiet.seen == []
    assert opted.texts()[0] == "wait_experiment: ajet_sleepy: running", opted.seen


# --- read-only mode ------------------------------------------------------------------------------------


async def test_read_only_mode_publishes_and_runs_only_what_changes_nothing(tmp_path: Path):
    assert READ_ONLY_TOOLS and {spec.name for spec in TOOLS} != READ_ONLY_TOOLS
    async with Client(stdio(**{READ_ONLY_ENV: "1"})) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == READ_ONLY_TOOLS and all(t.annotations.read_only_hint for t in listed.values())
        assert "read-only (SKILL_SERVER_READ_ONLY=1)" in (client.instructions or "")
        r = await client.call_tool("launch_experiment", {"name": "x", "command": "true", "workdir": str(tmp_path)})
        assert r.is_error and r.content[0].text.startswith(
            "Error executing tool launch_experiment: refused: SKILL_SERVER_READ_ONLY=1 (read-only mode) runs only "
            "the tools that change nothing, and launch_experiment changes things")
        ok = await client.call_tool("episode_cap", {"max_env_worker": 128, "num_repeat": 6})
        assert not ok.is_error and ok.structured_content["episode_cap"] == 128
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert prompts == {"explain-gauge"}  # run-blueprint launches experiments
    assert not list(tmp_path.iterdir())  # the refused launch started nothing
    async with Client(stdio(**{READ_ONLY_ENV: "0"})) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {spec.name for spec in TOOLS}


def test_read_only_mode_in_the_cli_and_a_setting_that_is_neither_on_nor_off(tmp_path: Path):
    env = cli_env(**{READ_ONLY_ENV: "yes"})
    listed = run_cli("tools", "--json", env=env)
    assert listed.returncode == 0 and {t["name"] for t in __import__("json").loads(listed.stdout)} == READ_ONLY_TOOLS
    code, _, err = call_cli("stop_experiment", {"id": "x"}, env=env)
    assert code == 1 and err.startswith("stop_experiment: refused: SKILL_SERVER_READ_ONLY=1") and err.count("\n") == 1
    code, out, _ = call_cli("episode_cap", {"max_env_worker": 8, "num_repeat": 2}, env=env)
    assert code == 0 and out["episode_cap"] == 8
    for command in (["tools"], ["call", "episode_cap", "max_env_worker=8", "num_repeat=2"]):
        bad = run_cli(*command, env=cli_env(**{READ_ONLY_ENV: "maybe"}))
        assert bad.returncode == 2 and bad.stdout == "" and bad.stderr == (
            "usage error: SKILL_SERVER_READ_ONLY: 'maybe' is neither on (1, true, yes) nor off (0, false, no, "
            "empty) (see python -m skill_server --help)\n")


def test_the_hints_decide_what_read_only_mode_publishes(monkeypatch: pytest.MonkeyPatch):
    """A tool added with read_only=True (a preflight, say) is published in read-only mode; one that changes
    things (an installer) is not: the table's hint decides, not a list kept elsewhere."""
    import dataclasses

    from skill_server.app import table

    reading = dataclasses.replace(TOOLS[0], name="preflight_like", read_only=True)
    writing = dataclasses.replace(TOOLS[0], name="installer_like", read_only=False, destructive=False)
    monkeypatch.setattr(table, "TOOLS", (*TOOLS, reading, writing))
    names = {spec.name for spec in published_tools(True)}
    assert "preflight_like" in names and "installer_like" not in names
    monkeypatch.setenv(READ_ONLY_ENV, "1")
    assert table.refusal(writing) is not None and table.refusal(reading) is None
