"""Streamable HTTP: bearer token, DNS-rebinding protection, loopback default, a real client session."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import REPO, cli_env

TOKEN = "test-token-0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def http_server(*extra: str, token: str | None = TOKEN) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    port = free_port()
    env = cli_env()
    env.pop("SKILL_SERVER_TOKEN", None)
    if token:
        env["SKILL_SERVER_TOKEN"] = token
    proc = subprocess.Popen(
        [sys.executable, "-m", "skill_server", "serve", "--transport", "http", "--host", "127.0.0.1",
         "--port", str(port), *extra],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(proc.stderr.read() if proc.stderr else "server exited") from None
                time.sleep(0.1)
        yield port, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def post(port: int, headers: dict[str, str]) -> int:
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_token_and_host_checks():
    with http_server() as (port, _):
        assert post(port, {}) == 401
        assert post(port, {"Authorization": "Bearer wrong"}) == 401
        assert post(port, {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"}) == 421
        assert post(port, {"Authorization": f"Bearer {TOKEN}", "Host": "attacker.test:80"}) == 421


@pytest.mark.anyio
async def test_real_client_over_http():
    with http_server() as (port, _):
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        async with http, Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"episode_cap", "build_config"} <= tools
            r = await client.call_tool("episode_cap", {"max_env_worker": 128, "num_repeat": 6, "train_batch_size": 32})
            assert r.structured_content["episode_cap"] == 128


def test_generated_token_printed_once_to_stderr():
    with http_server(token=None) as (port, proc):
        time.sleep(0.3)
        assert post(port, {}) == 401
    err = proc.stderr.read() if proc.stderr else ""
    lines = [line for line in err.splitlines() if "bearer token" in line]
    assert len(lines) == 1
    generated = lines[0].rsplit(" ", 1)[1]
    assert len(generated) >= 32 and proc.stdout is not None and proc.stdout.read() == ""


def test_non_loopback_without_token_is_refused():
    env = cli_env()
    env.pop("SKILL_SERVER_TOKEN", None)
    proc = subprocess.run(
        [sys.executable, "-m", "skill_server", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "0"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=30, check=False,
    )
    assert proc.returncode != 0 and "refusing to bind 0.0.0.0 without a token" in proc.stderr
