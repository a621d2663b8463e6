"""Bounded HTTP GET of JSON documents, standard library only.

Built for reading servers that may be down, slow, wrong or hostile: every request has one hard
deadline covering connect, TLS, send and the whole read (a server that drips one byte at a time
cannot stretch it), the body is capped in size, and every failure becomes a ``FetchError`` whose
message is a short reason a person can act on. ``run_parallel`` runs requests on daemon threads and
stops waiting at the deadline, so N slow servers cost about one timeout and a stuck DNS lookup can
never hold the caller.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from skill_server.core.text import shorten

MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
_STATUS_LINE = re.compile(rb"^HTTP/\d(?:\.\d)? (\d{3})(?: (.*))?$")
_T = TypeVar("_T")


class FetchError(Exception):
    """A request did not produce the expected document; ``str(exc)`` is the reason.

    ``kind`` says what to check next: ``"unreachable"`` (nothing answered: refused, unknown host, no
    route), ``"timeout"`` (no complete answer in time) or ``"answer"`` (something answered, wrongly).
    """

    def __init__(self, message: str, kind: str = "answer", status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status  # the HTTP status of a non-200 answer
        #: The server accepted the connection first: something listens there (a timeout then means busy or stuck,
        #: not gone).
        self.connected = False


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: dict[str, str]  # lower-cased names; repeated headers keep the last value
    body: bytes


def http_get(url: str, *, timeout: float, max_bytes: int = MAX_BODY_BYTES,
             deadline: float | None = None) -> HttpResponse:
    """GET ``url`` and return the complete response, or raise ``FetchError``.

    ``deadline`` (a ``time.monotonic()`` value) defaults to now + ``timeout``; nothing in here waits past it.
    """
    end = time.monotonic() + timeout if deadline is None else deadline
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"not an http(s) URL: {url!r}")
    host = parts.hostname
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise FetchError(f"invalid port in {url!r}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def remaining() -> float:
        left = end - time.monotonic()
        if left <= 0:
            raise FetchError(f"no complete answer within {timeout:g}s (server too slow or stalled)", "timeout")
        return left

    try:
        sock = socket.create_connection((host, port), timeout=remaining())
    except FetchError:
        raise
    except ConnectionRefusedError:
        raise FetchError(f"connection refused: nothing listens on {host}:{port}", "unreachable") from None
    except socket.gaierror:
        raise FetchError(f"cannot resolve host {host!r}", "unreachable") from None
    except TimeoutError:
        raise FetchError(f"could not connect to {host}:{port} within {timeout:g}s", "timeout") from None
    except OSError as exc:
        raise FetchError(f"cannot connect to {host}:{port}: {exc.strerror or exc}", "unreachable") from None
    try:
        if parts.scheme == "https":
            try:
                sock.settimeout(remaining())
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            except ssl.SSLError as exc:
                raise FetchError(f"TLS handshake with {host}:{port} failed: {exc.reason or exc}") from None
        host_header = parts.netloc.rsplit("@", 1)[-1]
        request = (
            f"GET {target} HTTP/1.1\r\nHost: {host_header}\r\nAccept: application/json\r\n"
            "User-Agent: agentjet-swarm-skill\r\nConnection: close\r\n\r\n"
        ).encode("ascii", errors="strict")
        try:
            sock.settimeout(remaining())
            sock.sendall(request)
        except TimeoutError:
            remaining()  # raises the deadline message
            raise FetchError("timed out sending the request", "timeout") from None
        except OSError as exc:
            raise FetchError(f"connection failed while sending: {exc.strerror or exc}") from None
        return _read_response(sock, remaining, max_bytes)
    except FetchError as exc:
        exc.connected = True
        raise
    finally:
        try:
            sock.close()
        except OSError:
            pass


def _read_response(sock: socket.socket, remaining: Callable[[], float], max_bytes: int) -> HttpResponse:
    """Receive until the answer is complete (its length, its last chunk, or the close), within the deadline."""
    buf = bytearray()
    head: _Head | None = None
    while head is None or not head.complete(buf):
        piece = _receive(sock, remaining)
        if not piece:
            break
        buf += piece
        if head is None:
            head = _head_of(buf, max_bytes)
        if head is not None and len(buf) - head.body_start > max_bytes + (64 * 1024 if head.chunked else 0):
            raise FetchError(f"answer larger than the {_mib(max_bytes)} limit")
    if head is None:
        if not buf:
            raise FetchError("the server closed the connection without answering")
        raise FetchError("not an HTTP answer (truncated or unknown protocol)")
    body = _body(head, bytes(buf[head.body_start:]), max_bytes)
    return HttpResponse(status=head.status, headers=head.headers, body=body)


@dataclass(frozen=True)
class _Head:
    """What the status line and headers say about the body that follows them."""

    status: int
    headers: dict[str, str]
    body_start: int  # where the body begins in the bytes received
    length: int | None  # Content-Length, when given (never with chunked encoding)
    chunked: bool

    def complete(self, buf: bytearray) -> bool:
        """Whether ``buf`` holds the whole body (an answer with neither runs to the close)."""
        if self.length is not None:
            return len(buf) - self.body_start >= self.length
        return self.chunked and _dechunk(bytes(buf[self.body_start:])) is not None


def _receive(sock: socket.socket, remaining: Callable[[], float]) -> bytes:
    """The next bytes, or b"" once the peer closed (a reset counts as a close: a short body is reported later)."""
    try:
        sock.settimeout(remaining())
        return sock.recv(65536)
    except TimeoutError:
        remaining()
        raise FetchError("timed out reading the answer", "timeout") from None
    except (ConnectionResetError, ConnectionAbortedError):
        return b""
    except OSError as exc:
        raise FetchError(f"connection failed while reading: {exc.strerror or exc}") from None


def _head_of(buf: bytearray, max_bytes: int) -> _Head | None:
    """The head once its end has arrived, else None; a head too long, or announcing too large a body, is refused."""
    cut = buf.find(b"\r\n\r\n")
    if cut < 0:
        if len(buf) > MAX_HEADER_BYTES:
            raise FetchError("not an HTTP answer (no end of headers in the first 64 KiB)")
        return None
    status, headers = _parse_head(bytes(buf[:cut]))
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    length = None
    if not chunked and "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise FetchError(f"invalid Content-Length {headers['content-length']!r}") from None
        if length > max_bytes:
            raise FetchError(f"answer of {length} bytes exceeds the {_mib(max_bytes)} limit")
    return _Head(status, headers, cut + 4, length, chunked)


def _body(head: _Head, raw: bytes, max_bytes: int) -> bytes:
    """The body from the bytes after the head, as its encoding and length say; a short one is refused."""
    if head.chunked:
        body = _dechunk(raw)
        if body is None:
            raise FetchError(f"truncated answer: chunked body ended after {len(raw)} bytes")
    elif head.length is not None:
        if len(raw) < head.length:
            raise FetchError(f"truncated answer: got {len(raw)} of {head.length} bytes")
        body = raw[:head.length]
    else:
        body = raw  # no length given: the body runs to the close
    if len(body) > max_bytes:
        raise FetchError(f"answer larger than the {_mib(max_bytes)} limit")
    return body


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.split(b"\r\n")
    match = _STATUS_LINE.match(lines[0].strip())
    if not match:
        raise FetchError("not an HTTP answer (unexpected status line)")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return int(match.group(1)), headers


def _dechunk(raw: bytes) -> bytes | None:
    """Decode a chunked body; None while it is incomplete (or malformed, which reads as incomplete)."""
    out = bytearray()
    pos = 0
    while True:
        eol = raw.find(b"\r\n", pos)
        if eol < 0:
            return None
        size_text = raw[pos:eol].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            return None
        if size == 0:
            return bytes(out)  # trailers, if any, are ignored
        start = eol + 2
        if len(raw) < start + size + 2:
            return None
        out += raw[start:start + size]
        pos = start + size + 2


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"


def get_json(url: str, *, timeout: float, max_bytes: int = MAX_BODY_BYTES, deadline: float | None = None) -> Any:
    """GET a JSON document. Non-200 answers, HTML pages and invalid JSON raise ``FetchError`` with a reason."""
    resp = http_get(url, timeout=timeout, max_bytes=max_bytes, deadline=deadline)
    content_type = resp.headers.get("content-type", "").lower()
    looks_html = "html" in content_type or resp.body.lstrip()[:1] == b"<"
    if resp.status != 200:
        hint = ""
        if resp.status == 404:
            hint = " (no such route: not an AgentJet swarm server, or a version without it)"
        elif resp.status >= 500:
            hint = " (the server failed while answering)"
        elif resp.status in (401, 403):
            hint = " (access denied: a proxy or another service in front?)"
        detail = "" if looks_html else _snippet(resp.body)
        raise FetchError(f"HTTP {resp.status}{hint}" + (f": {detail}" if detail else ""), status=resp.status)
    if looks_html:
        raise FetchError("answered with an HTML page, not JSON (a web UI or proxy, not an AgentJet swarm server)")
    try:
        return json.loads(resp.body.decode("utf-8"), parse_int=_bounded_int, parse_constant=_no_constant)
    except RecursionError:
        raise FetchError(f"answer is JSON nested too deeply ({len(resp.body)} bytes): not an AgentJet swarm "
                         "server") from None
    except (UnicodeDecodeError, ValueError):
        raise FetchError(f"answer is not valid JSON ({len(resp.body)} bytes): truncated, or not an AgentJet "
                         "swarm server") from None


class OversizedNumber(str):
    """A JSON integer too long to be any count a server reports; kept as its text."""

    def __repr__(self) -> str:
        return f"<a {len(self)}-digit number>"


#: Longest integer text parsed as an int (int64 needs 19 digits); longer ones become ``OversizedNumber``.
MAX_INT_DIGITS = 20


def _bounded_int(text: str) -> int | OversizedNumber:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return OversizedNumber(text)
    return int(text)


def _no_constant(name: str) -> float:
    """NaN and Infinity are not JSON; a server sending them is read as sending nothing usable."""
    return float("nan")


def _snippet(body: bytes, limit: int = 120) -> str:
    return shorten(" ".join(body.decode("utf-8", errors="replace").split()), limit)


def run_parallel(calls: Sequence[Callable[[], _T]], *, deadline: float,
                 late: Callable[[], BaseException]) -> list[_T | BaseException]:
    """Run ``calls`` at once on daemon threads; return each result or exception, in order.

    A call still running at ``deadline`` is abandoned (its thread is a daemon and ends on its own)
    and reported as the exception ``late()`` builds.
    """
    results: list[Any] = [None] * len(calls)
    finished = [threading.Event() for _ in calls]

    def runner(index: int, call: Callable[[], _T]) -> None:
        try:
            results[index] = call()
        except BaseException as exc:  # reported to the caller, not raised on a thread nobody joins
            results[index] = exc
        finally:
            finished[index].set()

    for index, call in enumerate(calls):
        threading.Thread(target=runner, args=(index, call), name=f"http-json-{index}", daemon=True).start()
    out: list[Any] = []
    for index, event in enumerate(finished):
        if event.wait(max(0.0, deadline - time.monotonic())):
            out.append(results[index])
        else:
            out.append(late())
    return out
