"""A resume policy's chain of attempts, taken into the registry.

A run launched with ``policy.on_error`` or ``on_stall`` set to ``resume`` is relaunched by its monitor on its
host, with nobody calling (``hosts.agent.policy``): each attempt is its own run, ``<id>.r2``, ``<id>.r3``...,
started by the same launch op, and the monitor that relaunched it leaves the new attempt's record (its id,
processes, pids, session, the checkpoint it continues from) in the run directory. An observation of an ended
attempt returns the records of every attempt after it (``monitor.attempts_after``); ``take_up`` inserts the
ones the registry does not have yet, each as a copy of the previous attempt's row with the new identities,
and links them (``previous_attempt`` / ``next_attempt``), so status, compare and results see the chain.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from skill_server.experiments.progress import iso
from skill_server.experiments.spec import RunSpec
from skill_server.experiments.store import Registry, Row


def _spec_of(previous: Row, host: str, record: dict[str, Any]) -> RunSpec | None:
    """The new attempt's spec: the previous one's, with this host's run directory, session and wrappers
    replaced by what the relaunch started (None: the record does not fit the previous attempt)."""
    launch = record.get("launch") or {}
    started = {p.get("role"): p for p in launch.get("procs") or [] if isinstance(p, dict)}
    where = previous.spec.hosts.get(host)
    if where is None or not isinstance(launch.get("run_dir"), str) or set(started) != {
            p.role for p in previous.spec.processes if p.host == host}:
        return None
    hosts = dict(previous.spec.hosts)
    hosts[host] = dataclasses.replace(where, run_dir=launch["run_dir"], session_id=launch.get("session_id") or None)
    processes = tuple(dataclasses.replace(p, window_id=started[p.role].get("window_id"),
                                          pane_id=started[p.role].get("pane_id"), pid=started[p.role].get("pid"),
                                          start=started[p.role].get("start")) if p.host == host else p
                      for p in previous.spec.processes)
    return dataclasses.replace(previous.spec, hosts=hosts, processes=processes, previous_attempt=previous.id,
                               next_attempt=None)


def take_up(reg: Registry, row: Row, host: str, chain: list[dict[str, Any]]) -> Row:
    """Insert the attempts after ``row`` (on ``host``) that the registry lacks, linked; ``row`` as it is now."""
    previous = row
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
            reg.insert(id=new_id, session=previous.session, socket=previous.socket, created=wall,
                       started_at=iso(wall), spec=spec, controller=previous.controller, launcher=previous.launcher)
            known = reg.get(new_id)
            if known is None:  # not recordable (a read-only registry): the next call tries again
                break
        if previous.spec.next_attempt != new_id:
            reg.update_spec(previous.id, dataclasses.replace(previous.spec, next_attempt=new_id))
        previous = known
    return reg.get(row.id) or row
