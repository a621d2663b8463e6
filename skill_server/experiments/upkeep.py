"""Healing: the maintenance a tool asks for by name, never a side effect of reading.

What needs mending after something went wrong while nobody was looking:

* ``finish_interrupted_launches``: a launch interrupted anywhere (the process killed, a host partitioned, tmux
  hung) left its intent row ``launching``, or a rollback left one ``discarding``: it is rolled back on every
  host by the run's identity and forgotten once every host confirms (until then each later call that asks tries
  again, at most every ``RETRY_S``). All such launches are rolled back in one round trip to their hosts, in
  parallel, bounded by ``BUDGET_S``. A row with processes on another machine's own host is left to that machine.
* ``HEAL`` for an observation (``observe.observe(..., upkeep=HEAL)``): in the observation's own round trip, the
  host starts the monitor of a run whose monitor died and releases the session of a run that ended without one,
  and the attempts a resume policy started are taken into the registry (``attempts.take_up``).

Which tools heal is decided in each tool (status, wait, watch, stop, launch, collect and ray_cluster do; compare,
gpu_status and swarm_status only read). Their answers keep saying what they said before; what was healed is
logged.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolFailure
from skill_server.experiments.spec import Handle, HostRecord
from skill_server.experiments.store import DISCARDING, RUNNING, Registry, Row, controller_identity, local_elsewhere
from skill_server.hosts import call_hosts, client, result_of
from skill_server.hosts.agent import procs

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import DiscardReply

log = logging.getLogger(__name__)

#: How long one call spends finishing interrupted launches, and how soon it tries one again.
BUDGET_S = 8.0
RETRY_S = 20.0
_TRIED: dict[str, float] = {}


@dataclass(frozen=True)
class Upkeep:
    """What an observation heals on the run's hosts (``ObserveRequest.heal``) and in the registry."""

    heal: bool


HEAL = Upkeep(heal=True)
READ_ONLY = Upkeep(heal=False)


def _launcher_gone(row: Row) -> bool:
    """Whether the process that launched ``row`` has ended (judged only on the machine that launched it: not by
    another one that shares its host identity, whose pids are another pid space, unless this one rebooted since)."""
    if row.controller != controller_identity():
        return False  # another machine's launch: that machine's calls finish it
    who = row.launcher or {}
    pid, start, space = who.get("pid"), who.get("start"), who.get("space")
    if not isinstance(pid, int):
        return True
    if isinstance(space, str) and space and procs.pid_space() and space != procs.pid_space():
        return not procs.same_boot(space) and procs.uptime() < time.time() - row.created
    return not procs.alive(pid, start if isinstance(start, str) else None)


def discard_ops(exp_id: str, places: Mapping[str, HostRecord], hosts: Sequence[str]
                ) -> dict[str, client.Op[DiscardReply]]:
    """The discard of run ``exp_id`` on each of ``hosts``, as its backend there undoes it."""
    from skill_server.experiments import backends

    return {h: backends.discard(exp_id, places[h]) for h in hosts if h in places}


def discard_everywhere(reg: Registry, exp_id: str, places: Mapping[str, HostRecord], hosts: Sequence[str],
                       deadline: Deadline) -> bool:
    """Undo run ``exp_id`` on ``hosts`` by its identity (its backend ends what it started; its run directory is
    left marked ``discarded``) and settle its row (``settle``); True when every host confirmed."""
    ops = discard_ops(exp_id, places, hosts)
    replies = call_hosts({h: [op] for h, op in ops.items()}, deadline=deadline)
    return settle(reg, exp_id, {host: result_of(reply) for host, reply in replies.items()})


def _confirmed(exp_id: str, host: str, answer: client.Result) -> bool:
    if answer.get("ok") and answer.get("confirmed"):
        return True
    log.warning("rolling back %s on %s: %s", exp_id, host, answer.get("error") or "not confirmed")
    return False


def settle(reg: Registry, exp_id: str, answers: Mapping[str, client.Result]) -> bool:
    """The row of a launch undone on every host that answered ``answers``: forgotten once every host confirmed;
    kept (``running``, with the handle the host gave) when a host says the run had already run to its end there
    (its scheduler's job ran although the launch was interrupted: it is no launch to undo, and a run that ran is
    never made invisible). True when every host confirmed."""
    if not all([_confirmed(exp_id, host, answer) for host, answer in answers.items()]):
        return False
    ran = {host: answer["ran"] for host, answer in answers.items() if isinstance(answer.get("ran"), dict)}
    row = reg.get(exp_id) if ran else None
    if row is None:
        reg.delete(exp_id)
        return True
    hosts = {h: dataclasses.replace(where, handle=Handle.from_json(ran[h])) if h in ran else where
             for h, where in row.spec.hosts.items()}
    reg.set_phase(exp_id, RUNNING, dataclasses.replace(row.spec, hosts=hosts))
    reg.set_note(exp_id, "its launch was interrupted after it submitted the job, which ran: kept")
    log.info("kept %s: its launch was interrupted, but its job ran", exp_id)
    return True


def finish_interrupted_launches(reg: Registry) -> list[str]:
    """Roll back every launch that was interrupted (its launching process gone, on this machine) or is being
    undone, in one round trip to their hosts; forget each one every host confirmed. The ids rolled back."""
    if reg.directory is None or reg.problem is not None:
        return []  # nothing on disk, or nothing can be recorded: nothing to finish now
    now = time.monotonic()
    rows = [row for row in reg.pending() if (row.phase == DISCARDING or _launcher_gone(row))
            and not local_elsewhere(row) and now - _TRIED.get(row.id, -RETRY_S) >= RETRY_S]
    if not rows:
        return []
    requests: dict[str, list[client.Op[DiscardReply]]] = {}
    where: list[tuple[Row, list[tuple[str, int]]]] = []
    try:
        for row in rows:
            _TRIED[row.id] = now
            if row.phase != DISCARDING:
                reg.set_phase(row.id, DISCARDING)
            placed = []
            for host, op in discard_ops(row.id, row.spec.hosts, list(dict.fromkeys(p.host for p in row.processes))
                                        ).items():
                requests.setdefault(host, []).append(op)
                placed.append((host, len(requests[host]) - 1))
            where.append((row, placed))
        replies = call_hosts(requests, deadline=Deadline(BUDGET_S))
        done = []
        for row, placed in where:
            if settle(reg, row.id, {host: result_of(replies.get(host), i) for host, i in placed}):
                _TRIED.pop(row.id, None)
                done.append(row.id)
                log.info("finished the interrupted launch %s", row.id)
        return done
    except ToolFailure as exc:  # the registry became unwritable meanwhile: the call goes on
        log.warning("cannot finish interrupted launches: %s", exc)
        return []
