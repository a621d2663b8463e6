"""``ray_cluster start``: check every node, launch one ``ray start --block`` per node as one run, wait.

1. Check (one round trip per node, in parallel): ``ray --version`` everywhere (present, and the same
   version on every node: Ray refuses mixed versions) and, with ``require_free_gpus``, nvidia-smi.
2. Launch through ``launch_experiment``: the head's and each worker's ``ray start`` are processes of
   one run, so they get logs, the run marker (every Ray daemon inherits it), the max-time monitor
   and ``stop_experiment``'s guarantees. The cluster's facts go into the run's registry spec.
3. Wait like ``wait_experiment``: at most 50 s per call, progress while waiting, polling the head's
   ``ray status`` until it lists every node, a ray start process ends, or time is up. Calling start
   again with the same head, port and workers finds the running cluster and keeps waiting.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import time

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.core.models import Progress
from skill_server.experiments import upkeep
from skill_server.experiments.checks import check_env
from skill_server.experiments.launching import launch
from skill_server.experiments.models import WAIT_DEFAULT_S, WAIT_MAX_S, LaunchInput, ProcessSpec
from skill_server.experiments.observe import View, observe
from skill_server.experiments.queries import observe_with_lines
from skill_server.experiments.spec import RayCluster
from skill_server.experiments.store import Row, open_registry
from skill_server.gpus import nvidia_smi
from skill_server.gpus.query import free_problems, from_reply
from skill_server.hosts import LOCAL, HostUnreachable, call_hosts, normalise
from skill_server.hosts.ssh import configured_hostname
from skill_server.tools.ray_cluster import commands
from skill_server.tools.ray_cluster.common import MAX_LINES, RayView, ask_ray, find_cluster, node_fields, run_fields
from skill_server.tools.ray_cluster.models import DEFAULT_PORT, RayClusterInput, RayClusterOutput
from skill_server.tools.ray_cluster.status_text import parse_version

POLL_S = 2.0
NEXT_WAIT_S = 10
DEFAULT_MAX_TIME_S = 7 * 86400
DEFAULT_LOG_DIR = "auto_agent/ray_cluster"
CHECK_TIMEOUT_S = 120.0


def check_workers(values: list[str] | None, head: str) -> list[str]:
    workers: list[str] = []
    for i, value in enumerate(values or []):
        host = normalise(value, field=f"workers.{i}")
        if host == head:
            raise ToolInputError(f"{host} is the head; a worker must be another host", field=f"workers.{i}")
        if host in workers:
            raise ToolInputError(f"{host} is listed twice", field=f"workers.{i}")
        workers.append(host)
    return workers


def head_address(given: str | None, head: str, workers: list[str]) -> tuple[str, str | None]:
    """(the address workers join, a note when it looks wrong for them)."""
    if given is not None:
        return commands.check_address(given), None
    if head == LOCAL:
        if workers:
            raise ToolInputError("give the address the workers reach this machine at (its IP or name on the "
                                 "cluster network): the head is 'local'", field="head_address")
        return "127.0.0.1", None
    name = configured_hostname(head)
    if name is None:
        raise ToolInputError(f"ssh -G could not tell which host {head!r} connects to; give head_address",
                             field="head_address")
    try:
        loopback = ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = name == "localhost"
    note = None
    if loopback and workers:
        note = (f"the head's address {name} is a loopback address (from ssh's HostName for {head}): workers on "
                "other machines cannot reach it; give head_address if they do not join")
    return name, note


def _host_field(host: str, head: str, workers: list[str]) -> str:
    return "head" if host == head else f"workers.{workers.index(host)}"


def preflight(nodes: list[str], head: str, workers: list[str], ray: str, require_free: float | None,
              deadline: Deadline | None = None) -> str | None:
    """Check every node before anything starts; raise what refuses the start, return the head's Ray version."""
    version = commands.version_op(ray)
    ops = [version, *nvidia_smi.query_ops()] if require_free is not None else [version]
    replies = call_hosts({h: ops for h in nodes}, timeout_s=CHECK_TIMEOUT_S, deadline=deadline)
    versions: dict[str, str] = {}
    gpu_problems: list[str] = []
    for host in nodes:
        reply = replies[host]
        field = _host_field(host, head, workers)
        if isinstance(reply, HostUnreachable):
            raise ToolFailure(reply.message, field=field)
        result = version.answer(reply[0])
        if not result["ok"]:
            raise ToolFailure(f"{ray} --version failed on {host}: {result['error'] or 'exit None'}", field="ray")
        if result["error"] or result["returncode"] != 0:
            detail = result["error"] or (result["stderr"].strip().splitlines() or [""])[-1]
            if result["timed_out"]:
                detail = f"it did not answer within {commands.VERSION_TIMEOUT_S} s"
            raise ToolFailure(f"{ray} --version failed on {host}: {detail or 'exit ' + str(result['returncode'])}",
                              field="ray")
        versions[host] = parse_version(result["stdout"]) or "unknown"
        if require_free is not None:
            gpu_problems += free_problems(from_reply(host, reply, first=1), require_free)
    if len(set(versions.values())) > 1:
        listing = ", ".join(f"{h} {v}" for h, v in versions.items())
        raise ToolFailure(f"the nodes run different Ray versions ({listing}); Ray nodes must run the same one",
                          field="ray")
    if gpu_problems:
        raise ToolFailure("refusing to start: " + "; ".join(gpu_problems), field="require_free_gpus")
    return versions.get(head)


def _launch(inp: RayClusterInput, head: str, workers: list[str], ray: str, port: int, address: str,
            common: list[str], head_only: list[str], deadline: Deadline) -> str:
    """Start the cluster's run (``common``: checked ray_args, ``head_only``: checked head_args); its id."""
    join = inp.join_timeout_s or commands.DEFAULT_JOIN_TIMEOUT_S
    processes = [ProcessSpec(role="head", command=commands.head_command(ray, port, inp.num_gpus, inp.num_cpus,
                                                                        common, head_only))]
    for i, worker in enumerate(workers):
        processes.append(ProcessSpec(role=f"worker{i + 1}", host=worker, command=commands.worker_command(
            ray, address, port, join, inp.num_gpus, inp.num_cpus, common)))
    launched = launch(LaunchInput(
        name=inp.name or f"ray_{port}", host=head, workdir=inp.workdir or "~",
        result_dir=inp.log_dir or DEFAULT_LOG_DIR, env=inp.env, max_time_s=inp.max_time_s or DEFAULT_MAX_TIME_S,
        processes=processes), deadline)
    with open_registry() as reg:
        row = reg.get(launched.id)
        if row is not None:
            cluster = RayCluster(head=head, workers=tuple(workers), port=port, address=f"{address}:{port}", ray=ray)
            reg.update_spec(row.id, dataclasses.replace(row.spec, ray_cluster=cluster))
    return launched.id


#: What the wait for the nodes leaves of the call's deadline for its closing status.
STATUS_RESERVE_S = 6.0


def _ended(view: View) -> str | None:
    """Why waiting is pointless: a ray start process is no longer running."""
    for p in view.procs:
        if p.state not in ("running", "waiting", "unreachable"):
            code = f", exit {p.exit_code}" if p.exit_code is not None else ""
            return f"{p.role} on {p.proc.host} is {p.state}{code}: see lines and its log {p.log_path}"
    return None


def start_cluster(inp: RayClusterInput, head: str, progress: Progress | None) -> RayClusterOutput:
    port = inp.port or DEFAULT_PORT
    workers = check_workers(inp.workers, head)
    ray = commands.check_ray(inp.ray)
    check_env(inp.env, "env")
    timeout = WAIT_DEFAULT_S if inp.timeout_s is None else min(inp.timeout_s, WAIT_MAX_S)
    started = time.monotonic()
    answer = Deadline.call()  # the whole start (checks, launch, the wait for the nodes) answers by it
    notes: list[str] = []
    with open_registry() as reg:
        upkeep.finish_interrupted_launches(reg)
        found = find_cluster(reg, inp, head)
        if found is not None and observe(reg, [found[0]], deadline=answer.share(40.0),
                                         upkeep=upkeep.HEAL)[0].state not in ("running", "unreachable"):
            found = None  # an ended cluster of the same name: start a new one
    version: str | None = None
    if found is not None:
        row, meta = found
        if list(meta.workers) != workers:
            raise ToolFailure(f"a cluster on {head} port {port} is already running with workers "
                              f"{list(meta.workers)} (id {row.id}); stop it first, or call start with the same "
                              "workers to keep waiting for it", field="workers")
        ray = meta.ray or ray
        notes.append(f"already running (id {row.id}): waiting for it, nothing started")
        exp_id = row.id
    else:
        address, note = head_address(inp.head_address, head, workers)
        if note:
            notes.append(note)
        common = commands.check_options(inp.ray_args, "ray_args")
        head_only = commands.check_options(inp.head_args, "head_args")
        version = preflight([head] + workers, head, workers, ray, inp.require_free_gpus, answer.share(40.0))
        exp_id = _launch(inp, head, workers, ray, port, address, common, head_only, answer.share(5.0))
    return _wait(exp_id, head, workers, port, ray, version, timeout, started, notes, progress, answer)


def _alive(view: RayView) -> int | None:
    return view.status.alive if view.status else None


def _readiness(view: RayView, expected: int, ended: str | None) -> tuple[bool, str | None]:
    """(ready, why not): ready once every node is alive and no ray start process has ended."""
    alive = _alive(view)
    if alive is not None and alive >= expected and ended is None:
        return True, None
    return False, ended or view.reason or f"{alive}/{expected} nodes alive so far"


def _wait(exp_id: str, head: str, workers: list[str], port: int, ray: str, version: str | None, timeout: int,
          started: float, notes: list[str], progress: Progress | None, answer: Deadline) -> RayClusterOutput:
    expected = 1 + len(workers)
    with open_registry() as reg:
        row: Row | None = reg.get(exp_id)
        if row is None or row.spec.ray_cluster is None:
            raise ToolFailure(f"the cluster's run {exp_id} vanished from the registry", field="id")
        address = row.spec.ray_cluster.address
        deadline = min(started + timeout, answer.end - STATUS_RESERVE_S)
        looks = Deadline(0.0, end=max(time.monotonic() + 3.0, deadline))
        ended: str | None = None
        ray_view = RayView(version, None, "not asked yet")
        while True:
            view = observe(reg, [row], deadline=looks, upkeep=upkeep.HEAL)[0]
            ended = _ended(view)
            left = deadline - time.monotonic()
            if ended is None:
                ray_view = ask_ray(head, ray, address, with_version=version is None, timeout_s=max(3.0, left),
                                   deadline=looks)
                version = version or ray_view.version
            alive = _alive(ray_view)
            waited = time.monotonic() - started
            if ended is not None or (alive is not None and alive >= expected) or time.monotonic() >= deadline:
                break
            if progress is not None:
                progress(round(waited, 1), float(timeout),
                         f"{alive if alive is not None else '?'}/{expected} nodes alive")
            time.sleep(min(POLL_S, max(0.1, deadline - time.monotonic())))
            row = reg.get(exp_id) or row
        fields = observe_with_lines(reg, [reg.get(exp_id) or row], None, MAX_LINES, deadline=answer,
                                    upkeep=upkeep.HEAL)[0]
    ready, reason = _readiness(ray_view, expected, ended)
    waited = round(time.monotonic() - started, 2)
    if progress is not None:
        progress(float(timeout), float(timeout), "ready" if ready else (reason or "waiting"))
    return RayClusterOutput(
        summary="",  # ray_cluster() writes it
        action="start", **run_fields(fields), head=head, workers=workers, port=port, address=address,
        ray_version=version, expected_nodes=expected, ready=ready, **node_fields(ray_view), reason=reason,
        waited_s=waited, timeout_s=timeout, next_wait_s=0 if ready or ended else NEXT_WAIT_S,
        note="; ".join(notes) or None)
