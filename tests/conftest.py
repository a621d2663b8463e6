"""Shared fixtures: a private environment per test, helpers to run the CLI and a real MCP client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

from tests.tmp_dirs import SSH_FALLBACK, left_behind, process_tmp_dir, short_tmp_dir

REPO = Path(__file__).resolve().parents[1]

# Hypothesis keeps its example database and caches in ./.hypothesis by default, which would land in the
# checkout (and from there in every installed copy of the skill): a temp folder of this session instead.
set_hypothesis_home_dir(process_tmp_dir("ajs-hypothesis"))


def untracked_in_checkout() -> set[str] | None:
    """Files in the checkout that git does not track, ignored ones included (bytecode caches aside); None
    outside a git checkout."""
    try:
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "--others", "-z"], capture_output=True,
                                timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {name for name in listed.decode(errors="replace").split("\0")
            if name and "__pycache__" not in name.split("/")}


_SSH_FALLBACK_EXISTED = os.path.lexists(SSH_FALLBACK)
_UNTRACKED_AT_START = untracked_in_checkout()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests leave the machine as they found it: a folder of ours still in /tmp, or a file the session added
    to the checkout, fails the session."""
    problems = []
    left = left_behind(_SSH_FALLBACK_EXISTED)
    if left:
        problems.append(f"tests left {len(left)} entries in /tmp: {', '.join(left[:10])}")
    now = untracked_in_checkout()
    added = sorted(now - _UNTRACKED_AT_START) if now is not None and _UNTRACKED_AT_START is not None else []
    if added:
        problems.append(f"tests left {len(added)} new files in the checkout: {', '.join(added[:10])}")
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            for problem in problems:
                reporter.write_line(problem, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
    box = short_tmp_dir()
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
        capture_output=True, text=True, env=env or cli_env(), cwd=cwd or REPO, timeout=timeout, check=False,
    )


def run_cli_to_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m skill_server ARGS | head -c 0``: the reader has gone before the first byte is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "skill_server", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, cwd=REPO, env=cli_env(), timeout=60, check=False)
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
    tmpdir = short_tmp_dir()  # short: socket paths are limited to ~100 bytes
    monkeypatch.setenv("TMUX_TMPDIR", tmpdir)
    monkeypatch.setenv("SKILL_SERVER_TMUX_SOCKET", name)
    monkeypatch.setenv("SHELL", "/bin/sh")
    yield name
    try:
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True, timeout=30,
                       env={**os.environ, "TMUX_TMPDIR": tmpdir}, check=False)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
