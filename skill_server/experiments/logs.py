"""Reading experiment logs incrementally: only appended bytes, bounded output, metric-line parsing.

Two independent positions are kept per log file:

* the *cursor* of ``experiment_status`` (which lines the caller has already seen), and
* the *scan offset* (how far error signatures, metric lines and the first-step pattern were scanned).

Both only move forward over appended bytes, so the cost of a status call depends on how much was
written since the previous call, never on the size of the log. When a backlog exceeds the budget, the
most recent bytes win and the skipped byte count is reported.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from skill_server.experiments.signatures import RAY_PREFIX, SIGNATURES

MAX_LINES = 200
MAX_BYTES = 16 * 1024
MAX_LINE_CHARS = 2000
#: Most bytes one status call scans per log file (newest bytes win when more were appended).
SCAN_BUDGET = 1024 * 1024
#: Longest kept error line.
MAX_ERROR_LINE = 400

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]")
METRIC_LINE_RE = re.compile(r"^" + RAY_PREFIX + r"step:(\d+) - (.*?)\s*$", re.MULTILINE)
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")
_INT = re.compile(r"^[-+]?\d+$")
DEFAULT_FIRST_STEP_PATTERN = r"\bkl_loss:\s*[-+]?(?:\d|\.\d|nan|inf)"


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def parse_number(text: str) -> float | int | None:
    """A metric value as printed by verl (``0.3125``, ``1e-06``, ``1``, ``nan``); None if not numeric."""
    value = text.strip()
    match = _NUMPY_SCALAR.match(value)
    if match:
        value = match.group(1).strip()
    if _INT.match(value):
        try:
            return int(value)
        except ValueError:  # pragma: no cover - regex guarantees digits
            return None
    try:
        return float(value)
    except ValueError:
        return None


def parse_metric_pairs(body: str) -> dict[str, float | int]:
    """``key:value - key:value`` (verl's console format) into a dict of numeric values."""
    metrics: dict[str, float | int] = {}
    for part in body.split(" - "):
        key, sep, raw = part.rpartition(":")
        key = key.strip()
        if not sep or not key:
            continue
        number = parse_number(raw)
        if number is not None:
            metrics[key] = number
    return metrics


def parse_metric_line(line: str) -> tuple[int, dict[str, float | int]] | None:
    """``(TaskRunner pid=1) step:3 - critic/real_reward:0.25 - ...`` into (3, {...}); None otherwise."""
    match = METRIC_LINE_RE.match(strip_ansi(line).rstrip("\r\n"))
    if not match:
        return None
    return int(match.group(1)), parse_metric_pairs(match.group(2))


def json_safe_number(value: float | int) -> float | int | None:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


# --------------------------------------------------------------------------------------------------
# Byte-range reading


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _read_range(path: str, start: int, end: int) -> bytes:
    if end <= start:
        return b""
    try:
        with open(path, "rb") as handle:
            handle.seek(start)
            return handle.read(end - start)
    except OSError:
        return b""


@dataclass
class Chunk:
    """Appended bytes of one log, decoded; ``end`` is where the next read starts."""

    text: str
    end: int
    skipped: int
    reset: bool = False  # the file shrank (rotated or truncated): reading restarted at 0


def read_appended(path: str, offset: int, budget: int, *, final: bool) -> Chunk:
    """Bytes appended after ``offset``, at most ``budget`` of the newest ones, cut at a line end.

    ``final`` (the process has exited) also hands out an unterminated last line.
    """
    size = _size(path)
    if size is None:
        return Chunk("", offset, 0)
    reset = False
    if offset > size:
        offset, reset = 0, True
    start = max(offset, size - budget)
    data = _read_range(path, start, size)
    skipped = start - offset
    if start > offset and data:
        # We jumped into the middle of the log: drop the partial first line.
        cut = data.find(b"\n")
        if cut >= 0:
            skipped += cut + 1
            data = data[cut + 1:]
            start += cut + 1
    end = start + len(data)
    if not final:
        last_nl = data.rfind(b"\n")
        if last_nl >= 0:
            data = data[: last_nl + 1]
            end = start + len(data)
        elif len(data) < budget:  # an unfinished line: wait for its end
            data, end = b"", start
    return Chunk(strip_ansi(data.decode("utf-8", errors="replace")), end, skipped, reset)


def split_lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + " [...]"
        out.append(line)
    return out


# --------------------------------------------------------------------------------------------------
# Incremental scanning


@dataclass
class ScanState:
    """What the scanner has learnt so far; stored as JSON in the registry."""

    offsets: list[int]
    unscanned_bytes: int = 0
    first_step_seen: bool = False
    first_step_at: float | None = None
    global_step: int | None = None
    metrics_step: int | None = None
    last_metrics: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "offsets": self.offsets,
            "unscanned_bytes": self.unscanned_bytes,
            "first_step_seen": self.first_step_seen,
            "first_step_at": self.first_step_at,
            "global_step": self.global_step,
            "metrics_step": self.metrics_step,
            "last_metrics": self.last_metrics,
            "errors": self.errors,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], n_logs: int) -> ScanState:
        offsets = [int(x) for x in data.get("offsets", [])]
        offsets = (offsets + [0] * n_logs)[:n_logs]
        return cls(
            offsets=offsets,
            unscanned_bytes=int(data.get("unscanned_bytes", 0)),
            first_step_seen=bool(data.get("first_step_seen", False)),
            first_step_at=data.get("first_step_at"),
            global_step=data.get("global_step"),
            metrics_step=data.get("metrics_step"),
            last_metrics=dict(data.get("last_metrics", {})),
            errors={k: dict(v) for k, v in data.get("errors", {}).items()},
        )

    def error_counts(self) -> dict[str, int]:
        return {name: int(hit.get("count", 0)) for name, hit in self.errors.items()}


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start: end if end >= 0 else len(text)].strip()
    return line if len(line) <= MAX_ERROR_LINE else line[: MAX_ERROR_LINE - 6] + " [...]"


def scan_text(text: str, state: ScanState, first_step_re: re.Pattern[str], *, role: str, now: float) -> None:
    """Fold one chunk of newly appended log text into ``state``."""
    if not text:
        return
    for sig in SIGNATURES:
        if sig.needles and not any(needle in text for needle in sig.needles):
            continue
        count, last = 0, None
        for match in sig.regex.finditer(text):
            count += 1
            last = match.start()
        if count:
            hit = state.errors.setdefault(sig.name, {"count": 0, "line": "", "role": role})
            hit["count"] = int(hit.get("count", 0)) + count
            hit["line"] = _line_at(text, last)  # type: ignore[arg-type]
            hit["role"] = role
    if "step:" in text:
        last_metric = None
        for last_metric in METRIC_LINE_RE.finditer(text):
            pass
        if last_metric is not None:
            step = int(last_metric.group(1))
            metrics = parse_metric_pairs(last_metric.group(2))
            state.metrics_step = step
            state.last_metrics = {k: json_safe_number(v) for k, v in metrics.items()}
            global_step = metrics.get("training/global_step", step)
            if isinstance(global_step, (int, float)) and not (isinstance(global_step, float) and math.isnan(global_step)):
                state.global_step = int(global_step)
    if not state.first_step_seen and first_step_re.search(text):
        state.first_step_seen = True
        state.first_step_at = now
