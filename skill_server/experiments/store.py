"""The experiment registry: one SQLite database (WAL mode) under the state directory.

Shared by every CLI call and MCP server of the same user at the same time, and it survives restarts.
Each call opens its own short-lived connection (autocommit, busy timeout), so concurrent processes and
worker threads never share a handle. Scan state is updated with a compare-and-set on ``scan_version``
so two status calls racing over the same bytes never count an error twice.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from skill_server.errors import ToolFailure

DB_NAME = "experiments.sqlite3"

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
CREATE INDEX IF NOT EXISTS experiments_by_session ON experiments(session, created);
"""


def state_dir() -> Path:
    """``$SKILL_SERVER_STATE_DIR``, else ``$XDG_STATE_HOME/agentjet-swarm-skill``, else ~/.local/state/..."""
    explicit = os.environ.get("SKILL_SERVER_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser().absolute()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return (base / "agentjet-swarm-skill").absolute()


@dataclass
class Row:
    id: str
    session: str
    socket: str
    created: float
    started_at: str
    spec: dict[str, Any]
    final_state: str | None
    final_exit_code: int | None
    ended: float | None
    note: str | None
    read_cursor: str
    scan: dict[str, Any]
    scan_version: int
    timeouts: int


_COLUMNS = ("id, session, socket, created, started_at, spec, final_state, final_exit_code, ended, note, "
            "read_cursor, scan, scan_version, timeouts")


def _row(values: tuple[Any, ...]) -> Row:
    (id_, session, socket, created, started_at, spec, final_state, final_exit_code, ended, note, read_cursor,
     scan, scan_version, timeouts) = values
    return Row(id_, session, socket, created, started_at, json.loads(spec), final_state, final_exit_code, ended,
               note, read_cursor, json.loads(scan or "{}"), scan_version, timeouts)


class Registry:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    # ---- writes
    def insert(self, *, id: str, session: str, socket: str, created: float, started_at: str,
               spec: dict[str, Any]) -> None:
        self.conn.execute(
            "INSERT INTO experiments (id, session, socket, created, started_at, spec) VALUES (?, ?, ?, ?, ?, ?)",
            (id, session, socket, created, started_at, json.dumps(spec)),
        )

    def update_spec(self, exp_id: str, spec: dict[str, Any]) -> None:
        self.conn.execute("UPDATE experiments SET spec = ? WHERE id = ?", (json.dumps(spec), exp_id))

    def delete(self, exp_id: str) -> None:
        self.conn.execute("DELETE FROM experiments WHERE id = ?", (exp_id,))

    def finish(self, exp_id: str, state: str, exit_code: int | None, ended: float, note: str | None = None) -> bool:
        """Record a terminal state once; False if another caller recorded one first."""
        cur = self.conn.execute(
            "UPDATE experiments SET final_state = ?, final_exit_code = ?, ended = ?, note = COALESCE(?, note) "
            "WHERE id = ? AND final_state IS NULL",
            (state, exit_code, ended, note, exp_id),
        )
        return cur.rowcount == 1

    def set_exit_code(self, exp_id: str, exit_code: int | None) -> None:
        self.conn.execute("UPDATE experiments SET final_exit_code = ? WHERE id = ?", (exit_code, exp_id))

    def save_scan(self, exp_id: str, scan: dict[str, Any], expected_version: int) -> bool:
        cur = self.conn.execute(
            "UPDATE experiments SET scan = ?, scan_version = scan_version + 1 WHERE id = ? AND scan_version = ?",
            (json.dumps(scan), exp_id, expected_version),
        )
        return cur.rowcount == 1

    def save_cursor(self, exp_id: str, cursor: str) -> None:
        self.conn.execute("UPDATE experiments SET read_cursor = ? WHERE id = ?", (cursor, exp_id))

    def bump_timeouts(self, exp_id: str) -> int:
        self.conn.execute("UPDATE experiments SET timeouts = timeouts + 1 WHERE id = ?", (exp_id,))
        row = self.conn.execute("SELECT timeouts FROM experiments WHERE id = ?", (exp_id,)).fetchone()
        return int(row[0]) if row else 0

    # ---- reads
    def get(self, exp_id: str) -> Row | None:
        values = self.conn.execute(f"SELECT {_COLUMNS} FROM experiments WHERE id = ?", (exp_id,)).fetchone()
        return _row(values) if values else None

    def find(self, key: str) -> Row | None:
        """By experiment id, else the newest experiment of the session with that name."""
        row = self.get(key)
        if row is not None:
            return row
        values = self.conn.execute(
            f"SELECT {_COLUMNS} FROM experiments WHERE session = ? ORDER BY created DESC LIMIT 1", (key,)
        ).fetchone()
        return _row(values) if values else None

    def latest_for_session(self, socket: str, session: str) -> Row | None:
        values = self.conn.execute(
            f"SELECT {_COLUMNS} FROM experiments WHERE socket = ? AND session = ? ORDER BY created DESC LIMIT 1",
            (socket, session),
        ).fetchone()
        return _row(values) if values else None

    def all(self, limit: int) -> list[Row]:
        """Unfinished experiments first (all of them), then the newest finished ones, up to ``limit``."""
        rows = [_row(v) for v in self.conn.execute(
            f"SELECT {_COLUMNS} FROM experiments WHERE final_state IS NULL ORDER BY created DESC")]
        rest = max(0, limit - len(rows))
        if rest:
            rows += [_row(v) for v in self.conn.execute(
                f"SELECT {_COLUMNS} FROM experiments WHERE final_state IS NOT NULL ORDER BY created DESC LIMIT ?",
                (rest,))]
        return rows


@contextmanager
def open_registry() -> Iterator[Registry]:
    """A registry connection for the duration of one tool call."""
    directory = state_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        conn = sqlite3.connect(str(directory / DB_NAME), timeout=15.0, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise ToolFailure(f"cannot open the experiment registry in {directory}: {exc}") from None
    try:
        conn.execute("PRAGMA busy_timeout = 15000")
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        yield Registry(conn)
    except sqlite3.Error as exc:
        raise ToolFailure(f"experiment registry error ({directory / DB_NAME}): {exc}") from None
    finally:
        conn.close()


def run_dir(exp_id: str) -> Path:
    """Where an experiment's wrapper scripts, pid and exit-code files live."""
    return state_dir() / "runs" / exp_id
