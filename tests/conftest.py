"""Shared fixtures: a private environment per test, helpers to run the CLI and a real MCP client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


# Folders our tests and stand-ins make directly in /tmp (short paths for sockets, or reachable by an
# unprivileged user). Each must be gone when the session ends: tests leave the machine as they found it.
OWN_TMP_PREFIXES = ("ajs", "standin-")
_TMP_AT_START: set[str] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _TMP_AT_START.update(os.listdir("/tmp"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    left = sorted(name for name in set(os.listdir("/tmp")) - _TMP_AT_START
                  if name.startswith(OWN_TMP_PREFIXES) and _owner(os.path.join("/tmp", name)) == os.getuid())
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"tests left {len(left)} entries in /tmp: {', '.join(left[:10])}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _owner(path: str) -> int | None:
    try:
        return os.lstat(path).st_uid
    except FileNotFoundError:  # gone while we looked
        return None


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees the developer's AgentJet, tmux or state directory.

    The state directory has a short path: ssh control sockets go under it, and a path past the socket
    limit would send them to the machine-wide fallback in /tmp, which tests must not touch."""
    monkeypatch.delenv("AJET_ROOT", raising=False)
    monkeypatch.delenv("TMUX", raising=False)
    box = tempfile.mkdtemp(prefix="ajs", dir="/tmp")
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", os.path.join(box, "state"))
    yield
    shutil.rmtree(box, ignore_errors=True)


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AJET_ROOT", "TMUX")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m skill_server ARGS`` in a subprocess, as an assistant's shell would."""
    return subprocess.run(
        [sys.executable, "-m", "skill_server", *args],
        capture_output=True, text=True, env=env or cli_env(), cwd=cwd or REPO, timeout=timeout,
    )


def run_cli_to_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m skill_server ARGS | head -c 0``: the reader has gone before the first byte is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "skill_server", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, cwd=REPO, env=cli_env(), timeout=60)
    finally:
        os.close(write_end)


def call_cli(tool: str, arguments: dict[str, Any], **kw: Any) -> tuple[int, Any, str]:
    """``call TOOL --json ...``: (exit code, parsed stdout or None, stderr)."""
    proc = run_cli("call", tool, "--json", json.dumps(arguments), **kw)
    out = json.loads(proc.stdout) if proc.returncode == 0 else None
    return proc.returncode, out, proc.stderr


@pytest.fixture
def private_tmux(monkeypatch: pytest.MonkeyPatch):
    """A private tmux server for experiment tools: its own socket name in its own TMUX_TMPDIR, killed after.

    ``SHELL=/bin/sh`` keeps pane shells free of login hooks that a killed test could leave half-run.
    """
    import uuid

    name = f"ajs-{uuid.uuid4().hex[:8]}"
    tmpdir = tempfile.mkdtemp(prefix="ajs", dir="/tmp")  # short: socket paths are limited to ~100 bytes
    monkeypatch.setenv("TMUX_TMPDIR", tmpdir)
    monkeypatch.setenv("SKILL_SERVER_TMUX_SOCKET", name)
    monkeypatch.setenv("SHELL", "/bin/sh")
    yield name
    try:
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True, timeout=30,
                       env={**os.environ, "TMUX_TMPDIR": tmpdir})
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
