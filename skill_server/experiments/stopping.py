"""Stopping a run: a stop that stops, on every host of the run, and says what it had to kill.

Per host (one call each, in parallel) the agent marks each unfinished process ``stopped``, sends
SIGINT to each wrapper's process group (what Ctrl-C in the pane does), waits up to ``grace_s`` for
every process carrying the run's marker to exit, then SIGTERM, then SIGKILL, and looks again. The run
is recorded ``stopped`` only once nothing of it is alive; survivors are listed. A finished run can be
stopped too: that removes its sessions and ends any marked process it left behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolFailure
from skill_server.experiments import backends, sentences, upkeep
from skill_server.experiments.models import ProcessRef, StopOutput
from skill_server.experiments.queries import observe_with_lines
from skill_server.experiments.store import Row, elsewhere_reason, local_elsewhere, open_registry
from skill_server.hosts import HostUnreachable, call_hosts, client

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import StopProc, StopReply

STOP_EXTRA_S = 30.0
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


def stop_run(key: str, grace_s: float | None = None, deadline: Deadline | None = None) -> StopOutput:
    """Stop the run with id (or newest of session name) ``key``; ``grace_s`` between Ctrl-C and SIGTERM
    (shortened on the host when the call's deadline leaves less). The stop round leaves
    ``STATUS_RESERVE_S`` of the deadline for the status that follows."""
    grace = 10.0 if grace_s is None else float(grace_s)
    bound = deadline or Deadline.call()
    with open_registry() as reg:
        upkeep.finish_interrupted_launches(reg)
        row = reg.find(key)
        if row is None:
            raise ToolFailure(f"no experiment {key!r} in this server's registry: stop_experiment only stops "
                              "sessions it launched", field="id")
        controller = local_elsewhere(row)
        if controller:
            raise ToolFailure(f"cannot stop {row.id!r} from this machine: {elsewhere_reason(controller)} (its "
                              "processes on host local are that machine's; nothing was signalled)", field="id")
        stops = _requests(row, grace)
        replies = call_hosts({host: [op] for host, op in stops.items()}, timeout_s=grace + STOP_EXTRA_S,
                             deadline=bound.share(STATUS_RESERVE_S))
        interrupted: list[str] = []
        killed_roles: list[str] = []
        killed: list[ProcessRef] = []
        alive: list[ProcessRef] = []
        removed = True
        unreachable: list[str] = []
        for host, reply in replies.items():
            if isinstance(reply, HostUnreachable):
                unreachable.append(f"{host}: {reply.reason}")
                removed = False
                continue
            result = stops[host].answer(reply[0])
            if not result["ok"]:
                unreachable.append(f"{host}: {result['error']}")
                removed = False
                continue
            interrupted += result["interrupted"]
            for seen, sink in ((result["terminated"], killed), (result["killed"], killed),
                               (result["survivors"], alive)):
                for p in seen:
                    ref = ProcessRef(host=host, role=p["role"], pid=p["pid"], command=p["command"])
                    if sink is killed and any(k.host == host and k.pid == ref.pid for k in killed):
                        continue
                    sink.append(ref)
            killed_roles += [p["role"] for p in result["terminated"] + result["killed"]]
            removed = removed and bool(result["session_removed"])
        fresh = reg.get(row.id) or row
        status = observe_with_lines(reg, [fresh], None, 50, deadline=bound, upkeep=upkeep.HEAL)[0]
    notes = [status.note] if status.note else []
    if alive:
        notes.append(f"{len(alive)} process(es) survived SIGKILL (uninterruptible or owned by another user): "
                     + ", ".join(f"{a.host} pid {a.pid}" for a in alive))
    if unreachable:
        notes.append("could not stop on " + "; ".join(unreachable) + " (nothing recorded; call stop again)")
    if status.next_attempt:  # a relaunch waiting for its backoff is cancelled by this stop; one done is not
        notes.append(f"its policy resumed it as {status.next_attempt}: stop that one too")
    status.note = "; ".join(dict.fromkeys(notes)) or None
    out = StopOutput(**dict(status), interrupted=sorted(set(interrupted)), killed=sorted(set(killed_roles)),
                     killed_processes=killed, still_alive=alive, session_removed=removed)
    out.summary = sentences.stopped(out)
    return out
