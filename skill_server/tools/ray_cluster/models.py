"""Input and output models of ``ray_cluster`` (one tool, three actions: start, status, stop)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictInt, StrictStr

from skill_server.core.models import NonNegativeInt, PositiveInt, ToolInput, ToolOutput
from skill_server.experiments.models import HOST_DESCRIPTION, MAX_PROCESSES, Duration, ProcessInfo, ProcessRef, State
from skill_server.gpus.models import FreeFraction, GpuHost

#: Every node is one process of the cluster's run; the head takes one of them.
MAX_WORKERS = MAX_PROCESSES - 1
DEFAULT_PORT = 6379
RayArg = Annotated[StrictStr, Field(min_length=3, max_length=1000)]
Host = Annotated[StrictStr, Field(max_length=255)]


class RayClusterInput(ToolInput):
    action: Literal["start", "status", "stop"] = Field(
        description="start, status or stop the cluster. Start: ray start --head on head and --address on every worker "
        "(in tmux, as a run of this server), then wait (bounded) until every node shows; status: alive nodes and "
        "resources; stop: end the run, ray stop --force on every node, report what still holds GPUs.")
    head: Host | None = Field(default=None, description="Head node. " + HOST_DESCRIPTION)
    workers: list[Host] | None = Field(default=None, max_length=MAX_WORKERS,
                                       description="Worker nodes (ssh destinations or 'local'), each a different "
                                       "host from the head.")
    ray: StrictStr | None = Field(default=None, max_length=4096,
                                  description="The ray executable of the training venv on every node, e.g. "
                                  "'/data/venv/bin/ray' ('~/' is the node's home). Default 'ray' from the node's "
                                  "PATH, which for ssh sessions rarely includes a venv.")
    port: StrictInt | None = Field(default=None, ge=1, le=65535, description="The head's GCS port (default 6379).")
    id: StrictStr | None = Field(default=None, max_length=200,
                                 description="status/stop: the cluster's id from start (default: the newest cluster "
                                 "this server started on head and port).")
    name: StrictStr | None = Field(default=None, max_length=64,
                                   description="Session name (default 'ray_<port>', shown as 'ajet_ray_<port>').")
    head_address: StrictStr | None = Field(
        default=None, max_length=255, description="start: the address workers reach the head at (IP or name). "
        "Default: the HostName ssh connects to for head; required when head is 'local' and there are workers.")
    num_gpus: NonNegativeInt | None = Field(default=None, le=4096,
                                            description="start: --num-gpus for every node (default: Ray detects).")
    num_cpus: NonNegativeInt | None = Field(default=None, le=65536,
                                            description="start: --num-cpus for every node (default: Ray detects).")
    ray_args: list[RayArg] | None = Field(default=None, max_length=32,
                                          description="start: extra 'ray start' options for every node. Each "
                                          "'--name=value' or '--flag' (e.g. '--object-store-memory=10000000000').")
    head_args: list[RayArg] | None = Field(default=None, max_length=32,
                                           description="start: options for the head only (e.g. "
                                           "'--include-dashboard=false', '--node-ip-address=10.0.0.5').")
    env: dict[str, StrictStr] | None = Field(default=None, description="start: environment of every ray start "
                                             "(e.g. CUDA_VISIBLE_DEVICES, RAY_* settings).")
    workdir: StrictStr | None = Field(default=None, max_length=4096,
                                      description="start: directory ray start runs in on every node (default '~').")
    log_dir: StrictStr | None = Field(default=None, max_length=4096,
                                      description="start: where each node's ray start log goes, absolute or relative "
                                      "to workdir (default 'auto_agent/ray_cluster').")
    max_time_s: Duration | None = Field(default=None, description="start: the cluster's lifetime (default 7 days); "
                                        "at the end the run monitor on each node stops it.")
    require_free_gpus: FreeFraction | None = Field(
        default=None, description="start: refuse unless every GPU has this fraction of memory free. For example 0.95; "
        "the refusal names the pids holding memory.")
    timeout_s: NonNegativeInt | None = Field(default=None, le=3600,
                                             description="start: wait at most this long for every node (default 30, "
                                             "clamped to 50); call start again to keep waiting.")
    join_timeout_s: PositiveInt | None = Field(default=None, le=3600,
                                               description="start: a worker gives up (exit 124) when the head's port "
                                               "does not answer within this many seconds (default 300).")
    kill_gpu_processes: StrictBool | None = Field(
        default=None, description="stop: also end the ssh user's processes still holding GPU memory. Only those owned "
        "by the ssh user, after ray stop (SIGTERM, grace_s, SIGKILL). Default false: only report them.")
    grace_s: NonNegativeInt | None = Field(default=None, le=120,
                                           description="stop: seconds between Ctrl-C/SIGTERM and SIGKILL (default 10).")


class RayResource(ToolOutput):
    used: float | None
    total: float | None
    unit: Literal["count", "bytes"] = Field(description="bytes: memory figures as rounded by ray status.")


class RayNode(ToolOutput):
    node_id: str
    resources: dict[str, RayResource]


class RayStopReport(ToolOutput):
    host: str
    ok: bool = Field(description="ray stop --force ran and exited 0.")
    message: str | None = Field(description="Its last line ('Stopped all N Ray processes.', 'Did not find any "
                                "active Ray processes.'), or why it could not run.")


class GpuProcessOutcome(ToolOutput):
    host: str
    pid: int
    name: str
    signal: str = Field(default="", description="The last signal sent (SIGTERM or SIGKILL); empty if none was.")
    reason: str | None = Field(default=None, description="Why it was left alone (skipped) or survived.")


class RayClusterOutput(ToolOutput):
    summary: str = Field(description="One line to quote: the cluster's state and what to do next.")
    action: str
    id: str | None = Field(description="The cluster's run id (experiment_status/stop_experiment accept it too); "
                           "null for a cluster this server did not start.")
    session: str | None
    state: State | None = Field(description="State of the cluster's run (running, failed, stopped, ...); null "
                                "without a run.")
    head: str
    workers: list[str]
    port: int
    address: str | None = Field(description="head_address:port, what workers joined.")
    ray_version: str | None = Field(description="ray --version on the head (null when it could not run).")
    expected_nodes: int
    alive_nodes: int | None = Field(description="Nodes ray status lists as alive; null when ray status could not "
                                    "be read (see reason).")
    ready: bool = Field(description="Every expected node is alive.")
    nodes: list[RayNode] | None
    resources: dict[str, RayResource] | None = Field(description="Cluster totals from ray status.")
    pending: list[str] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)
    reason: str | None = Field(description="Why the cluster is not ready or its status is unknown.")
    processes: list[ProcessInfo] = Field(default_factory=list, description="One ray start per node: state, log.")
    lines: list[str] = Field(default_factory=list, description="New log lines of the ray start processes.")
    waited_s: float = 0.0
    timeout_s: int = 0
    next_wait_s: int = Field(default=0, description="start: call start again after this many seconds to keep "
                             "waiting (0 when ready or ended).")
    ray_stop: list[RayStopReport] = Field(default_factory=list)
    killed_processes: list[ProcessRef] = Field(default_factory=list, description="stop: processes of the run that "
                                               "needed SIGTERM/SIGKILL.")
    still_alive: list[ProcessRef] = Field(default_factory=list)
    gpus: list[GpuHost] = Field(default_factory=list, description="stop: every node's GPUs after the stop.")
    gpu_processes_killed: list[GpuProcessOutcome] = Field(default_factory=list)
    gpu_processes_left: list[GpuProcessOutcome] = Field(default_factory=list,
                                                        description="GPU processes skipped or surviving, with why.")
    note: str | None = None
