"""Metric summaries for results and comparisons: parsing AgentJet's metric markdown files, and per-metric
first/best/last, trend, plateau and direction.

AgentJet appends ``str(metrics)`` (a Python dict repr) to ``val_print_to_markdown_file_path`` once per
validation and to ``train_print_to_markdown_file_path`` once per step. Each line is parsed with
``ast.literal_eval`` after turning ``nan``/``inf`` and ``np.float64(x)`` into literals, never ``eval``.
Which direction is better is assumed from the name: lower for loss-, error-, time-like metrics, higher
otherwise (callers say so when they use it).
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from pydantic import Field

from skill_server.core.jsonsafe import json_number
from skill_server.core.models import ToolOutput
from skill_server.hosts.agent import results as host_results

MAX_DICT_LINE = 1024 * 1024
PLATEAU_KEYS = ("mean_reward", "task_pass_rate")
STEP_KEYS = ("training/global_step", "global_step", "step")  # how a metrics line may record its step
LOWER_IS_BETTER_TOKENS = host_results.LOWER_IS_BETTER_TOKENS
_NP_SCALAR = re.compile(r"\bnp\.\w+\(\s*([^()]*?)\s*\)")
_BARE_NONFINITE = re.compile(r"(?<![\w'\".])(-?)(nan|inf|NaN|Infinity)(?![\w'\"])")


class MetricSummary(ToolOutput):
    key: str
    n: int
    first: float | None
    best: float | None
    last: float | None
    trend: str
    plateau: bool | None = None
    best_step: int | None = Field(default=None, description="The global step at which best was reached, when the "
                                  "source records steps (the log's step lines, or a metrics line carrying "
                                  "training/global_step); null when it does not (AgentJet's validation lines carry "
                                  "no step: see best_point).")
    best_point: int | None = Field(default=None, description="Which of the n points holds best (1 = the first); null "
                                   "when no point is finite.")


def _to_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("nan", "-nan", "inf", "-inf", "infinity", "-infinity"):
        return float(value.strip().lower().replace("infinity", "inf"))
    return None


def parse_dict_line(line: str) -> dict[str, float] | None:
    """The numeric entries of a dict literal found on ``line``; None when there is none."""
    start, end = line.find("{"), line.rfind("}")
    if start < 0 or end <= start or end - start > MAX_DICT_LINE:
        return None
    text = _NP_SCALAR.sub(r"\1", line[start: end + 1])
    text = _BARE_NONFINITE.sub(lambda m: f'"{m.group(1)}{m.group(2)}"', text)
    try:
        data = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(data, dict):
        return None
    out = {}
    for key, value in data.items():
        number = _to_number(value)
        if number is not None:
            out[str(key)] = number
    return out


def metric_rows(text: str, truncated: bool) -> list[dict[str, float]]:
    """The dict lines of a metrics file (``truncated``: the text starts mid-file, drop its first line)."""
    if truncated:
        text = text.split("\n", 1)[1] if "\n" in text else ""
    rows = []
    for line in text.splitlines():
        if "{" in line:
            parsed = parse_dict_line(line)
            if parsed:
                rows.append(parsed)
    return rows


def lower_is_better(key: str) -> bool:
    """Whether a smaller value of this metric is better, assumed from its name (``hosts.agent.results``)."""
    return host_results.lower_is_better(key)


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if not (math.isnan(v) or math.isinf(v))]


def plateaued(values: list[float]) -> bool | None:
    """True when the last third brought no real improvement over the best before it (needs 4+ points)."""
    values = _finite(values)
    if len(values) < 4:
        return None
    recent_n = max(2, len(values) // 3)
    earlier, recent = values[:-recent_n], values[-recent_n:]
    best_before = max(earlier)
    tolerance = max(0.01 * abs(best_before), 1e-3)
    return max(recent) <= best_before + tolerance


def _trend(values: list[float]) -> str:
    values = _finite(values)
    if len(values) < 2:
        return "n/a"
    k = max(1, len(values) // 3)
    head, tail = sum(values[:k]) / k, sum(values[-k:]) / k
    scale = max(abs(head), abs(tail), 1e-9)
    if abs(tail - head) / scale < 0.02:
        return "flat"
    return "up" if tail > head else "down"


def row_step(row: dict[str, float]) -> int | None:
    """The global step a metrics line records (``training/global_step`` and its kin), if any."""
    for key in STEP_KEYS:
        value = row.get(key)
        if value is not None and math.isfinite(value) and float(value).is_integer() and value >= 0:
            return int(value)
    return None


def summarise(rows: list[dict[str, float]]) -> list[MetricSummary]:
    """One summary per key of the dict lines of a metrics file, in first-seen key order."""
    series: dict[str, list[float]] = {}
    steps: dict[str, list[int | None]] = {}
    for row in rows:
        step = row_step(row)
        for key, value in row.items():
            series.setdefault(key, []).append(value)
            steps.setdefault(key, []).append(step)
    return summarise_series(series, steps)


def summarise_series(series: dict[str, list[float]],
                     steps: dict[str, list[int | None]] | None = None) -> list[MetricSummary]:
    """One summary per named series of values in step order (NaN/inf count as points, never as best);
    ``steps``: the global step of each point, where known."""
    out = []
    for key, values in series.items():
        if not values:
            continue
        finite = [(i, v) for i, v in enumerate(values) if not (math.isnan(v) or math.isinf(v))]
        best_i, best = (min if lower_is_better(key) else max)(finite, key=lambda p: p[1]) if finite else (None, None)
        at = (steps or {}).get(key) or []
        best_step = at[best_i] if best_i is not None and best_i < len(at) else None
        plateau = plateaued(values) if any(k in key for k in PLATEAU_KEYS) else None
        out.append(MetricSummary(key=key, n=len(values), first=json_number(values[0]), best=best,
                                 last=json_number(values[-1]), trend=_trend(values), plateau=plateau,
                                 best_step=best_step, best_point=None if best_i is None else best_i + 1))
    return out
