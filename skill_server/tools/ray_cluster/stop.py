"""``ray_cluster stop``: end the cluster's run, ``ray stop --force`` on every node, report (or end) GPU users.

1. ``stop_experiment`` on the cluster's run: Ctrl-C to each ``ray start --block`` (Ray then ends its
   daemons), grace, SIGTERM/SIGKILL to every process carrying the run's marker, verified.
2. On every node at once, one round trip each: ``ray stop --force`` (it ends every Ray process of the
   ssh user it can see there, also ones this server did not start, which is what cleaning a node for
   the next run needs), then nvidia-smi's two queries.
3. What still holds GPU memory is reported. Only with ``kill_gpu_processes`` is it ended, and then only
   processes the ssh user owns that really hold an nvidia device on that node (``gpus.reclaim``);
   nvidia-smi is asked again in the same round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolFailure
from skill_server.experiments.stopping import stop_run
from skill_server.experiments.store import open_registry
from skill_server.gpus import nvidia_smi, reclaim
from skill_server.gpus.models import GpuHost
from skill_server.gpus.query import CALL_TIMEOUT_S, from_reply
from skill_server.hosts import HostUnreachable, Reply, call_hosts, client
from skill_server.tools.ray_cluster import commands
from skill_server.tools.ray_cluster.common import default_session, find_cluster
from skill_server.tools.ray_cluster.models import (
    DEFAULT_PORT,
    GpuProcessOutcome,
    RayClusterInput,
    RayClusterOutput,
    RayStopReport,
)
from skill_server.tools.ray_cluster.status_text import last_message

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import ReclaimReply, RunReply

RAY_STOP_TIMEOUT_S = 90


#: Of a stop's deadline: what the run's stop leaves for ray stop and the reclaim, and ray stop for the reclaim.
RAY_STOP_RESERVE_S = 20.0
RECLAIM_RESERVE_S = 8.0

def _ray_stop_report(host: str, ray_stop: client.Op[RunReply], reply: Reply) -> RayStopReport:
    if isinstance(reply, HostUnreachable):
        return RayStopReport(host=host, ok=False, message=f"unreachable: {reply.reason}")
    result = ray_stop.answer(reply[0])
    if not result["ok"] or result["error"]:
        return RayStopReport(host=host, ok=False, message=str(result["error"]))
    if result["timed_out"]:
        return RayStopReport(host=host, ok=False, message=f"ray stop did not finish within {RAY_STOP_TIMEOUT_S} s")
    text = result["stderr"] + "\n" + result["stdout"]
    return RayStopReport(host=host, ok=result["returncode"] == 0, message=last_message(text))


def _holders(gpus: list[GpuHost]) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for host in gpus:
        for gpu in host.gpus or []:
            for p in gpu.processes or []:
                if (p.pid, p.name) not in out.setdefault(host.host, []):
                    out[host.host].append((p.pid, p.name))
    return out


def _outcomes(host: str, found: list[tuple[int, str]], reason: str | None) -> list[GpuProcessOutcome]:
    """The GPU users found on ``host``, each left alone for ``reason``."""
    return [GpuProcessOutcome(host=host, pid=pid, name=name, reason=reason) for pid, name in found]


def _reclaimed(host: str, found: list[tuple[int, str]], report: ReclaimReply
               ) -> tuple[list[GpuProcessOutcome], list[GpuProcessOutcome]]:
    """(ended, still there) from one host's reclaim report: those alive after SIGKILL, then those it skipped."""
    names = dict(found)
    ended = [GpuProcessOutcome(host=host, pid=x["pid"], name=x["name"], signal=x["signal"]) for x in report["killed"]]
    alive = [GpuProcessOutcome(host=host, pid=x["pid"], name=x["name"], signal=x["signal"],
                               reason="alive after SIGKILL") for x in report["survivors"]]
    alive += [GpuProcessOutcome(host=host, pid=x["pid"], name=x["name"] or names.get(x["pid"], ""), reason=x["reason"])
              for x in report["skipped"]]
    return ended, alive


def stop_cluster(inp: RayClusterInput, head: str) -> RayClusterOutput:
    port = inp.port or DEFAULT_PORT
    with open_registry() as reg:
        cluster = find_cluster(reg, inp, head)
    if cluster is None:
        raise ToolFailure(f"no Ray cluster started by this server on {head} port {port} (session "
                          f"{default_session(inp)}): ray_cluster stop only stops clusters it started; to clean a "
                          "node by hand run 'ray stop --force' there", field="head")
    row, meta = cluster
    head, workers, ray = meta.head, list(meta.workers), meta.ray or "ray"
    if inp.ray is not None:
        ray = commands.check_ray(inp.ray)
    grace = 10 if inp.grace_s is None else inp.grace_s
    bound = Deadline.call()  # the run's stop, ray stop on every node, the GPU reclaim: all by it
    stopped = stop_run(row.id, grace, bound.share(RAY_STOP_RESERVE_S))
    nodes = [head] + workers
    ray_stop = client.run(commands.ray_argv(ray, "stop", "--force"), timeout_s=RAY_STOP_TIMEOUT_S,
                          max_output=256 * 1024)
    ops = [ray_stop, *nvidia_smi.query_ops()]
    replies = call_hosts({h: ops for h in nodes}, timeout_s=RAY_STOP_TIMEOUT_S + CALL_TIMEOUT_S,
                         deadline=bound.share(RECLAIM_RESERVE_S))
    reports = [_ray_stop_report(h, ray_stop, replies[h]) for h in nodes]
    gpus = [from_reply(h, replies[h], first=1) for h in nodes]
    killed: list[GpuProcessOutcome] = []
    left: list[GpuProcessOutcome] = []
    holders = _holders(gpus)
    if inp.kill_gpu_processes and holders:
        requests: dict[str, list[client.Op[Any]]] = {
            h: [reclaim.reclaim_op([pid for pid, _ in found], float(grace)), *nvidia_smi.query_ops()]
            for h, found in holders.items()}
        answers = call_hosts(requests, timeout_s=grace + reclaim.KILL_WAIT_S + 30 + CALL_TIMEOUT_S,
                             deadline=bound)
        for h, found in holders.items():
            answer = answers[h]
            report, failure = reclaim.read_result(answer)
            if report is None:
                left += _outcomes(h, found, failure)
                continue
            ended, alive = _reclaimed(h, found, report)
            killed += ended
            left += alive
            gpus[nodes.index(h)] = from_reply(h, answer, first=1)
    elif holders:
        left = [o for h, found in holders.items()
                for o in _outcomes(h, found, "still holds GPU memory; not ended (kill_gpu_processes is false)")]
    notes = [stopped.note] if stopped.note else []
    if left:
        notes.append(f"{len(left)} process(es) still hold GPU memory: see gpu_processes_left")
    # a stop's answer is never "stalled" (nor "queued": a Ray cluster is no scheduler's job)
    state = "running" if stopped.state == "stalled" or stopped.state == "queued" else stopped.state
    return RayClusterOutput(
        summary="",  # ray_cluster() writes it
        action="stop", id=row.id, session=row.session, state=state, head=head, workers=workers, port=port,
        address=meta.address, ray_version=None, expected_nodes=len(nodes), alive_nodes=None, ready=False,
        nodes=None, resources=None, reason=None, processes=stopped.processes, lines=stopped.lines,
        ray_stop=reports, killed_processes=stopped.killed_processes, still_alive=stopped.still_alive, gpus=gpus,
        gpu_processes_killed=killed, gpu_processes_left=left, note="; ".join(notes) or None)
