"""collect_results: summarise a run's metrics and log into results.md (with a plot), then finish.flag.

Metrics come from AgentJet's markdown files (``val_print_to_markdown_file_path`` and
``train_print_to_markdown_file_path``, dict lines parsed by ``summaries``); when a file is absent or has
no lines, from the metric history of the run's ``step:N`` log lines (``history``: validation metrics are
the ``val-*`` keys). The answer and results.md say which source each table came from.

Everything on the run's host happens on its main host, in at most three round trips: one reads the YAML
candidates (only when a markdown path is not given; the paths come from them), one the metric files
(regular files only, bounded: a FIFO or a device is refused, never read), one writes ``metrics.png``
(when matplotlib is installed) and ``results.md`` into the run's own folder ``<result_dir>/<id>/`` (their
documented job is to replace that run's previous ones, never another run's) and, once the run has ended, an
empty ``finish.flag`` into ``<result_dir>`` itself (AgentJet's blueprint convention), all atomically and only
over regular files.
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.core.safe_yaml import MAX_YAML_BYTES, parse_yaml_text
from skill_server.experiments import history, lineage, plots, runconfig, sentences, upkeep
from skill_server.experiments.checks import host_path
from skill_server.experiments.models import ErrorHit, ExperimentStatus, MetricsHistory
from skill_server.experiments.observe import observe
from skill_server.experiments.queries import find, find_any, status_fields
from skill_server.experiments.spec import RunSpec
from skill_server.experiments.store import Registry, Row, elsewhere_reason, launched_elsewhere, open_registry
from skill_server.experiments.summaries import MetricSummary, metric_rows, summarise, summarise_series
from skill_server.hosts import LOCAL, Host, client, expect, get_host, normalise
from skill_server.tools.collect_results.models import CollectInput, CollectOutput

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import ReadReply

MAX_MARKDOWN_BYTES = 64 * 1024 * 1024
#: Most metrics summarised from the history (verl prints 60-100 per step).
MAX_SUMMARY_SERIES = 300
PLOT_NAME = "metrics.png"


# --------------------------------------------------------------------------------------------------
# locating the files


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


def _read_ops(paths: list[str], length: int) -> list[client.Op[ReadReply]]:
    return [client.read(p, length, offset=-length, text=True) for p in paths]


def _yaml_markdown_paths(host: Host, candidates: list[runconfig.Candidate], explicit: bool,
                         notes: list[str]) -> tuple[str | None, str | None]:
    """Markdown paths from the first YAML candidates that name them (one round trip for all)."""
    val_md = train_md = None
    if not candidates:
        return None, None
    for cand, result in zip(candidates, host.call([runconfig.read_op(c.path) for c in candidates])):
        if val_md and train_md:
            break
        if not result.get("ok"):
            if explicit:
                expect(result, field="yaml_path")
            continue
        if int(result["size"]) > MAX_YAML_BYTES:
            notes.append(f"{cand.path} is over {MAX_YAML_BYTES // (1024 * 1024)} MiB; not read")
            continue
        try:
            data = parse_yaml_text(result["text"], field="yaml_path", source=cand.path)
        except ToolInputError as exc:
            if explicit:
                raise
            notes.append(f"could not read {cand.path}: {exc.message}")
            continue
        v, t = _markdown_paths(data, cand.workdir)
        val_md, train_md = val_md or v, train_md or t
    return val_md, train_md


# --------------------------------------------------------------------------------------------------
# the metric history: tables and the plot


def is_validation_metric(name: str) -> bool:
    """verl logs validation metrics as ``val-core/...``, ``val-aux/...`` (older: ``val/...``)."""
    return name.startswith(("val-", "val/"))


@dataclass
class Table:
    """Named series of values in step order, with the global step of each point."""

    values: dict[str, list[float]] = field(default_factory=dict)
    steps: dict[str, list[int | None]] = field(default_factory=dict)


def _history_tables(reg: Registry, exp_id: str) -> tuple[Table, Table]:
    """(validation, training) series from the run's step lines, in step order."""
    val, train = Table(), Table()
    for name in history.metric_names(reg, exp_id)[:MAX_SUMMARY_SERIES]:
        series = history.read_series(reg, exp_id, name)
        table = val if is_validation_metric(name) else train
        table.values[name] = [math.nan if v is None else v for v in series.values]
        table.steps[name] = list(series.steps)
    return val, train


def _plot_curves(reg: Registry, row: Row, overlays: list[Row], patterns: list[str] | None,
                 notes: list[str]) -> tuple[list[plots.Curve], list[str]]:
    names = history.metric_names(reg, row.id)
    if patterns:
        metrics, unmatched = history.match_names(names, patterns)
        if unmatched:
            notes.append(f"plot_metrics matched nothing in {row.id}: {', '.join(unmatched)}")
    else:
        metrics = plots.default_metrics(names)
    metrics = metrics[:plots.MAX_PANELS]
    return plots.curves_from_history(reg, [row] + overlays, metrics), metrics


# --------------------------------------------------------------------------------------------------
# the steps of the tool


@dataclass
class _Run:
    """What the registry says of the experiment (all empty when only result_dir is given)."""

    row: Row | None = None
    overlays: list[Row] = field(default_factory=list)
    status: ExperimentStatus | None = None
    #: The metric history as (validation, training) series: the tables when no markdown file has lines.
    val_series: Table = field(default_factory=Table)
    train_series: Table = field(default_factory=Table)
    curves: list[plots.Curve] = field(default_factory=list)
    plot_data: MetricsHistory | None = None
    #: Which attempt of a resumed run this is, and the others (``_attempts_note``).
    attempts: str | None = None

    @property
    def state(self) -> str | None:
        return self.status.state if self.status is not None else None

    @property
    def exit_code(self) -> int | None:
        return self.status.exit_code if self.status is not None else None

    @property
    def errors(self) -> list[ErrorHit]:
        return self.status.errors if self.status is not None else []

    @property
    def log_paths(self) -> list[str]:
        if self.status is None or self.row is None:
            return []
        host = self.row.host
        return [p.log_path if p.host == host else f"{p.host}:{p.log_path}" for p in self.status.processes]


def _check_arguments(inp: CollectInput) -> None:
    if inp.id is None and inp.result_dir is None:
        raise ToolInputError("give id (an experiment) or result_dir", field="id")
    if inp.id is not None and inp.host is not None:
        raise ToolInputError("the host is the experiment's own; give host only without id", field="host")
    for name in ("plot_metrics", "overlay_ids"):
        if inp.id is None and getattr(inp, name) is not None:
            raise ToolInputError("plots are drawn from an experiment's metric history: give id too", field=name)


def _attempts_note(reg: Registry, row: Row) -> str | None:
    """Which attempt of a resumed run these results cover, and where its metrics went on (each attempt is its
    own run: a resumed run's steps continue in the next one); None for a run that was never resumed."""
    attempts = lineage.of(reg, row)
    before, after = [a.id for a in attempts.before(row.id)], [a.id for a in attempts.after(row.id)]
    if not before and not after:
        return None
    chain = ", ".join([*before, f"{row.id} (this one)", *after])
    tail = (f"; its metrics continue in {', '.join(after)} (collect_results id={after[-1]} for the newest)"
            if after else "")
    return f"these results cover attempt {len(before) + 1} of {len(before) + 1 + len(after)} ({chain}) only{tail}"


def _read_run(inp: CollectInput, exp_key: str, want_plot: bool, notes: list[str]) -> _Run:
    """The run, its overlays, its status, its metric history and the curves to draw, in one registry session."""
    with open_registry() as reg:
        upkeep.finish_interrupted_launches(reg)
        row = find_any(reg, exp_key)
        overlays = [find(reg, key, f"overlay_ids.{i}") for i, key in enumerate(inp.overlay_ids or [])]
        view = observe(reg, [row], upkeep=upkeep.HEAL)[0]
        row = reg.get(view.row.id) or view.row
        status = status_fields(view, [], [0] * len(view.procs), 0, attempts=lineage.links(reg, [row])[row.id])
        run = _Run(row, overlays, status, *_history_tables(reg, row.id), attempts=_attempts_note(reg, row))
        if run.attempts:
            notes.append(run.attempts)
        if want_plot:
            run.curves, plot_metrics = _plot_curves(reg, row, overlays, inp.plot_metrics, notes)
            if run.curves and not plots.available():
                run.plot_data = plots.plot_data(reg, row.id, plot_metrics)
    return run


def _markdown_files(inp: CollectInput, host: Host, host_name: str, row: Row | None, spec: RunSpec | None,
                    result_dir: str, notes: list[str]) -> tuple[str | None, str | None]:
    """The (validation, training) metric files: as given, else as named by the given YAML or the run's own."""
    val_md = host_path(inp.val_markdown, "val_markdown") if inp.val_markdown else None
    train_md = host_path(inp.train_markdown, "train_markdown") if inp.train_markdown else None
    if val_md and train_md:
        return val_md, train_md
    if inp.yaml_path:
        first = spec.processes[0].workdir if spec and spec.processes else ""
        base = first or (spec.workdir if spec else "") or result_dir
        candidates = [runconfig.Candidate(host_name, host_path(inp.yaml_path, "yaml_path"), base)]
    else:
        candidates = [c for c in runconfig.candidates(row) if c.host == host_name] if row is not None else []
    v, t = _yaml_markdown_paths(host, candidates, inp.yaml_path is not None, notes)
    return val_md or v, train_md or t


def _markdown_rows(label: str, arg: str, path: str | None, answers: dict[str, dict[str, Any]],
                   notes: list[str]) -> list[dict[str, float]]:
    """The dict lines of one metric file (``answers``: the reads by path); a note says why there are none."""
    rows: list[dict[str, float]] = []
    if path is None:
        notes.append(f"no {label} markdown file known (pass {arg}, or set the YAML's "
                     f"{arg.split('_')[0]}_print_to_markdown_file_path)")
    elif not answers[path].get("ok"):
        notes.append(f"cannot read the {label} file {path}: {answers[path].get('error')}")
    else:
        rows = metric_rows(answers[path]["text"], int(answers[path]["size"]) > MAX_MARKDOWN_BYTES)
        if not rows:
            notes.append(f"the {label} file {path} has no metric lines yet")
    return rows


def _summaries(label: str, path: str | None, rows: list[dict[str, float]], fallback: dict[str, list[float]],
               notes: list[str], fallback_steps: dict[str, list[int | None]] | None = None,
               ) -> tuple[list[MetricSummary], str]:
    """One table and where it came from: the markdown file's lines, else the metric history (``fallback``, with
    the step of each point in ``fallback_steps``), else nothing."""
    if rows:
        return summarise(rows), f"markdown file {path}"
    if fallback:
        count = max(len(v) for v in fallback.values())
        notes.append(f"{label} metrics taken from the log's step lines (no usable markdown file)")
        return summarise_series(fallback, fallback_steps), f"the log's step lines (metric history, {count} steps)"
    return [], "none"


def _metric_tables(host: Host, val_md: str | None, train_md: str | None, run: _Run, notes: list[str]
                   ) -> tuple[dict[str, list[MetricSummary]], dict[str, str]]:
    """The validation and training tables and their sources, both files read in one round trip."""
    sources = [("validation", "val_markdown", val_md), ("training", "train_markdown", train_md)]
    wanted = [path for _, _, path in sources if path is not None]
    answers = dict(zip(wanted, host.call(_read_ops(wanted, MAX_MARKDOWN_BYTES)))) if wanted else {}
    tables: dict[str, list[MetricSummary]] = {}
    metrics_source: dict[str, str] = {}
    shared: str | None = None
    for label, arg, path in reversed(sources):  # training first: its lines say whether the files are shared
        rows = _markdown_rows(label, arg, path, answers, notes)
        why = _holds_other_runs(label, rows, run)
        if why is None and shared is not None and path is not None and posixpath.dirname(path) == shared:
            why = "it lies beside the training file that does"
        if why is not None and path is not None:
            notes.append(f"the {label} file {path} holds lines of more than one run ({why}; several runs use that "
                         "YAML's path): this run's own log is used instead")
            rows = []
            shared = posixpath.dirname(path) if label == "training" else shared
        fallback = run.val_series if label == "validation" else run.train_series
        tables[label], metrics_source[label] = _summaries(label, path, rows, fallback.values, notes, fallback.steps)
    return {k: tables[k] for k in ("validation", "training")}, metrics_source


def _holds_other_runs(label: str, rows: list[dict[str, float]], run: _Run) -> str | None:
    """Why a metric file seems to hold other runs' lines as well (AgentJet appends to one path per YAML, so
    runs started from one YAML share it), or None when nothing says so."""
    steps = [r["training/global_step"] for r in rows if isinstance(r.get("training/global_step"), (int, float))]
    if any(b <= a for a, b in zip(steps, steps[1:])):
        return "its training/global_step starts again"
    reached = run.status.global_step if run.status is not None else None
    if label == "training" and isinstance(reached, int) and len(rows) > reached:
        return f"{len(rows)} step lines, and this run reached step {reached}"
    return None


def _finish_flag_wanted(inp: CollectInput, state: str | None, notes: list[str]) -> bool:
    """finish.flag is written once the run has ended, unless the caller says not to; a note says why not."""
    running = state in ("running", "stalled", "unreachable")
    if inp.write_finish_flag is False:
        notes.append("finish.flag not written (write_finish_flag=false)")
    elif running:
        why = "is still running" if state != "unreachable" else "cannot be asked about (host unreachable)"
        notes.append(f"the experiment {why}: results.md is interim and finish.flag was not written")
    return inp.write_finish_flag is not False and not running


def _picture(run: _Run, notes: list[str]) -> tuple[plots.Picture | None, str]:
    """metrics.png and its title, or (None, "") with a note when there is nothing to draw or no matplotlib."""
    if not run.curves:
        notes.append("no plot: no step line with the chosen metrics has been scanned for this run")
        return None, ""
    assert run.row is not None
    labels = plots.run_labels([run.row] + run.overlays)
    title = f"{labels[0]}: metrics over steps" + (f" (with {', '.join(labels[1:])})" if len(labels) > 1 else "")
    return plots.draw(run.curves, title, notes), title


def run_folder(result_dir: str, row: Row | None) -> str:
    """Where a run's results.md and metrics.png go: its own folder ``<result_dir>/<id>/``, so that no run's results
    replace another's (runs started from one directory share result_dir); without a run, result_dir itself."""
    return posixpath.join(result_dir, row.id) if row is not None else result_dir


def _write(host: Host, result_dir: str, folder: str, text: str, picture: plots.Picture | None,
           flag_wanted: bool) -> list[str]:
    """Write metrics.png and results.md into ``folder`` and finish.flag (as wanted) into ``result_dir``, where
    AgentJet's blueprint looks for it, in one round trip; their paths, in that order."""
    writes = []
    if picture is not None:
        writes.append(client.write(posixpath.join(folder, PLOT_NAME), data=picture.png, replace=True))
    writes.append(client.write(posixpath.join(folder, "results.md"), text=text, replace=True))
    if flag_wanted:
        writes.append(client.write(posixpath.join(result_dir, "finish.flag"), text="", replace=True))
    return [expect(r, field="result_dir")["path"] for r in host.call(writes)]


# --------------------------------------------------------------------------------------------------
# the tool


def collect_results(inp: CollectInput) -> CollectOutput:
    """Locate the inputs, summarise, draw, render and write, in that order (the notes keep it)."""
    _check_arguments(inp)
    notes: list[str] = []
    spec: RunSpec | None = None
    want_plot = inp.id is not None and inp.plot is not False
    host_name = normalise(inp.host, field="host") if inp.host is not None else LOCAL
    run = _Run()
    if inp.id is not None:
        run = _read_run(inp, inp.id, want_plot, notes)
        assert run.row is not None and run.status is not None
        elsewhere = launched_elsewhere(run.row) if run.row.host == LOCAL else None
        if elsewhere:  # its result folder is on that machine: nothing is written here
            raise ToolFailure(f"the results of {run.row.id!r} are on another machine: {elsewhere_reason(elsewhere)}",
                              field="id")
        spec = run.row.spec
        host_name = run.row.host
    host = get_host(host_name)
    result_dir = host_path(inp.result_dir, "result_dir") if inp.result_dir else spec.result_dir if spec else None
    assert result_dir is not None

    val_md, train_md = _markdown_files(inp, host, host_name, run.row, spec, result_dir, notes)
    tables, metrics_source = _metric_tables(host, val_md, train_md, run, notes)
    val_metrics, train_metrics = tables["validation"], tables["training"]
    plateau = {m.key: bool(m.plateau) for m in val_metrics + train_metrics if m.plateau is not None}
    flag_wanted = _finish_flag_wanted(inp, run.state, notes)
    picture, title = _picture(run, notes) if want_plot else (None, "")
    errors, log_paths = run.errors, run.log_paths
    folder = run_folder(result_dir, run.row)
    text = _render(spec, run.status, host_name, folder, val_metrics, train_metrics,
                   metrics_source, plateau, errors, log_paths, notes, PLOT_NAME if picture else None)
    written = _write(host, result_dir, folder, text, picture, flag_wanted)
    image = None
    if picture is not None:
        assert run.row is not None  # a picture is drawn only for an experiment id
        image = picture.attachment(title, bool(inp.image_data), path=written.pop(0), host=host_name,
                                   keep_as=plots.kept_name("metrics", [run.row.id]), notes=notes)
    summary = sentences.collected(written[0], run.state, len(val_metrics), len(train_metrics), len(errors),
                                  image.path if image is not None else None, run.attempts)
    return CollectOutput(
        summary=summary,
        host=host_name, results_path=written[0], finish_flag_path=written[1] if flag_wanted else None,
        state=run.state, exit_code=run.exit_code,
        val_markdown=val_md, train_markdown=train_md, val_metrics=val_metrics, train_metrics=train_metrics,
        metrics_source=metrics_source, plateau=plateau, errors=errors, log_paths=log_paths, plot=image,
        plot_data=run.plot_data, notes=notes,
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
    out = ["| metric | n | first | best | last | trend | plateau | best at |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in metrics:
        plateau = "-" if m.plateau is None else ("yes" if m.plateau else "no")
        out.append(f"| {m.key} | {m.n} | {_fmt(m.first)} | {_fmt(m.best)} | {_fmt(m.last)} | {m.trend} | {plateau} "
                   f"| {_best_at(m)} |")
    return out + [""]


def _best_at(m: MetricSummary) -> str:
    """'step 12', or 'point 3 of 8' when the source records no step."""
    if m.best_step is not None:
        return f"step {m.best_step}"
    return f"point {m.best_point} of {m.n}" if m.best_point is not None else "-"


def _render(spec: RunSpec | None, status: ExperimentStatus | None, host: str, result_dir: str,
            val_metrics: list[MetricSummary], train_metrics: list[MetricSummary],
            sources: dict[str, str], plateau: dict[str, bool], errors: list[ErrorHit], log_paths: list[str],
            notes: list[str], plot_name: str | None) -> str:
    out = ["# Experiment results", ""]
    if status is not None:
        out += [
            f"- experiment: `{status.id}` (tmux session `{status.session}`)",
            f"- final state: **{status.state}**, exit code {status.exit_code}",
            f"- started: {status.started_at}, elapsed {status.elapsed_s:.0f} s",
            f"- first step seen: {status.first_step_seen} (overdue: {status.first_step_overdue}), "
            f"last global step: {status.global_step}",
        ]
        commands = [p.command for p in spec.processes] if spec else []
        out += [f"- command: `{c}`" for c in commands]
    out += [f"- result dir: {result_dir}" + ("" if host == LOCAL else f" (on {host})")]
    out += [f"- log: {p}" for p in log_paths]
    out += [f"- {label} metrics from: {sources.get(label, 'none')}" for label in ("validation", "training")] + [""]
    if plot_name:
        out += ["## Metrics over steps", "", f"![metrics over steps]({plot_name})", ""]
    if plateau:
        out += ["## Plateau check", ""]
        out += [f"- {key}: {'plateaued' if flat else 'still improving'}" for key, flat in plateau.items()]
        out += [""]
    out += ["## Validation metrics", "", f"Source: {sources.get('validation', 'none')}.", ""] + _table(val_metrics)
    out += ["## Training metrics", "", f"Source: {sources.get('training', 'none')}.", ""] + _table(train_metrics)
    if status is not None and status.last_metrics:
        out += [f"## Last metric line in the log (step {status.global_step})", ""]
        out += [f"- {k}: {_fmt(v)}" for k, v in list(status.last_metrics.items())[:40]] + [""]
    out += ["## Errors seen in the log", ""]
    if errors:
        out += ["| signature | count | last line | fix |", "| --- | --- | --- | --- |"]
        for e in errors:
            line = e.line.replace("|", "\\|")[:200]
            out.append(f"| {e.signature} | {e.count} | `{line}` | {e.hint} |")
        out += [""]
    else:
        out += ["(none)", ""]
    if notes:
        out += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(out)
