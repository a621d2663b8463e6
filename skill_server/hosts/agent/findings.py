"""What a run's log says, folded chunk by chunk: error hits, step lines, the first step, training progress.

One implementation for the run monitor on every host and for the server's own scan of runs started before
the monitor (``experiments.logs.scan_text``, ``experiments.progress.fold``). ``fold`` takes one chunk of
newly appended text and updates a state object in place; the state is any object with the attributes
of ``FoldState`` (the server's ``ScanState``, the monitor's per-role ``RoleFindings``), so both sides keep
their own storage and share the rules:

* error signatures count lines, not matches (``scanner.Table``); a hit keeps its first and last line;
* a step line is ``[(Actor pid=N)] step:N - key:value - ...`` (verl's console format); the first
  training step is the first step line with N >= 1 (``step:0`` is validation before training), unless
  the run gave its own ``first_step_pattern``;
* the global step is ``training/global_step`` of the newest step line (else its N);
* progress (``fold_progress``): a step counter that goes back is a restart, ``timing_s/step`` values are
  step times, the newest ``Training Progress`` tqdm bar gives the total and the rate.

``now`` is whatever clock the caller keeps (the server's wall clock, the monitor's run clock). Stdlib only,
Python 3.8.
"""

from __future__ import annotations

import math
import re
from collections import deque

from .protocol import TYPE_CHECKING
from .scanner import normalise

if TYPE_CHECKING:
    from typing import Any, Protocol

    from .scanner import Table

    class ProgressLike(Protocol):
        last_step_by_role: dict[str, int]
        step_times: list[float]
        tqdm_total: int | None
        tqdm_step: int | None
        tqdm_rate_s: float | None
        batches: list[list[float]]
        restarts: list[dict[str, Any]]

    class FoldState(Protocol):
        first_step_seen: bool
        first_step_at: float | None
        first_step: int | None
        global_step: int | None
        metrics_step: int | None
        last_metrics: dict[str, Any]
        errors: dict[str, dict[str, Any]]

        @property
        def progress(self) -> ProgressLike: ...

#: A Ray actor prefix such as "(TaskRunner pid=4821) " or "(TaskRunner pid=4821, ip=10.0.0.2) ".
RAY_PREFIX = r"(?:\([^()\n]*\)\s*)?"
#: The start of a step line (its body is the rest of the line, trailing whitespace left out).
STEP_HEAD_RE = re.compile(RAY_PREFIX + r"step:(\d+) - ")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")
#: Largest integer a JSON client holds exactly.
MAX_EXACT_INT = 2**53 - 1
#: Most metrics kept from one step line (verl prints about 60-100).
MAX_METRICS_PER_LINE = 500

#: The trainer's tqdm bar: ``Training Progress:  12%|█▏   | 3/25 [00:41<05:01, 13.70s/it]`` (the bracket with
#: the times and the rate is left out by a custom ``bar_format``; the count alone still gives the total).
#: Every repetition is bounded, so a hostile line costs linear time.
TQDM_RE = re.compile(r"Training Progress:[^\n\r|]{0,40}\|[^\n\r|]{0,200}\|\s{0,5}(\d{1,12})/(\d{1,12})\s{0,5}"
                     r"(?:\[[^\]\n\r,]{0,60}(?:,\s{0,5}(\d{1,12}(?:\.\d{1,12})?)(s/it|it/s))?[^\]\n\r]{0,200}\])?")
STEP_TIME_KEY = "timing_s/step"
#: Largest step number or count believed (verl counts steps in int64; anything larger is a parse accident).
MAX_STEPS = 10**12
KEEP_STEP_TIMES = 20
KEEP_BATCHES = 30
KEEP_RESTARTS = 20


class StepLine:
    """One ``step:N - key:value - ...`` line: the step number, its numeric metrics and the process role."""

    __slots__ = ("step", "metrics", "role")

    def __init__(self, step: int, metrics: dict[str, float | int], role: str) -> None:
        self.step = step
        self.metrics = metrics
        self.role = role

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StepLine) and (self.step, self.metrics, self.role) == (
            other.step, other.metrics, other.role)

    def __hash__(self) -> int:
        return hash((self.step, self.role))

    def __repr__(self) -> str:
        return "StepLine(%r, %r, %r)" % (self.step, self.metrics, self.role)


def parse_number(text: str) -> float | int | None:
    """A metric value as printed by verl (``0.3125``, ``1e-06``, ``1``, ``nan``); None if not numeric.

    Integers beyond 2**53 become floats (JSON clients cannot hold them exactly); beyond float range,
    or longer than Python converts, they are not numbers at all. (Plain string tests before any regex:
    this runs for every value of every step line.)"""
    value = text.strip()
    if value.startswith("np."):
        match = _NUMPY_SCALAR.match(value)
        if match:
            value = match.group(1).strip()
    if len(value) > 400:
        return None
    digits = value[1:] if value[:1] in ("-", "+") else value
    if digits.isdecimal():  # what ``[-+]?\d+`` accepts
        number = int(value)
        if abs(number) <= MAX_EXACT_INT:
            return number
        try:
            return float(number)
        except OverflowError:
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


def step_lines(text: str, role: str) -> list[StepLine]:
    """Every ``step:N - key:value`` line of ``text``, in order (steps beyond 15 digits are not steps).

    Lines are found by ``str.find`` of "step:" and only then matched at their start: a regex anchored at
    every line start would cost more than the rest of the scan."""
    out = []
    pos = text.find("step:")
    while pos >= 0:
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        if end < 0:
            end = len(text)
        match = STEP_HEAD_RE.match(text, start, end)
        if match is not None and len(match.group(1)) <= 15:
            metrics = parse_metric_pairs(text[match.end():end].rstrip())
            if len(metrics) > MAX_METRICS_PER_LINE:
                metrics = dict(list(metrics.items())[:MAX_METRICS_PER_LINE])
            out.append(StepLine(int(match.group(1)), metrics, role))
        pos = text.find("step:", end)
    return out


def _first_and_last_step(text: str) -> str:
    """The lines of ``text`` holding its first and its last "step:" (what a sampled chunk parses)."""
    first, last = text.find("step:"), text.rfind("step:")
    lines = []
    for pos in sorted({first, last}):
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        lines.append(text[start: end if end >= 0 else len(text)])
    return "\n".join(lines)


def finite_or_none(value: float | int) -> float | int | None:
    """A metric as JSON carries it: NaN and inf become None (``skill_server.core.jsonsafe.json_number``'s rule)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def fold(state: FoldState, text: str, table: Table, first_step_re: re.Pattern[str] | None, *, role: str,
         now: float, sample_steps: bool = False) -> list[StepLine]:
    """Fold one chunk of newly appended log text (ANSI codes already removed) into ``state``; returns its step
    lines (for the metric history). ``first_step_re`` (a run's ``first_step_pattern``) replaces the
    first-step rule when given. ``sample_steps`` (a log growing faster than its lines can be parsed): only
    the chunk's first and last step lines are parsed; errors are still looked for on every line."""
    if not text:
        return []
    text = normalise(text)
    for name, (count, first, last) in table.scan(text).items():
        hit = state.errors.get(name)
        if hit is None:
            hit = state.errors[name] = {"count": 0, "line": "", "role": role, "first_line": first}
        hit["count"] = int(hit.get("count", 0)) + count
        hit["line"] = last
        hit["role"] = role
    lines = (step_lines(_first_and_last_step(text) if sample_steps else text, role)) if "step:" in text else []
    if lines:
        last_line = lines[-1]
        state.metrics_step = last_line.step
        state.last_metrics = {k: finite_or_none(v) for k, v in last_line.metrics.items()}
        global_step = last_line.metrics.get("training/global_step", last_line.step)
        if isinstance(global_step, float) and global_step.is_integer():
            global_step = int(global_step)
        if isinstance(global_step, int) and 0 <= global_step <= MAX_EXACT_INT:
            state.global_step = global_step
    fold_progress(state.progress, lines, text, now)
    if not state.first_step_seen:
        if first_step_re is not None:
            if first_step_re.search(text):
                state.first_step_seen, state.first_step_at = True, now
        else:
            first_line = next((line for line in lines if line.step >= 1), None)
            if first_line is not None:
                state.first_step_seen, state.first_step_at, state.first_step = True, now, first_line.step
    return lines


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def fold_progress(state: ProgressLike, lines: list[StepLine], text: str, now: float) -> None:
    """Fold the step lines and tqdm bars of one chunk of newly appended text into ``state``."""
    if lines:
        top: int | None = None
        for line in lines:
            last = state.last_step_by_role.get(line.role)
            if last is not None and line.step < last:
                state.restarts.append({"role": line.role, "from_step": last, "to_step": line.step, "seen_at": now})
                state.restarts = state.restarts[-KEEP_RESTARTS:]
                state.batches, state.step_times, top = [], [], None
            state.last_step_by_role[line.role] = line.step
            top = line.step if top is None else max(top, line.step)
            step_time = line.metrics.get(STEP_TIME_KEY)
            if step_time is not None and _positive(step_time):
                state.step_times.append(float(step_time))
        state.step_times = state.step_times[-KEEP_STEP_TIMES:]
        if top is not None:
            state.batches.append([now, top])
            state.batches = state.batches[-KEEP_BATCHES:]
    if "Training Progress" in text:
        bars = deque(TQDM_RE.finditer(text), maxlen=1)  # the bar's newest redraw is the one that counts
        match = bars[0] if bars else None
        if match is not None:
            done, total = int(match.group(1)), int(match.group(2))
            if 0 < total <= MAX_STEPS and done <= total:
                state.tqdm_total, state.tqdm_step = total, done
            if match.group(3):
                rate = float(match.group(3))
                if rate > 0 and math.isfinite(rate):
                    state.tqdm_rate_s = rate if match.group(4) == "s/it" else 1.0 / rate
