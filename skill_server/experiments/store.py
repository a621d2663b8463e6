"""The experiment registry: one SQLite database (WAL mode) under the state directory of this machine, or
node-local when that directory is on a filesystem shared between machines (``registry_place``).

Shared by every CLI call and MCP server of the same user at the same time, and it survives restarts.
Each call opens its own short-lived connection (autocommit, busy timeout), so concurrent processes and
worker threads never share a handle. Scan state is updated with a compare-and-set on ``scan_version``
(``history.save_scan_and_points``, together with the step lines' metrics) so two status calls racing
over the same bytes never count an error or store a step twice; a final state is recorded
once (compare-and-set on ``final_state IS NULL``).

A row's ``spec`` holds what the launch decided (``spec.RunSpec``, parsed once when the row is read),
including, per process, the host it runs on and the pid and start time of its wrapper (``Row.processes``),
and per host its backend's handle. Every row knows its *lineage* (the id of its first attempt: a run a resume
policy relaunched is the same lineage's next ``attempt``; ``experiments.lineage``). Runs on other hosts keep
their run directories (wrapper scripts, exit codes, markers) on those hosts; only this registry lives here. A
row that cannot be read (hand-edited, truncated) is reported as a ``CorruptRow`` for that id only.

This module only stores: opening the registry reads and writes nothing of any run. Finishing launches that
were interrupted is a maintenance step a tool asks for by name (``experiments.upkeep``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skill_server.core import mounts
from skill_server.core.errors import ToolFailure
from skill_server.experiments.spec import LOCAL, RunProcess, RunSpec
from skill_server.hosts.agent import procs
from skill_server.hosts.agent.protocol import host_identity
from skill_server.hosts.agent.protocol import state_dir as _host_state_dir

log = logging.getLogger(__name__)

DB_NAME = "experiments.sqlite3"
#: How long a registry open waits for a lock: SQLite's busy timeout, and the bound of ``_use_wal``'s retries.
BUSY_TIMEOUT_S = 15.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (
    id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    socket TEXT NOT NULL,
    created REAL NOT NULL,
    started_at TEXT NOT NULL,
    spec TEXT NOT NULL,
    final_state TEXT,
    final_exit_code INTEGER,
    ended REAL,
    note TEXT,
    read_cursor TEXT NOT NULL DEFAULT '',
    scan TEXT NOT NULL DEFAULT '{}',
    scan_version INTEGER NOT NULL DEFAULT 0,
    timeouts INTEGER NOT NULL DEFAULT 0
);
-- Metric history (``experiments.history``): one series per (run, metric name), one point per step line.
CREATE TABLE IF NOT EXISTS metric_series (
    id INTEGER PRIMARY KEY,
    exp_id TEXT NOT NULL,
    name TEXT NOT NULL,
    UNIQUE (exp_id, name)
);
CREATE TABLE IF NOT EXISTS metric_points (
    series INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    step INTEGER NOT NULL,
    value REAL,
    PRIMARY KEY (series, seq)
) WITHOUT ROWID;
-- What a run's training YAML says (``experiments.runconfig``), cached between calls.
CREATE TABLE IF NOT EXISTS run_configs (
    exp_id TEXT PRIMARY KEY,
    checked_at REAL NOT NULL,
    data TEXT NOT NULL
);
"""


#: Columns added after the first release, with their definitions: ``_migrate`` adds those a registry lacks.
#: ``seq``: registration order (lookups by name take the newest by it, never by wall-clock time);
#: ``phase``: ``launching`` from the intent row until every host has started, then ``running`` (a launch
#: being undone is ``discarding``); ``controller``: the identity of the machine that wrote the row;
#: ``launcher``: JSON ``{"pid", "start"}`` of the process that launched it (to tell an interrupted launch);
#: ``lineage``: the id of the run's first attempt (its own, unless a resume policy relaunched it);
#: ``attempt``: its number in that lineage (1: the launch).
_ADDED_COLUMNS = (
    ("seq", "INTEGER"),
    ("phase", "TEXT NOT NULL DEFAULT 'running'"),
    ("controller", "TEXT"),
    ("launcher", "TEXT"),
    ("lineage", "TEXT"),
    ("attempt", "INTEGER"),
)
#: The indexes every query of this module runs on, created in registries of every age (``_migrate``): a page of
#: the listing (``phase = ? ORDER BY seq DESC``) and a lookup by session name walk their index in order and
#: stop after the rows they return, so their cost does not grow with the finished runs a registry holds (an
#: index on ``phase`` alone made SQLite sort every row of the phase first). Registries written by older
#: versions also hold ``experiments_by_phase`` and ``experiments_by_session``: left in place, so an older
#: version that opens the same registry finds its indexes and builds nothing.
_INDEXES = """
CREATE INDEX IF NOT EXISTS experiments_by_seq ON experiments(seq);
CREATE INDEX IF NOT EXISTS experiments_by_phase_seq ON experiments(phase, seq);
CREATE INDEX IF NOT EXISTS experiments_by_session_seq ON experiments(session, phase, seq);
CREATE INDEX IF NOT EXISTS experiments_by_lineage ON experiments(lineage, attempt);
"""
RUNNING = "running"
LAUNCHING = "launching"
DISCARDING = "discarding"


def _migrate(conn: sqlite3.Connection) -> None:
    """Add the columns a registry written by an older version lacks; number its rows in the order they
    were written (SQLite's rowid), once; create the indexes it lacks (``_INDEXES``)."""
    have = {str(r[1]) for r in conn.execute("PRAGMA table_info(experiments)")}
    missing = [(name, kind) for name, kind in _ADDED_COLUMNS if name not in have]
    if missing:
        conn.execute("BEGIN IMMEDIATE")
        try:
            have = {str(r[1]) for r in conn.execute("PRAGMA table_info(experiments)")}  # another process may have
            for name, kind in _ADDED_COLUMNS:
                if name not in have:
                    conn.execute(f"ALTER TABLE experiments ADD COLUMN {name} {kind}")
            conn.execute("UPDATE experiments SET seq = rowid WHERE seq IS NULL")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    conn.executescript(_INDEXES)
    if conn.execute("SELECT 1 FROM experiments WHERE lineage IS NULL LIMIT 1").fetchone():
        _number_attempts(conn)


def _number_attempts(conn: sqlite3.Connection) -> None:
    """Give each row written before lineages (or by a version that knows none) its lineage and attempt number:
    a resumed run's spec named the attempt it resumes (``previous_attempt``), a linked list followed here once."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        rows = conn.execute("SELECT id, spec, lineage, attempt FROM experiments ORDER BY seq").fetchall()
        known = {str(i): (lineage, attempt) for i, _, lineage, attempt in rows if lineage is not None}
        for exp_id, spec, lineage, _ in rows:
            if lineage is not None:
                continue
            try:
                previous = json.loads(spec).get("previous_attempt")
            except (TypeError, ValueError, AttributeError, RecursionError):
                previous = None
            first, number = known.get(previous, (None, None)) if isinstance(previous, str) else (None, None)
            place = (first, int(number or 1) + 1) if first is not None else (str(exp_id), 1)
            known[str(exp_id)] = place
            conn.execute("UPDATE experiments SET lineage = ?, attempt = ? WHERE id = ?", (*place, exp_id))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def state_dir() -> Path:
    """``$SKILL_SERVER_STATE_DIR``, else ``$XDG_STATE_HOME/agentjet-swarm-skill``, else ~/.local/state/...

    The same rule the host agent applies on every host (one implementation)."""
    return Path(_host_state_dir())


class CorruptRow(ToolFailure):
    """A registry row that cannot be read; names the experiment so the others stay usable."""

    def __init__(self, exp_id: str, reason: str) -> None:
        super().__init__(f"the registry row of experiment {exp_id!r} cannot be read ({reason}); other experiments "
                         "are unaffected", field="id")
        self.exp_id = exp_id
        self.reason = reason


@dataclass
class Row:
    id: str
    session: str
    socket: str
    created: float
    started_at: str
    spec: RunSpec
    final_state: str | None
    final_exit_code: int | None
    ended: float | None
    note: str | None
    read_cursor: str
    scan: dict[str, Any]
    scan_version: int
    timeouts: int
    seq: int = 0
    phase: str = RUNNING
    controller: str | None = None
    launcher: dict[str, Any] | None = None
    #: The id of its lineage's first attempt, and its number in the lineage (``experiments.lineage``).
    lineage: str = ""
    attempt: int = 1

    @property
    def processes(self) -> tuple[RunProcess, ...]:
        """The run's processes in launch order: role, command, host, workdir, log path, wrapper pid."""
        return self.spec.resolved

    @property
    def host(self) -> str:
        """The experiment's main host: where its result directory (results.md, finish.flag) lives."""
        return self.spec.host

    @property
    def hosts(self) -> list[str]:
        """Every host the experiment has processes on, main host first."""
        out = [self.host]
        for p in self.processes:
            if p.host not in out:
                out.append(p.host)
        return out


_COLUMNS = ("id, session, socket, created, started_at, spec, final_state, final_exit_code, ended, note, "
            "read_cursor, scan, scan_version, timeouts, seq, phase, controller, launcher, lineage, attempt")
_COLUMN_COUNT = _COLUMNS.count(",") + 1


def _launcher(text: object) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _row(values: tuple[Any, ...]) -> Row:
    """A readable row, or ``CorruptRow`` saying what is wrong with it."""
    values = tuple(values) + (None,) * (_COLUMN_COUNT - len(values))  # the added columns may be left out
    (id_, session, socket, created, started_at, spec, final_state, final_exit_code, ended, note, read_cursor,
     scan, scan_version, timeouts, seq, phase, controller, launcher, lineage, attempt) = values
    exp_id = str(id_)
    try:
        spec_data = json.loads(spec)
        scan_data = json.loads(scan or "{}")
    except (TypeError, ValueError, RecursionError):
        raise CorruptRow(exp_id, "its JSON is damaged") from None
    try:
        if not isinstance(spec_data, dict) or not isinstance(scan_data, dict):
            raise TypeError("not an object")
        if not isinstance(session, str) or not isinstance(created, (int, float)) or not isinstance(scan_version, int):
            raise TypeError("bad column")
        parsed = RunSpec.from_json(spec_data, session)
        if not parsed.resolved or not all(p.role and p.log_path and p.run_dir for p in parsed.resolved):
            raise ValueError("no processes")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptRow(exp_id, f"unexpected content: {exc}") from None
    return Row(exp_id, session, socket, created, started_at, parsed, final_state, final_exit_code, ended, note,
               read_cursor if isinstance(read_cursor, str) else "", scan_data, scan_version, timeouts,
               seq if isinstance(seq, int) else 0, phase if isinstance(phase, str) else RUNNING,
               controller if isinstance(controller, str) else None, _launcher(launcher),
               lineage if isinstance(lineage, str) and lineage else exp_id,
               attempt if isinstance(attempt, int) and attempt > 0 else 1)


def unwritable(directory: Path, exc: BaseException | None = None) -> str | None:
    """Why the registry in ``directory`` cannot be written, in words (read-only, or its disk is full); None
    when neither is the case (``exc``, SQLite's error, then means something else)."""
    path = directory / DB_NAME
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    try:
        fs = os.statvfs(directory)
    except OSError:
        fs = None
    if fs is not None and fs.f_flag & os.ST_RDONLY:
        return f"the registry {path} is read-only (its filesystem is mounted read-only)"
    if (path.exists() and not os.access(path, os.W_OK)) or not os.access(directory, os.W_OK):
        return f"the registry {path} is read-only"
    if (fs is not None and fs.f_bavail == 0) or name.startswith("SQLITE_FULL"):
        return f"the disk holding the registry {path} is full"
    if name.startswith("SQLITE_READONLY"):
        return f"the registry {path} is read-only"
    return None


#: Rows not (yet, or no longer) ``running``, which finishing interrupted launches reads: two ranges around
#: 'running' use the (phase, seq) index (``phase != ?`` reads every row, a cost that grew with each finished run);
#: the few rows found are ordered by ``seq`` in Python.
PENDING_SQL = f"SELECT {_COLUMNS} FROM experiments WHERE phase < ? OR phase > ?"
#: One page of the listing, newest registration first: the (phase, seq) index in order, from ``offset`` on.
PAGE_SQL = f"SELECT {_COLUMNS} FROM experiments WHERE phase = ? ORDER BY seq DESC LIMIT ? OFFSET ?"
#: The newest run of a session name: the (session, phase, seq) index, one row.
BY_NAME_SQL = f"SELECT {_COLUMNS} FROM experiments WHERE session = ? AND phase = ? ORDER BY seq DESC LIMIT 1"


class Registry:
    def __init__(self, conn: sqlite3.Connection, directory: Path | None = None, problem: str | None = None,
                 place: RegistryPlace | None = None) -> None:
        self.conn = conn
        self.directory = directory
        #: Where this registry lives and in which mode (None for one made by hand, as tests do).
        self.place = place
        #: Why this call could not record something (the registry is read-only or its disk is full); the
        #: answer says so. None while every write went through.
        self.problem = problem

    def recordable(self, exc: sqlite3.Error) -> bool:
        """Whether ``exc`` from a write means the registry cannot be written (then ``problem`` says why and
        the call goes on without recording); False for any other error."""
        if not isinstance(exc, sqlite3.OperationalError) or self.directory is None:
            return False
        problem = unwritable(self.directory, exc)
        if problem is None:
            return False
        self.problem = self.problem or problem  # the first reason stands (later writes meet its read-only view)
        return True

    def _write(self, sql: str, params: tuple[Any, ...] = (), *, required: bool = False) -> sqlite3.Cursor | None:
        """One write; when the registry cannot be written, None (``problem`` says why), or with ``required``
        a ``ToolFailure`` that says it in words."""
        try:
            return self.conn.execute(sql, params)
        except sqlite3.Error as exc:
            if not self.recordable(exc):
                raise
            if required:
                raise ToolFailure(f"{self.problem}: nothing was started or changed") from None
            return None

    # ---- writes
    def insert(self, *, id: str, session: str, socket: str, created: float, started_at: str, spec: RunSpec,
               phase: str = RUNNING, controller: str | None = None, launcher: dict[str, Any] | None = None,
               lineage: str | None = None, attempt: int = 1) -> None:
        """Register a run (``phase`` ``launching`` for a launch's intent row); its ``seq`` is the next number;
        ``lineage``: its first attempt's id (default: its own)."""
        self._write(
            "INSERT INTO experiments (id, session, socket, created, started_at, spec, phase, controller, launcher, "
            "lineage, attempt, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "(SELECT COALESCE(MAX(seq), 0) + 1 FROM experiments))",
            (id, session, socket, created, started_at, json.dumps(spec.to_json()), phase, controller,
             None if launcher is None else json.dumps(launcher), lineage or id, attempt), required=True)

    def set_phase(self, exp_id: str, phase: str, spec: RunSpec | None = None) -> None:
        """Move a launch on (``running`` once every host has started, with the spec that records them)."""
        if spec is None:
            self._write("UPDATE experiments SET phase = ? WHERE id = ?", (phase, exp_id), required=True)
        else:
            self._write("UPDATE experiments SET phase = ?, spec = ? WHERE id = ?",
                        (phase, json.dumps(spec.to_json()), exp_id), required=True)

    def delete(self, exp_id: str) -> None:
        """Forget a run whose launch was rolled back on every host (with what was cached about it)."""
        self._write("BEGIN IMMEDIATE", required=True)
        try:
            self.conn.execute("DELETE FROM metric_points WHERE series IN "
                              "(SELECT id FROM metric_series WHERE exp_id = ?)", (exp_id,))
            self.conn.execute("DELETE FROM metric_series WHERE exp_id = ?", (exp_id,))
            self.conn.execute("DELETE FROM run_configs WHERE exp_id = ?", (exp_id,))
            self.conn.execute("DELETE FROM experiments WHERE id = ?", (exp_id,))
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def update_spec(self, exp_id: str, spec: RunSpec) -> None:
        self._write("UPDATE experiments SET spec = ? WHERE id = ?", (json.dumps(spec.to_json()), exp_id))

    def finish(self, exp_id: str, state: str, exit_code: int | None, ended: float, note: str | None = None) -> bool:
        """Record a terminal state once; False if another caller recorded one first."""
        cur = self._write(
            "UPDATE experiments SET final_state = ?, final_exit_code = ?, ended = ?, note = COALESCE(?, note) "
            "WHERE id = ? AND final_state IS NULL",
            (state, exit_code, ended, note, exp_id),
        )
        return cur is None or cur.rowcount == 1  # not recordable: this call's answer stands alone

    def set_note(self, exp_id: str, note: str) -> None:
        self._write("UPDATE experiments SET note = ? WHERE id = ?", (note, exp_id))

    def save_cursor(self, exp_id: str, cursor: str) -> None:
        self._write("UPDATE experiments SET read_cursor = ? WHERE id = ?", (cursor, exp_id))

    def bump_timeouts(self, exp_id: str) -> int:
        self._write("UPDATE experiments SET timeouts = timeouts + 1 WHERE id = ?", (exp_id,))
        row = self.conn.execute("SELECT timeouts FROM experiments WHERE id = ?", (exp_id,)).fetchone()
        return int(row[0]) if row else 0

    # ---- reads
    def get(self, exp_id: str) -> Row | None:
        """The row with this id (``CorruptRow`` if it cannot be read)."""
        values = self.conn.execute(f"SELECT {_COLUMNS} FROM experiments WHERE id = ?", (exp_id,)).fetchone()
        return _row(values) if values else None

    def find(self, key: str) -> Row | None:
        """By experiment id, else the newest registered experiment of the session with that name
        (``CorruptRow`` if that row cannot be read). A launch still under way is not found."""
        values = self.conn.execute(f"SELECT {_COLUMNS} FROM experiments WHERE id = ? AND phase = ?",
                                   (key, RUNNING)).fetchone()
        if values is None:
            values = self.conn.execute(BY_NAME_SQL, (key, RUNNING)).fetchone()
        return _row(values) if values else None

    def session_runs(self, socket: str | None, session: str) -> list[Row]:
        """Readable experiments with this session name on this socket name (None: on any), newest first (a
        few)."""
        out = []
        where, args = ("socket = ? AND ", (socket,)) if socket is not None else ("", ())
        for values in self.conn.execute(
                f"SELECT {_COLUMNS} FROM experiments WHERE {where}session = ? AND phase = ? "
                "ORDER BY seq DESC LIMIT 20", (*args, session, RUNNING)):
            try:
                out.append(_row(values))
            except CorruptRow:
                continue
        return out

    def lineage(self, lineage: str) -> list[Row]:
        """The readable registered attempts of a lineage, first attempt first (``experiments.lineage``)."""
        out = []
        for values in self.conn.execute(
                f"SELECT {_COLUMNS} FROM experiments WHERE lineage = ? AND phase = ? ORDER BY attempt, seq",
                (lineage, RUNNING)):
            try:
                out.append(_row(values))
            except CorruptRow:
                continue
        return out

    def lineage_ids(self, lineages: list[str]) -> dict[str, list[str]]:
        """Lineage -> the ids of its registered attempts, first attempt first, for many lineages at once."""
        out: dict[str, list[str]] = {}
        for lo in range(0, len(lineages), 500):
            part = lineages[lo:lo + 500]
            for exp_id, lineage in self.conn.execute(
                    f"SELECT id, lineage FROM experiments WHERE lineage IN ({', '.join('?' * len(part))}) "
                    "AND phase = ? ORDER BY attempt, seq", (*part, RUNNING)):
                out.setdefault(str(lineage), []).append(str(exp_id))
        return out

    def count(self) -> int:
        """How many experiments are registered (launches under way aside)."""
        return int(self.conn.execute("SELECT COUNT(*) FROM experiments WHERE phase = ?", (RUNNING,)).fetchone()[0])

    def pending(self) -> list[Row]:
        """Rows of launches that have not finished starting (``launching``) or are being undone."""
        out = []
        for values in self.conn.execute(PENDING_SQL, (RUNNING, RUNNING)):
            try:
                out.append(_row(values))
            except CorruptRow:
                continue
        return sorted(out, key=lambda row: row.seq)

    def all(self, limit: int) -> list[Row]:
        """The newest ``limit`` experiments; rows that cannot be read are left out (``all_with_problems``
        reports them)."""
        return self.all_with_problems(limit)[0]

    def all_with_problems(self, limit: int, offset: int = 0) -> tuple[list[Row], list[CorruptRow]]:
        """One page of the registered experiments, newest registration first (an order that observing them
        does not change, so pages neither repeat nor skip); ``limit`` rows from ``offset`` (``count`` tells
        how many there are)."""
        values = list(self.conn.execute(PAGE_SQL, (RUNNING, limit, offset)))
        rows: list[Row] = []
        problems: list[CorruptRow] = []
        for v in values:
            try:
                rows.append(_row(v))
            except CorruptRow as exc:
                problems.append(exc)
        return rows, problems


#: Tests only: a controller identity other than this machine's, so two processes on one machine stand in
#: for controllers on two login nodes that share one registry.
CONTROLLER_ENV = "SKILL_SERVER_TEST_CONTROLLER"


@functools.cache
def controller_identity() -> str:
    """This machine's identity (``protocol.host_identity``), recorded in every row it writes."""
    return os.environ.get(CONTROLLER_ENV) or host_identity()


def launched_elsewhere(row: Row) -> str | None:
    """The machine that launched ``row`` when that is not this one (its processes on host ``local`` are that
    machine's: this one can neither see nor signal them); None for a row of this machine (or one written
    before rows recorded their controller)."""
    if row.controller is None or row.controller == controller_identity():
        return None
    return row.controller


def elsewhere_reason(controller: str) -> str:
    """Why a process on host ``local`` of another machine's run is not judged here."""
    return f"launched on {controller}: ask there"


def launcher_identity() -> dict[str, Any]:
    """This process as a launch records it: pid and start time (a pid alone may be reused), and where its pid
    means something (``procs.pid_space``: a machine that shares this one's host identity is another space)."""
    return {"pid": os.getpid(), "start": procs.start_time(os.getpid()), "space": procs.pid_space()}


def local_elsewhere(row: Row) -> str | None:
    """The machine that launched ``row`` when that is another one and the row has processes on its host
    ``local``: only that machine can see, stop or undo those (a discard here would find nothing, "confirm",
    and forget a run that still lives there); None otherwise."""
    controller = launched_elsewhere(row)
    return controller if controller and any(p.host == LOCAL for p in row.processes) else None


#: Where the registry lives when it must not be in the state directory (see ``registry_place``).
REGISTRY_DIR_ENV = "SKILL_SERVER_REGISTRY_DIR"
#: Tests only: the folder that stands in for ``/var/tmp`` as the base of node-local registries.
NODE_LOCAL_BASE_ENV = "SKILL_SERVER_NODE_LOCAL_BASE"
NODE_LOCAL_BASE = "/var/tmp"
LOCAL_WAL = "local-wal"


@dataclass(frozen=True)
class RegistryPlace:
    """Where the registry lives and why: ``mode`` is ``local-wal`` (SQLite in WAL mode on a filesystem of
    this machine), ``node-local (the state dir is on <fs>)`` (the state directory is shared between
    machines, so the registry stays on this one), or ``wal on <fs> (set by SKILL_SERVER_REGISTRY_DIR)``;
    ``warning`` says what a caller should know about it (a shared filesystem chosen explicitly, an earlier
    registry left in the state directory)."""

    directory: Path
    mode: str
    filesystem: str | None
    warning: str | None = None
    node_local: bool = False


def _node_local_dir(state: Path) -> Path:
    """``/var/tmp/agentjet-swarm-skill-<uid>/<digest of the state directory>/``: one per configured state
    directory, so two configurations on one machine keep two registries."""
    import hashlib

    base = Path(os.environ.get(NODE_LOCAL_BASE_ENV) or NODE_LOCAL_BASE)
    digest = hashlib.sha256(str(state).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return base / f"agentjet-swarm-skill-{os.getuid()}" / digest


def registry_place() -> RegistryPlace:
    """The registry's directory and mode: ``$SKILL_SERVER_REGISTRY_DIR`` as given when set (with a warning
    when it is on a filesystem shared between machines); else the state directory, unless that is on such a
    filesystem (NFS, Lustre, GPFS, BeeGFS, SMB, Ceph, FUSE...): SQLite is not safe there when two machines
    use one database, so the registry then lives node-local (``_node_local_dir``)."""
    explicit = os.environ.get(REGISTRY_DIR_ENV)
    if explicit:
        directory = Path(os.path.abspath(os.path.expanduser(explicit)))
        fs = mounts.filesystem_of(str(directory))
        if not mounts.shared(fs):
            return RegistryPlace(directory, LOCAL_WAL, fs)
        return RegistryPlace(directory, f"wal on {fs} (set by {REGISTRY_DIR_ENV})", fs,
                             warning=f"the registry {directory} ({REGISTRY_DIR_ENV}) is on a {fs} filesystem: "
                             "SQLite there is safe only while one machine at a time uses it; a folder on a "
                             "local disk of this machine is safe")
    state = state_dir()
    fs = mounts.filesystem_of(str(state))
    if not mounts.shared(fs):
        return RegistryPlace(state, LOCAL_WAL, fs)
    earlier = None
    if (state / DB_NAME).is_file():
        earlier = (f"an earlier registry is in {state / DB_NAME}: the runs registered there are not listed here "
                   f"({REGISTRY_DIR_ENV}={state} lists them, from one machine at a time)")
    return RegistryPlace(_node_local_dir(state), f"node-local (the state dir is on {fs})", fs, earlier,
                         node_local=True)


def registry_dir() -> Path:
    """The registry's directory (``registry_place``)."""
    return registry_place().directory


def _own_private_dir(path: Path, create: bool) -> None:
    """Make sure ``path`` (a folder in a world-writable base such as /var/tmp) is a real directory of ours
    that no one else can enter: created 0700 when missing, never a symlink or another user's."""
    import stat

    if create:
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise ToolFailure(f"cannot create the node-local registry folder {path}: {exc.strerror or exc}") from None
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ToolFailure(f"the node-local registry folder {path} is not a directory (a symlink or a file): "
                          "remove it, or set " + REGISTRY_DIR_ENV)
    if info.st_uid != os.getuid():
        raise ToolFailure(f"the node-local registry folder {path} belongs to uid {info.st_uid}, not to this "
                          f"user: remove it, or set {REGISTRY_DIR_ENV}")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)


def _prepare_place(place: RegistryPlace, create: bool) -> None:
    """Create (``create``) or check the registry's folder; a node-local one with its checks."""
    if not place.node_local:
        if create:
            place.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        return
    mine = place.directory.parent
    if create:
        mine.parent.mkdir(parents=True, exist_ok=True)
    _own_private_dir(mine, create)
    _own_private_dir(place.directory, create)


def registry_exists(place: RegistryPlace | None = None) -> bool:
    """Whether any experiment was ever registered here (the database file exists)."""
    return ((place or registry_place()).directory / DB_NAME).is_file()


def _connect(path: Path | None, *, read_only: bool = False) -> sqlite3.Connection:
    """A connection to the registry file (``None``: an empty one in memory); ``read_only`` opens it as an
    immutable file, which works where SQLite cannot create its WAL index (a read-only or full disk)."""
    if path is None:
        return sqlite3.connect(":memory:", timeout=BUSY_TIMEOUT_S, isolation_level=None)
    if read_only:
        return sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?immutable=1", uri=True,
                               timeout=BUSY_TIMEOUT_S, isolation_level=None)
    return sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)


def _use_wal(conn: sqlite3.Connection) -> None:
    """Put the registry in WAL mode (a new one is created in rollback mode).

    SQLite converts a database by opening a read transaction and then upgrading it to an exclusive one, and
    it never calls the busy handler for such an upgrade: when two processes create the registry at once
    (two controllers' first launches), the one that loses gets "database is locked" at once, whatever the
    busy timeout. The loser retries until the winner's conversion is visible (then there is nothing to do),
    within the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _prepare(conn: sqlite3.Connection, on_disk: bool) -> None:
    if on_disk:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        _use_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(_SCHEMA)
    _migrate(conn)


@contextmanager
def open_registry(*, create: bool = True) -> Iterator[Registry]:
    """A registry connection for the duration of one tool call.

    ``create=False`` is for calls that only look runs up: before any launch there is no registry, and an
    empty one in memory answers instead, so they never create a state directory and database on disk.
    A registry that cannot be written (read-only, or its disk is full) is opened read-only: lookups and
    observations work, writes are skipped and ``Registry.problem`` says why (a launch refuses). Opening it does
    nothing to any run (``experiments.upkeep`` finishes interrupted launches, for the tools that ask)."""
    place = registry_place()
    directory = place.directory
    on_disk = create or registry_exists(place)
    path = directory / DB_NAME if on_disk else None
    problem: str | None = None
    try:
        _prepare_place(place, on_disk)
        conn = _connect(path)
        _prepare(conn, on_disk)
    except (OSError, sqlite3.Error) as exc:
        problem = unwritable(directory, exc) if path is not None and path.is_file() else None
        if problem is None:
            raise ToolFailure(f"cannot open the experiment registry in {directory}: {exc}") from None
        try:
            conn = _connect(path, read_only=True)
        except sqlite3.Error:
            raise ToolFailure(f"cannot open the experiment registry in {directory}: {problem}") from None
    try:
        yield Registry(conn, directory if on_disk else None, problem, place)
    except sqlite3.Error as exc:
        problem = unwritable(directory, exc) if on_disk else None
        raise ToolFailure(f"experiment registry error ({directory / DB_NAME}): {problem or exc}") from None
    finally:
        conn.close()
