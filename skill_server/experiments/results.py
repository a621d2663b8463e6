"""collect_results: summarise the validation/training markdown files and the log into results.md, then finish.flag.

AgentJet appends ``str(metrics)`` (a Python dict repr) to ``val_print_to_markdown_file_path`` once per
validation and to ``train_print_to_markdown_file_path`` once per step. Each line is parsed with
``ast.literal_eval`` after turning ``nan``/``inf`` and ``np.float64(x)`` into literals, never ``eval``.
Both output files are written atomically; ``finish.flag`` (empty) only once the run has ended.
"""

from __future__ import annotations

import ast
import math
import os
import re
import shlex
from pathlib import Path
from typing import Any

from pydantic import Field, StrictBool, StrictStr

from skill_server.errors import ToolInputError
from skill_server.experiments import api, logs
from skill_server.experiments.signatures import SIGNATURES
from skill_server.experiments.store import open_registry
from skill_server.fsutil import write_text_atomic
from skill_server.models import ToolInput, ToolOutput
from skill_server.safe_yaml import load_yaml_file

MAX_MARKDOWN_BYTES = 64 * 1024 * 1024
MAX_DICT_LINE = 1024 * 1024
PLATEAU_KEYS = ("mean_reward", "task_pass_rate")
_LOWER_IS_BETTER = ("loss", "error", "timing", "time_per", "madness", "std", "clip_ratio", "grad_norm")
_NP_SCALAR = re.compile(r"\bnp\.\w+\(\s*([^()]*?)\s*\)")
_BARE_NONFINITE = re.compile(r"(?<![\w'\".])(-?)(nan|inf|NaN|Infinity)(?![\w'\"])")
_CONF_ARG = re.compile(r"--conf(?:=|\s+)(\S+)")


class CollectInput(ToolInput):
    id: StrictStr | None = Field(default=None, description="Experiment id or session name.")
    result_dir: StrictStr | None = Field(default=None, description="Absolute; default: the experiment's result dir.")
    val_markdown: StrictStr | None = Field(default=None, description="Validation metrics file; default: "
                                           "ajet.trainer_common.val_print_to_markdown_file_path of the run's YAML.")
    train_markdown: StrictStr | None = Field(default=None, description="Training metrics file; default: "
                                             "ajet.trainer_common.train_print_to_markdown_file_path.")
    yaml_path: StrictStr | None = Field(default=None, description="Training YAML to read those two paths from.")
    write_finish_flag: StrictBool | None = Field(default=None, description="Default true; only once the run ended.")


class MetricSummary(ToolOutput):
    key: str
    n: int
    first: float | None
    best: float | None
    last: float | None
    trend: str
    plateau: bool | None = None


class CollectOutput(ToolOutput):
    results_path: str
    finish_flag_path: str | None
    state: str | None
    exit_code: int | None
    val_markdown: str | None
    train_markdown: str | None
    val_metrics: list[MetricSummary]
    train_metrics: list[MetricSummary]
    plateau: dict[str, bool]
    errors: list[api.ErrorHit]
    log_paths: list[str]
    notes: list[str]


# --------------------------------------------------------------------------------------------------
# parsing


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


def read_metric_rows(path: Path) -> list[dict[str, float]]:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size > MAX_MARKDOWN_BYTES:
            handle.seek(size - MAX_MARKDOWN_BYTES)
            handle.readline()  # drop the partial line
        raw = handle.read()
    rows = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if "{" in line:
            parsed = parse_dict_line(line)
            if parsed:
                rows.append(parsed)
    return rows


def _lower_is_better(key: str) -> bool:
    return any(token in key.lower() for token in _LOWER_IS_BETTER)


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


def summarise(rows: list[dict[str, float]]) -> list[MetricSummary]:
    series: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            series.setdefault(key, []).append(value)
    out = []
    for key, values in series.items():
        finite = _finite(values)
        best = (min(finite) if _lower_is_better(key) else max(finite)) if finite else None
        plateau = plateaued(values) if any(k in key for k in PLATEAU_KEYS) else None
        out.append(MetricSummary(key=key, n=len(values), first=logs.json_safe_number(values[0]), best=best,
                                 last=logs.json_safe_number(values[-1]), trend=_trend(values), plateau=plateau))
    return out


# --------------------------------------------------------------------------------------------------
# locating the files


def _yaml_candidates(spec: dict[str, Any]) -> list[str]:
    found = []
    if spec.get("yaml_path"):
        found.append(spec["yaml_path"])
    for proc in spec.get("processes", []):
        for match in _CONF_ARG.finditer(proc.get("command", "")):
            try:
                token = shlex.split(match.group(1))[0]
            except (ValueError, IndexError):
                continue
            found.append(token if os.path.isabs(token) else os.path.join(proc.get("workdir", ""), token))
    return found


def _markdown_paths_from_yaml(path: str, base: str) -> tuple[str | None, str | None]:
    data = load_yaml_file(path, field="yaml_path")
    common = ((data.get("ajet") or {}).get("trainer_common") or {}) if isinstance(data.get("ajet"), dict) else {}
    found = []
    for key in ("val_print_to_markdown_file_path", "train_print_to_markdown_file_path"):
        value = common.get(key) if isinstance(common, dict) else None
        if isinstance(value, str) and value.strip():
            found.append(value if os.path.isabs(value) else os.path.normpath(os.path.join(base, value)))
        else:
            found.append(None)
    return found[0], found[1]


def _abs(value: str, field: str) -> str:
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise ToolInputError(f"give an absolute path (got {value!r})", field=field)
    return str(path)


# --------------------------------------------------------------------------------------------------
# the tool


def collect_results(inp: CollectInput) -> CollectOutput:
    notes: list[str] = []
    state = exit_code = None
    errors: list[api.ErrorHit] = []
    log_paths: list[str] = []
    status: dict[str, Any] | None = None
    spec: dict[str, Any] = {}
    if inp.id is None and inp.result_dir is None:
        raise ToolInputError("give id (an experiment) or result_dir", field="id")
    if inp.id is not None:
        with open_registry() as reg:
            row = api._find(reg, inp.id)
            view = api.observe(reg, [row])[0]
            status = api._status_model(view, [], [0] * len(view.procs), 0, 0.0)
        spec = row.spec
        state, exit_code = status["state"], status["exit_code"]
        errors = status["errors"]
        log_paths = [p.log_path for p in status["processes"]]
    result_dir = _abs(inp.result_dir, "result_dir") if inp.result_dir else spec.get("result_dir")
    assert result_dir is not None
    workdir = spec.get("workdir") or result_dir

    val_md = _abs(inp.val_markdown, "val_markdown") if inp.val_markdown else None
    train_md = _abs(inp.train_markdown, "train_markdown") if inp.train_markdown else None
    yamls = [_abs(inp.yaml_path, "yaml_path")] if inp.yaml_path else _yaml_candidates(spec)
    for candidate in yamls:
        if val_md and train_md:
            break
        if not os.path.isfile(candidate):
            if inp.yaml_path:
                raise ToolInputError(f"file not found: {candidate}", field="yaml_path")
            continue
        try:
            v, t = _markdown_paths_from_yaml(candidate, workdir)
        except ToolInputError as exc:
            notes.append(f"could not read {candidate}: {exc.message}")
            continue
        val_md, train_md = val_md or v, train_md or t

    val_rows: list[dict[str, float]] = []
    train_rows: list[dict[str, float]] = []
    for label, path, sink in (("validation", val_md, val_rows), ("training", train_md, train_rows)):
        if path is None:
            arg = "val_markdown" if label == "validation" else "train_markdown"
            notes.append(f"no {label} markdown file known (pass {arg}, or set the YAML's "
                         f"{arg.split('_')[0]}_print_to_markdown_file_path)")
            continue
        try:
            sink.extend(read_metric_rows(Path(path)))
        except OSError as exc:
            notes.append(f"cannot read the {label} file {path}: {exc.strerror or exc}")
            continue
        if not sink:
            notes.append(f"the {label} file {path} has no metric lines yet")

    val_metrics, train_metrics = summarise(val_rows), summarise(train_rows)
    plateau = {m.key: bool(m.plateau) for m in val_metrics + train_metrics if m.plateau is not None}
    running = state == "running"
    text = _render(spec, status, result_dir, val_md, train_md, val_metrics, train_metrics, plateau, errors,
                   log_paths, notes)
    results_path = write_text_atomic(Path(result_dir) / "results.md", text, overwrite=True, field="result_dir")
    flag_path = None
    if inp.write_finish_flag is False:
        notes.append("finish.flag not written (write_finish_flag=false)")
    elif running:
        notes.append("the experiment is still running: results.md is interim and finish.flag was not written")
    else:
        flag_path = str(write_text_atomic(Path(result_dir) / "finish.flag", "", overwrite=True, field="result_dir"))
    return CollectOutput(
        results_path=str(results_path), finish_flag_path=flag_path, state=state, exit_code=exit_code,
        val_markdown=val_md, train_markdown=train_md, val_metrics=val_metrics, train_metrics=train_metrics,
        plateau=plateau, errors=errors, log_paths=log_paths, notes=notes,
    )


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def _table(metrics: list[MetricSummary]) -> list[str]:
    if not metrics:
        return ["(none)", ""]
    out = ["| metric | n | first | best | last | trend | plateau |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for m in metrics:
        plateau = "-" if m.plateau is None else ("yes" if m.plateau else "no")
        out.append(f"| {m.key} | {m.n} | {_fmt(m.first)} | {_fmt(m.best)} | {_fmt(m.last)} | {m.trend} | {plateau} |")
    return out + [""]


def _render(spec: dict[str, Any], status: dict[str, Any] | None, result_dir: str, val_md: str | None,
            train_md: str | None, val_metrics: list[MetricSummary], train_metrics: list[MetricSummary],
            plateau: dict[str, bool], errors: list[api.ErrorHit], log_paths: list[str], notes: list[str]) -> str:
    out = ["# Experiment results", ""]
    if status is not None:
        out += [
            f"- experiment: `{status['id']}` (tmux session `{status['session']}`)",
            f"- final state: **{status['state']}**, exit code {status['exit_code']}",
            f"- started: {status['started_at']}, elapsed {status['elapsed_s']:.0f} s",
            f"- first step seen: {status['first_step_seen']} (overdue: {status['first_step_overdue']}), "
            f"last global step: {status['global_step']}",
        ]
        commands = [p.get("command", "") for p in spec.get("processes", [])]
        out += [f"- command: `{c}`" for c in commands]
    out += [f"- result dir: {result_dir}"]
    out += [f"- log: {p}" for p in log_paths]
    out += [f"- validation file: {val_md or '(none)'}", f"- training file: {train_md or '(none)'}", ""]
    if plateau:
        out += ["## Plateau check", ""]
        out += [f"- {key}: {'plateaued' if flat else 'still improving'}" for key, flat in plateau.items()]
        out += [""]
    out += ["## Validation metrics", ""] + _table(val_metrics)
    out += ["## Training metrics", ""] + _table(train_metrics)
    if status is not None and status.get("last_metrics"):
        out += [f"## Last metric line in the log (step {status['global_step']})", ""]
        out += [f"- {k}: {_fmt(v)}" for k, v in list(status["last_metrics"].items())[:40]] + [""]
    out += ["## Errors seen in the log", ""]
    if errors:
        hints = {s.name: s.hint for s in SIGNATURES}
        out += ["| signature | count | last line | fix |", "| --- | --- | --- | --- |"]
        for e in errors:
            line = e.line.replace("|", "\\|")[:200]
            out.append(f"| {e.signature} | {e.count} | `{line}` | {hints.get(e.signature, e.hint)} |")
        out += [""]
    else:
        out += ["(none)", ""]
    if notes:
        out += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(out)
