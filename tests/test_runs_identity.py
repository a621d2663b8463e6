"""A run is addressed by its identity (issue 19 item 1): stopping a finished attempt never touches the
live relaunch of the same name, and a lookup by name takes the newest registration whatever the wall
clock says. Real tmux on a private socket, real processes, a real wall-clock step (libfaketime)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skill_server.hosts.agent.protocol import host_identity
from tests.conftest import cli_env, run_cli
from tests.experiment_helpers import call, marked_pids, status, tmux_socket, trainer, wait_exit, wait_until, workdir  # noqa: F401  (fixtures are used by name)
from tests.faults import clock_step_env


def test_stopping_the_finished_attempt_leaves_the_relaunch_running(tmux_socket: str, workdir: Path):
    old = call("launch_experiment", name="same", command="echo first attempt", workdir=str(workdir))
    wait_exit(old["id"])
    new = call("launch_experiment", name="same", command=trainer("--mode", "hang"), workdir=str(workdir))
    wait_until(lambda: marked_pids(new["id"] + "/"))
    stopped = call("stop_experiment", id=old["id"], grace_s=1)
    assert stopped["id"] == old["id"] and stopped["state"] == "succeeded"
    assert stopped["killed_processes"] == [] and stopped["killed"] == [] and stopped["interrupted"] == []
    # its own session went when it ended (its monitor removed it); the one of that name now is the relaunch's
    live = status(new["id"], max_lines=0)
    assert live["state"] == "running" and marked_pids(new["id"] + "/")
    by_name = call("stop_experiment", id="ajet_same", grace_s=1)  # the newest registration of the name
    assert by_name["id"] == new["id"] and by_name["state"] == "stopped" and by_name["session_removed"]
    assert marked_pids(new["id"] + "/") == []


@pytest.mark.needs("libfaketime")
def test_a_backwards_clock_step_does_not_change_which_run_a_name_means(tmux_socket: str, workdir: Path):
    first = call("launch_experiment", name="stepped", command=trainer("--mode", "hang"), workdir=str(workdir))
    call("stop_experiment", id=first["id"], grace_s=1)
    # The relaunch happens after the clock was stepped back two days: its wall-clock start is the older one.
    args = {"name": "stepped", "command": trainer("--mode", "hang"), "workdir": str(workdir)}
    proc = run_cli("call", "launch_experiment", "--json", json.dumps(args), env=clock_step_env(cli_env(), "-2d"))
    assert proc.returncode == 0, proc.stderr
    second = json.loads(proc.stdout)
    assert second["started_at"] < first["started_at"]
    wait_until(lambda: marked_pids(second["id"] + "/"))
    assert status("ajet_stepped", max_lines=0)["id"] == second["id"]
    by_name = call("stop_experiment", id="ajet_stepped", grace_s=1)
    assert by_name["id"] == second["id"] and by_name["state"] == "stopped"
    assert marked_pids(second["id"] + "/") == []
    assert status(first["id"], max_lines=0)["state"] == "stopped"


def test_the_run_directory_carries_the_host_identity(tmux_socket: str, workdir: Path):
    import os

    out = call("launch_experiment", name="where", command="true", workdir=str(workdir))
    wait_exit(out["id"])
    run_dir = Path(os.environ["SKILL_SERVER_STATE_DIR"]) / "runs" / out["id"]
    assert [p.name for p in run_dir.iterdir()] == [host_identity()]
    assert (run_dir / host_identity() / "main.exit").read_text().strip() == "0"


@pytest.mark.needs("libfaketime")
@pytest.mark.parametrize("step", ["+25h", "+30m", "-3d"])
def test_a_wall_clock_step_changes_no_verdict(tmux_socket: str, workdir: Path, step: str):
    """Durations that decide a state come from the host's boot-relative clock: a status asked by a process
    whose wall clock is far ahead (or behind) sees a young run as young."""
    out = call("launch_experiment", name="young", command=trainer("--mode", "hang"), workdir=str(workdir),
               max_time_s=3600, first_step_timeout_s=1200)
    wait_until(lambda: marked_pids(out["id"] + "/"))
    for tool, args in (("experiment_status", {"id": out["id"], "max_lines": 0}),
                       ("wait_experiment", {"id": out["id"], "timeout_s": 1})):
        proc = run_cli("call", tool, "--json", json.dumps(args), env=clock_step_env(cli_env(), step))
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout)
        seen = seen["experiments"][0] if tool == "experiment_status" else seen
        assert seen["state"] == "running" and not seen["first_step_overdue"], seen
        assert seen["elapsed_s"] < 60 and 3500 < seen["time_left_s"] <= 3600, seen
        assert "past its max time" not in (seen["note"] or "")
    call("stop_experiment", id=out["id"], grace_s=1)
