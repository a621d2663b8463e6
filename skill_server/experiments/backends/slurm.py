"""The Slurm backend: the run is one batch job submitted from its host (the login node; the host agent's
``backend_slurm``); its processes and its monitor run inside the allocation, and the host agent asks Slurm (and
reads the job's ``job.json``) for their state. Its launch option is the launch input's ``slurm`` (``OPTIONS``:
sbatch's options; references/remote-and-multinode.md)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, StrictStr

from skill_server.core.errors import ToolInputError
from skill_server.core.models import PositiveInt, ToolInput
from skill_server.hosts import LOCAL, HostUnreachable, call_hosts, client

if TYPE_CHECKING:
    from skill_server.experiments.backends import JobNodes, LaunchContext
    from skill_server.experiments.spec import HostRecord
    from skill_server.gpus.models import GpuHost
    from skill_server.hosts.agent.protocol import BackendChoice, LaunchPlan


class SlurmSpec(ToolInput):
    # sbatch's options for a run submitted as one Slurm job (references/remote-and-multinode.md)

    partition: StrictStr | None = Field(default=None, max_length=200)
    nodes: PositiveInt | None = Field(default=None, le=1024)
    gpus_per_node: Annotated[int, Field(strict=True, ge=0, le=64)] | None = None
    cpus_per_task: PositiveInt | None = Field(default=None, le=4096)
    mem: StrictStr | None = Field(default=None, pattern=r"^[0-9]+[KMGT]?$")  # per node
    account: StrictStr | None = Field(default=None, max_length=200)
    qos: StrictStr | None = Field(default=None, max_length=200)
    extra_args: list[Annotated[StrictStr, Field(pattern=r"^-", max_length=500)]] | None = Field(
        default=None, max_length=20)  # more sbatch options


OPTIONS = SlurmSpec

#: The nodes of a Slurm job, one per line (``scontrol show hostnames`` of its NodeList, not of ReqNodeList or
#: ExcNodeList), asked on the login node.
_JOB_NODES = ('info=$(scontrol show job -o "$0") || exit 1; case "$info" in *" JobState=RUNNING "*) ;; '
              '*) echo "$info" | grep -o "JobState=[^ ]*" >&2; exit 3;; esac; '
              'nodes=$(echo "$info" | grep -o " NodeList=[^ ]*" | cut -d= -f2) && scontrol show hostnames "$nodes"')


#: The most nodes of one job that are asked (GPUs, preflight).
MAX_NODES = 64


class Slurm:
    name = "slurm"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = options or {}

    def configure(self, options: Any, context: LaunchContext) -> Slurm:
        """Every process runs inside the job's allocation (so none names a host of its own), which gets its GPUs
        from Slurm (the login node's say nothing); a stop from inside the job cancels it, and a relaunch would be
        a new sbatch, which is not done here."""
        if context.other_host_field is not None:
            raise ToolInputError("with slurm every process runs in the job's allocation: give no host of its own",
                                 field=context.other_host_field)
        if context.gpus_required:
            raise ToolInputError("not with slurm: the job gets its GPUs from Slurm (slurm.gpus_per_node)",
                                 field="require_free_gpus")
        if "max_resumes" in context.policy:
            field = "policy.on_error" if context.policy.get("on_error") == "resume" else "policy.on_stall"
            raise ToolInputError("resume is not done with slurm: use stop (the job is cancelled) and launch again",
                                 field=field)
        return Slurm(options.model_dump(exclude_none=True))

    def choice(self, replace_pids: Sequence[int]) -> BackendChoice:
        """The time limit is the run's max time (Slurm enforces it); the run's monitor runs inside the job."""
        return {"kind": self.name, "options": dict(self.options)}

    def attach(self, host: str, plan: LaunchPlan) -> str:
        """Its first process's log, followed (``tail -F``; over ssh for a remote login node)."""
        follow = shlex.join(plan["attach"])
        if not follow:
            return ""
        return follow if host == LOCAL else f"ssh {shlex.quote(host)} {shlex.quote(follow)}"

    scheduler = "Slurm"

    def job_nodes_op(self, job_id: str) -> client.Op[Any]:
        return client.run(["sh", "-c", _JOB_NODES, str(job_id)], timeout_s=20)

    def job_nodes(self, reply: Any, job_id: str) -> JobNodes:
        from skill_server.experiments.backends import JobNodes

        listed = client.answer(reply, client.run)
        command = f"scontrol show job {job_id}"
        if listed["ok"] and listed["returncode"] == 0 and listed["stdout"].split():
            return JobNodes(listed["stdout"].split()[:MAX_NODES], command)
        why = (listed.get("stderr") or "").strip().splitlines() if listed["ok"] else [listed["error"]]
        return JobNodes([], command, why[-1] if why else "not queued or ended",
                        "start the allocation first (salloc or sbatch), then pass its job id")

    def on_node(self, job_id: str, node: str) -> list[str]:
        """An ``srun --jobid --overlap`` step on one node: it starts at once even while the job's steps hold
        every CPU."""
        return ["srun", f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node}"]

    def allocation_gpus(self, host: str, where: HostRecord) -> list[GpuHost] | None:
        """The GPUs of every node of the running job as the job's processes see them: from the login node,
        nvidia-smi on each node (``on_node``). Two round trips: the job's nodes, then every node's two queries."""
        from skill_server.gpus import nvidia_smi
        from skill_server.gpus.query import CALL_TIMEOUT_S, from_reply

        job_id = where.handle.get("job_id")
        if not job_id:
            raise ToolInputError("has no Slurm job (its launch did not finish)", field="experiment")
        label = f"{host}: Slurm job {job_id}"
        reply = call_hosts({host: [self.job_nodes_op(str(job_id))]}, timeout_s=CALL_TIMEOUT_S)[host]
        if isinstance(reply, HostUnreachable):
            return [nvidia_smi.unreachable(label, reply.reason)]
        listed = self.job_nodes(reply[0], str(job_id))
        if not listed.nodes:
            return [nvidia_smi.unreachable(label, f"no nodes: the job is not running ({listed.why})")]
        ops = [op for node in listed.nodes for op in nvidia_smi.query_ops(self.on_node(str(job_id), node))]
        replies = call_hosts({host: ops}, timeout_s=CALL_TIMEOUT_S + 5 * len(listed.nodes))[host]
        return [from_reply(node, replies, first=2 * i) if not isinstance(replies, HostUnreachable)
                else nvidia_smi.unreachable(node, replies.reason) for i, node in enumerate(listed.nodes)]


BACKEND = Slurm()
