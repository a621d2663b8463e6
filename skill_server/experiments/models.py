"""Input and output models of the experiment tools (one place, so every tool speaks the same words).

States: ``running``; ``succeeded`` (every process exited 0); ``failed`` (a process exited non-zero);
``stopped`` (by ``stop_experiment``; a scheduler's job cancelled); ``timed_out`` (stopped at its max time by the
run's monitor on its host, or by its scheduler's time limit); ``lost`` (a process vanished without an exit code:
its tmux server died or it was killed); ``unreachable`` (a host of the run could not be asked: nothing is
known and nothing is recorded, the next call asks again). The first five final states are recorded once and
never change. ``stalled`` is what status says of a running run whose processes live but whose progress
stopped for longer than the bound its monitor derives from the run's pace (``hosts.agent.stall``); the
registry keeps calling it running, as it does ``queued``: a run whose scheduler's job is still in its queue.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, StrictInt, StrictStr

from skill_server.core.models import PositiveInt, ToolInput, ToolOutput
from skill_server.experiments.backends.slurm import SlurmSpec
from skill_server.gpus.models import FreeFraction
from skill_server.hosts.agent import outcome

State = Literal["running", "succeeded", "failed", "stopped", "timed_out", "lost", "unreachable"]
#: A run's state as status reports it: ``stalled`` is a running run whose progress stopped; ``queued`` one whose
#: scheduler's job waits in its queue.
StatusState = Literal["running", "queued", "stalled", "succeeded", "failed", "stopped", "timed_out", "lost",
                      "unreachable"]
ProcessState = Literal["running", "waiting", "succeeded", "failed", "stopped", "timed_out", "lost", "unreachable"]
TERMINAL = outcome.TERMINAL

#: Longest accepted max time or first-step deadline (arguments and blueprints alike): one leap year, in seconds.
MAX_DURATION_S = 366 * 86400
MAX_PROCESSES = 8
MAX_HISTORY_POINTS = 5000
DEFAULT_HISTORY_POINTS = 200
MAX_ENV_VARS = 200
MAX_ENV_VALUE = 32 * 1024
ROLE_RE = r"^[A-Za-z0-9_-]{1,32}$"
#: Starts with a capital so that a field that puts its own sentence first publishes only that sentence.
HOST_DESCRIPTION = ("Either 'local' (default) or an ssh destination ('gpu1', 'user@10.0.0.5', 'ssh://user@host:2222'). "
                    "An ssh destination is an alias from your ssh config or user@host[:port].")
Duration = Annotated[int, Field(strict=True, ge=1, le=MAX_DURATION_S)]
PolicyAction = Literal["notify", "stop", "resume"]
#: A metric name or fnmatch glob ('critic/score/*'), as the history, plot and comparison inputs take them.
MetricPattern = Annotated[StrictStr, Field(min_length=1, max_length=200)]
#: An experiment id or session name naming another run (overlays, comparisons).
RunKey = Annotated[StrictStr, Field(min_length=1, max_length=200)]


class RunPolicy(ToolInput):
    """What the run's monitor does alone on its host. See references/monitoring.md."""

    # Each description's first sentence is what the tool list publishes; the rest is references/tools.md's.
    on_error: PolicyAction | None = Field(
        default=None, description="On a matched error signature: notify, stop, or resume, which relaunches only after "
        "a transient one such as nccl_error. Default null: errors are only reported (status, wait, the notify file "
        "and command). resume stops the run, waits backoff_s and relaunches it from its newest global_step_N "
        "checkpoint, only after a signature classified transient (NCCL errors and collective timeouts); any other "
        "matched signature is stopped, never resumed.")
    errors: list[Annotated[StrictStr, Field(max_length=64)]] = Field(
        default=["error"], max_length=40, description="Signature ids or severities on_error acts on. The default "
        "[\"error\"] is every error-severity signature, never a warning; ids are in references/error-signatures.md, "
        "so [\"nccl_error\"] acts on NCCL failures alone and leaves other errors to end the run by themselves. Only "
        "with on_error.")
    on_stall: PolicyAction | None = Field(
        default=None, description="On a stall: notify, stop or resume. Default null: a stall is only reported. A run "
        "stalls when its processes live but its newest step line is older than max(stall_floor_s, stall_k x median "
        "step time); before the first step the first-step deadline governs, never the stall bound. resume relaunches "
        "from the newest checkpoint (a hang that prints no error line).")
    on_end: Literal["notify", "collect"] | None = Field(
        default=None, description="At the experiment's end: notify, or collect its results where its blueprint wants "
        "them. Default null. collect writes results.md (every attempt, metrics merged by step) in <result_dir>/<id>/ "
        "and beside finish.flag in <result_dir> on the main host, at the last attempt's end; finish.flag only when it "
        "succeeded or timed out. Neither starts or stops anything.")
    on_first_step_overdue: Literal["notify", "stop"] | None = Field(
        default=None, description="When no first step comes by the first-step deadline: notify or stop. Default null: "
        "it is only reported (status first_step_overdue, and a stall line to notify_file and notify_command). stop "
        "ends a run stuck before step 1 that keeps logging, which on_stall never judges.")
    notify_file: StrictStr = Field(
        default="", max_length=4096, description="File on the run's host that gets one line per happening. Default "
        "empty: none. Each line is '<UTC time> <run id> <kind>: <text>', appended at once, for started, first_step, "
        "failure, stall, restart, stopped and end, in that order (references/monitoring.md); a warning is never a "
        "failure. A relative path is in the run's workdir; it is created 0600 and never replaced.")
    notify_command: StrictStr = Field(
        default="", max_length=4000, description="Shell command told each happening. Default empty: nobody is told. "
        "It runs with /bin/sh -c on the run's host with one happening as one JSON line on stdin (its kind, text and "
        "fields; the same happenings as notify_file), at most 10 s each, one at a time in order; a failure is "
        "counted in actions, never retried, and never stops the run.")
    stall_k: float = Field(
        default=5, ge=1, le=1000, description="Stall bound in median step times. The bound is max(stall_floor_s, "
        "stall_k x median step time): a run stepping every 4 min stalls after 20 min at the default 5.")
    stall_floor_s: Duration = Field(
        default=900, description="Shortest quiet time that counts as a stall, in seconds; the default outlasts NCCL's "
        "600 s watchdog. So a collective that hangs shows first as the nccl_error signature when NCCL's watchdog "
        "ends it (on_error), and a stall catches a hang that prints nothing; keep it above the run's longest quiet "
        "phase (a final validation, a checkpoint save), or on_stall stop ends a healthy run.")
    max_resumes: int = Field(
        default=2, strict=True, ge=0, le=20, description="Most relaunches by resume. The failure after the last one "
        "is stopped, never resumed ('gave up after N resumes'); 0 makes resume a stop.")
    backoff_s: int = Field(
        default=60, strict=True, ge=0, le=3600, description="Seconds from a resume's stop to its relaunch. A "
        "stop_experiment in that time cancels the relaunch.")


class ProcessSpec(ToolInput):
    role: StrictStr = Field(pattern=ROLE_RE, description="Window name and log suffix, e.g. 'server', 'client1'.")
    command: StrictStr = Field(min_length=1, max_length=16000, description="Shell command of this process.")
    host: StrictStr | None = Field(default=None, max_length=255,
                                   description="Host of this process (default: the experiment's host). "
                                   + HOST_DESCRIPTION)
    workdir: StrictStr | None = Field(default=None, max_length=4096,
                                      description="Absolute directory on its host; default: the top-level workdir.")
    env: dict[str, StrictStr] | None = Field(default=None, description="Extra variables (on top of the top-level env).")
    wait_for_url: StrictStr | None = Field(default=None, max_length=2000,
                                           description="Start once this http(s) URL answers. For example the swarm "
                                           "server's port; checked from this process's host.")
    wait_for_url_timeout_s: PositiveInt | None = Field(
        default=None, le=3600, description="Give up waiting after this many seconds (default 600). Exit code 124.")
    log_path: StrictStr | None = Field(default=None, max_length=4096,
                                       description="On its host. Default: <result_dir>/<id>/<session>.<role>.log (the "
                                       "run's own folder).")


class LaunchInput(ToolInput):
    blueprint: StrictStr | None = Field(default=None, max_length=4096,
                                        description="Blueprint file: 'gpu1:~/exp/bp.md' runs on gpu1, a plain path is "
                                        "on host. It is read, checked and launched there (relative paths in it "
                                        "resolve against its folder); 'local:/path' reads one here for a run on host, "
                                        "and a relative plain path here resolves against the server's working "
                                        "directory. Its fields are defaults that explicit arguments override.")
    name: StrictStr | None = Field(default=None, max_length=64,
                                   description="Session name ([A-Za-z0-9_-]). 'ajet_' is prefixed unless it contains "
                                   "'ajet'. Default: from the blueprint purpose.")
    host: StrictStr | None = Field(default=None, max_length=255, description=HOST_DESCRIPTION)
    command: StrictStr | None = Field(default=None, max_length=16000, description="Command of a one-process run.")
    workdir: StrictStr | None = Field(default=None, max_length=4096,
                                      description="Absolute working directory on the host. '~/x' is expanded there.")
    python: StrictStr | None = Field(default=None, max_length=4096,
                                     description="Venv interpreter on the host. Its bin dir is put first on PATH.")
    env: dict[str, StrictStr] | None = Field(default=None, description="Environment set explicitly in the session.")
    result_dir: StrictStr | None = Field(default=None, max_length=4096,
                                         description="On the host; default: <workdir>/auto_agent/exp_results/. Each "
                                         "run keeps its logs and results in <result_dir>/<id>/; finish.flag goes "
                                         "here.")
    log_path: StrictStr | None = Field(default=None, max_length=4096,
                                       description="Default: <result_dir>/<id>/<session>.log (the run's own folder).")
    max_time_s: Duration | None = Field(default=None, description="Wall-clock budget in seconds (default 86400). At "
                                        "most 366 days; enforced on the host, where the run ends as timed_out.")
    first_step_timeout_s: Duration | None = Field(default=None, description="First-step deadline (default 1200).")
    first_step_pattern: StrictStr | None = Field(default=None, max_length=500,
                                                 description="Regex proving step 1. Default: the first 'step:N' "
                                                 "line with N >= 1, whatever metrics it carries.")
    processes: list[ProcessSpec] | None = Field(default=None, min_length=1, max_length=MAX_PROCESSES,
                                                description="Several processes, started in order. They are windows "
                                                "of one session per host.")
    policy: RunPolicy | None = None
    require_free_gpus: FreeFraction | None = Field(
        default=None, description="Refuse unless every GPU of the host has this fraction of memory free. AgentJet's "
        "launcher wants 0.95; the refusal names the pids holding memory. "
        "Checked with nvidia-smi in the launch's own check round; a host without nvidia-smi is refused too.")
    slurm: SlurmSpec | None = Field(default=None, description="Submit as a Slurm job from host (login node).")


class ProcessInfo(ToolOutput):
    role: str
    host: str = Field(description="'local' or the ssh destination the process runs on.")
    state: ProcessState
    exit_code: int | None
    log_path: str = Field(description="Path of the log on the process's host.")
    pid: int | None = Field(default=None, description="Wrapper pid on its host (the process group leader).")
    attach: str = Field(default="", description="Command that shows this process's tmux session.")
    reason: str | None = Field(default=None, description="Why the state is unreachable (the host's error).")


class LaunchOutput(ToolOutput):
    summary: str = Field(description="One line to quote: what started where, and the next call.")
    id: str
    session: str
    socket: str
    host: str = Field(description="The experiment's main host: its result_dir (results.md, finish.flag) is there.")
    log_path: str
    result_dir: str
    attach: str
    started_at: str
    processes: list[ProcessInfo]
    max_time_s: int
    first_step_timeout_s: int
    policy: dict[str, Any] | None = Field(default=None, description="The policy in force (every RunPolicy field, "
                                          "defaults filled in; source: the argument or the blueprint's "
                                          "[exp_policy]); null: none.")


class ErrorHit(ToolOutput):
    signature: str
    title: str
    severity: str
    line: str
    count: int
    hint: str
    role: str | None = None


class RestartInfo(ToolOutput):
    role: str = Field(description="Process whose step counter went back.")
    from_step: int
    to_step: int
    seen_at: str = Field(description="When this tool first saw the lower step (UTC).")


class ProgressInfo(ToolOutput):
    """Steps, rate and ETA; every null value is explained in ``unknown``."""

    global_step: int | None
    total_steps: int | None
    total_steps_source: str | None = Field(description="The tqdm bar in the log, or the config key and file.")
    seconds_per_step: float | None
    seconds_per_step_source: str | None = Field(description="timing_s/step in the step lines, the tqdm rate, or "
                                                "observed times of new step lines.")
    steps_per_hour: float | None
    eta_s: float | None = Field(description="(total_steps - global_step) x seconds_per_step.")
    eta_at: str | None = Field(description="Now plus eta_s (UTC).")
    restarts: list[RestartInfo] = Field(description="Times a step counter went back (resume or relaunch): the "
                                        "rate restarts there.")
    unknown: dict[str, str] = Field(description="Why each null value above is unknown.")


class CheckpointInfo(ToolOutput):
    step: int
    path: str
    size_bytes: int = Field(description="Regular files inside, summed.")
    files: int
    modified_at: str = Field(description="Newest modification inside (UTC).")
    partial: bool = Field(description="The walk's entry budget ran out inside it: size and files are lower bounds.")


class CheckpointList(ToolOutput):
    host: str | None
    directory: str | None = Field(description="Where global_step_N folders were looked for.")
    source: str | None = Field(description="How the directory was found (config key and file).")
    checkpoints: list[CheckpointInfo] = Field(description="Oldest step first.")
    more: int = Field(description="Older checkpoints not listed.")
    latest: int | None = Field(description="verl's latest_checkpointed_iteration.txt, when present.")
    truncated: bool = Field(description="The bounded walk stopped early; the list may be incomplete.")
    reason: str | None = Field(default=None, description="Why nothing could be listed, or a caveat.")


class MetricSeries(ToolOutput):
    name: str
    points: int = Field(description="Points in the step range before downsampling (one per step).")
    steps: list[int]
    last: list[float | None] = Field(description="Value at each returned step (the last of its bucket).")
    min: list[float | None] = Field(description="Smallest value of each bucket.")
    max: list[float | None] = Field(description="Largest value of each bucket.")


class MetricsHistory(ToolOutput):
    series: list[MetricSeries]
    method: str = Field(description="How points were downsampled.")
    max_points: int
    from_step: int | None
    to_step: int | None
    unmatched: list[str] = Field(description="Patterns that matched no metric of this run.")
    available: list[str] = Field(description="Metric names of this run (at most 300), when a pattern matched "
                                 "nothing.")
    note: str | None = None


class AttemptInfo(ToolOutput):
    """One attempt of an experiment (a run a resume policy relaunched is its next attempt)."""

    id: str
    attempt: int
    state: StatusState
    exit_code: int | None
    alive: bool | None = Field(description="Anything of this attempt still runs (its processes, its monitor, its "
                               "pending relaunch), as checked now; null: its host could not be asked.")
    first_step: int | None
    last_step: int | None
    resumed_from: str | None = Field(default=None, description="The checkpoint it continued from ('global_step_3 "
                                     "(path)', or 'started over'); null for the first attempt.")
    ended_by: str | None = Field(default=None, description="What ended it: its policy's action and why, its max time, "
                                 "a stop, or its exit; null while it runs.")
    log_path: str = Field(description="Its own log (each attempt writes its own).")


class MetricOutcome(ToolOutput):
    """A headline metric over every attempt, merged by step."""

    name: str
    points: int
    final: float | None
    final_step: int | None
    best: float | None
    best_step: int | None
    direction: Literal["higher", "lower"] = Field(description="Which is better, assumed from the name.")
    best_saved: bool | None = Field(default=None, description="Whether a global_step_N checkpoint of best_step exists "
                                    "(null: the checkpoints could not be listed).")
    nearest_checkpoint: int | None = Field(default=None, description="The saved step nearest best_step.")


class ExperimentInfo(ToolOutput):
    """The whole experiment an id belongs to: every attempt, its metrics merged by step, whether anything lives."""

    id: str = Field(description="The experiment's first attempt (its lineage).")
    state: str = Field(description="Its newest attempt's state, or 'relaunching' while a resume waits out its "
                       "backoff.")
    alive: bool | None = Field(description="Anything of it still runs: an attempt's processes, a monitor, a pending "
                               "relaunch (checked on its hosts now); null: a host could not be asked.")
    still_running: list[str] = Field(description="What of it still runs, each named.")
    attempts: list[AttemptInfo]
    metrics: list[MetricOutcome] = Field(description="Final and best of its headline metrics (reward, validation, "
                                         "loss) over every attempt: a later attempt's points replace the earlier's "
                                         "from its first step on.")


class ExperimentStatus(ToolOutput):
    summary: str = Field(description="One line to quote: the run's state and what to do next.")
    id: str
    session: str
    socket: str
    host: str
    attach: str
    state: StatusState
    exit_code: int | None
    started_at: str
    elapsed_s: float
    time_left_s: float | None
    max_time_s: int
    first_step_seen: bool
    first_step_overdue: bool
    global_step: int | None
    quiet_s: float | None = Field(default=None, description="Running: seconds since the newest step line (or, "
                                  "before the first one, since the log last grew), as the run's monitor saw it.")
    quiet_since: Literal["step", "output"] | None = Field(default=None, description="What quiet_s counts from.")
    stall_bound_s: float | None = None
    actions: list[str] = Field(default_factory=list, description="By its policy: 'time trigger -> action: result'.")
    previous_attempt: str | None = None
    next_attempt: str | None = None
    last_metrics: dict[str, float | int | None]
    errors: list[ErrorHit]
    lines: list[str]
    cursor: str
    skipped_bytes: int = Field(description="Log bytes between the cursor and the returned lines that were skipped.")
    unscanned_bytes: int = Field(description="Log bytes never scanned for errors/metrics (backlog over budget).")
    processes: list[ProcessInfo]
    log_path: str
    result_dir: str
    note: str | None = None
    progress: ProgressInfo | None = Field(default=None, description="Total steps, seconds per step, steps per "
                                          "hour and ETA, each with its source or the reason it is unknown.")
    checkpoints: CheckpointList | None = Field(default=None, description="global_step_N folders of the run "
                                               "(with id; checkpoints=false leaves them out).")
    metrics_history: MetricsHistory | None = Field(default=None, description="When asked for (metrics_history); "
                                                   "with id, over every attempt of its experiment, merged by step.")
    scheduler: dict[str, str] | None = Field(default=None, description="Its scheduler's words on its job.")
    alive: bool | None = Field(default=None, description="Anything of its experiment still runs: any attempt's "
                               "processes, a monitor, a pending relaunch, checked on the hosts in this call; null: a "
                               "host could not be asked.")
    policy: dict[str, Any] | None = Field(default=None, description="The policy in force (as launch_experiment "
                                          "answered it); null: none.")
    experiment: ExperimentInfo | None = Field(default=None, description="With id: the whole experiment it belongs to "
                                              "(every attempt, merged metrics, alive).")
    #: What of this run still runs (``observe.still_running``), for the experiment's answer; not shown.
    _running: list[str] | None = PrivateAttr(default=None)
    #: The first step its step lines showed, for its experiment's attempts; not shown.
    _first_step: int | None = PrivateAttr(default=None)


class RegistryProblem(ToolOutput):
    id: str
    message: str


class ProcessRef(ToolOutput):
    host: str
    role: str
    pid: StrictInt
    command: str


class StopOutput(ExperimentStatus):
    interrupted: list[str] = Field(description="Roles that got Ctrl-C (SIGINT to their process group).")
    killed: list[str] = Field(description="Roles with processes still alive after the grace period.")
    killed_processes: list[ProcessRef] = Field(description="Processes that got SIGTERM (and SIGKILL if needed).")
    still_alive: list[ProcessRef] = Field(description="Processes alive even after SIGKILL; the run is then not "
                                          "reported as stopped.")
    session_removed: bool


WAIT_DEFAULT_S, WAIT_MAX_S = 30, 50
