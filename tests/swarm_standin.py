"""A stand-in for AgentJet's swarm server, for tests only.

AgentJet's real swarm server cannot run here: it needs GPUs (a verl trainer with vLLM behind it).
This stand-in answers the read-only routes ``swarm_status`` uses, with response shapes written from
the documented pydantic models (the engine status triple, ``CurrentBatchRolloutPoolInformation`` with
its server-side ``running_episode_details``, and ``{server_experiment_dir}``), and can misbehave on purpose: HTML page, HTTP 500
or 404, slow answer, one-byte drip, truncated body, JSON of the wrong shape, invalid JSON, a huge body.
Or it answers with exact bytes (``raw``): numbers of thousands of digits, wrong types, odd unicode.
It listens on 127.0.0.1 on a free port chosen by the OS (or the one given).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ENGINE_ROUTE = "/get_engine_status"
POOL_ROUTE = "/get_current_batch_rollout_pool_information"
EXPERIMENT_DIR_ROUTE = "/get_server_experiment_dir"

#: Misbehaviours a route can be set to (``None`` = answer normally).
FAILURES = ("html", "500", "404", "slow", "drip", "truncated", "wrong_json", "not_json", "huge", "null", "list",
            "huge_unsized", "chunked")


def episode(idle_s: float, timeout_s: float = 240.0, client: str = "client-a", calls: int = 3,
            task_id: str = "") -> dict[str, str]:
    """One ``running_episode_details`` value as the server writes it (all strings)."""
    return {
        "episode_status": "claimed",
        "time_since_last_activity": f"{idle_s:.1f}s",
        "discard_episode_timeout": f"{timeout_s:.1f}s",
        "llm_call_count": str(calls),
        "client_uuid": client,
        "optional_task_id": task_id,
    }


@dataclass
class SwarmState:
    engine_status: str = "ENGINE.ROLLING"
    engine_status_detail: str | None = None
    global_step: int = 3
    sample_collection_method: str = "rollout_until_finish_enough_tasks"
    running: dict[str, dict[str, Any]] = field(default_factory=dict)
    completed_episodes: int = 40
    completed_episode_target: int = 128
    completed_tasks: int = 10
    completed_task_target: int = 32
    completed_non_dummy_tasks: int = 8
    completed_non_dummy_task_target: int = 32
    task_expected_num_repeat: int = 4
    #: What /get_server_experiment_dir reports (None before an experiment starts, as in AgentJet).
    experiment_dir: str | None = None
    #: False: an older server without /get_server_experiment_dir (404).
    has_experiment_dir_route: bool = True
    failures: dict[str, str] = field(default_factory=dict)  # route -> one of FAILURES
    #: route -> exact body bytes to answer with (HTTP 200, application/json): hostile JSON on purpose.
    raw: dict[str, bytes] = field(default_factory=dict)
    slow_s: float = 5.0
    #: Called on each pool read with the read's index; lets a test change the state between samples.
    on_pool_read: Callable[[int, SwarmState], None] | None = None
    pool_reads: int = 0

    def set_running(self, n: int, idle_s: float = 5.0, clients: int = 2, timeout_s: float = 240.0) -> None:
        self.running = {
            f"ep-{i:04d}": episode(idle_s + i * 0.1, timeout_s, client=f"client-{i % clients}") for i in range(n)
        }

    def engine_doc(self) -> dict[str, Any]:
        return {"engine_status": self.engine_status, "engine_status_detail": self.engine_status_detail,
                "global_step": self.global_step}

    def pool_doc(self) -> dict[str, Any]:
        return {
            "sample_collection_method": self.sample_collection_method,
            "completed_episodes": self.completed_episodes,
            "completed_episode_target": self.completed_episode_target,
            "completed_tasks": self.completed_tasks,
            "completed_task_target": self.completed_task_target,
            "completed_non_dummy_tasks": self.completed_non_dummy_tasks,
            "completed_non_dummy_task_target": self.completed_non_dummy_task_target,
            "task_expected_num_repeat": self.task_expected_num_repeat,
            "completed_tasks_details": {},
            "completed_tasks_rewards": {},
            "running_episode_details": dict(self.running),
            "engine_status": self.engine_status,
            "global_step": self.global_step,
            "booting_start_time": None,
        }


class SwarmStandin:
    """``with SwarmStandin() as s: s.url ...``; ``s.state`` is mutable while it runs."""

    def __init__(self, state: SwarmState | None = None, port: int = 0) -> None:
        self.state = state or SwarmState()
        self._closing = threading.Event()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                standin._answer(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> SwarmStandin:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    # -- answering -------------------------------------------------------------------------------

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        st = self.state
        if h.path == ENGINE_ROUTE:
            doc: Any = st.engine_doc()
        elif h.path == EXPERIMENT_DIR_ROUTE and st.has_experiment_dir_route:
            doc = {"server_experiment_dir": st.experiment_dir}
        elif h.path == POOL_ROUTE:
            if st.on_pool_read is not None:
                st.on_pool_read(st.pool_reads, st)
            st.pool_reads += 1
            doc = st.pool_doc()
        else:
            self._send(h, 404, b'{"detail":"Not Found"}')
            return
        mode = st.failures.get(h.path)
        body = st.raw[h.path] if h.path in st.raw else json.dumps(doc).encode()
        if mode is None:
            self._send(h, 200, body)
        elif mode == "html":
            self._send(h, 200, b"<!doctype html><html><body>Grafana</body></html>", "text/html; charset=utf-8")
        elif mode == "500":
            self._send(h, 500, b"Internal Server Error", "text/plain")
        elif mode == "404":
            self._send(h, 404, b'{"detail":"Not Found"}')
        elif mode == "slow":
            self._closing.wait(st.slow_s)
            self._send(h, 200, body)
        elif mode == "drip":  # headers at once, then one byte every 0.1 s: each read is quick, the whole is not
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            for i in range(len(body)):
                if self._closing.wait(0.1):
                    return
                try:
                    h.wfile.write(body[i:i + 1])
                    h.wfile.flush()
                except OSError:
                    return
        elif mode == "truncated":  # promises the whole body, sends a third of it, closes
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body[: len(body) // 3])
            h.close_connection = True
        elif mode == "wrong_json":
            self._send(h, 200, b'{"status": "ok", "version": "1.2"}')
        elif mode == "not_json":
            self._send(h, 200, b"engine_status=ROLLING\n", "text/plain")
        elif mode == "null":
            self._send(h, 200, b"null")
        elif mode == "list":
            self._send(h, 200, b"[1, 2, 3]")
        elif mode == "huge":  # 3 MB of valid JSON
            self._send(h, 200, json.dumps({"engine_status": "ENGINE.ROLLING", "pad": "x" * (3 * 1024 * 1024)}).encode())
        elif mode == "huge_unsized":  # 3 MB with no Content-Length: the body runs until the close
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Connection", "close")
            h.end_headers()
            try:
                for _ in range(48):
                    h.wfile.write(b"[" + b"0," * 32 * 1024 + b"0]")
            except OSError:
                pass
            h.close_connection = True
        elif mode == "chunked":  # a correct answer in chunked transfer encoding
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            for start in range(0, len(body), 50):
                piece = body[start:start + 50]
                h.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            h.wfile.write(b"0\r\n\r\n")
        else:
            raise ValueError(f"unknown failure mode {mode!r}")

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str = "application/json") -> None:
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        try:
            h.wfile.write(body)
        except OSError:
            pass


def free_port_with_nothing_listening() -> int:
    """A port on 127.0.0.1 that refuses connections (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
