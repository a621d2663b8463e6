"""Stopping a run: a stop that stops, on every host of the run, follows its lineage, and says what it had to kill.

Per host (one call each, in parallel) the agent marks each unfinished process ``stopped``, sends
SIGINT to each wrapper's process group (what Ctrl-C in the pane does), waits up to ``grace_s`` for
every process carrying the run's marker to exit, then SIGTERM, then SIGKILL, and looks again (a scheduler's job
is cancelled instead and verified; when its scheduler does not answer, the run's monitor inside the job signals
the processes on its node and the stop says it could not be confirmed). The run is recorded ``stopped`` only once
nothing of it is alive; survivors are listed. A finished run can be stopped too: that removes its sessions and
ends any marked process it left behind.

A stop on any id of a lineage (``experiments.lineage``) stops whatever of it is alive: the attempt asked for, the
attempts its resume policy started after it (taken up first when the registry does not have them yet) and a
relaunch still waiting for its backoff (cancelled by the stop's mark on the host). The answer is the asked run's,
with what was stopped besides it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolFailure
from skill_server.experiments import backends, lineage, sentences, upkeep
from skill_server.experiments.models import TERMINAL, ExperimentStatus, ProcessRef, StopOutput
from skill_server.experiments.queries import find_any, observe_with_lines
from skill_server.experiments.store import Registry, Row, elsewhere_reason, local_elsewhere, open_registry
from skill_server.hosts import HostUnreachable, call_hosts, client

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import StopProc, StopReply

#: A stop's bound beyond its grace: a scheduler that does not answer takes 20 s to say so, and the run's monitor
#: then stops the processes where they run.
STOP_EXTRA_S = 45.0
#: Of a stop's deadline, what the stop round leaves for the status observation after it.
STATUS_RESERVE_S = 8.0


def _requests(row: Row, grace: float) -> dict[str, client.Op[StopReply]]:
    """One stop per host of the run; its run directory and socket are those of its first process there."""
    first: dict[str, int] = {}
    procs: dict[str, list[StopProc]] = {}
    for i, p in enumerate(row.processes):
        first.setdefault(p.host, i)
        procs.setdefault(p.host, []).append({"role": p.role, "pid": p.pid, "start": p.start, "pane_id": p.pane_id})
    return {host: backends.stop(row.id, row.processes[i], grace_s=grace, procs=procs[host])
            for host, i in first.items()}


@dataclass
class _Done:
    """What the stop round did to one run, over its hosts."""

    interrupted: list[str] = field(default_factory=list)
    killed_roles: list[str] = field(default_factory=list)
    killed: list[ProcessRef] = field(default_factory=list)
    alive: list[ProcessRef] = field(default_factory=list)
    removed: bool = True
    unreachable: list[str] = field(default_factory=list)
    #: Per host, why the stop could not be confirmed there, and what was done instead.
    unconfirmed: list[str] = field(default_factory=list)
    #: Roles this stop ended whose ``stopped`` mark could not be written on their host (a read-only run directory).
    unmarked: list[str] = field(default_factory=list)

    def take(self, host: str, result: StopReply) -> None:
        self.interrupted += result["interrupted"]
        for seen, sink in ((result["terminated"], self.killed), (result["killed"], self.killed),
                           (result["survivors"], self.alive)):
            for p in seen:
                ref = ProcessRef(host=host, role=p["role"], pid=p["pid"], command=p["command"])
                if sink is self.killed and any(k.host == host and k.pid == ref.pid for k in self.killed):
                    continue
                sink.append(ref)
        self.killed_roles += [p["role"] for p in result["terminated"] + result["killed"]]
        self.removed = self.removed and bool(result["session_removed"])
        if result.get("unconfirmed"):
            self.unconfirmed.append(f"{host}: {result['unconfirmed']}")
        self.unmarked += [f"{host}/{role}" for role in result.get("unmarked") or [] if role in result["interrupted"]]

    def record_here(self, reg: Registry, exp_id: str) -> None:
        """This stop ended processes whose hosts could not keep its mark (a read-only run directory): the stop is
        recorded in the registry, so that their exit (130 after Ctrl-C) does not read as a failure."""
        if self.unmarked and not self.alive and not self.unreachable and not self.unconfirmed:
            reg.finish(exp_id, "stopped", None, time.time(), "stopped by stop_experiment; its run directory on "
                       + ", ".join(sorted({u.split("/", 1)[0] for u in self.unmarked}))
                       + " could not be written, so the stop is recorded here only")

    def did_something(self) -> bool:
        return bool(self.interrupted or self.killed_roles or self.unconfirmed)


def _stop_round(rows: list[Row], grace: float, deadline: Deadline) -> dict[str, _Done]:
    """Stop every run of ``rows`` on each of its hosts, in one parallel round."""
    stops = {row.id: _requests(row, grace) for row in rows}
    requests: dict[str, list[client.Op[StopReply]]] = {}
    where: dict[tuple[str, str], int] = {}
    for exp_id, per_host in stops.items():
        for host, op in per_host.items():
            requests.setdefault(host, []).append(op)
            where[(exp_id, host)] = len(requests[host]) - 1
    replies = call_hosts(requests, timeout_s=grace + STOP_EXTRA_S, deadline=deadline)
    done = {row.id: _Done() for row in rows}
    for (exp_id, host), index in where.items():
        reply, into = replies.get(host), done[exp_id]
        if isinstance(reply, HostUnreachable) or reply is None:
            into.unreachable.append(f"{host}: {reply.reason if reply is not None else 'no answer'}")
            into.removed = False
            continue
        result = stops[exp_id][host].answer(reply[index])
        if not result["ok"]:
            into.unreachable.append(f"{host}: {result['error']}")
            into.removed = False
            continue
        into.take(host, result)
    return done


def _targets(reg: Registry, row: Row) -> list[Row]:
    """The runs a stop of ``row`` covers: it, every later attempt of its lineage, and any earlier one not ended."""
    chain = lineage.of(reg, row)
    earlier = [r for r in chain.before(row.id) if r.final_state is None]
    return [*earlier, row, *chain.after(row.id)]


def stop_run(key: str, grace_s: float | None = None, deadline: Deadline | None = None) -> StopOutput:
    """Stop the run with id (or newest of session name) ``key`` and whatever of its lineage is alive; ``grace_s``
    between Ctrl-C and SIGTERM (shortened on the host when the call's deadline leaves less). The stop round leaves
    ``STATUS_RESERVE_S`` of the deadline for the status that follows."""
    grace = 10.0 if grace_s is None else float(grace_s)
    bound = deadline or Deadline.call()
    with open_registry() as reg:
        upkeep.finish_interrupted_launches(reg)
        row = find_any(reg, key, bound, "stop_experiment only stops sessions it launched")
        controller = local_elsewhere(row)
        if controller:
            raise ToolFailure(f"cannot stop {row.id!r} from this machine: {elsewhere_reason(controller)} (its "
                              "processes on host local are that machine's; nothing was signalled)", field="id")
        targets = [r for r in _targets(reg, row) if not local_elsewhere(r)]
        done = _stop_round(targets, grace, bound.share(STATUS_RESERVE_S))
        for exp_id, did in done.items():
            did.record_here(reg, exp_id)
        statuses = _observe(reg, targets, bound)
        later = [r for r in lineage.of(reg, reg.get(row.id) or row).after(targets[-1].id) if r.id not in done]
        if later:  # relaunched while this stop ran: taken up by the look just now, stopped too
            again = _stop_round(later, grace, bound.share(STATUS_RESERVE_S))
            for exp_id, did in again.items():
                did.record_here(reg, exp_id)
            done.update(again)
            statuses.update(_observe(reg, later, bound))
    return _answer(row.id, done, statuses)


def _observe(reg: Registry, rows: list[Row], bound: Deadline) -> dict[str, ExperimentStatus]:
    fresh = [reg.get(r.id) or r for r in rows]
    return {s.id: s for s in observe_with_lines(reg, fresh, None, 50, deadline=bound, upkeep=upkeep.HEAL)}


def _answer(asked: str, done: dict[str, _Done], statuses: dict[str, ExperimentStatus]) -> StopOutput:
    """The asked run's answer: its status after the stop, what was done to it, and what the stop did to the rest
    of its lineage."""
    mine, status = done[asked], statuses[asked]
    notes = [status.note] if status.note else []
    if mine.alive:
        notes.append(f"{len(mine.alive)} process(es) survived SIGKILL (uninterruptible or owned by another user): "
                     + ", ".join(f"{a.host} pid {a.pid}" for a in mine.alive))
    if mine.unreachable:
        notes.append("could not stop on " + "; ".join(mine.unreachable) + " (nothing recorded; call stop again)")
    notes += [f"the stop could not be confirmed on {u}" for u in mine.unconfirmed]
    cancelled = [s.id for s in statuses.values() if _relaunch_cancelled(s)]
    also = []
    for exp_id, other in done.items():
        if exp_id == asked:
            continue
        seen = statuses.get(exp_id)
        if other.did_something() or (seen is not None and seen.state not in TERMINAL):
            also.append(f"{exp_id} ({seen.state if seen is not None else 'not observed'})")
        if other.unreachable:
            notes.append(f"could not stop {exp_id} on " + "; ".join(other.unreachable) + " (call stop again)")
        notes += [f"the stop of {exp_id} could not be confirmed on {u}" for u in other.unconfirmed]
    if also:
        notes.append("also stopped the lineage's " + ", ".join(also))
    if cancelled:
        notes.append("the relaunch its resume policy had pending is cancelled")
    status.note = "; ".join(dict.fromkeys(notes)) or None
    out = StopOutput(**dict(status), interrupted=sorted(set(mine.interrupted)), killed=sorted(set(mine.killed_roles)),
                     killed_processes=mine.killed, still_alive=mine.alive, session_removed=mine.removed)
    out.summary = sentences.stopped(out, unconfirmed=mine.unconfirmed, also=also, cancelled=bool(cancelled))
    return out


def _relaunch_cancelled(status: ExperimentStatus) -> bool:
    """Whether the run's resume policy had a relaunch pending that this stop cancelled (the monitor recorded the
    cancellation, or will: the stop's mark is there and nothing relaunched it)."""
    done = [result for _, action, result in sentences.acts(status) if action == "resume"]
    return bool(done) and status.next_attempt is None and (
        done[-1].startswith(("cancelled", "relaunch failed")) or " relaunching" in done[-1])
