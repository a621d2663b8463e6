"""``ray_cluster``: check which arguments the action uses, dispatch, and the read-only ``status`` action."""

from __future__ import annotations

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolInputError
from skill_server.core.models import Progress
from skill_server.experiments import upkeep
from skill_server.experiments.models import TERMINAL
from skill_server.experiments.queries import observe_with_lines
from skill_server.experiments.store import open_registry
from skill_server.hosts import normalise
from skill_server.tools.ray_cluster import commands
from skill_server.tools.ray_cluster.common import MAX_LINES, RayView, ask_ray, find_cluster, node_fields, run_fields
from skill_server.tools.ray_cluster.models import DEFAULT_PORT, RayClusterInput, RayClusterOutput
from skill_server.tools.ray_cluster.start import check_workers, start_cluster
from skill_server.tools.ray_cluster.stop import stop_cluster

START_ONLY = ("head_address", "num_gpus", "num_cpus", "ray_args", "head_args", "env", "workdir", "log_dir",
              "max_time_s", "require_free_gpus", "timeout_s", "join_timeout_s")
STOP_ONLY = ("kill_gpu_processes", "grace_s")


def _check_fields(inp: RayClusterInput) -> None:
    given = inp.model_fields_set
    if inp.action != "start":
        for name in START_ONLY:
            if name in given and getattr(inp, name) is not None and not (inp.action == "status" and
                                                                         name == "head_address"):
                raise ToolInputError("only used with action='start'", field=name)
    if inp.action != "stop":
        for name in STOP_ONLY:
            if name in given and getattr(inp, name) is not None:
                raise ToolInputError("only used with action='stop'", field=name)
    if inp.action == "start" and inp.id is not None:
        raise ToolInputError("start finds a running cluster by head and port; id is for status and stop", field="id")


def ray_cluster(inp: RayClusterInput, progress: Progress | None = None) -> RayClusterOutput:
    _check_fields(inp)
    head = normalise(inp.head, field="head")
    if inp.action == "start":
        out = start_cluster(inp, head, progress)
    elif inp.action == "stop":
        out = stop_cluster(inp, head)
    else:
        out = cluster_status(inp, head)
    out.summary = cluster_summary(out)
    return out


def cluster_summary(out: RayClusterOutput) -> str:
    """One line: the cluster's state and what to do next."""
    nodes = f"{out.alive_nodes if out.alive_nodes is not None else '?'}/{out.expected_nodes} nodes alive"
    where = f"Ray cluster on {out.head}" + (f" (run {out.id}, {out.state})" if out.id else "")
    if out.action == "stop":
        left = len(out.still_alive) + len(out.gpu_processes_left)
        tail = f"; {left} process(es) still alive or holding GPU memory (see still_alive, gpu_processes_left)" \
            if left else ""
        return f"{where}: stopped{tail}."
    if out.ready:
        return f"{where}: ready, {nodes}."
    if out.action == "start" and out.next_wait_s:
        return f"{where}: not ready yet, {nodes}; call ray_cluster start again in {out.next_wait_s} s to keep waiting."
    why = f" ({out.reason})" if out.reason else ""
    return f"{where}: not ready, {nodes}{why}."[:600]


def cluster_status(inp: RayClusterInput, head: str) -> RayClusterOutput:
    """Read-only: the run's processes (when this server started the cluster) and ``ray status`` on the head."""
    port = inp.port or DEFAULT_PORT
    fields = None
    answer = Deadline.call()
    with open_registry() as reg:
        upkeep.finish_interrupted_launches(reg)
        found = find_cluster(reg, inp, head)
        if found is not None:
            fields = observe_with_lines(reg, [found[0]], None, MAX_LINES, deadline=answer.share(20.0),
                                        upkeep=upkeep.HEAL)[0]
    note = None
    if found is not None:
        meta = found[1]
        head, workers, port, address = meta.head, list(meta.workers), meta.port, meta.address
        ray = commands.check_ray(inp.ray) if inp.ray is not None else meta.ray or commands.DEFAULT_RAY
    else:
        workers = check_workers(inp.workers, head)
        ray = commands.check_ray(inp.ray)
        host = commands.check_address(inp.head_address) if inp.head_address else "127.0.0.1"
        address = f"{host}:{port}"
        note = "not a cluster this server started: ray status asked on the head at " + address
    expected = 1 + len(workers)
    if fields is not None and fields.state in TERMINAL:  # its nodes are gone: ray status would only time out
        view = RayView(None, None, f"the cluster's run is {fields.state} (ray_cluster start starts a new one)")
    else:
        view = ask_ray(head, ray, address, with_version=True, deadline=answer)
    nodes = node_fields(view)
    alive = nodes["alive_nodes"]
    ready = alive is not None and alive >= expected
    reason = view.reason if alive is None else (None if ready else f"{alive}/{expected} nodes alive")
    return RayClusterOutput(summary="", action="status", **run_fields(fields), head=head, workers=workers, port=port,
                            address=address, ray_version=view.version, expected_nodes=expected, ready=ready, **nodes,
                            reason=reason, note=note)
