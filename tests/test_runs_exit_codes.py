"""The exit code of a run survives a full disk (issue 19 item 3): the wrapper cannot write its exit file,
tmux keeps the code in memory (the option the wrapper set, the dead pane's status), status reports it,
and the next look writes the file once space is back. ``lost`` only when no code exists anywhere.
Real tmux, a real tmpfs filled to the last byte (tests/faults.py ``FullDisk``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from skill_server.hosts.agent.protocol import host_identity
from tests.experiment_helpers import call, marked_pids, status, tmux_socket, trainer, wait_until, workdir  # noqa: F401  (fixtures)
from tests.faults import FullDisk, have_root_mounts
from tests.tmp_dirs import kill_run_processes

needs_root = pytest.mark.skipif(not have_root_mounts(), reason="mounting a tmpfs needs root")


@pytest.fixture
def full_state_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The state directory (run directories) on a small tmpfs; the registry elsewhere, so that only the
    host side's files meet the full disk."""
    disk = FullDisk(tmp_path / "disk", "2m")
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", str(disk.path / "state"))
    monkeypatch.setenv("SKILL_SERVER_REGISTRY_DIR", str(tmp_path / "registry"))
    try:
        yield disk
    finally:
        kill_run_processes(str(disk.path / "state"))  # a failed test's runs hold files there: they go first
        disk.free()
        disk.unmount()


@needs_root
@pytest.mark.parametrize("code", [0, 1])
def test_the_exit_code_of_a_run_that_filled_the_disk_is_known(tmux_socket: str, workdir: Path,
                                                               full_state_disk: FullDisk, code: int):
    filler = full_state_disk.filler
    out = call("launch_experiment", name=f"full{code}", workdir=str(workdir),
               command=f"cat /dev/zero > {filler} 2>/dev/null; echo filled; exit {code}")
    done = call("wait_experiment", id=out["id"], timeout_s=20)
    assert done["reason"] == "exited" and done["exit_code"] == code
    assert done["state"] == ("succeeded" if code == 0 else "failed")
    assert done["processes"][0]["state"] == done["state"]
    run_dir = Path(os.environ["SKILL_SERVER_STATE_DIR"]) / "runs" / out["id"] / host_identity()
    assert not (run_dir / "main.exit").exists()  # the disk was full when the wrapper ended
    full_state_disk.free()
    again = status(out["id"], max_lines=0)  # the final state was recorded; this look writes the file
    assert again["state"] == done["state"] and again["exit_code"] == code
    wait_until((run_dir / "main.exit").is_file)
    assert (run_dir / "main.exit").read_text().strip() == str(code)


@needs_root
def test_a_wrapper_killed_on_a_full_disk_is_lost_only_because_no_code_exists(tmux_socket: str, workdir: Path,
                                                                             full_state_disk: FullDisk):
    out = call("launch_experiment", name="fullk9", command=trainer("--mode", "hang"), workdir=str(workdir))
    wait_until(lambda: len(marked_pids(out["id"] + "/")) >= 3)
    full_state_disk.fill()
    for pid in marked_pids(out["id"] + "/"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # ended with its parent between the listing and the kill
            pass
    seen = wait_until(lambda: (s := status(out["id"], max_lines=0))["state"] != "running" and s)
    assert seen["state"] == "lost" and seen["exit_code"] is None
