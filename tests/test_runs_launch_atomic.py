"""A launch is atomic from the registry's point of view (issue 19 item 2): the CLI or the MCP server killed
(SIGKILL, SIGTERM, SIGINT) at the moment the run's tmux session appears leaves, after the next call of any
tool, a run that is registered and stoppable or one that is gone from the host: never a session or a
process that no tool can see. Real tmux on a private socket, real processes, real signals, timing loops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_env
from tests.experiment_helpers import call, marked_pids, tmux_socket, workdir  # noqa: F401  (fixtures)

DELAYS_S = (0.0, 0.01, 0.05, 0.2)
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)


def _socket_path() -> str:
    return os.path.join(os.environ["TMUX_TMPDIR"], f"tmux-{os.getuid()}", os.environ["SKILL_SERVER_TMUX_SOCKET"])


def _has_session(name: str) -> bool:
    done = subprocess.run(["tmux", "-S", _socket_path(), "has-session", "-t", "=" + name], capture_output=True,
                          timeout=10, check=False)
    return done.returncode == 0


def _cut_when_the_session_appears(proc: subprocess.Popen[bytes], session: str, sig: int, delay: float) -> None:
    """Signal ``proc`` ``delay`` seconds after ``session`` exists (or once it has ended by itself)."""
    end = time.monotonic() + 60
    while not _has_session(session) and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.002)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(timeout=90)


def _registered_or_gone(session: str) -> str:
    """After the next call of any tool: the run is listed and stops cleanly, or nothing of it is left."""
    listed = [e for e in call("experiment_status", max_lines=0)["experiments"] if e["session"] == session]
    prefix = session + "-"
    if listed:
        assert len(listed) == 1 and listed[0]["state"] == "running", listed
        stopped = call("stop_experiment", id=listed[0]["id"], grace_s=1)
        assert stopped["state"] == "stopped" and stopped["still_alive"] == []
        outcome = "registered"
    else:
        outcome = "gone"
    assert not _has_session(session), f"{session}: a session is left ({outcome})"
    assert marked_pids(prefix) == [], f"{session}: processes are left ({outcome})"
    return outcome


def _launch_args(name: str, workdir: Path) -> dict[str, object]:
    return {"name": name, "command": "sleep 300", "workdir": str(workdir)}


def test_the_cli_killed_as_the_session_appears_leaves_a_run_registered_or_gone(tmux_socket: str, workdir: Path):
    outcomes = []
    for sig in SIGNALS:
        for i, delay in enumerate(DELAYS_S):
            name = f"cli{int(sig)}x{i}"
            proc = subprocess.Popen([sys.executable, "-m", "skill_server", "call", "launch_experiment", "--json",
                                     json.dumps(_launch_args(name, workdir))], cwd=REPO, env=cli_env(),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _cut_when_the_session_appears(proc, "ajet_" + name, sig, delay)
            outcomes.append(_registered_or_gone("ajet_" + name))
    assert "gone" in outcomes  # the loop did cut launches in the middle (each outcome was checked above)


def _rpc(proc: subprocess.Popen[bytes], message: dict[str, object]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_the_mcp_server_killed_as_the_session_appears_leaves_a_run_registered_or_gone(
        tmux_socket: str, workdir: Path, sig: int):
    for i, delay in enumerate(DELAYS_S):
        name = f"mcp{int(sig)}x{i}"
        proc = subprocess.Popen([sys.executable, "-m", "skill_server"], cwd=REPO, env=cli_env(),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _rpc(proc, INIT)
            assert proc.stdout is not None and b'"id":1' in proc.stdout.readline().replace(b" ", b"")
            _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                        "params": {"name": "launch_experiment", "arguments": _launch_args(name, workdir)}})
            _cut_when_the_session_appears(proc, "ajet_" + name, sig, delay)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        expected = {signal.SIGKILL: -signal.SIGKILL, signal.SIGTERM: 0, signal.SIGINT: 130}[sig]
        assert proc.returncode == expected  # the exit codes are those of before: SIGTERM 0, SIGINT 130
        if sig != signal.SIGKILL:  # the call in flight finished before the exit: the run is registered
            assert _registered_or_gone("ajet_" + name) == "registered"
        else:
            _registered_or_gone("ajet_" + name)


def test_a_shutdown_request_between_the_rounds_starts_nothing(tmux_socket: str, workdir: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    from skill_server.core import deadline
    from skill_server.core.errors import ToolFailure

    monkeypatch.setattr(deadline, "_SHUTDOWN", type(deadline._SHUTDOWN)())
    deadline.request_shutdown()
    with pytest.raises(ToolFailure, match="shutting down: nothing was started"):
        call("launch_experiment", **_launch_args("late", workdir))
    assert not _has_session("ajet_late") and marked_pids("ajet_late-") == []
