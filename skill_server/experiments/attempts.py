"""Taking a resume policy's attempts into the registry (an observation's healing, ``upkeep.HEAL``).

A run launched with ``policy.on_error`` or ``on_stall`` set to ``resume`` is relaunched by its monitor on its
host, with nobody calling (``hosts.agent.policy``): each attempt is its own run, ``<lineage>.r2``, ``.r3``...,
started by the same launch op, and the monitor that relaunched it leaves the new attempt's record
(``AttemptRecord``: its id, number, lineage, processes, pids, session, the checkpoint it continues from) in the run
directory. An observation of an ended attempt returns the records of every attempt after it; ``take_up``
inserts the ones the registry does not have yet, each as a copy of the previous attempt's row with the new
identities, in the same lineage (``experiments.lineage``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from skill_server.experiments.progress import iso
from skill_server.experiments.spec import Handle, RunSpec
from skill_server.experiments.store import Registry, Row

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import AttemptRecord


def _spec_of(previous: Row, host: str, record: AttemptRecord) -> RunSpec | None:
    """The new attempt's spec: the previous one's, with this host's run directory, handle, wrappers and logs (each
    attempt writes its own) replaced by what the relaunch started (None: the record does not fit the previous
    attempt)."""
    launch: dict[str, Any] = dict(record.get("launch") or {})
    started = {p.get("role"): p for p in launch.get("procs") or [] if isinstance(p, dict)}
    where = previous.spec.hosts.get(host)
    handle = launch.get("handle")
    if where is None or not isinstance(launch.get("run_dir"), str) or set(started) != {
            p.role for p in previous.spec.processes if p.host == host}:
        return None
    hosts = dict(previous.spec.hosts)
    if isinstance(handle, dict) and handle.get("kind"):
        new = Handle.from_json(handle)
    else:  # a record an agent wrote before handles: its tmux session's id at the top level
        new = Handle(where.handle.kind, {**where.handle.values, "session_id": launch.get("session_id") or None})
    hosts[host] = dataclasses.replace(where, run_dir=launch["run_dir"], handle=new)
    processes = tuple(dataclasses.replace(p, window_id=started[p.role].get("window_id"),
                                          pane_id=started[p.role].get("pane_id"), pid=started[p.role].get("pid"),
                                          start=started[p.role].get("start"),
                                          log_path=started[p.role].get("log_path") or p.log_path)  # its own log
                      if p.host == host else p for p in previous.spec.processes)
    return dataclasses.replace(previous.spec, hosts=hosts, processes=processes)


def take_up(reg: Registry, row: Row, host: str, chain: list[AttemptRecord]) -> list[str]:
    """Insert the attempts after ``row`` (on ``host``) that the registry lacks, in ``row``'s lineage; their ids."""
    previous, added = row, []
    for record in chain:
        new_id = record.get("id")
        if not isinstance(new_id, str) or record.get("previous") != previous.id:
            break
        known = reg.get(new_id)
        if known is None:
            spec = _spec_of(previous, host, record)
            if spec is None:
                break
            wall = float(record.get("wall") or previous.created)
            attempt = record.get("attempt")
            reg.insert(id=new_id, session=previous.session, socket=previous.socket, created=wall,
                       started_at=iso(wall), spec=spec, controller=previous.controller, launcher=previous.launcher,
                       lineage=previous.lineage or previous.id,
                       attempt=attempt if isinstance(attempt, int) and attempt > 0 else previous.attempt + 1)
            known = reg.get(new_id)
            if known is None:  # not recordable (a read-only registry): the next call tries again
                break
            added.append(new_id)
        previous = known
    return added
