"""A registry that cannot be written says so in words, and a stop still stops (issue 19 item 7): the
database made immutable (chattr +i), its folder bind-mounted read-only, its disk (a tmpfs) filled. Status
answers with what it could not record, stop_experiment ends the run and says what it could not record, a
launch refuses before anything starts. Real tmux, real processes, real mounts (root)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from skill_server.core.errors import ToolFailure
from skill_server.experiments.store import DB_NAME
from tests.experiment_helpers import call, marked_pids, status, tmux_socket, trainer, wait_until, workdir  # noqa: F401  (fixtures)
from tests.faults import FullDisk, ReadOnlyBind

pytestmark = pytest.mark.skipif(os.getuid() != 0 or shutil.which("chattr") is None,
                                reason="mounts and chattr need root")


class Immutable:
    """The database file made immutable (``chattr +i``): even root cannot write it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        subprocess.run(["chattr", "+i", str(path)], check=True, timeout=20)

    def unmount(self) -> None:
        subprocess.run(["chattr", "-i", str(self.path)], check=False, timeout=20)


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    where = tmp_path / "registry"
    where.mkdir()
    monkeypatch.setenv("SKILL_SERVER_REGISTRY_DIR", str(where))
    yield where


def _fault(kind: str, registry: Path, tmp_path: Path):
    if kind == "immutable":
        return Immutable(registry / DB_NAME), "is read-only"
    if kind == "read-only mount":
        return ReadOnlyBind(registry), "is read-only (its filesystem is mounted read-only)"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["immutable", "read-only mount"])
def test_a_read_only_registry_says_so_and_a_stop_still_stops(tmux_socket: str, workdir: Path, registry: Path,
                                                              tmp_path: Path, kind: str):
    out = call("launch_experiment", name="ro", command=trainer("--mode", "hang"), workdir=str(workdir))
    wait_until(lambda: len(marked_pids(out["id"] + "/")) >= 3)
    fault, words = _fault(kind, registry, tmp_path)
    try:
        seen = status(out["id"], max_lines=0)
        assert seen["state"] == "running" and words in seen["note"] and "not recorded" in seen["note"]
        stopped = call("stop_experiment", id=out["id"], grace_s=1)
        assert stopped["state"] == "stopped" and marked_pids(out["id"] + "/") == []
        assert f"not recorded: the registry {registry / DB_NAME} {words}" in stopped["note"]
        with pytest.raises(ToolFailure) as err:
            call("launch_experiment", name="ro2", command="sleep 300", workdir=str(workdir))
        assert words in str(err.value) and "nothing was started" in str(err.value)
        assert marked_pids("ajet_ro2-") == []
    finally:
        fault.unmount()
    assert status(out["id"], max_lines=0)["state"] == "stopped"  # recorded once the registry is writable


@pytest.fixture
def full_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FullDisk]:
    disk = FullDisk(tmp_path / "registry", "4m")
    monkeypatch.setenv("SKILL_SERVER_REGISTRY_DIR", str(disk.path))
    try:
        yield disk
    finally:
        disk.free()
        disk.unmount()


def test_a_full_registry_disk_says_so_and_a_stop_still_stops(tmux_socket: str, workdir: Path,
                                                              full_registry: FullDisk):
    out = call("launch_experiment", name="fulldb", command=trainer("--mode", "hang"), workdir=str(workdir))
    wait_until(lambda: len(marked_pids(out["id"] + "/")) >= 3)
    full_registry.fill()
    words = f"the disk holding the registry {full_registry.path / DB_NAME} is full"
    seen = status(out["id"], max_lines=0)
    assert seen["state"] == "running" and f"not recorded: {words}" in seen["note"]
    stopped = call("stop_experiment", id=out["id"], grace_s=1)
    assert stopped["state"] == "stopped" and marked_pids(out["id"] + "/") == []
    assert f"not recorded: {words}" in stopped["note"]
    with pytest.raises(ToolFailure) as err:
        call("launch_experiment", name="fulldb2", command="sleep 300", workdir=str(workdir))
    assert words in str(err.value) and marked_pids("ajet_fulldb2-") == []
    full_registry.free()
    assert status(out["id"], max_lines=0)["state"] == "stopped"
