"""The host protocol: what the server asks a host's agent, what the agent answers, and what both must agree on.

The one module the server and the agent share (it ships with the agent, so it is stdlib-only Python 3.8).
A request is an :class:`Envelope` of ops, one ``*Request`` per op; the reply is a :class:`ReplyEnvelope`
with one result per op, in order: the op's ``*Reply`` (``ok`` true) or a :class:`Failure`. The server
builds requests only through ``skill_server.hosts.client``; the agent reads each field with
``request.need`` (the wire is JSON from another process: every field is checked where it is read).

A key missing from a request, or null, means its default. Python 3.8 has no ``NotRequired``: optional
keys sit in a ``total=False`` class that extends the required ones. Changing what goes over the wire
means a new ``PROTOCOL_VERSION`` (hosts cache the agent per source digest, so old and new never mix).

The types exist for type checkers only (``if TYPE_CHECKING:``; import them the same way): building them
needs ``typing``, which the agent never loads at run time, so a call on a host pays nothing for them.
Python 3.8 has no ``typing_extensions`` there either, so nothing here needs more than ``typing``.

What comes back is typed as well as what goes: besides each op's reply, the documents a run's monitor
writes on its host and the server reads (``MonitorDocument``, the observation's ``MonitorReport``, its
``MonitorEvent``s and the resume policy's ``AttemptRecord``). A run lives on each host in its *backend*
(``agent.backend``): the wire carries that as a ``Handle`` whose ``kind`` names the backend and whose other
keys are the backend's own, and a scheduler's job comes back as ``JobFacts`` in a shape no backend owns.
"""

from __future__ import annotations

import os

#: ``typing.TYPE_CHECKING`` without importing typing: false at run time, taken as true by type checkers.
TYPE_CHECKING = False

PROTOCOL_VERSION = 3

#: The environment variable every process of a run carries: ``<experiment id>/<role>``.
RUN_MARKER = "AGENTJET_SKILL_RUN"
#: What starts every line the wrapper and the run monitor write into a run's log.
LOG_MARK = "[agentjet-swarm-skill]"
#: How long a stop waits after SIGKILL before it reports what survived (callers add it to their bounds).
KILL_WAIT_S = 3.0
#: The state directory's override, on every host.
STATE_DIR_ENV = "SKILL_SERVER_STATE_DIR"


def state_dir() -> str:
    """``$SKILL_SERVER_STATE_DIR``, else ``$XDG_STATE_HOME/agentjet-swarm-skill``, else ~/.local/state/...

    The rule on every host (and for the server's registry). Self-contained apart from ``os`` and
    ``STATE_DIR_ENV``: the SSH stage one runs a copy of this function's source before the package exists."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    xdg = os.environ.get("XDG_STATE_HOME")
    base = os.path.expanduser(xdg) if xdg else os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.abspath(os.path.join(base, "agentjet-swarm-skill"))


#: Where a machine's identity comes from (the first readable file), after its host name.
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def host_identity() -> str:
    """This machine as a name that is safe in a path: its host name plus a digest of its machine id (the
    host name alone when no machine id can be read).

    Hosts that share a home directory keep their run state under ``<state>/runs/<id>/<identity>/``, so
    two machines never write into one folder; the digest tells apart machines that share a host name."""
    import hashlib
    import socket

    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in socket.gethostname())[:64] or "host"
    for path in MACHINE_ID_FILES:
        try:
            with open(path, "rb") as handle:
                machine = handle.read(256).strip()
        except OSError:
            continue
        if machine:
            return "%s-%s" % (name, hashlib.sha256(machine).hexdigest()[:12])
    return name


if TYPE_CHECKING:
    from typing import Any, Literal, TypedDict

    # What a run's monitor writes on its host and an observation carries back (``documents``), re-exported: the
    # server reads every shape the host gives it from this module.
    from .documents import ActionRecord as ActionRecord
    from .documents import AttemptDoc as AttemptDoc
    from .documents import AttemptRecord as AttemptRecord
    from .documents import CheckpointRef as CheckpointRef
    from .documents import ErrorHitDoc as ErrorHitDoc
    from .documents import MetricPoint as MetricPoint
    from .documents import MonitorDocument as MonitorDocument
    from .documents import MonitorEvent as MonitorEvent
    from .documents import MonitorReport as MonitorReport
    from .documents import NotifyFailure as NotifyFailure
    from .documents import NotifyTally as NotifyTally
    from .documents import OutcomeDoc as OutcomeDoc
    from .documents import PendingResume as PendingResume
    from .documents import ProgressDoc as ProgressDoc
    from .documents import Replacement as Replacement
    from .documents import ResultsDoc as ResultsDoc
    from .documents import RoleFindings as RoleFindings
    from .documents import RunReport as RunReport
    from .documents import StallVerdict as StallVerdict
    from .documents import WrapUpReply as WrapUpReply

    # ---- results

    class Ok(TypedDict, total=False):
        """Every reply: ``ok`` is added by the dispatcher once the op returned (so an op's body never sets it)."""

        ok: Literal[True]

    class Failure(TypedDict):
        """A failed op: one line, the argument it names (if any), and what kind of failure it is."""

        ok: Literal[False]
        error: str
        field: str | None
        #: error, not_found, not_regular, exists, duplicate, no_tmux, no_bash, internal; unreachable (server side)
        kind: str

    # ---- ping: who answers

    class PingRequest(TypedDict):
        op: Literal["ping"]

    class PingReply(Ok):
        python: str
        version: list[int]
        platform: str
        uid: int
        pid: int
        state_dir: str
        proc: bool
        tmux: str | None
        bash: str | None

    # ---- run: one command, bounded in time and output

    class _RunRequired(TypedDict):
        op: Literal["run"]
        argv: list[str]

    class RunRequest(_RunRequired, total=False):
        timeout_s: float
        stdin: str
        cwd: str
        env: dict[str, str]
        max_output: int

    class RunReply(Ok):
        returncode: int | None  # None: it could not start, or it timed out
        stdout: str
        stderr: str
        timed_out: bool
        truncated: bool
        error: str | None  # why it could not start

    # ---- read: a regular file's size and one byte range

    class _ReadRequired(TypedDict):
        op: Literal["read"]
        path: str
        length: int

    class ReadRequest(_ReadRequired, total=False):
        offset: int  # negative: from the end
        text: bool

    class _ReadSize(Ok):
        path: str
        size: int

    class ReadReply(_ReadSize, total=False):
        text: str  # when text was asked for
        data: str  # otherwise: base64

    # ---- write: atomic, creating a file or replacing a regular file only

    class _WriteRequired(TypedDict):
        op: Literal["write"]
        path: str
        replace: bool  # false: create only

    class WriteRequest(_WriteRequired, total=False):
        text: str
        data: str  # base64, when no text is given
        mode: int

    class WriteReply(Ok):
        path: str

    # ---- stat: what each of a few paths is on this host (``~`` expanded there, symlinks followed)

    class StatRequest(TypedDict):
        op: Literal["stat"]
        paths: list[str]

    class PathInfo(TypedDict):
        path: str  # expanded and normalised on this host
        kind: Literal["dir", "file", "other", "missing", "unreadable"]
        executable: bool  # a regular file this user may run

    class StatReply(Ok):
        paths: list[PathInfo]  # one per path asked, in order

    # ---- launch: check (dry run) or start one experiment's processes on this host

    class LaunchProc(TypedDict):
        role: str
        command: str
        workdir: str
        workdir_field: str
        env: dict[str, str]
        log_path: str
        log_field: str
        wait_for_url: str | None
        wait_for_url_timeout_s: int

    class _SignatureRequired(TypedDict):
        """One error signature as a host's scanner needs it (``experiments.signatures.monitor_rows``)."""

        name: str
        pattern: str
        flags: str  # "i": ignore case
        needles: list[str]

    class SignatureRow(_SignatureRequired, total=False):
        severity: str  # "error" | "warning" (a spec an older version wrote has none: "error")

    class _MonitorRequired(TypedDict):
        signatures: list[SignatureRow]
        first_step_pattern: str | None

    class MonitorPolicy(TypedDict, total=False):
        """The run's policies as its monitor carries them out (``hosts.agent.policy``); ``errors``: the signature
        names ``on_error`` acts on; ``collect``: this host holds the results (``on_end: collect``)."""

        on_error: str
        errors: list[str]
        on_stall: str
        on_end: str
        on_first_step_overdue: str
        notify_command: str
        notify_file: str  # absolute, or ``~/...`` (expanded on the host)
        stall_k: float
        stall_floor_s: int
        collect: bool
        transient: list[str]  # the signature names a resume relaunches after
        max_resumes: int
        backoff_s: int
        attempt: int  # 1: the launch; 2, 3...: its relaunches (``<lineage>.r2``...)
        lineage: str  # the first attempt's id
        previous: str  # the attempt this one resumes
        resumed_from: CheckpointRef | None  # the checkpoint it continues from (None: it started over)
        checkpoint_dirs: list[str]  # where the attempts before it saved checkpoints

    class MonitorConfig(_MonitorRequired, total=False):
        """What the run monitor needs from the server: the signature table, the run's first-step pattern, its
        first-step deadline and its policies."""

        first_step_s: int
        policy: MonitorPolicy

    class _LaunchRequired(TypedDict):
        op: Literal["launch"]
        exp_id: str
        session: str  # the run's name (the tmux session's; a scheduler's job is named by ``exp_id``)
        dry_run: bool
        python: str | None
        workdir: str
        result_dir: str
        max_time_s: int
        deadline_grace_s: int
        procs: list[LaunchProc]

    class Handle(TypedDict):
        """Where a run lives on one host, as its backend knows it: ``kind`` names the backend (``agent.backend``),
        the other keys are that backend's own and nobody else reads them (tmux: the socket, the session's name
        and id; a batch scheduler: the job's id). The registry stores it as it came."""

        kind: str

    class _BackendRequired(TypedDict):
        kind: str

    class BackendChoice(_BackendRequired, total=False):
        """Which backend starts a launch's processes on this host (missing: tmux) and its own options."""

        options: dict[str, Any]

    class _JobFactsRequired(TypedDict):
        scheduler: str
        job_id: str
        state: str
        queued: bool
        final: bool
        reason: str
        exit_code: str
        nodes: str
        source: str
        error: str | None

    class JobFacts(_JobFactsRequired, total=False):
        """A batch scheduler's job as the host that submitted it sees it, in no backend's shape: ``scheduler``
        names it for people; ``state``, ``reason``, ``exit_code`` (``EXIT:SIGNAL``) and ``nodes`` are the
        scheduler's own words (``LOST``: the tools' word for a job the scheduler forgot whose end nobody recorded);
        ``queued``: none of its processes has started (pending, held, suspended); ``final``: it is over.
        ``source``: where the words came from (the scheduler, the job's own record, "judged" from what remains of
        a job the scheduler forgot, or "none"); ``error``: why the scheduler could not be asked (the state is
        then the record's, or UNKNOWN). ``restarts``: times the scheduler requeued it (it ran again: the same
        run); ``said``: how a judged end was judged, in words."""

        restarts: int
        said: str

    class LaunchRequest(_LaunchRequired, total=False):
        monitor: MonitorConfig  # missing: the monitor enforces the max time and scans for nothing
        backend: BackendChoice  # missing: tmux

    class PlannedProc(TypedDict):
        role: str
        workdir: str
        log_path: str

    class StartedProc(TypedDict):
        window_id: str
        pane_id: str
        pid: int | None  # None: known only once it starts (inside a scheduler's job, on one of its nodes)
        start: str | None
        role: str
        workdir: str
        log_path: str

    class _LaunchWhere(Ok):
        run_dir: str
        result_dir: str
        python: str
        host_identity: str  # ``host_identity()`` of the host that answered
        handle: Handle  # the dry run's: what is known before anything started
        attach: list[str]  # the command (argv, on that host) a user runs to watch the run there

    class LaunchPlan(_LaunchWhere):
        """The dry run's answer: where everything would go."""

        procs: list[PlannedProc]

    class LaunchStarted(_LaunchWhere):
        procs: list[StartedProc]

    # ---- stopping: what a stop saw and did (shared by discard and stop)

    class SeenProc(TypedDict):
        pid: int
        role: str
        start: str | None
        command: str

    class StopReport(TypedDict):
        interrupted: list[str]  # roles that got SIGINT
        terminated: list[SeenProc]  # alive when SIGTERM was sent
        killed: list[SeenProc]  # alive when SIGKILL was sent
        survivors: list[SeenProc]  # alive even after SIGKILL

    class _DiscardRequired(TypedDict):
        op: Literal["discard"]
        exp_id: str
        handle: Handle  # as far as it is known (the dry run's, when the start never answered)

    class DiscardRequest(_DiscardRequired, total=False):
        run_dir: str | None  # the launch's run directory on this host (default: ``files.run_dir``)

    class _Discarded(StopReport, Ok):
        session_removed: bool
        #: Nothing of the run is left on this host (its tmux server answered, no session or process of it
        #: remains): the caller may forget the run there.
        confirmed: bool

    class DiscardReply(_Discarded, total=False):
        #: The run had already run to its end here (a scheduler's job): no launch to undo; its handle, so that the
        #: caller keeps the run instead of forgetting it.
        ran: Handle

    class StopProc(TypedDict):
        role: str
        pid: int | None
        start: str | None
        pane_id: str | None

    class _StopRequired(TypedDict):
        op: Literal["stop"]
        exp_id: str
        run_dir: str
        handle: Handle
        grace_s: float
        procs: list[StopProc]

    class StopRequest(_StopRequired, total=False):
        keep_session: bool  # leave what holds the ended run (its tmux session) in place

    class _StopDone(StopReport, Ok):
        exit_codes: dict[str, int | None]
        session_removed: bool

    class StopReply(_StopDone, total=False):
        #: Roles whose ``stopped`` mark could not be written (a read-only run directory): the caller records
        #: the stop itself.
        unmarked: list[str]
        #: Why the stop could not be confirmed (a scheduler that does not answer), and what was done instead.
        unconfirmed: str

    # ---- observe: everything status needs from this host in one go

    class ReadSpan(TypedDict):
        offset: int
        budget: int

    class _ObserveProcRequired(TypedDict):
        run_dir: str
        role: str
        pid: int | None
        start: str | None
        log_path: str
        reads: list[ReadSpan]  # the caller's own ranges (new lines, a pattern search)
        handle: Handle  # its backend says whether it lives and how it ended

    class ObserveProc(_ObserveProcRequired, total=False):
        exp_id: str  # whose leftovers (a finished tmux session) a healing observation may release
        pane_id: str | None  # the process's pane, when it runs in one (tmux)
        scan: ReadSpan  # the range to scan, read only for a run without a monitor
        points: list[int]  # the caller's cursor in the monitor's points of this process ([seq, offset, generation])

    class _ObserveRequired(TypedDict):
        op: Literal["observe"]
        procs: list[ObserveProc]

    class ObserveRequest(_ObserveRequired, total=False):
        #: Also heal what this host can (missing: false, an observation only reads): start the monitor of a run
        #: whose monitor died, release the finished session of a run without a live monitor.
        heal: bool

    class Pane(TypedDict):
        session: str
        window_id: str
        window: str
        pane_id: str
        dead: bool
        dead_status: int | None
        pid: int | None
        session_id: str

    class Appended(TypedDict):
        """Bytes appended to a log after an offset (see ``files.read_appended``)."""

        text: str
        end: int
        skipped: int
        reset: bool

    class _ObservedProcRequired(TypedDict):
        alive: bool | None  # None: its backend cannot tell (its scheduler could not be asked)
        exit_code: int | None
        #: Where the exit code came from: "file" (``<role>.exit``), else the backend's own source ("tmux_option",
        #: "pane_status": tmux kept what the wrapper could not write; a scheduler's name); None: no code.
        exit_source: str | None
        #: Seconds since the wrapper started, by the host's boot-relative clock (None when it has ended).
        elapsed_s: float | None
        markers: list[str]
        final: bool
        size: int | None
        reads: list[Appended]

    class ObservedProc(_ObservedProcRequired, total=False):
        scan: Appended  # the scan range, for a run without a monitor (when asked for)
        monitor: MonitorReport  # what the run's monitor found (missing: the run has none)
        points: list[MetricPoint]  # the monitor's points after the caller's cursor
        points_cursor: list[int]
        points_more: bool  # more points are waiting for the next observation
        scheduler: JobFacts  # a run that is a scheduler's job
        elsewhere: str  # why this host cannot judge it (launched on another machine with this host's identity)

    class ObserveReply(Ok):
        procs: list[ObservedProc]
        host_identity: str
        healed: list[str]  # what a healing observation did (a monitor started, a session released), in words

    # ---- checkpoints: global_step_N folders under a directory

    class _CheckpointsRequired(TypedDict):
        op: Literal["checkpoints"]
        path: str

    class CheckpointsRequest(_CheckpointsRequired, total=False):
        max_depth: int
        max_entries: int
        limit: int

    class Checkpoint(TypedDict):
        size: int
        files: int
        mtime: float
        partial: bool
        path: str
        step: int

    class CheckpointsReply(Ok):
        path: str
        checkpoints: list[Checkpoint]
        more: int
        truncated: bool
        latest: int | None

    # ---- wrap_up: an experiment's results page, the result directory's document, finish.flag (``results``)

    class _WrapUpRequired(TypedDict):
        op: Literal["wrap_up"]
        result_dir: str
        doc: ResultsDoc
        flag: bool

    class WrapUpRequest(_WrapUpRequired, total=False):
        png: str  # base64: metrics.png beside the page

    class WrapUpDone(Ok, WrapUpReply):
        pass

    # ---- reclaim_gpus: end the GPU processes this user owns here

    class _ReclaimRequired(TypedDict):
        op: Literal["reclaim_gpus"]
        pids: list[int]

    class ReclaimRequest(_ReclaimRequired, total=False):
        grace_s: float

    class Ended(TypedDict):
        pid: int
        name: str
        signal: str  # the last signal sent ("" when none was)

    class Skipped(TypedDict):
        pid: int
        name: str
        reason: str

    class ReclaimReply(Ok):
        killed: list[Ended]
        survivors: list[Ended]
        skipped: list[Skipped]

    # ---- the envelope

    OpRequest = (PingRequest | RunRequest | ReadRequest | WriteRequest | LaunchRequest | DiscardRequest | ObserveRequest
                 | StopRequest | CheckpointsRequest | ReclaimRequest | StatRequest | WrapUpRequest)
    OpReply = (PingReply | RunReply | ReadReply | WriteReply | LaunchPlan | LaunchStarted | DiscardReply | ObserveReply
               | StopReply | CheckpointsReply | ReclaimReply | StatReply | WrapUpDone)

    class _EnvelopeRequired(TypedDict):
        v: int
        ops: list[OpRequest]

    class Envelope(_EnvelopeRequired, total=False):
        budget_s: float  # what the caller's deadline leaves for the whole request (``agent.deadline``)

    class _ReplyVersion(TypedDict):
        v: int

    class ReplyEnvelope(_ReplyVersion, total=False):
        results: list[OpReply | Failure]  # one per op, in order
        error: str  # the whole request was refused (wrong version, not JSON, too large)
