"""The agent's entry point: one JSON request in, one JSON reply out (the shapes: ``protocol``).

A request is ``{"v": PROTOCOL_VERSION, "ops": [{"op": NAME, ...}, ...]}``; the reply is
``{"v": ..., "results": [...]}`` with one result per op, in order: ``{"ok": true, ...}`` or
``{"ok": false, "error": "one line", "field": ..., "kind": ...}``. An op never raises past
:func:`handle`, so one bad op costs only its own result. Operations live in ``generic`` (ping, run,
read, write, stat), ``runs`` (launch, discard, observe, stop), ``checkpoints``, ``reclaim`` (reclaim_gpus) and
``results`` (wrap_up).
"""

from __future__ import annotations

import json
import os
import sys

from . import deadline
from .checkpoints import op_checkpoints
from .files import AgentError
from .generic import op_ping, op_read, op_run, op_stat, op_write
from .protocol import PROTOCOL_VERSION, TYPE_CHECKING
from .reclaim import op_reclaim_gpus
from .results import op_wrap_up
from .runs import op_discard, op_launch, op_observe, op_stop

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .protocol import Failure, OpReply, ReplyEnvelope

MAX_REQUEST_BYTES = 64 * 1024 * 1024

#: Each op reads its fields from the request as it came (``request.need``) and returns its reply's body.
OPS: dict[str, Callable[[Mapping[str, object]], OpReply]] = {
    "ping": op_ping, "run": op_run, "read": op_read, "write": op_write, "stat": op_stat,
    "launch": op_launch, "discard": op_discard, "observe": op_observe, "stop": op_stop,
    "checkpoints": op_checkpoints, "reclaim_gpus": op_reclaim_gpus, "wrap_up": op_wrap_up}


def _failure(error: str, field: str | None, kind: str) -> Failure:
    return {"ok": False, "error": error, "field": field, "kind": kind}


def _one(op: object) -> OpReply | Failure:
    """One op's result; never raises."""
    name = op.get("op") if isinstance(op, dict) else None
    fn = OPS.get(name) if isinstance(name, str) else None
    if fn is None or not isinstance(op, dict):
        return _failure("unknown operation %r" % (name,), None, "error")
    try:
        result = fn(op)
        result["ok"] = True
        return result
    except AgentError as exc:
        return _failure(exc.message, exc.field, exc.kind)
    except Exception as exc:  # a bug or an unexpected OS error: one line, never a traceback
        return _failure("host agent error in %s: %s: %s" % (name, type(exc).__name__, exc), None, "internal")


def handle(request: object) -> ReplyEnvelope:
    """Answer one request; never raises. Its ``budget_s`` (what the caller's deadline leaves) bounds
    every step that could block (``deadline``)."""
    if not isinstance(request, dict) or request.get("v") != PROTOCOL_VERSION or not isinstance(
            request.get("ops"), list):
        return {"v": PROTOCOL_VERSION, "error": "bad request (protocol version %d expected)" % PROTOCOL_VERSION}
    budget = request.get("budget_s")
    deadline.start(float(budget) if isinstance(budget, (int, float)) and not isinstance(budget, bool) else None)
    try:
        return {"v": PROTOCOL_VERSION, "results": [_one(op) for op in request["ops"]]}
    finally:
        deadline.start(None)


#: A serving agent exits after this long without a request (the caller starts a new one when needed).
SERVE_IDLE_S = 300.0


def _encode(reply: ReplyEnvelope) -> bytes:
    return json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _answer(raw: bytes) -> ReplyEnvelope:
    try:
        return handle(json.loads(raw.decode("utf-8")))
    except ValueError as exc:
        return {"v": PROTOCOL_VERSION, "error": "request is not JSON: %s" % exc}


def serve(nonce: str) -> int:
    """Answer framed requests (``AJS <nonce> <length>``, then that many bytes of JSON; replies framed alike)
    until stdin closes or stays idle for ``SERVE_IDLE_S``: the caller keeps one such agent per host, so a
    call costs a round trip on the open connection, not a new process; a one-shot call closes stdin after
    its reply. Blank lines between frames are skipped (the caller's keep-alive newlines). Reads go through
    ``sys.stdin.buffer``, which the bootstrap and stage one read before, so nothing they buffered is lost."""
    import signal

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    head = ("AJS %s " % nonce).encode("ascii")

    def idle(signum: int, frame: object) -> None:
        os._exit(0)

    signal.signal(signal.SIGALRM, idle)
    while True:
        signal.alarm(int(SERVE_IDLE_S))
        line = inp.readline(256)
        signal.alarm(0)
        if not line:
            return 0
        if not line.strip():
            continue
        if not line.startswith(head) or not line.endswith(b"\n") or not line[len(head):-1].isdigit():
            return 2
        size = int(line[len(head):-1])
        if size > MAX_REQUEST_BYTES:
            return 2
        body = inp.read(size)
        if len(body) < size:
            return 0
        reply = _encode(_answer(body))
        out.write(head + str(len(reply)).encode("ascii") + b"\n" + reply)
        out.flush()


def _daemon(entry: str, argv: list[str]) -> int:
    import importlib

    return int(importlib.import_module("%s.%s" % (__package__, entry)).main(argv))


def main(argv: list[str]) -> int:
    """Entry point of the shipped program: ``monitor RUN_DIR`` or ``supervisor RUN_DIR`` (a run's daemons,
    ``daemon``); ``AJS-READY <nonce> AJS`` (the bootstrap's arguments: framed requests, see ``serve``; followed by
    a daemon's arguments when it was started through stage one); or one request on stdin and the reply on
    stdout."""
    from .daemon import ENTRIES

    if len(argv) > 1 and argv[1] in ENTRIES:
        return _daemon(argv[1], argv[2:])
    if len(argv) > 2 and argv[1] == "AJS-READY":
        if len(argv) > 4 and argv[4] in ENTRIES:  # a run's daemon started through stage one
            return _daemon(argv[4], argv[5:])
        return serve(argv[2])
    raw = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    reply: ReplyEnvelope
    if len(raw) > MAX_REQUEST_BYTES:
        reply = {"v": PROTOCOL_VERSION, "error": "request over %d bytes" % MAX_REQUEST_BYTES}
    else:
        reply = _answer(raw)
    sys.stdout.buffer.write(_encode(reply))
    sys.stdout.buffer.flush()
    return 0
