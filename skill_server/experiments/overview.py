"""The whole experiment an id belongs to, in one answer: what ``experiment_status`` with an id and
``collect_results`` say of it, whichever of its attempts' ids they were given.

An experiment a resume policy relaunched is a lineage of runs (``lineage``). ``observe_whole`` observes the asked
attempt with its new lines and the rest of its lineage without (taking up the attempts its hosts know of and the
registry does not yet, ``upkeep.HEAL``); ``summarise`` makes of them an ``ExperimentInfo``: each attempt with the
cause of its end and the checkpoint it continued from (in the host agent's words: ``hosts.agent.results``), the
headline metrics merged by step over every attempt (``history.read_lineage``: a later attempt's points replace the
earlier's from its first step on) with their final and best values and steps, whether the best step was saved and
the saved step nearest it, and whether anything of it still runs (``alive``: any attempt's
``observe.still_running``, checked on its hosts in this call, never inferred from states).
"""

from __future__ import annotations

from dataclasses import dataclass

from skill_server.core.deadline import Deadline
from skill_server.experiments import history, lineage, upkeep
from skill_server.experiments.models import (
    TERMINAL,
    AttemptInfo,
    CheckpointList,
    ExperimentInfo,
    ExperimentStatus,
    MetricOutcome,
)
from skill_server.experiments.queries import observe_with_lines
from skill_server.experiments.store import Registry, Row
from skill_server.hosts.agent import results as host_results

#: The words a relaunching attempt's action says the checkpoint in (``hosts.agent.policy.Resume``).
RELAUNCHING = "relaunching as "


@dataclass
class Whole:
    """The asked attempt's status (with its lines) and every attempt's, first first."""

    asked: ExperimentStatus
    attempts: list[ExperimentStatus]

    @property
    def ids(self) -> list[str]:
        return [a.id for a in self.attempts]


def observe_whole(reg: Registry, row: Row, *, since: str | None, max_lines: int, checkpoints: bool,
                  deadline: Deadline) -> Whole:
    """Observe ``row`` (its new lines after ``since``, its checkpoints when asked) and every other attempt of its
    experiment (no lines, no cursor moved), following the attempts each observation takes up."""
    (asked,) = observe_with_lines(reg, [row], since, max_lines, checkpoints=checkpoints, deadline=deadline,
                                  upkeep=upkeep.HEAL)
    seen = {asked.id: asked}
    for _ in range(lineage.MAX_ATTEMPTS):
        rest = [r for r in lineage.of(reg, reg.get(row.id) or row).attempts if r.id not in seen]
        if not rest:
            break
        for status in observe_with_lines(reg, rest, None, 0, deadline=deadline, upkeep=upkeep.HEAL):
            seen[status.id] = status
    order = [r.id for r in lineage.of(reg, reg.get(row.id) or row).attempts]
    return Whole(asked, [seen[i] for i in order if i in seen])


def _action_dicts(status: ExperimentStatus) -> list[dict[str, str]]:
    """A status's actions ('<time> <trigger> -> <action>: <result>') as the host recorded them."""
    out = []
    for line in status.actions:
        _, _, rest = line.partition(" ")
        trigger, _, rest = rest.partition(" -> ")
        action, _, result = rest.partition(": ")
        out.append({"trigger": trigger, "action": action, "result": result})
    return out


def resumed_from(previous: ExperimentStatus, attempt: str) -> str | None:
    """The checkpoint ``attempt`` continued from, as the attempt before it said when it relaunched it: 'global_step_3
    (path)', 'started over', or None when it did not say."""
    for a in _action_dicts(previous):
        head = RELAUNCHING + attempt + ", "
        if a["action"] == "resume" and a["result"].startswith(head):
            where = a["result"][len(head):]
            return where[len("continuing from "):] if where.startswith("continuing from ") else "started over"
    return None


def _attempt(number: int, status: ExperimentStatus, previous: ExperimentStatus | None) -> AttemptInfo:
    ended = status.state in TERMINAL
    steps = [status.global_step] if status.global_step is not None else []
    return AttemptInfo(
        id=status.id, attempt=number, state=status.state, exit_code=status.exit_code,
        alive=None if status._running is None else bool(status._running),
        first_step=status._first_step, last_step=max(steps) if steps else None,
        resumed_from=resumed_from(previous, status.id) if previous is not None else None,
        ended_by=host_results.cause_of_end(status.state, status.exit_code, _action_dicts(status), None)
        if ended else None, log_path=status.log_path)


def _saved(listing: CheckpointList | None) -> list[int] | None:
    """The saved checkpoint steps (None: they could not be listed)."""
    if listing is None or (listing.reason and not listing.checkpoints and listing.directory is None):
        return None
    return sorted(c.step for c in listing.checkpoints)


def outcomes(reg: Registry, ids: list[str], saved: list[int] | None) -> list[MetricOutcome]:
    """Final and best of the experiment's headline metrics, merged by step over its attempts."""
    starts = history.first_steps(reg, ids)
    out = []
    for name in host_results.headline(history.names_of(reg, ids)):
        series = history.read_lineage(reg, ids, name, starts=starts)
        found = host_results.outcome_of(name, dict(zip(series.steps, series.values)), saved)
        out.append(MetricOutcome.model_validate(found))
    return out


def summarise(reg: Registry, whole: Whole, listing: CheckpointList | None) -> ExperimentInfo:
    """The experiment's answer (``ExperimentInfo``) from its attempts' statuses."""
    attempts = [_attempt(i + 1, s, whole.attempts[i - 1] if i else None) for i, s in enumerate(whole.attempts)]
    running = [f"{s.id}: {what}" for s in whole.attempts for what in s._running or []]
    unknown = any(s._running is None for s in whole.attempts)
    newest = whole.attempts[-1]
    state: str = newest.state
    if state in TERMINAL and any(what.endswith("a relaunch its resume policy waits to make") for what in running):
        state = "relaunching"
    return ExperimentInfo(id=whole.attempts[0].id, state=state, alive=True if running else None if unknown else False,
                          still_running=running, attempts=attempts,
                          metrics=outcomes(reg, whole.ids, _saved(listing)))
