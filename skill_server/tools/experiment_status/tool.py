"""experiment_status: states, new log lines by byte cursor, errors, metrics, progress, checkpoints. Read-only.

Cursors: one byte offset per process log (``"1234"`` or ``"1234,88"``). Without ``since`` a call continues
from the cursor stored by the previous status or wait call of that experiment; an explicit ``since``
reads independently. The observation itself (one round trip per host, the YAML and checkpoint reads
riding along) is ``experiments.queries``; it heals what it finds broken (``experiments.upkeep``: a launch left
half done, a dead monitor, a finished session, a resumed run's new attempts), as every status call did.
"""

from __future__ import annotations

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolInputError
from skill_server.experiments import history, logs, overview, sentences, upkeep
from skill_server.experiments.models import DEFAULT_HISTORY_POINTS, ExperimentStatus, RegistryProblem
from skill_server.experiments.queries import HistoryRequest, find_any, observe_with_lines
from skill_server.experiments.store import DB_NAME, Registry, open_registry
from skill_server.tools.experiment_status.models import RegistryInfo, StatusInput, StatusOutput

#: Experiments in one answer without ``id`` (``limit``): a page, with ``more`` and ``next_offset``, keeps
#: the answer within what MCP clients accept however many runs the registry holds.
DEFAULT_LIMIT = 20


def history_request(inp: StatusInput) -> HistoryRequest | None:
    """The metric history asked for, checked (a step range belongs to one experiment's history)."""
    extras = [name for name in ("history_from_step", "history_to_step", "history_points")
              if getattr(inp, name) is not None]
    if inp.metrics_history is None:
        if extras:
            raise ToolInputError("only used with metrics_history", field=extras[0])
        return None
    if inp.id is None:
        raise ToolInputError("the metric history belongs to one experiment: give id too", field="metrics_history")
    if inp.history_from_step is not None and inp.history_to_step is not None \
            and inp.history_from_step > inp.history_to_step:
        raise ToolInputError(f"is below history_from_step ({inp.history_from_step})", field="history_to_step")
    return HistoryRequest(list(inp.metrics_history), inp.history_from_step, inp.history_to_step,
                          inp.history_points or DEFAULT_HISTORY_POINTS)


def _one(reg: Registry, inp: StatusInput, wanted: HistoryRequest | None, deadline: Deadline
         ) -> tuple[list[ExperimentStatus], overview.Whole]:
    """One experiment by any of its attempts' ids: that attempt's status (its lines, checkpoints), with the whole
    experiment (``overview``: every attempt, merged metrics, alive) and the metric history over every attempt."""
    row = find_any(reg, inp.id or "", deadline)
    max_lines = logs.MAX_LINES if inp.max_lines is None else inp.max_lines
    whole = overview.observe_whole(reg, row, since=inp.since, max_lines=max_lines,
                                   checkpoints=inp.checkpoints is not False, deadline=deadline)
    asked = whole.asked
    asked.experiment = overview.summarise(reg, whole, asked.checkpoints)
    asked.alive = asked.experiment.alive
    if wanted is not None:
        asked.metrics_history = history.history_view(reg, whole.ids, wanted.patterns, wanted.from_step,
                                                     wanted.to_step, wanted.max_points,
                                                     restarts=len(asked.progress.restarts) if asked.progress else 0)
    return [asked], whole


def _lineage_alive(reg: Registry, runs: list[ExperimentStatus]) -> None:
    """A listing's ``alive``: anything of each run's experiment among the runs observed in this call."""
    groups: dict[str, list[ExperimentStatus]] = {}
    rows = {r.id: r for r in (reg.get(run.id) for run in runs) if r is not None}
    for run in runs:
        row = rows.get(run.id)
        groups.setdefault(row.lineage or row.id if row is not None else run.id, []).append(run)
    for group in groups.values():
        found = [r._running for r in group]
        alive = True if any(found) else None if any(f is None for f in found) else False
        for run in group:
            run.alive = alive


def experiment_status(inp: StatusInput) -> StatusOutput:
    if inp.since is not None and inp.id is None:
        raise ToolInputError("a cursor belongs to one experiment: give id too", field="since")
    wanted = history_request(inp)
    deadline = Deadline.call()
    problems: list[RegistryProblem] = []
    if inp.id is not None and inp.offset is not None:
        raise ToolInputError("only used when listing all (without id)", field="offset")
    with open_registry(create=False) as reg:
        upkeep.finish_interrupted_launches(reg)
        if inp.id is not None:
            runs, whole = _one(reg, inp, wanted, deadline)
            place = reg.place
            total, more, next_offset = 1, 0, None
        else:
            offset, limit = inp.offset or 0, inp.limit or DEFAULT_LIMIT
            rows, corrupt = reg.all_with_problems(limit, offset)
            problems = [RegistryProblem(id=c.exp_id, message=c.message) for c in corrupt]
            max_lines = 20 if inp.max_lines is None else inp.max_lines
            total = reg.count()
            more = max(0, total - offset - limit)
            next_offset = offset + limit if more else None
            runs = observe_with_lines(reg, rows, None, max_lines, checkpoints=bool(inp.checkpoints),
                                      deadline=deadline, follow_attempts=True, upkeep=upkeep.HEAL)
            _lineage_alive(reg, runs)
            whole = None
            place = reg.place
    registry = None if place is None else RegistryInfo(
        path=str(place.directory / DB_NAME), mode=place.mode, filesystem=place.filesystem, warning=place.warning)
    for run in runs:
        run.summary = sentences.run_state(run)
    if whole is not None and len(whole.attempts) > 1:
        runs[0].summary = sentences.attempts(whole.attempts)
    return StatusOutput(summary=sentences.listed(runs, len(problems)), experiments=runs, problems=problems, total=total,
                        more=more, next_offset=next_offset, registry=registry)
