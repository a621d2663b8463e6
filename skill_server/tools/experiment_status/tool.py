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
from skill_server.experiments import lineage, logs, sentences, upkeep
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


def later_attempts(reg: Registry, first: ExperimentStatus, deadline: Deadline) -> list[ExperimentStatus]:
    """The attempts after a resumed run (``first``: its status), each observed (no lines, no cursor moved),
    oldest first: what happened overnight in the one call about the id the user knows."""
    chain: list[ExperimentStatus] = []
    last = reg.get(first.id)
    seen = {first.id}
    while last is not None and len(seen) < lineage.MAX_ATTEMPTS:
        rows = [row for row in lineage.of(reg, last).after(last.id) if row.id not in seen]  # what it knows now
        if not rows:
            break
        seen.update(row.id for row in rows)
        chain += observe_with_lines(reg, rows, None, 0, deadline=deadline, upkeep=upkeep.HEAL)
        last = reg.get(rows[-1].id)  # observing the last may have taken up more
    return chain


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
            rows = [find_any(reg, inp.id, deadline)]
            max_lines = logs.MAX_LINES if inp.max_lines is None else inp.max_lines
            total, more, next_offset = 1, 0, None
        else:
            offset, limit = inp.offset or 0, inp.limit or DEFAULT_LIMIT
            rows, corrupt = reg.all_with_problems(limit, offset)
            problems = [RegistryProblem(id=c.exp_id, message=c.message) for c in corrupt]
            max_lines = 20 if inp.max_lines is None else inp.max_lines
            total = reg.count()
            more = max(0, total - offset - limit)
            next_offset = offset + limit if more else None
        listing = inp.checkpoints if inp.checkpoints is not None else inp.id is not None
        runs = observe_with_lines(reg, rows, inp.since, max_lines, checkpoints=listing, history_request=wanted,
                                  deadline=deadline, follow_attempts=inp.id is None, upkeep=upkeep.HEAL)
        chain = later_attempts(reg, runs[0], deadline) if inp.id is not None and runs else []
        place = reg.place
    registry = None if place is None else RegistryInfo(
        path=str(place.directory / DB_NAME), mode=place.mode, filesystem=place.filesystem, warning=place.warning)
    for run in runs:
        run.summary = sentences.run_state(run)
    if chain:
        runs[0].summary = sentences.attempts([runs[0], *chain])
    return StatusOutput(summary=sentences.listed(runs, len(problems)), experiments=runs, problems=problems, total=total,
                        more=more, next_offset=next_offset, registry=registry)
