"""Small things that keep a long-lived setup healthy (issue 19 item 9): ``experiment_status`` without an id
answers one bounded page however many runs the registry holds, and a host's stale agent install folders
(left by a full disk or a killed install) are removed. Real tmux, real runs, the real shipped program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skill_server.core.errors import ToolInputError
from skill_server.hosts.agent import program
from skill_server.hosts.agent.protocol import PROTOCOL_VERSION
from tests.experiment_helpers import call, tmux_socket, workdir  # noqa: F401  (fixtures)


def test_listing_every_run_answers_one_bounded_page_with_a_cursor(tmux_socket: str, workdir: Path):
    ids = [call("launch_experiment", name=f"many{i}", command="true", workdir=str(workdir))["id"] for i in range(25)]
    first = call("experiment_status", max_lines=0)  # none observed yet: 25 unfinished rows
    assert len(first["experiments"]) == 20 and first["total"] == 25 and first["more"] == 5
    assert first["next_offset"] == 20
    second = call("experiment_status", max_lines=0, offset=first["next_offset"])
    assert len(second["experiments"]) == 5 and second["more"] == 0 and second["next_offset"] is None
    seen = [e["id"] for e in first["experiments"] + second["experiments"]]
    assert seen == list(reversed(ids))  # newest first, every run once
    small = call("experiment_status", max_lines=0, limit=3)
    assert [e["id"] for e in small["experiments"]] == seen[:3] and small["more"] == 22
    assert len(json.dumps(first)) < 200_000
    with pytest.raises(ToolInputError) as err:
        call("experiment_status", id=ids[0], offset=3)
    assert err.value.field == "offset"


#: The experiments table and its indexes as the release before the listing index (d563054) wrote them.
OLD_REGISTRY = """
CREATE TABLE experiments (
    id TEXT PRIMARY KEY, session TEXT NOT NULL, socket TEXT NOT NULL, created REAL NOT NULL,
    started_at TEXT NOT NULL, spec TEXT NOT NULL, final_state TEXT, final_exit_code INTEGER, ended REAL,
    note TEXT, read_cursor TEXT NOT NULL DEFAULT '', scan TEXT NOT NULL DEFAULT '{}',
    scan_version INTEGER NOT NULL DEFAULT 0, timeouts INTEGER NOT NULL DEFAULT 0,
    seq INTEGER, phase TEXT NOT NULL DEFAULT 'running', controller TEXT, launcher TEXT
);
CREATE INDEX experiments_by_session ON experiments(session, created);
CREATE INDEX experiments_by_seq ON experiments(seq);
CREATE INDEX experiments_by_phase ON experiments(phase);
"""


def _plan(reg, sql: str, params: tuple) -> str:
    return " ".join(str(row[-1]) for row in reg.conn.execute("EXPLAIN QUERY PLAN " + sql, params))


def test_an_old_registry_gets_the_listing_index_and_pages_without_sorting_its_history():
    """A registry written before the (phase, seq) index: opening it adds the index and keeps every row; a page
    of the listing and a lookup by name then walk an index in order (no sort of every row: the cost that grew
    with each finished run; its time is measured in bench/status.py, not here)."""
    import sqlite3

    from skill_server.experiments import store
    from skill_server.experiments.spec import RunSpec

    spec = json.dumps(RunSpec.from_json({"format": 2, "host": "local", "hosts": {"local": {
        "run_dir": "/nonexistent/runs/old", "socket_path": "/nonexistent/sock"}}, "processes": [
        {"role": "main", "host": "local", "log_path": "/nonexistent/old.log", "pid": 2**22, "start": "1"}]}).to_json())
    directory = store.registry_dir()
    directory.mkdir(parents=True)
    old = sqlite3.connect(str(directory / store.DB_NAME), isolation_level=None)
    old.executescript(OLD_REGISTRY)
    old.executemany("INSERT INTO experiments (id, session, socket, created, started_at, spec, final_state, seq) "
                    "VALUES (?, ?, 'x', ?, '', ?, 'succeeded', ?)",
                    [(f"old_{i}-x", f"old_{i % 7}", float(i), spec, i + 1) for i in range(300)])
    old.close()
    with store.open_registry() as reg:
        indexes = {str(r[1]) for r in reg.conn.execute("PRAGMA index_list(experiments)")}
        assert {"experiments_by_phase_seq", "experiments_by_session_seq"} <= indexes
        rows, problems = reg.all_with_problems(10, 20)
        assert [r.id for r in rows] == [f"old_{i}-x" for i in range(279, 269, -1)] and not problems
        assert reg.count() == 300 and reg.find("old_3").id == "old_297-x"
        page = _plan(reg, store.PAGE_SQL, (store.RUNNING, 10, 20))
        by_name = _plan(reg, store.BY_NAME_SQL, ("old_3", store.RUNNING))
    for plan in (page, by_name):
        assert "TEMP B-TREE" not in plan and "SCAN experiments" not in plan, plan
    assert "experiments_by_phase_seq" in page and "experiments_by_session_seq" in by_name


NONCE = "feedc0de"


def _ping(env: dict[str, str]) -> dict:
    request = json.dumps({"v": PROTOCOL_VERSION, "ops": [{"op": "ping"}]}).encode()
    done = subprocess.run([sys.executable, "-I", "-S", "-c", program.BOOTSTRAP, *program.bootstrap_argv(NONCE)],
                          input=program.ssh_payload(NONCE) + program.frame(NONCE, request), env=env,
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.split(b"\n", 2)[2])


def test_stale_agent_install_folders_are_removed(tmp_path: Path):
    import socket

    env = {"PATH": os.environ["PATH"], "SKILL_SERVER_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    agent = tmp_path / "state" / "agent"
    agent.mkdir(parents=True)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()  # a pid that no longer runs
    host = socket.gethostname()
    stale = agent / f"0123456789abcdef.tmp-{host}-{gone}"
    (stale / "ajs_agent").mkdir(parents=True)
    (stale / "ajs_agent" / "ops.py").write_text("# half written\n")
    alive = agent / f"0123456789abcdef.tmp-{host}-{os.getpid()}"  # a writer that still runs: left alone
    alive.mkdir()
    other = agent / f"0123456789abcdef.tmp-otherhost-{gone}"  # another host of a shared home: its own business
    other.mkdir()
    assert _ping(env)["results"][0]["ok"]
    left = sorted(p.name for p in agent.iterdir())
    assert stale.name not in left and alive.name in left and other.name in left
    assert len([p for p in left if ".tmp-" not in p]) == 1  # the real install


def test_an_install_that_fails_leaves_no_folder(tmp_path: Path):
    """A full disk while the agent installs itself: it answers from memory and removes its folder."""
    from tests.faults import FullDisk, have_root_mounts

    if not have_root_mounts():
        pytest.skip("mounting a tmpfs needs root")
    disk = FullDisk(tmp_path / "state", "1m")
    try:
        (disk.path / "agent").mkdir()
        disk.fill()
        env = {"PATH": os.environ["PATH"], "SKILL_SERVER_STATE_DIR": str(disk.path), "HOME": str(tmp_path)}
        assert _ping(env)["results"][0]["ok"]
        assert list((disk.path / "agent").iterdir()) == []
    finally:
        disk.free()
        disk.unmount()
