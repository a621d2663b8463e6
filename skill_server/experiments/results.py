"""collect_results: summarise the validation/training markdown files and the log into results.md, then finish.flag.

AgentJet appends ``str(metrics)`` (a Python dict repr) to ``val_print_to_markdown_file_path`` once per
validation and to ``train_print_to_markdown_file_path`` once per step. Each line is parsed with
``ast.literal_eval`` after turning ``nan``/``inf`` and ``np.float64(x)`` into literals, never ``eval``.

Everything happens on the experiment's main host, in two round trips: one reads the YAML candidates
and metric files (regular files only, bounded: a FIFO or a device is refused, never read), one writes
``results.md`` (its documented job is to replace the previous one) and, once the run has ended, an empty
``finish.flag``, both atomically and only over regular files.
"""

from __future__ import annotations

import ast
import math
import posixpath
import re
import shlex
from typing import Any

from pydantic import Field, StrictBool, StrictStr

from skill_server.errors import ToolInputError
from skill_server.experiments import logs
from skill_server.experiments.launch import host_path
from skill_server.experiments.models import HOST_DESCRIPTION, ErrorHit
from skill_server.experiments.observe import observe
from skill_server.experiments.signatures import SIGNATURES
from skill_server.experiments.status import find, status_fields
from skill_server.experiments.store import open_registry
from skill_server.hosts import LOCAL, Host, expect, get_host, normalise
from skill_server.models import ToolInput, ToolOutput
from skill_server.safe_yaml import MAX_YAML_BYTES, parse_yaml_text

MAX_MARKDOWN_BYTES = 64 * 1024 * 1024
MAX_DICT_LINE = 1024 * 1024
PLATEAU_KEYS = ("mean_reward", "task_pass_rate")
_LOWER_IS_BETTER = ("loss", "error", "timing", "time_per", "madness", "std", "clip_ratio", "grad_norm")
_NP_SCALAR = re.compile(r"\bnp\.\w+\(\s*([^()]*?)\s*\)")
_BARE_NONFINITE = re.compile(r"(?<![\w'\".])(-?)(nan|inf|NaN|Infinity)(?![\w'\"])")
_CONF_ARG = re.compile(r"--conf(?:=|\s+)(\S+)")


class CollectInput(ToolInput):
    id: StrictStr | None = Field(default=None, max_length=200, description="Experiment id or session name.")
    host: StrictStr | None = Field(default=None, max_length=255,
                                   description="Without id: where result_dir and the files are. " + HOST_DESCRIPTION)
    result_dir: StrictStr | None = Field(default=None, max_length=4096,
                                         description="Absolute, on the host; default: the experiment's result dir.")
    val_markdown: StrictStr | None = Field(default=None, max_length=4096,
                                           description="Validation metrics file on the host; default: "
                                           "ajet.trainer_common.val_print_to_markdown_file_path of the run's YAML.")
    train_markdown: StrictStr | None = Field(default=None, max_length=4096,
                                             description="Training metrics file on the host; default: "
                                             "ajet.trainer_common.train_print_to_markdown_file_path.")
    yaml_path: StrictStr | None = Field(default=None, max_length=4096,
                                        description="Training YAML on the host to read those two paths from.")
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
    host: str = Field(description="Where results.md and finish.flag were written ('local' or the ssh destination).")
    results_path: str
    finish_flag_path: str | None
    state: str | None
    exit_code: int | None
    val_markdown: str | None
    train_markdown: str | None
    val_metrics: list[MetricSummary]
    train_metrics: list[MetricSummary]
    plateau: dict[str, bool]
    errors: list[ErrorHit]
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
            found.append(token if posixpath.isabs(token) else posixpath.join(proc.get("workdir", ""), token))
    return list(dict.fromkeys(found))


def _markdown_paths(data: Any, base: str) -> tuple[str | None, str | None]:
    ajet = data.get("ajet") if isinstance(data, dict) else None
    common = ajet.get("trainer_common") if isinstance(ajet, dict) else None
    found: list[str | None] = []
    for key in ("val_print_to_markdown_file_path", "train_print_to_markdown_file_path"):
        value = common.get(key) if isinstance(common, dict) else None
        if isinstance(value, str) and value.strip() and "\x00" not in value:
            found.append(value if posixpath.isabs(value) or value.startswith("~")
                         else posixpath.normpath(posixpath.join(base, value)))
        else:
            found.append(None)
    return found[0], found[1]


def _read_ops(paths: list[str], length: int) -> list[dict[str, Any]]:
    return [{"op": "read", "path": p, "offset": -length, "length": length, "text": True} for p in paths]


def _yaml_markdown_paths(host: Host, candidates: list[str], explicit: bool, base: str,
                         notes: list[str]) -> tuple[str | None, str | None]:
    """Markdown paths from the first YAML candidates that name them (one round trip for all)."""
    val_md = train_md = None
    if not candidates:
        return None, None
    for path, result in zip(candidates, host.call(_read_ops(candidates, MAX_YAML_BYTES + 1))):
        if val_md and train_md:
            break
        if not result.get("ok"):
            if explicit:
                expect(result, field="yaml_path")
            continue
        if int(result["size"]) > MAX_YAML_BYTES:
            notes.append(f"{path} is over {MAX_YAML_BYTES // (1024 * 1024)} MiB; not read")
            continue
        try:
            data = parse_yaml_text(result["text"], field="yaml_path", source=path)
        except ToolInputError as exc:
            if explicit:
                raise
            notes.append(f"could not read {path}: {exc.message}")
            continue
        v, t = _markdown_paths(data, base)
        val_md, train_md = val_md or v, train_md or t
    return val_md, train_md


# --------------------------------------------------------------------------------------------------
# the tool


def collect_results(inp: CollectInput) -> CollectOutput:
    notes: list[str] = []
    state = exit_code = None
    errors: list[ErrorHit] = []
    log_paths: list[str] = []
    status: dict[str, Any] | None = None
    spec: dict[str, Any] = {}
    if inp.id is None and inp.result_dir is None:
        raise ToolInputError("give id (an experiment) or result_dir", field="id")
    if inp.id is not None and inp.host is not None:
        raise ToolInputError("the host is the experiment's own; give host only without id", field="host")
    host_name = normalise(inp.host, field="host") if inp.host is not None else LOCAL
    if inp.id is not None:
        with open_registry() as reg:
            row = find(reg, inp.id)
            view = observe(reg, [row])[0]
            status = status_fields(view, [], [0] * len(view.procs), 0)
        spec = view.row.spec
        host_name = view.row.host
        state, exit_code = status["state"], status["exit_code"]
        errors = status["errors"]
        log_paths = [p.log_path if p.host == host_name else f"{p.host}:{p.log_path}" for p in status["processes"]]
    host = get_host(host_name)
    result_dir = host_path(inp.result_dir, "result_dir") if inp.result_dir else spec.get("result_dir")
    assert result_dir is not None
    first = (spec.get("processes") or [{}])[0]
    workdir = first.get("workdir") or spec.get("workdir") or result_dir

    val_md = host_path(inp.val_markdown, "val_markdown") if inp.val_markdown else None
    train_md = host_path(inp.train_markdown, "train_markdown") if inp.train_markdown else None
    if not (val_md and train_md):
        candidates = [host_path(inp.yaml_path, "yaml_path")] if inp.yaml_path else _yaml_candidates(spec)
        v, t = _yaml_markdown_paths(host, candidates, inp.yaml_path is not None, workdir, notes)
        val_md, train_md = val_md or v, train_md or t

    sources = [("validation", "val_markdown", val_md), ("training", "train_markdown", train_md)]
    wanted = [path for _, _, path in sources if path is not None]
    answers = dict(zip(wanted, host.call(_read_ops(wanted, MAX_MARKDOWN_BYTES)))) if wanted else {}
    rows: dict[str, list[dict[str, float]]] = {"validation": [], "training": []}
    for label, arg, path in sources:
        if path is None:
            notes.append(f"no {label} markdown file known (pass {arg}, or set the YAML's "
                         f"{arg.split('_')[0]}_print_to_markdown_file_path)")
            continue
        answer = answers[path]
        if not answer.get("ok"):
            notes.append(f"cannot read the {label} file {path}: {answer.get('error')}")
            continue
        rows[label] = metric_rows(answer["text"], int(answer["size"]) > MAX_MARKDOWN_BYTES)
        if not rows[label]:
            notes.append(f"the {label} file {path} has no metric lines yet")

    val_metrics, train_metrics = summarise(rows["validation"]), summarise(rows["training"])
    plateau = {m.key: bool(m.plateau) for m in val_metrics + train_metrics if m.plateau is not None}
    running = state in ("running", "unreachable")
    flag_wanted = inp.write_finish_flag is not False and not running
    if inp.write_finish_flag is False:
        notes.append("finish.flag not written (write_finish_flag=false)")
    elif running:
        why = "is still running" if state == "running" else "cannot be asked about (host unreachable)"
        notes.append(f"the experiment {why}: results.md is interim and finish.flag was not written")
    text = _render(spec, status, host_name, result_dir, val_md, train_md, val_metrics, train_metrics, plateau, errors,
                   log_paths, notes)
    writes = [{"op": "write", "path": posixpath.join(result_dir, "results.md"), "text": text, "replace": True}]
    if flag_wanted:
        writes.append({"op": "write", "path": posixpath.join(result_dir, "finish.flag"), "text": "", "replace": True})
    written = [expect(r, field="result_dir")["path"] for r in host.call(writes)]
    return CollectOutput(
        host=host_name, results_path=written[0], finish_flag_path=written[1] if flag_wanted else None, state=state,
        exit_code=exit_code, val_markdown=val_md, train_markdown=train_md, val_metrics=val_metrics,
        train_metrics=train_metrics, plateau=plateau, errors=errors, log_paths=log_paths, notes=notes,
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


def _render(spec: dict[str, Any], status: dict[str, Any] | None, host: str, result_dir: str, val_md: str | None,
            train_md: str | None, val_metrics: list[MetricSummary], train_metrics: list[MetricSummary],
            plateau: dict[str, bool], errors: list[ErrorHit], log_paths: list[str], notes: list[str]) -> str:
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
    out += [f"- result dir: {result_dir}" + ("" if host == LOCAL else f" (on {host})")]
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
