"""The registry where the state directory is shared between machines (issue 20), with real parts: a FUSE
network filesystem (sshfs over the loopback sshd of tests/sshd.py) under the state directory, and two
controller processes using one registry at once (CLI processes whose controller identity differs through
``SKILL_SERVER_TEST_CONTROLLER``, which exists for tests only), as two login nodes of a cluster would.

Nothing is written outside temp dirs: ``SKILL_SERVER_NODE_LOCAL_BASE`` stands in for /var/tmp, and the
FUSE mount is unmounted in a ``finally``."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from skill_server.core import mounts
from skill_server.core.errors import ToolFailure
from skill_server.experiments import store
from tests.conftest import call_cli, cli_env
from tests.experiment_helpers import call, tmux_socket, wait_until, workdir  # noqa: F401  (fixtures)
from tests.sshd import LoopbackSshd
from tests.system_packages import MissingProgram, require
from tests.tmp_dirs import short_tmp_dir

# ---- which filesystem holds a path ---------------------------------------------------------------------

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 27 0:50 / /home rw,relatime shared:20 - nfs4 srv:/home rw,vers=4.2
41 40 0:51 / /home/u/my\\040data rw,relatime - fuse.sshfs u@h:/d rw,user_id=0
42 27 0:52 / /scratch rw - lustre 10.0.0.1@o2ib:/fs rw
43 42 0:53 / /scratch rw - ext4 /dev/sdb1 rw
44 27 8:17 / /mnt/usb rw - fuseblk /dev/sdc1 rw
garbage line
"""


def test_the_longest_mount_point_that_holds_a_path_decides_and_later_mounts_win():
    found = mounts.parse_mountinfo(MOUNTINFO)
    assert [m.fstype for m in found] == ["proc", "ext4", "nfs4", "fuse.sshfs", "lustre", "ext4", "fuseblk"]

    def fs(path: str) -> str | None:
        m = mounts.mount_of(path, found)
        return m.fstype if m else None

    assert fs("/home/u/.local/state/agentjet-swarm-skill") == "nfs4"
    assert fs("/home/u/my data/x") == "fuse.sshfs" and fs("/home/u/my datax") == "nfs4"
    assert fs("/scratch/run") == "ext4"  # mounted over the lustre mount at the same point
    assert fs("/var/tmp") == "ext4" and fs("/homework") == "ext4"
    assert [mounts.shared(x) for x in ("nfs4", "fuse.sshfs", "lustre", "ext4", "fuseblk", "tmpfs", None)] == [
        True, True, True, False, False, False, False]
    assert all(mounts.shared(x) for x in ("nfs", "gpfs", "beegfs", "cifs", "smb3", "9p", "ceph", "glusterfs"))


def test_the_state_dir_on_a_local_disk_keeps_the_registry_there():
    place = store.registry_place()
    assert place.mode == "local-wal" and place.directory == store.state_dir() and not place.node_local


def test_a_node_local_folder_that_is_a_symlink_or_another_users_is_refused(tmp_path: Path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(ToolFailure, match="is not a directory"):
        store._own_private_dir(link, create=True)
    mine = tmp_path / "mine"
    store._own_private_dir(mine, create=True)
    assert mine.is_dir() and (mine.stat().st_mode & 0o777) == 0o700
    if os.getuid() == 0:  # a folder of another user (as anyone may make one in /var/tmp first)
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(ToolFailure, match="belongs to uid 65534"):
            store._own_private_dir(theirs, create=True)


# ---- a real FUSE network filesystem under the state directory --------------------------------------------

@pytest.fixture(scope="module")
def sshfs_mount():
    """An sshfs mount (FUSE, over the loopback sshd) of a temp folder; unmounted at the end."""
    if not Path("/dev/fuse").exists():
        pytest.skip("this machine has no /dev/fuse (a container started without the FUSE device): no sshfs mount")
    try:
        require("sshfs", "fusermount")
    except MissingProgram as exc:
        pytest.fail(str(exc), pytrace=False)
    server = LoopbackSshd().start()
    export = server.root / "export"
    export.mkdir()
    point = Path(short_tmp_dir("ajsf"))
    try:
        done = subprocess.run(["sshfs", "-F", str(server.config), f"node1:{export}", str(point),
                               "-o", "ServerAliveInterval=5", "-o", "cache=no"], capture_output=True, text=True,
                              timeout=60, check=False, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: mounts.filesystem_of(str(point)) == "fuse.sshfs", timeout=20)
        yield point
    finally:
        for _ in range(50):  # a run's monitor may still be closing its files there
            if subprocess.run(["fusermount", "-u", str(point)], capture_output=True, timeout=60,
                              check=False).returncode == 0:
                break
            time.sleep(0.2)
        else:
            subprocess.run(["fusermount", "-u", "-z", str(point)], capture_output=True, timeout=60, check=False)
        shutil.rmtree(point, ignore_errors=True)
        server.stop()


@pytest.fixture
def node_local(monkeypatch: pytest.MonkeyPatch) -> Path:
    base = Path(short_tmp_dir("ajsv"))
    monkeypatch.setenv(store.NODE_LOCAL_BASE_ENV, str(base))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_a_state_dir_on_sshfs_puts_the_registry_node_local_and_says_so(sshfs_mount: Path, node_local: Path,
                                                                       tmux_socket: str, workdir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    state = sshfs_mount / f"state-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", str(state))
    before = call("experiment_status")["registry"]
    assert before["mode"] == "node-local (the state dir is on fuse.sshfs)" and before["filesystem"] == "fuse.sshfs"
    mine = node_local / f"agentjet-swarm-skill-{os.getuid()}"
    assert Path(before["path"]).parent.parent == mine and before["warning"] is None
    out = call("launch_experiment", name="onfuse", command="echo hello", workdir=str(workdir))
    done = call("wait_experiment", id=out["id"], timeout_s=30)
    assert done["state"] == "succeeded" and "hello" in done["lines"]
    assert Path(before["path"]).is_file() and not (state / store.DB_NAME).exists()
    assert (mine.stat().st_mode & 0o777) == 0o700 and (Path(before["path"]).parent.stat().st_mode & 0o777) == 0o700
    assert [p.name for p in (state / "runs" / out["id"]).iterdir()]  # the run's host state stays in the state dir
    after = call("experiment_status")
    assert after["registry"] == before and [e["id"] for e in after["experiments"]] == [out["id"]]


def test_an_explicit_registry_dir_on_sshfs_is_honoured_with_a_warning(sshfs_mount: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    chosen = sshfs_mount / f"reg-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv(store.REGISTRY_DIR_ENV, str(chosen))
    info = call("experiment_status")["registry"]
    assert info["path"] == str(chosen / store.DB_NAME) and info["filesystem"] == "fuse.sshfs"
    assert info["mode"] == f"wal on fuse.sshfs (set by {store.REGISTRY_DIR_ENV})"
    assert "safe only while one machine at a time uses it" in info["warning"]


# ---- two controllers, one registry ---------------------------------------------------------------------

def test_a_registry_that_another_process_is_creating_is_waited_for_not_locked(tmp_path: Path):
    """The cause of the load-dependent "database is locked" of two controllers' first launches: SQLite turns
    a new database into WAL by upgrading a read transaction, without its busy handler, so the second of two
    processes creating the registry at once failed at once. Here the other process holds the new database's
    write lock for half a second: opening it waits and comes out in WAL mode."""
    path = tmp_path / store.DB_NAME
    other = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE being_created (x)")
    release = threading.Timer(0.5, other.execute, ("COMMIT",))
    conn = store._connect(path)
    try:
        started = time.monotonic()
        release.start()
        store._prepare(conn, True)
        waited = time.monotonic() - started
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert waited >= 0.4, waited
    finally:
        release.join()
        conn.close()
        other.close()


LAUNCHES = 10


def _controller(name: str) -> dict[str, str]:
    return cli_env(SKILL_SERVER_TEST_CONTROLLER=name)


def _launch_loop(name: str, workdir: Path, out: dict[str, list], durations: dict[str, float]) -> None:
    start = time.monotonic()
    for i in range(LAUNCHES):
        code, answer, stderr = call_cli("launch_experiment", {"name": f"{name}{i}", "command": "true",
                                                              "workdir": str(workdir)}, env=_controller(name))
        out[name].append((code, answer["id"] if answer else None, stderr))
    durations[name] = time.monotonic() - start


def test_two_controllers_launching_at_once_lose_no_row_and_judge_only_their_own(tmux_socket: str, workdir: Path):
    results: dict[str, list] = {"ctla": [], "ctlb": []}
    durations: dict[str, float] = {}
    threads = [threading.Thread(target=_launch_loop, args=(n, workdir, results, durations)) for n in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    launched = {n: [x[1] for x in r] for n, r in results.items()}
    for runs in results.values():
        assert [code for code, _, _ in runs] == [0] * LAUNCHES, runs
        assert not any("locked" in stderr for _, _, stderr in runs), runs
    ids = launched["ctla"] + launched["ctlb"]
    assert len(set(ids)) == 2 * LAUNCHES
    path = store.registry_dir() / store.DB_NAME
    with sqlite3.connect(str(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = dict(conn.execute("SELECT id, controller FROM experiments"))
    assert rows == {**{i: "ctla" for i in launched["ctla"]}, **{i: "ctlb" for i in launched["ctlb"]}}
    print(f"two controllers x {LAUNCHES} launches: {durations}")  # shown with -s (the report's numbers)

    # Controller a looks at everything: b's runs (on b's "local") are unreachable with the reason, never lost.
    code, listing, _ = call_cli("experiment_status", {"limit": 100, "max_lines": 0}, env=_controller("ctla"))
    assert code == 0
    by_id = {e["id"]: e for e in listing["experiments"]}
    for exp_id in launched["ctlb"]:
        seen = by_id[exp_id]
        assert seen["state"] == "unreachable", seen
        assert seen["processes"][0]["reason"] == "launched on ctlb: ask there"
    with sqlite3.connect(str(path)) as conn:
        finals = dict(conn.execute("SELECT id, final_state FROM experiments WHERE controller = 'ctlb'"))
    assert "lost" not in finals.values() and set(finals.values()) <= {None, "succeeded"}
    code, mine, _ = call_cli("experiment_status", {"limit": 100, "max_lines": 0}, env=_controller("ctlb"))
    assert {e["state"] for e in mine["experiments"] if e["id"] in launched["ctlb"]} == {"succeeded"}


def test_a_stop_of_another_controllers_local_run_refuses_and_its_own_controller_stops_it(tmux_socket: str,
                                                                                         workdir: Path):
    code, run, _ = call_cli("launch_experiment", {"name": "theirs", "command": "sleep 300", "workdir": str(workdir)},
                            env=_controller("ctlb"))
    assert code == 0
    code, _, stderr = call_cli("stop_experiment", {"id": run["id"], "grace_s": 1}, env=_controller("ctla"))
    assert code != 0 and "launched on ctlb: ask there" in stderr and "nothing was signalled" in stderr
    code, _, stderr = call_cli("collect_results", {"id": run["id"]}, env=_controller("ctla"))
    assert code != 0 and "are on another machine: launched on ctlb: ask there" in stderr
    code, waited, _ = call_cli("wait_experiment", {"id": run["id"], "timeout_s": 60}, env=_controller("ctla"))
    assert code == 0 and (waited["reason"], waited["next_wait_s"]) == ("unreachable", 0), waited
    assert waited["waited_s"] < 10 and waited["summary"] == (
        f"Wait ended at once: run {run['id']} is another machine's (launched on ctlb: ask there); this machine "
        "cannot see its processes, so waiting here cannot help."), waited["summary"]
    # b is in the middle of undoing it (an interrupted launch): a's calls leave that to b, the row stays
    path = store.registry_dir() / store.DB_NAME
    with sqlite3.connect(str(path)) as conn:
        conn.execute("UPDATE experiments SET phase = 'discarding' WHERE id = ?", (run["id"],))
    code, _, _ = call_cli("experiment_status", {"max_lines": 0}, env=_controller("ctla"))
    with sqlite3.connect(str(path)) as conn:
        assert conn.execute("SELECT phase FROM experiments WHERE id = ?", (run["id"],)).fetchone() == ("discarding",)
        conn.execute("UPDATE experiments SET phase = 'running' WHERE id = ?", (run["id"],))
    code, seen, _ = call_cli("experiment_status", {"id": run["id"], "max_lines": 0}, env=_controller("ctlb"))
    assert seen["experiments"][0]["state"] == "running"
    code, stopped, _ = call_cli("stop_experiment", {"id": run["id"], "grace_s": 1}, env=_controller("ctlb"))
    assert code == 0 and stopped["state"] == "stopped", stopped
    assert json.dumps(stopped).count("ask there") == 0
