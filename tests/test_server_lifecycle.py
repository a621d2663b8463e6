"""The server as a person meets it: what it says on a terminal, and how Ctrl-C, Ctrl-D and SIGTERM end it.

Real subprocesses, real signals, a real pseudo-terminal for the interactive case, and the real HTTP
transport with a client stream left open.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import threading
import urllib.request

import pytest

from tests.conftest import REPO, cli_env
from tests.test_http_transport import TOKEN, http_server

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def spawn(stdin: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "skill_server"], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO, env=cli_env())


def read_line(stream, timeout: float = 30) -> bytes:
    """One line from a pipe, or fail after ``timeout`` (never hangs the suite)."""
    box: list[bytes] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert box, f"no line within {timeout}s"
    return box[0]


def finish(proc: subprocess.Popen[bytes], timeout: float = 30) -> tuple[int, str]:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("the server did not stop") from None
    return proc.returncode, proc.stderr.read().decode(errors="replace") if proc.stderr else ""


@pytest.fixture
def terminal():
    """A pseudo-terminal pair; the child gets the slave end as stdin."""
    master, slave = pty.openpty()
    yield master, slave
    for fd in (master, slave):
        try:
            os.close(fd)
        except OSError:
            pass


def test_on_a_terminal_it_says_what_it_is_and_ctrl_c_ends_it(terminal):
    master, slave = terminal
    proc = spawn(slave)
    try:
        banner = read_line(proc.stderr).decode()
        assert "agentjet-swarm-skill" in banner and "MCP server" in banner and "stdin/stdout" in banner
        assert "Ctrl-D or Ctrl-C" in banner
        assert "Smoke test: python -m skill_server call episode_cap" in banner
        proc.send_signal(signal.SIGINT)
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 130
    assert "Traceback" not in err and "stopped by SIGINT" in err


def test_on_a_terminal_ctrl_d_ends_it(terminal):
    master, slave = terminal
    proc = spawn(slave)
    try:
        assert b"Ctrl-D" in read_line(proc.stderr)
        os.write(master, b"\x04")  # the terminal's end-of-file character
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0 and "Traceback" not in err


@pytest.mark.parametrize("signum, expected", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_stdio_server_in_a_session_stops_cleanly_on_a_signal(signum, expected):
    """Under an MCP client (stdin a pipe): no banner; a signal mid-session ends it at once, no traceback."""
    proc = spawn(subprocess.PIPE)
    try:
        assert proc.stdin and proc.stdout
        proc.stdin.write((json.dumps(INIT) + "\n").encode())
        proc.stdin.flush()
        reply = json.loads(read_line(proc.stdout))
        assert reply["id"] == 1 and "result" in reply
        proc.send_signal(signum)
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == expected
    assert "Traceback" not in err and "MCP server speaking" not in err
    assert f"stopped by {signal.Signals(signum).name}" in err


def test_stdio_server_ends_with_zero_on_eof():
    proc = subprocess.run([sys.executable, "-m", "skill_server"], input=b"", capture_output=True, cwd=REPO,
                          env=cli_env(), timeout=60, check=False)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr and proc.stdout == b""


@pytest.mark.parametrize("signum, expected", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_http_server_stops_cleanly_on_a_signal_with_a_stream_open(signum, expected):
    with http_server() as (port, proc):
        # a client holding the server-to-client event stream open, as MCP clients do
        request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", method="POST", headers={
            "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"}, data=json.dumps(INIT).encode())
        with urllib.request.urlopen(request, timeout=20) as answer:
            session = answer.headers.get("mcp-session-id")
            answer.read()
        held = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", method="GET", headers={
            "Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream",
            **({"mcp-session-id": session} if session else {})})
        stream = urllib.request.urlopen(held, timeout=30)
        try:
            proc.send_signal(signum)
            proc.wait(timeout=30)  # the open stream must not keep it alive (graceful shutdown is bounded)
        finally:
            stream.close()
        err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == expected, err
    assert "Traceback" not in err and f"stopped by {signal.Signals(signum).name}" in err
