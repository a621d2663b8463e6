"""Hosts: where experiment processes run and their files live, behind one interface.

``get_host("local")`` is this machine (the agent runs in-process); any other name is an SSH destination
(the agent is shipped over the system ``ssh`` client). The experiment tools never branch on which one
they hold. Requests are ``client`` ops; ``call_hosts`` asks several hosts at once, one round trip each,
in parallel; ``result_of`` reads one op's result from a host's reply (a host that could not be asked
gives a failed result).

Modules: ``base`` (the interface, ``HostUnreachable``), ``client`` (one typed function per agent
operation, ``expect``), ``local``, ``ssh``, ``destinations`` (which strings name a host),
``localfiles`` (this machine's files, read as the agent reads them) and ``agent`` (the stdlib-only
program that does the work on a host; ``agent.protocol`` is what crosses the wire).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from skill_server.core.deadline import Deadline, bounded
from skill_server.hosts.base import LOCAL, CommandResult, Host, HostUnreachable
from skill_server.hosts.client import Op, Result, expect
from skill_server.hosts.destinations import normalise

__all__ = ["LOCAL", "CommandResult", "Host", "HostUnreachable", "Reply", "call_hosts", "expect", "get_host",
           "normalise", "result_of"]

#: What ``call_hosts`` gives per host: one result per op, or why the host could not be asked.
Reply = list[Result] | HostUnreachable

_LOCK = threading.Lock()
_HOSTS: dict[str, Host] = {}


def get_host(name: str) -> Host:
    """The host named ``name`` (``local`` or an already validated SSH destination)."""
    with _LOCK:
        host = _HOSTS.get(name)
        if host is None:
            if name == LOCAL:
                from skill_server.hosts.local import LocalHost

                host = LocalHost()
            else:
                from skill_server.hosts.ssh import SshHost

                host = SshHost(name)
            _HOSTS[name] = host
        return host


def call_hosts(requests: Mapping[str, Sequence[Op[Any]]], *, timeout_s: float = 60.0,
               deadline: Deadline | None = None) -> dict[str, Reply]:
    """One ``call`` per host, all hosts in parallel, each ending by ``deadline`` (when given) and within
    ``timeout_s``; a host that cannot be asked maps to its error."""
    bound = bounded(deadline, timeout_s)

    def one(name: str) -> Reply:
        try:
            return get_host(name).call(requests[name], timeout_s=timeout_s, deadline=bound)
        except HostUnreachable as exc:
            return exc

    names = list(requests)
    if len(names) <= 1:
        return {name: one(name) for name in names}
    with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
        return dict(zip(names, pool.map(one, names)))


def result_of(reply: Reply | None, index: int = 0) -> Result:
    """Op ``index``'s result in a host's reply; a failed result (kind ``unreachable``) when there is none."""
    if isinstance(reply, HostUnreachable):
        return {"ok": False, "error": reply.message, "field": None, "kind": "unreachable"}
    if reply is None or index >= len(reply):
        return {"ok": False, "error": "no answer", "field": None, "kind": "unreachable"}
    return reply[index]
