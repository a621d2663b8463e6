"""collect_results: an experiment's results where its blueprint wants them: its page (every attempt, the metrics
merged by step, a plot) and, once it finished, finish.flag.

Any id of an experiment a resume policy relaunched answers for the whole experiment (``experiments.overview``):
every attempt with the cause of its end and the checkpoint it continued from, the tables and the plot over every
attempt merged by step, final and best with their steps, whether anything of it still runs (``alive``).

Metrics come from AgentJet's markdown files (``val_print_to_markdown_file_path`` and
``train_print_to_markdown_file_path``, dict lines parsed by ``summaries``); when a file is absent, has no lines or
holds other runs' lines too, from the metric history of the runs' ``step:N`` log lines (``history``: validation
metrics are the ``val-*`` keys). The answer and the page say which source each table came from.

Everything on the run's host happens on its main host, in at most three round trips: one reads the YAML
candidates (only when a markdown path is not given; the paths come from them), one the metric files
(regular files only, bounded: a FIFO or a device is refused, never read), one writes (the host agent's
``wrap_up``, the renderer the run's monitor uses for ``on_end: collect`` too): ``metrics.png`` and the page in the
experiment's own folder ``<result_dir>/<id>/``, then ``<result_dir>/results.md`` (the page, or an index when
several experiments share the directory), then ``finish.flag`` (only when the experiment finished, succeeded or
timed out, unless ``write_finish_flag`` says otherwise), all atomically and only over regular files.
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.core.safe_yaml import MAX_YAML_BYTES, parse_yaml_text
from skill_server.experiments import history, overview, plots, runconfig, sentences, upkeep
from skill_server.experiments.checks import host_path
from skill_server.experiments.models import ErrorHit, ExperimentInfo, ExperimentStatus, MetricsHistory
from skill_server.experiments.queries import find, find_any
from skill_server.experiments.spec import RunSpec
from skill_server.experiments.store import Registry, Row, elsewhere_reason, launched_elsewhere, open_registry
from skill_server.experiments.summaries import MetricSummary, metric_rows, summarise, summarise_series
from skill_server.hosts import LOCAL, Host, client, expect, get_host, normalise
from skill_server.hosts.agent import results as host_results
from skill_server.tools.collect_results.models import CollectInput, CollectOutput

if TYPE_CHECKING:
    from skill_server.hosts.agent.documents import MetricRowDoc
    from skill_server.hosts.agent.protocol import AttemptDoc, ReadReply, ResultsDoc, WrapUpReply

MAX_MARKDOWN_BYTES = 64 * 1024 * 1024
#: Most metrics summarised from the history (verl prints 60-100 per step).
MAX_SUMMARY_SERIES = 300


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


def _history_tables(reg: Registry, ids: list[str]) -> tuple[Table, Table]:
    """(validation, training) series from the step lines of a run (or of an experiment's attempts, merged by step),
    in step order."""
    val, train = Table(), Table()
    starts = history.first_steps(reg, ids)
    for name in history.names_of(reg, ids)[:MAX_SUMMARY_SERIES]:
        series = history.read_lineage(reg, ids, name, starts=starts)
        table = val if is_validation_metric(name) else train
        table.values[name] = [math.nan if v is None else v for v in series.values]
        table.steps[name] = list(series.steps)
    return val, train


def _plot_curves(reg: Registry, row: Row, ids: list[str], overlays: list[Row], patterns: list[str] | None,
                 notes: list[str]) -> tuple[list[plots.Curve], list[str]]:
    names = history.names_of(reg, ids)
    if patterns:
        metrics, unmatched = history.match_names(names, patterns)
        if unmatched:
            notes.append(f"plot_metrics matched nothing in {row.id}: {', '.join(unmatched)}")
    else:
        metrics = plots.default_metrics(names)
    metrics = metrics[:plots.MAX_PANELS]
    return plots.curves_from_history(reg, [row] + overlays, metrics, attempts={row.id: ids}), metrics


# --------------------------------------------------------------------------------------------------
# the steps of the tool


@dataclass
class _Run:
    """What the registry says of the experiment (all empty when only result_dir is given)."""

    row: Row | None = None
    overlays: list[Row] = field(default_factory=list)
    status: ExperimentStatus | None = None
    #: Every attempt of its experiment (``overview``), and what they say together.
    whole: overview.Whole | None = None
    info: ExperimentInfo | None = None
    #: The metric history as (validation, training) series: the tables when no markdown file has lines.
    val_series: Table = field(default_factory=Table)
    train_series: Table = field(default_factory=Table)
    curves: list[plots.Curve] = field(default_factory=list)
    plot_data: MetricsHistory | None = None

    @property
    def attempts(self) -> list[ExperimentStatus]:
        return self.whole.attempts if self.whole is not None else []

    @property
    def state(self) -> str | None:
        """The experiment's state (its newest attempt's; 'relaunching' during a resume's backoff)."""
        return self.info.state if self.info is not None else None

    @property
    def exit_code(self) -> int | None:
        return self.attempts[-1].exit_code if self.attempts else None

    @property
    def errors(self) -> list[ErrorHit]:
        """Each signature once, over every attempt (its lines counted in all)."""
        seen: dict[str, ErrorHit] = {}
        for attempt in self.attempts:
            for e in attempt.errors:
                known = seen.get(e.signature)
                seen[e.signature] = e if known is None else known.model_copy(update={"count": known.count + e.count})
        return list(seen.values())

    @property
    def log_paths(self) -> list[str]:
        if self.row is None:
            return []
        host = self.row.host
        return [p.log_path if p.host == host else f"{p.host}:{p.log_path}" for a in self.attempts
                for p in a.processes]


def _check_arguments(inp: CollectInput) -> None:
    if inp.id is None and inp.result_dir is None:
        raise ToolInputError("give id (an experiment) or result_dir", field="id")
    if inp.id is not None and inp.host is not None:
        raise ToolInputError("the host is the experiment's own; give host only without id", field="host")
    for name in ("plot_metrics", "overlay_ids"):
        if inp.id is None and getattr(inp, name) is not None:
            raise ToolInputError("plots are drawn from an experiment's metric history: give id too", field=name)


def _read_run(inp: CollectInput, exp_key: str, want_plot: bool, notes: list[str]) -> _Run:
    """The experiment (every attempt), its overlays, its metric history and the curves to draw, in one registry
    session."""
    with open_registry() as reg:
        upkeep.finish_interrupted_launches(reg)
        deadline = Deadline.call()
        row = find_any(reg, exp_key, deadline)
        overlays = [find(reg, key, f"overlay_ids.{i}") for i, key in enumerate(inp.overlay_ids or [])]
        whole = overview.observe_whole(reg, row, since=None, max_lines=0, checkpoints=True, deadline=deadline)
        info = overview.summarise(reg, whole, whole.asked.checkpoints)
        row = reg.get(whole.asked.id) or row
        run = _Run(row, overlays, whole.asked, whole, info, *_history_tables(reg, whole.ids))
        if len(whole.attempts) > 1:
            notes.append(f"these results cover the {len(whole.attempts)} attempts of {info.id} "
                         f"({', '.join(whole.ids)}), metrics merged by step")
        if want_plot:
            run.curves, plot_metrics = _plot_curves(reg, row, whole.ids, overlays, inp.plot_metrics, notes)
            if run.curves and not plots.available():
                run.plot_data = plots.plot_data(reg, whole.ids, plot_metrics)
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
    reached = run.attempts[-1].global_step if run.attempts else None
    if label == "training" and isinstance(reached, int) and len(rows) > reached:
        return f"{len(rows)} step lines, and this run reached step {reached}"
    return None


def _finish_flag_wanted(inp: CollectInput, state: str | None, notes: list[str]) -> bool:
    """finish.flag says the experiment is done: written unasked only once it finished (succeeded or timed out), with
    ``write_finish_flag`` once it ended in any way, never while something of it runs; a note says why not."""
    running = state in ("running", "queued", "stalled", "relaunching", "unreachable")
    finished = state in host_results.FINISHED or state is None  # no experiment: the caller's own result_dir
    if inp.write_finish_flag is False:
        notes.append("finish.flag not written (write_finish_flag=false)")
    elif running:
        why = ("cannot be asked about (host unreachable)" if state == "unreachable" else "is still running"
               + ("" if state == "running" else f" ({state})"))
        notes.append(f"the experiment {why}: results.md is interim and finish.flag was not written")
    elif not finished and inp.write_finish_flag is None:
        notes.append(f"finish.flag not written: the experiment did not finish (it {state}); write_finish_flag=true "
                     "writes it")
    return not running and (inp.write_finish_flag is True or (inp.write_finish_flag is None and finished))


def _picture(run: _Run, notes: list[str]) -> tuple[plots.Picture | None, str]:
    """metrics.png and its title, or (None, "") with a note when there is nothing to draw or no matplotlib."""
    if not run.curves:
        notes.append("no plot: no step line with the chosen metrics has been scanned for this run")
        return None, ""
    assert run.row is not None
    labels = plots.run_labels([run.row] + run.overlays)
    title = f"{labels[0]}: metrics over steps" + (f" (with {', '.join(labels[1:])})" if len(labels) > 1 else "")
    return plots.draw(run.curves, title, notes), title


def _rows(metrics: list[MetricSummary]) -> list[MetricRowDoc]:
    return [{"key": m.key, "n": m.n, "first": m.first, "best": m.best, "best_at": _best_at(m), "last": m.last,
             "trend": m.trend, "plateau": m.plateau} for m in metrics]


def _best_at(m: MetricSummary) -> str:
    """'step 12', or 'point 3 of 8' when the source records no step."""
    if m.best_step is not None:
        return f"step {m.best_step}"
    return f"point {m.best_point} of {m.n}" if m.best_point is not None else "-"


def _attempt_docs(run: _Run) -> list[AttemptDoc]:
    out: list[AttemptDoc] = []
    for info, status in zip(run.info.attempts if run.info else [], run.attempts):
        doc: AttemptDoc = {"id": info.id, "attempt": info.attempt, "state": info.state, "exit_code": info.exit_code,
                           "first_step": info.first_step, "last_step": info.last_step,
                           "ended_by": info.ended_by or "still running", "logs": [p.log_path for p in status.processes]}
        if info.resumed_from is not None:
            doc["resumed_from"] = info.resumed_from
        out.append(doc)
    return out


def _document(run: _Run, spec: RunSpec | None, host: str, tables: dict[str, list[MetricSummary]],
              sources: dict[str, str], notes: list[str]) -> ResultsDoc:
    """What the page says (``hosts.agent.results.render`` renders it on the host)."""
    doc: ResultsDoc = {
        "id": run.info.id if run.info is not None else "results", "state": run.state or "-",
        "written_by": "collect_results", "host": host,
        "commands": [p.command for p in spec.processes] if spec else [],
        "attempts": _attempt_docs(run),
        "outcomes": [m.model_dump() for m in run.info.metrics] if run.info else [],  # type: ignore[misc]
        "tables": [{"title": f"{label.capitalize()} metrics", "source": sources.get(label, "none"),
                    "rows": _rows(tables[label])} for label in ("validation", "training")],
        "last_metrics": dict(run.attempts[-1].last_metrics) if run.attempts else {},
        "errors": [{"signature": e.signature, "severity": e.severity, "count": e.count, "line": e.line, "fix": e.hint}
                   for e in run.errors],
        "actions": [f"{a.id} {line}" for a in run.attempts for line in a.actions], "notes": list(notes)}
    if run.attempts:
        doc["started_at"] = run.attempts[0].started_at
    if run.info is not None and run.info.metrics:
        first = run.info.metrics[0].name
        series = run.train_series if first in run.train_series.values else run.val_series
        values = dict(zip(series.steps.get(first) or [], series.values.get(first) or []))
        doc["curve"] = host_results.curve(first, {s: v for s, v in values.items() if s is not None})
    return doc


def _write(host: Host, result_dir: str, doc: ResultsDoc, picture: plots.Picture | None, flag: bool
           ) -> WrapUpReply:
    """The page, the result directory's document and finish.flag, in one round trip: for an experiment, the host
    agent's ``wrap_up``; without one (result_dir and metric files only), ``results.md`` in result_dir itself."""
    if doc["id"] != "results":
        op = client.wrap_up(result_dir, doc, png=picture.png if picture else None, flag=flag)
        return op.expect(host.call([op])[0], field="result_dir")
    writes = [client.write(posixpath.join(result_dir, host_results.PAGE), text=host_results.render(doc),
                           replace=True)]
    if flag:
        writes.append(client.write(posixpath.join(result_dir, host_results.FLAG), text="", replace=True))
    paths = [expect(r, field="result_dir")["path"] for r in host.call(writes)]
    return {"page": paths[0], "document": paths[0], "plot": None, "finish_flag": paths[1] if flag else None,
            "index": False, "note": None}


# --------------------------------------------------------------------------------------------------
# the tool


def collect_results(inp: CollectInput) -> CollectOutput:
    """Locate the inputs, summarise, draw, gather the document and have the host write it, in that order (the notes
    keep it)."""
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
    written = _write(host, result_dir, _document(run, spec, host_name, tables, metrics_source, notes), picture,
                     flag_wanted)
    if written["note"]:
        notes.append(written["note"])
    image = None
    if picture is not None:
        assert run.row is not None  # a picture is drawn only for an experiment id
        image = picture.attachment(title, bool(inp.image_data), path=written["plot"], host=host_name,
                                   keep_as=plots.kept_name("metrics", [run.row.id]), notes=notes)
    document = written["document"] or written["page"]
    summary = sentences.collected(document, run.state, len(val_metrics), len(train_metrics), len(errors),
                                  image.path if image is not None else None, len(run.attempts),
                                  written["finish_flag"] is not None, run.info)
    return CollectOutput(
        summary=summary, host=host_name, results_path=written["page"], document_path=written["document"],
        finish_flag_path=written["finish_flag"], state=run.state, exit_code=run.exit_code,
        alive=run.info.alive if run.info is not None else None, experiment=run.info,
        val_markdown=val_md, train_markdown=train_md, val_metrics=val_metrics, train_metrics=train_metrics,
        metrics_source=metrics_source, plateau=plateau, errors=errors, log_paths=log_paths, plot=image,
        plot_data=run.plot_data, notes=notes,
    )
