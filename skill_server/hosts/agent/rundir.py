"""A run's directory on one host, by name: the one place that knows what is in it.

``<state>/runs/<id>/<host identity>/`` (``files.run_dir``) holds, per process (``role``): its wrapper script
(``<role>.sh``), the pid the wrapper wrote when it started, its exit code (written atomically as it ends),
its markers (``gate``/``started``: waiting for a URL, then started; ``stopped``: a stop was asked for before
it ended; ``timedout``: its monitor ended it at the max time), the processes that survived a stop's SIGKILL,
and its metric points; for the whole run: the monitor's spec, findings, lock, log and restart stamp, the
launch request a resume relaunches, the resume policy's record of the next attempt, and the marks a stop, a
rollback and the removal of its tmux session leave; the monitor's heartbeat, its supervisor's lock and
heartbeat, and the monitor's replacements (``supervisor``). A backend may keep its own files here too (a batch
scheduler's script and job record: ``file(name)``).

The bash wrapper and the batch script write some of these files themselves; they are rendered from the names
here (``PID``, ``EXIT``...), so the layout is spelt once. Stdlib only, Python 3.8.
"""

from __future__ import annotations

import json
import os

from . import files
from .files import AgentError
from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

    from .protocol import AttemptRecord, MonitorDocument

#: Per process: ``<role><suffix>``.
SCRIPT, PID, EXIT, SURVIVORS, POINTS = ".sh", ".pid", ".exit", ".survivors", ".metrics.jsonl"
#: Per process: ``<role>.<marker>``, each an empty file.
MARKERS = ("gate", "started", "stopped", "timedout")
#: The run's: the monitor's spec, findings, lock (held while it lives), log, and when an observation last
#: started one; what a batch job's monitor reads on stdin when the agent was not installed yet.
SPEC, FINDINGS, LOCK, LOG, RESTARTED, STAGE = (
    "monitor.spec.json", "monitor.json", "monitor.lock", "monitor.log", "monitor.restarted", "monitor.stage")
#: The run's: the monitor's heartbeat, its supervisor's lock and heartbeat, and the monitor's replacements so far
#: (``supervisor``); where the launch that made it ran (``procs.pid_space``: its pids mean nothing elsewhere).
BEAT, SUPERVISOR_LOCK, SUPERVISOR_BEAT, REPLACED, PID_SPACE = (
    "monitor.beat", "supervisor.lock", "supervisor.beat", "monitor.replaced", "pid.space")
#: The run's: its tmux session was removed (by its monitor, an observation or a stop); the next attempt a resume
#: policy started (``AttemptRecord``); the launch request a relaunch sends again; ``stop_experiment`` was called.
SESSION_REMOVED, NEXT_ATTEMPT, LAUNCH_REQUEST, STOP_REQUESTED = (
    "session.removed", "next_attempt.json", "launch.json", "stop.requested")
#: The run's: ``stop_experiment`` asks the run's monitor to stop the processes where they run (the scheduler of
#: the run's job could not be asked to end it: ``watchers.StopAsked``); the processes were started again in this
#: directory (a scheduler requeued the job): which start this is and each log's size then (``runstate.new_life``).
STOP_HERE, RESTART = "stop.here", "restart.json"
#: Held while a launch starts the run's processes, taken by a rollback; left by a rollback (a start that arrives
#: later refuses).
LAUNCH_LOCK, DISCARDED = "launch.lock", "discarded"
NOTIFY_LOG = "notify.log"
#: The format of the monitor's spec and findings (a document of another format is not read).
FORMAT = 1
#: Longest chain of attempts followed from one run directory.
MAX_CHAIN = 50


class RunDir:
    """One run's directory on this host."""

    def __init__(self, path: str) -> None:
        self.path = path

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def of(self, role: str, suffix: str) -> str:
        """A file of one process (``suffix``: ``PID``, ``EXIT``... or ``"." + marker``)."""
        return os.path.join(self.path, role + suffix)

    def has(self, name: str) -> bool:
        return files.exists(self.file(name))

    def touch(self, name: str) -> bool:
        """Leave an empty mark; False when it could not be written (a full disk: the caller goes on)."""
        try:
            files.touch(self.file(name))
        except OSError:
            return False
        return True

    # ---- per process

    def pid(self, role: str) -> int | None:
        return files.read_int(self.of(role, PID))

    def exit_code(self, role: str) -> int | None:
        return files.read_int(self.of(role, EXIT))

    def has_exit(self, role: str) -> bool:
        return files.exists(self.of(role, EXIT))

    def write_exit(self, role: str, code: int) -> None:
        """Record an exit code found elsewhere (tmux kept it when the disk was full); never replaces one."""
        try:
            files.write_atomic(self.of(role, EXIT), b"%d\n" % code, replace=False, mode=0o600)
        except AgentError:
            pass

    def marked(self, role: str, marker: str) -> bool:
        return files.exists(self.of(role, "." + marker))

    def mark(self, role: str, marker: str) -> bool:
        """Whether the mark is there now (False: the run directory cannot be written: read-only, say)."""
        try:
            files.touch(self.of(role, "." + marker))
        except OSError:
            return self.marked(role, marker)
        return True

    def markers(self, role: str) -> list[str]:
        return [m for m in MARKERS if self.marked(role, m)]

    def mark_stopped(self, roles: list[str]) -> list[str]:
        """Each role without an exit code is marked ``stopped`` (what it ends with is then a stop, not a failure);
        the roles that could not be marked (their stop must be recorded elsewhere)."""
        return [role for role in roles if self.exit_code(role) is None and not self.mark(role, "stopped")]

    def pid_space(self) -> tuple[str, float | None]:
        """Where the launch that made this directory ran (``procs.pid_space``) and when (wall clock); ("", None)
        when it was not recorded (a run launched before it was)."""
        space, _, wall = (files.read_small(self.file(PID_SPACE), 256) or "").strip().partition(" ")
        try:
            return space, float(wall)
        except ValueError:
            return space, None

    def survivors(self, role: str) -> list[dict[str, Any]]:
        """What survived a stop's SIGKILL ([{pid, start}]) as the stop recorded it."""
        try:
            recorded = json.loads(files.read_small(self.of(role, SURVIVORS), 64 * 1024) or "[]")
        except ValueError:
            return []
        return [x for x in recorded if isinstance(x, dict)] if isinstance(recorded, list) else []

    def write_survivors(self, role: str, left: list[dict[str, Any]]) -> None:
        path = self.of(role, SURVIVORS)
        if left:
            files.write_atomic(path, json.dumps(left).encode("utf-8"), replace=True, mode=0o600)
        elif files.exists(path):
            os.unlink(path)

    def points(self, role: str) -> str:
        return self.of(role, POINTS)

    # ---- the run's documents

    def read_json(self, name: str, limit: int = 16 * 1024 * 1024) -> dict[str, Any] | None:
        """A JSON object kept here (None: missing, unreadable, or not an object)."""
        text = files.read_small(self.file(name), limit)
        try:
            data = json.loads(text) if text else None
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def read_json_list(self, name: str, limit: int = 1024 * 1024) -> list[Any]:
        """A JSON list kept here (empty: missing, unreadable, or not a list)."""
        text = files.read_small(self.file(name), limit)
        try:
            data = json.loads(text) if text else []
        except ValueError:
            return []
        return data if isinstance(data, list) else []

    def write_json(self, name: str, data: object, replace: bool) -> None:
        """Raises ``AgentError`` when it cannot be written."""
        files.write_atomic(self.file(name), json.dumps(data).encode("utf-8"), replace=replace, mode=0o600)

    def spec(self) -> dict[str, Any] | None:
        """The monitor's spec, in this version's shape (``spec_of``); None: missing or not one."""
        data = self.read_json(SPEC)
        if data is None or data.get("format") != FORMAT or not isinstance(data.get("roles"), list):
            return None
        return spec_of(data)

    def monitored(self) -> bool:
        """Whether the run was launched with a monitor (runs from before monitors have none)."""
        return files.exists(self.file(SPEC))

    def findings(self) -> MonitorDocument | None:
        data = self.read_json(FINDINGS)
        if data is None or data.get("format") != FORMAT:
            return None
        return data  # type: ignore[return-value]  # written by ``runstate.Run.document``

    def next_attempt(self) -> AttemptRecord | None:
        """The record of the attempt a resume policy started after this run (None: none was)."""
        record = self.read_json(NEXT_ATTEMPT, 1024 * 1024)
        launch = (record or {}).get("launch")
        if record is None or not isinstance(launch, dict) or not isinstance(launch.get("run_dir"), str):
            return None
        return record  # type: ignore[return-value]  # written by ``policy.Resume``

    def attempts_after(self) -> list[AttemptRecord]:
        """Every attempt a resume policy started after this run, in order: each one's record, followed from run
        directory to run directory."""
        chain: list[AttemptRecord] = []
        here: RunDir | None = self
        while here is not None and len(chain) < MAX_CHAIN:
            record = here.next_attempt()
            if record is None:
                break
            chain.append(record)
            here = RunDir(record["launch"]["run_dir"])
        return chain

    def clear(self) -> None:
        """Remove everything but the launch lock and the rollback mark (a rolled-back launch leaves nothing)."""
        import shutil

        try:
            entries = os.listdir(self.path)
        except OSError:
            return
        for entry in entries:
            if entry in (LAUNCH_LOCK, DISCARDED):
                continue
            path = self.file(entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def spec_of(data: dict[str, Any]) -> dict[str, Any]:
    """A monitor spec in this version's shape, with the run's ``handle`` (its backend's) as a launch writes it
    now. A spec written before handles named where the run lives at its top level: the backend that wrote it
    reads it (``backend.legacy_handle``), so runs in flight when the agent was updated read the same."""
    if isinstance(data.get("handle"), dict):
        return data
    from . import backend

    return dict(data, handle=backend.legacy_handle(data))
