"""What a run's monitor writes on its host and an observation carries back to the server, typed.

``MonitorDocument`` is ``monitor.json`` (``runstate.Run.document``: each room writes its own part), ``MonitorReport``
what an observation reports of it per process (``observer.report``), ``MonitorEvent`` one thing that happened
(``phases``), ``AttemptRecord`` the record a resume policy leaves for the next attempt (``next_attempt.json``),
``ResultsDoc`` an experiment's results as ``results.wrap_up`` renders them.
``protocol`` re-exports them: the server reads every shape the host gives it from there. Like ``protocol``,
the types exist for type checkers only (stdlib only, Python 3.8: ``typing`` is never loaded at run time).
"""

from __future__ import annotations

#: ``typing.TYPE_CHECKING`` without importing typing (as ``protocol``).
TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TypedDict

    class ProgressDoc(TypedDict, total=False):
        """Training progress of one process (``runstate.Progress``)."""

        last_step_by_role: dict[str, int]
        step_times: list[float]
        tqdm_total: int | None
        tqdm_step: int | None
        tqdm_rate_s: float | None
        batches: list[list[float]]
        restarts: list[dict[str, Any]]

    class ErrorHitDoc(TypedDict, total=False):
        """One error signature's hits in one log: lines counted, the first and the last line, when (run clock)."""

        count: int
        line: str
        first_line: str
        first_at: float
        last_at: float

    class RoleFindings(TypedDict, total=False):
        """What one process's log has said so far and how far it was read (``runstate.RoleFindings``); times
        are on the run clock."""

        log_path: str
        start_offset: int
        offset: int
        size: int
        unscannable: int
        resets: int
        sampled_bytes: int
        drained: bool
        first_step_seen: bool
        first_step_at: float | None
        first_step_not_before: float | None
        first_step: int | None
        global_step: int | None
        metrics_step: int | None
        last_metrics: dict[str, Any]
        errors: dict[str, ErrorHitDoc]
        grew_at: float | None
        stepped_at: float | None
        looked_at: float | None
        points: list[int]
        progress: ProgressDoc

    _StallFields = TypedDict("_StallFields", {"from": float}, total=False)

    class StallVerdict(_StallFields, total=False):
        """The stall watch's verdict (empty: no stall can be judged): since what (``step``, ``output``) the
        clock counts, from when, its bound, the last step, and when it was found stalled."""

        stalled: bool
        since: str
        bound_s: float
        last_step: int | None
        stalled_at: float | None

    class ActionRecord(TypedDict):
        """One thing a policy did: when (run clock, wall clock), what triggered it, what it did, how it went."""

        at: float
        wall: float
        trigger: str
        action: str
        result: str

    class NotifyFailure(TypedDict):
        at: float
        event: str
        error: str

    class NotifyLoss(TypedDict):
        """Happenings the notify command was never given (``notifier.Notifier.lost``; the notify file has them):
        when (run clock), their kinds, why."""

        at: float
        events: list[str]
        why: str

    class NotifyTally(TypedDict, total=False):
        """What became of the happenings told: lines written to the notify file, the notify command's runs (sent,
        failed, killed at the time bound), how many it was never given (``dropped``; ``lost``: the last such loss),
        and the last failure of either."""

        written: int
        sent: int
        failed: int
        killed: int
        dropped: int
        last_failure: NotifyFailure
        lost: NotifyLoss

    class _PendingRequired(TypedDict):
        trigger: str
        due: float

    class PendingResume(_PendingRequired, total=False):
        """A resume policy's relaunch, due after the backoff: what triggered it, when (run clock); after a try that
        failed (``resume``), why (``failed``), how many tries failed, and since when (run clock)."""

        tries: int
        failed: str
        failed_since: float

    class Replacement(TypedDict, total=False):
        """One replacement of a run's monitor (``supervisor``): when (wall clock), why, by whom (its supervisor, a
        status call), the process replaced, and whether its lock had to be fenced (it would not die)."""

        wall: float
        why: str
        by: str
        pid: int | None
        fenced: bool

    class _EventRequired(TypedDict):
        at: float  # the run clock
        kind: str  # phases.EVENTS
        seq: int

    class MonitorEvent(_EventRequired, total=False):
        """One thing that happened to the run (``phases.Lifecycle``); the keys beside ``kind`` depend on it."""

        phase: str  # the phase it happened in (missing in events recorded before phases said it)
        roles: list[str]  # started
        first_step_s: float | None
        deadline_s: float  # first_step_overdue
        attempt: int  # a resume's relaunch: the new attempt, its id, the checkpoint it continues from
        next_id: str
        checkpoint: CheckpointRef | None
        results: str | None  # finished: where the results document is, finish.flag, why nothing was written
        finish_flag: str | None
        collect_error: str | None
        stopped_by: str | None
        role: str
        signature: str
        severity: str
        line: str
        step: int | None
        exit_code: int | None
        max_time_s: float
        since: str
        last_step: int | None
        quiet_s: float
        bound_s: float
        stalled_s: float
        trigger: str
        action: str
        result: str
        state: str
        exit_codes: dict[str, int | None]

    class CheckpointRef(TypedDict):
        step: int
        path: str

    class AttemptRecord(TypedDict, total=False):
        """What a resume policy leaves in the run directory of the attempt it relaunched
        (``next_attempt.json``): the new attempt's id and number, its lineage (the first attempt's id), the
        attempt it follows, why, when, the checkpoint it continues from, and what its launch started."""

        id: str
        attempt: int
        lineage: str
        previous: str
        trigger: str
        wall: float
        checkpoint: CheckpointRef | None
        launch: Mapping[str, Any]  # the relaunch's launch reply (``protocol.LaunchStarted``)

    class AttemptDoc(TypedDict, total=False):
        """One attempt of an experiment on its results page: its state, steps, the checkpoint it continued from,
        what ended it and its logs."""

        id: str
        attempt: int
        state: str
        exit_code: int | None
        first_step: int | None
        last_step: int | None
        resumed_from: str | None
        ended_by: str
        logs: list[str]

    class OutcomeDoc(TypedDict, total=False):
        """A headline metric over the whole experiment: final and best value with their steps, which way is
        better, whether the best step was saved as a checkpoint and the saved step nearest it."""

        name: str
        points: int
        final: float | None
        final_step: int | None
        best: float | None
        best_step: int | None
        direction: str
        best_saved: bool
        nearest_checkpoint: int | None

    class MetricRowDoc(TypedDict, total=False):
        key: str
        n: int
        first: float | None
        best: float | None
        best_at: str
        last: float | None
        trend: str
        plateau: bool | None

    class TableDoc(TypedDict):
        title: str
        source: str
        rows: list[MetricRowDoc]

    class ErrorDoc(TypedDict, total=False):
        signature: str
        severity: str
        count: int
        line: str
        fix: str

    class ResultsDoc(TypedDict, total=False):
        """An experiment's results (``results.render``): it is the first attempt's id; every list may be empty."""

        id: str
        state: str
        written_by: str
        written_at: str
        host: str
        started_at: str
        elapsed_s: float
        commands: list[str]
        attempts: list[AttemptDoc]
        outcomes: list[OutcomeDoc]
        curve: dict[str, Any]  # one metric over steps: metric, steps, values
        plot: str | None  # the picture's file name beside the page
        tables: list[TableDoc]
        last_metrics: dict[str, Any]
        errors: list[ErrorDoc]
        actions: list[str]
        notes: list[str]

    class WrapUpReply(TypedDict):
        """What ``results.wrap_up`` wrote: the experiment's page, the result directory's document (None: a
        results.md that is not ours is there, ``note`` says so), the plot, finish.flag, whether the document
        is an index."""

        page: str
        document: str | None
        plot: str | None
        finish_flag: str | None
        index: bool
        note: str | None

    class MonitorDocument(TypedDict, total=False):
        """``monitor.json``: everything a run's monitor knows, written atomically as it goes (``runstate.Run``)."""

        format: int
        exp_id: str
        pid: int
        start: str | None
        clock_s: float
        written_at: float
        ended: bool
        phase: str  # phases.PHASES (missing in documents written before phases)
        timed_out: bool
        session_removed: bool
        internal_errors: int
        roles: dict[str, RoleFindings]
        events: list[MonitorEvent]
        event_seq: int
        policy_seq: int
        stall: StallVerdict
        first_step_overdue_at: float | None
        actions: list[ActionRecord]
        notify: NotifyTally
        pending_resume: PendingResume | None
        notify_queue: list[dict[str, Any]]  # the happenings the notify command is still owed, oldest first
        origin: dict[str, Any]  # the run clock's zero on the machine's boot clock: {"space", "uptime"}
        generation: int  # which start of the run's processes in its directory (a requeue starts them again)

    class RunReport(TypedDict, total=False):
        """What an observation says of the run on this host as its monitor left it: whether the monitor lives
        (and its supervisor, its heartbeat, its replacements), whether the run ended here, its phase and clock, and
        the policies' state; ``attempts``: what a resume policy started after it."""

        alive: bool
        ended: bool
        phase: str
        clock_s: float | None
        timed_out: bool
        internal_errors: int
        stall: StallVerdict
        actions: list[ActionRecord]
        notify: NotifyTally
        pending_resume: PendingResume | None
        attempts: list[AttemptRecord]
        beat_age_s: float | None  # seconds since the monitor's last heartbeat (None: not comparable here)
        supervised: bool  # its supervisor runs
        replaced: list[Replacement]  # the monitor's latest replacements
        stop_requested: bool  # stop_experiment was called (a relaunch still to come is cancelled)

    class MonitorReport(RoleFindings, total=False):
        """What the run's monitor found for one process, plus ``run`` (``observer.report``)."""

        run: RunReport

    class MetricPoint(TypedDict):
        """One metric point (``points.point``): its sequence number, step and metrics (None: not finite)."""

        seq: int
        step: int
        m: dict[str, float | int | None]
