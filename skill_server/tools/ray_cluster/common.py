"""What the three actions share: the cluster's record, asking the head's ``ray status``, the answer's fields.

A cluster started here is an experiment run (one ``ray start --block`` process per node, in tmux, with
logs, the run marker and the stop guarantees) whose registry spec also holds its ``RayCluster``: head,
workers, port, the address workers joined and the ray path. It is found by id, or as the newest run
of its session name (``ajet_ray_<port>`` unless named) whose head is the given head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolInputError
from skill_server.experiments.checks import session_name
from skill_server.experiments.models import ExperimentStatus
from skill_server.experiments.spec import RayCluster
from skill_server.experiments.store import Registry, Row, elsewhere_reason, local_elsewhere
from skill_server.hosts import HostUnreachable, call_hosts, client
from skill_server.tools.ray_cluster import commands
from skill_server.tools.ray_cluster.models import DEFAULT_PORT, RayClusterInput, RayNode, RayResource
from skill_server.tools.ray_cluster.status_text import ClusterStatus, last_message, parse_status, parse_version

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import Failure, RunReply

#: ``ray status`` to an address where nothing listens blocks for about 40 s: every call is bounded.
STATUS_TIMEOUT_S = 20.0
MAX_LINES = 40


def default_session(inp: RayClusterInput) -> str:
    return session_name(inp.name or f"ray_{inp.port or DEFAULT_PORT}", None)


def find_cluster(reg: Registry, inp: RayClusterInput, head: str) -> tuple[Row, RayCluster] | None:
    """The cluster run ``id`` names, else the newest of this session name whose head is ``head``; with its
    cluster record. A cluster another machine started on its own host ``local`` is not this machine's."""
    if inp.id is not None:
        row = reg.find(inp.id)
        if row is None or row.spec.ray_cluster is None:
            raise ToolInputError(f"no Ray cluster {inp.id!r} started by this server", field="id")
        controller = local_elsewhere(row)
        if controller:
            raise ToolInputError(f"the Ray cluster {inp.id!r} runs on another machine's own host: "
                                 f"{elsewhere_reason(controller)}", field="id")
        return row, row.spec.ray_cluster
    port = inp.port or DEFAULT_PORT
    # any socket: a cluster started before the socket became one per state directory is still this one's
    for row in reg.session_runs(None, default_session(inp)):
        meta = row.spec.ray_cluster
        if meta is not None and meta.head == head and meta.port == port and not local_elsewhere(row):
            return row, meta  # a cluster on another machine's "local" is that machine's (not this one's head)
    return None


@dataclass
class RayView:
    """What the head's ``ray`` said: its version, the parsed status, or why the status is unknown."""

    version: str | None
    status: ClusterStatus | None
    reason: str | None


def _run_failure(result: RunReply | Failure, what: str, timeout: float) -> str | None:
    if not result["ok"]:
        return result["error"]
    if result["error"]:
        return f"{what}: {result['error']}"
    if result["timed_out"]:
        return f"{what} did not answer within {timeout:.0f} s"
    if result["returncode"] != 0:
        text = result["stderr"] + "\n" + result["stdout"]
        return f"{what} failed (exit {result['returncode']}): {last_message(text) or 'no message'}"
    return None


def ask_ray(head: str, ray: str, address: str, *, with_version: bool, timeout_s: float = STATUS_TIMEOUT_S,
            deadline: Deadline | None = None) -> RayView:
    """``ray status -v --address=ADDRESS`` (and ``ray --version``) on the head, one round trip, bounded (by
    ``deadline`` too, when given)."""
    timeout_s = max(3.0, min(timeout_s, STATUS_TIMEOUT_S))
    if deadline is not None:
        timeout_s = max(1.0, min(timeout_s, deadline.remaining() - 2.0))
    ops = [commands.version_op(ray)] if with_version else []
    status = client.run(commands.ray_argv(ray, "status", "-v", f"--address={address}"), timeout_s=timeout_s,
                        max_output=1024 * 1024)
    bound = (commands.VERSION_TIMEOUT_S if with_version else 0) + timeout_s + 30
    reply = call_hosts({head: ops + [status]}, timeout_s=bound, deadline=deadline)[head]
    if isinstance(reply, HostUnreachable):
        return RayView(None, None, f"head {head} is unreachable: {reply.reason}")
    version = None
    if ops:
        asked = ops[0].answer(reply[0])
        if asked["ok"] and _run_failure(asked, "ray --version", commands.VERSION_TIMEOUT_S) is None:
            version = parse_version(asked["stdout"])
    result = status.answer(reply[-1])
    failure = _run_failure(result, f"ray status on {head}", timeout_s)
    if failure is not None or not result["ok"]:
        if result["ok"] and result["timed_out"]:
            failure = f"{failure} (is a Ray head listening at {address}?)"
        return RayView(version, None, failure)
    text = result["stdout"]
    parsed = parse_status(text)
    if parsed is None:
        return RayView(version, None, "ray status printed something this tool does not recognise: "
                       + (last_message(text) or "nothing"))
    return RayView(version, parsed, None)


def node_fields(view: RayView) -> dict[str, Any]:
    """The answer's alive_nodes, nodes, resources, pending and failures from one ``RayView``."""
    status = view.status
    if status is None:
        return {"alive_nodes": None, "nodes": None, "resources": None, "pending": [], "failures": []}

    def resources(raw: dict[str, Any]) -> dict[str, RayResource]:
        return {name: RayResource(used=r.used, total=r.total, unit=r.unit) for name, r in raw.items()}

    return {"alive_nodes": status.alive,
            "nodes": [RayNode(node_id=node, resources=resources(res)) for node, res in status.nodes.items()],
            "resources": resources(status.resources), "pending": status.pending, "failures": status.failures}


def run_fields(status: ExperimentStatus | None) -> dict[str, Any]:
    """The answer's id, session, state, processes and lines from the run's status (or none)."""
    if status is None:
        return {"id": None, "session": None, "state": None, "processes": [], "lines": []}
    return {"id": status.id, "session": status.session, "state": status.state, "processes": status.processes,
            "lines": status.lines}
