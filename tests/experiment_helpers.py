"""Fixtures and helpers shared by the experiment tests (real tmux on a private socket per test)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import libtmux
import pytest

from skill_server.app.table import TOOLS_BY_NAME
from tests.conftest import REPO, needs
from tests.tmp_dirs import kill_run_processes, short_tmp_dir

FAKE = REPO / "tests" / "fixtures" / "fake_trainer.py"
PY = shlex.quote(sys.executable)

@pytest.fixture
def tmux_socket(monkeypatch: pytest.MonkeyPatch):
    """A private tmux server: unique socket name in a private TMUX_TMPDIR (short path: sockets max ~100 chars)."""
    needs("tmux")
    name = f"ajs-{uuid.uuid4().hex[:8]}"
    tmpdir = short_tmp_dir()
    monkeypatch.setenv("TMUX_TMPDIR", tmpdir)
    monkeypatch.setenv("SKILL_SERVER_TMUX_SOCKET", name)
    # The tmux server's default shell comes from $SHELL. A login bash may run slow start-up hooks (pyenv
    # rehash takes a lock file); tests that kill sessions at once could leave such a lock behind and slow
    # every later shell. Runs are pane commands (no shell in between), and a plain sh keeps the rest harmless.
    monkeypatch.setenv("SHELL", "/bin/sh")
    yield name
    try:
        srv = libtmux.Server(socket_name=name)
        if srv.is_alive():
            srv.kill()
        kill_run_processes(os.environ["SKILL_SERVER_STATE_DIR"])
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def marked_pids(prefix: str) -> list[int]:
    """Pids whose environment carries AGENTJET_SKILL_RUN=<prefix>... (read from /proc by the test itself)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(e.startswith(f"AGENTJET_SKILL_RUN={prefix}".encode()) for e in environ.split(b"\0")):
            found.append(int(entry))
    return found


def pid_alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return TOOLS_BY_NAME[tool].invoke(arguments).model_dump()


def trainer(*args: str) -> str:
    return f"{PY} {shlex.quote(str(FAKE))} " + " ".join(shlex.quote(a) for a in args)


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not reached in time")


def status(exp_id: str, **kw: Any) -> dict[str, Any]:
    return call("experiment_status", id=exp_id, **kw)["experiments"][0]


def wait_exit(exp_id: str, timeout_s: int = 20) -> dict[str, Any]:
    out = call("wait_experiment", id=exp_id, timeout_s=timeout_s)
    assert out["reason"] == "exited", out
    return out
