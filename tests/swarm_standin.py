"""A stand-in for AgentJet's swarm server (``ajet-swarm start``, AgentJet c68c154f), for tests only.

AgentJet's real swarm server cannot run here: it needs GPUs (a verl trainer with vLLM behind it). This
stand-in answers the routes ``swarm_status`` reads, ``GET /get_engine_status``,
``/get_current_batch_rollout_pool_information`` and ``/get_server_experiment_dir``, plus
``POST /start_engine`` and ``/stop_engine`` to drive its lifecycle, and reproduces what the real server
was measured to do (its c68c154 code run on CPU with real ``rollout_swarm`` threads and real clients):

* ``running_episode_details`` is ``null``, not ``{}``, when no episode is claimed;
* ``global_step`` is ``null`` before the trainer's first update, ``0`` after a trainer crash (the
  engine falls back to OFFLINE), and kept after ``/stop_engine``, as are the experiment directory and the
  last counters;
* ``booting_start_time`` is a timestamp while the engine is BOOTING (null otherwise);
* before the trainer's first pool push of an engine run, ``sample_collection_method`` is ``""`` and every
  counter and target is zero;
* the pool information always carries ``completed_tasks_client_uuids``, ``training_model_path`` and
  ``swarm_client_instruction``; ``engine_status_detail`` is never sent (set it to test a server that does);
* clients claim episodes with different discard timeouts (``set_running(timeout_s=[...])``);
* ``/start_engine`` holds the whole server for ``start_engine_block_s`` (about 5 s on the real one when
  the experiment's backup folder already exists): every route waits until it returns;
* worker threads push pool information concurrently, so a read may show fewer completed episodes than
  the one before within a step (``on_pool_read`` scripts such sequences).

It can also misbehave on purpose: HTML page, HTTP 500 or 404, slow answer, one-byte drip, truncated
body, JSON of the wrong shape, invalid JSON, a huge body; or answer with exact bytes (``raw``): numbers
of thousands of digits, wrong types, odd unicode. It listens on 127.0.0.1 on a free port chosen by the
OS (or the one given).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ENGINE_ROUTE = "/get_engine_status"
POOL_ROUTE = "/get_current_batch_rollout_pool_information"
EXPERIMENT_DIR_ROUTE = "/get_server_experiment_dir"
START_ROUTE = "/start_engine"
STOP_ROUTE = "/stop_engine"

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
    #: Sent in /get_engine_status only when set: the real c68c154 server never sends it.
    engine_status_detail: str | None = None
    global_step: int | None = 3
    sample_collection_method: str = "rollout_until_finish_enough_tasks"
    running: dict[str, dict[str, Any]] = field(default_factory=dict)
    completed_episodes: int = 40
    completed_episode_target: int = 128
    completed_tasks: int = 10
    completed_task_target: int = 32
    completed_non_dummy_tasks: int = 8
    completed_non_dummy_task_target: int = 32
    task_expected_num_repeat: int = 4
    #: False until the trainer's first pool push of this engine run: the method is "" and every count 0.
    pushed: bool = True
    booting_start_time: float | None = None
    training_model_path: str = "/mnt/models/Qwen2.5-7B-Instruct"
    completed_tasks_client_uuids: dict[str, list[str]] = field(default_factory=dict)
    swarm_client_instruction: dict[str, Any] = field(default_factory=dict)
    #: What /get_server_experiment_dir reports (None before an experiment starts; absolute once one did).
    experiment_dir: str | None = None
    #: False: an older server without /get_server_experiment_dir (404).
    has_experiment_dir_route: bool = True
    #: How long POST /start_engine holds the whole server (the real one: about 5 s when the backup folder exists).
    start_engine_block_s: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)  # route -> one of FAILURES
    #: route -> exact body bytes to answer with (HTTP 200, application/json): hostile JSON on purpose.
    raw: dict[str, bytes] = field(default_factory=dict)
    slow_s: float = 5.0
    #: Called on each pool read with the read's index; lets a test change the state between samples.
    on_pool_read: Callable[[int, SwarmState], None] | None = None
    pool_reads: int = 0

    def set_running(self, n: int, idle_s: float = 5.0, clients: int = 2,
                    timeout_s: float | list[float] = 240.0) -> None:
        """``n`` claimed episodes spread over ``clients``; a list of timeouts gives client i the i-th (cycling)."""
        timeouts = timeout_s if isinstance(timeout_s, list) else [timeout_s]
        self.running = {
            f"ep-{i:04d}": episode(idle_s + i * 0.1, timeouts[(i % clients) % len(timeouts)],
                                   client=f"client-{i % clients}") for i in range(n)
        }

    # -- the lifecycle, as the real server moves through it

    def start_engine(self, now: float) -> None:
        """After /start_engine: BOOTING since ``now``; nothing pushed yet for this run."""
        self.engine_status, self.booting_start_time, self.pushed, self.running = "ENGINE.BOOTING", now, False, {}

    def roll(self) -> None:
        """The trainer reports ROLLING (its first pool push comes later)."""
        self.engine_status, self.booting_start_time = "ENGINE.ROLLING", None

    def crash(self) -> None:
        """The training process died: OFFLINE, step 0, nothing claimed."""
        self.engine_status, self.global_step, self.running, self.booting_start_time = "ENGINE.OFFLINE", 0, {}, None

    def stop_engine(self) -> None:
        """After /stop_engine: OFFLINE; the step, the experiment directory and the last counters stay."""
        self.engine_status, self.running, self.booting_start_time = "ENGINE.OFFLINE", {}, None

    # -- the documents

    def engine_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"engine_status": self.engine_status, "global_step": self.global_step}
        if self.engine_status_detail is not None:
            doc["engine_status_detail"] = self.engine_status_detail
        return doc

    def pool_doc(self) -> dict[str, Any]:
        counts = {
            "completed_episodes": self.completed_episodes,
            "completed_episode_target": self.completed_episode_target,
            "completed_tasks": self.completed_tasks,
            "completed_task_target": self.completed_task_target,
            "completed_non_dummy_tasks": self.completed_non_dummy_tasks,
            "completed_non_dummy_task_target": self.completed_non_dummy_task_target,
            "task_expected_num_repeat": self.task_expected_num_repeat,
        }
        if not self.pushed:
            counts = dict.fromkeys(counts, 0)
        return {
            "sample_collection_method": self.sample_collection_method if self.pushed else "",
            **counts,
            "completed_tasks_details": {},
            "completed_tasks_rewards": {},
            "completed_tasks_client_uuids": dict(self.completed_tasks_client_uuids),
            "running_episode_details": dict(self.running) or None,
            "engine_status": self.engine_status,
            "global_step": self.global_step,
            "booting_start_time": self.booting_start_time,
            "training_model_path": self.training_model_path,
            "swarm_client_instruction": dict(self.swarm_client_instruction),
        }


class SwarmStandin:
    """``with SwarmStandin() as s: s.url ...``; ``s.state`` is mutable while it runs."""

    def __init__(self, state: SwarmState | None = None, port: int = 0) -> None:
        self.state = state or SwarmState()
        self._closing = threading.Event()
        self._busy = threading.Lock()  # held while /start_engine blocks the whole server
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                with standin._busy:  # a blocked server answers nothing until /start_engine returns
                    pass
                standin._answer(self)

            def do_POST(self) -> None:
                standin._control(self)

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

    def _control(self, h: BaseHTTPRequestHandler) -> None:
        """POST /start_engine (holding every route for ``start_engine_block_s``) and /stop_engine."""
        st = self.state
        length = int(h.headers.get("Content-Length") or 0)
        if length:
            h.rfile.read(length)
        if h.path == START_ROUTE:
            with self._busy:
                self._closing.wait(st.start_engine_block_s)
                st.start_engine(time.time())
        elif h.path == STOP_ROUTE:
            st.stop_engine()
        else:
            self._send(h, 404, b'{"detail":"Not Found"}')
            return
        self._send(h, 200, b'{"success": true}')

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
