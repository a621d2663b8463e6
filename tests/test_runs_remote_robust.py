"""Runs on ssh hosts that can be left alone (issue 19) against a real OpenSSH server on loopback: a stop of
an old attempt never touches the relaunch, interrupted launches are rolled back, calls end in their bound
under a partition and a hung tmux, noisy login shells work. See tests/faults.py for the faults."""

from __future__ import annotations

from tests.experiment_helpers import call, status, wait_until
from tests.sshd import LoopbackSshd
from tests.test_experiments_remote import node_marked, remote, sshd, trainer, workdir_on  # noqa: F401  (fixtures)


def test_stopping_the_finished_attempt_on_a_node_leaves_the_relaunch_running(remote: LoopbackSshd):
    work = workdir_on(remote)
    old = call("launch_experiment", host="node1", name="same", workdir=str(work), command="echo first")
    assert call("wait_experiment", id=old["id"], timeout_s=30)["state"] == "succeeded"
    new = call("launch_experiment", host="node1", name="same", workdir=str(work), command="sleep 300")
    wait_until(lambda: node_marked("node1", new["id"] + "/"), timeout=20)
    stopped = call("stop_experiment", id=old["id"], grace_s=1)
    assert stopped["killed_processes"] == [] and not stopped["session_removed"] and stopped["state"] == "succeeded"
    assert status(new["id"], max_lines=0)["state"] == "running" and node_marked("node1", new["id"] + "/")
    done = call("stop_experiment", id=new["id"], grace_s=1)
    assert done["state"] == "stopped" and done["session_removed"] and node_marked("node1", new["id"] + "/") == []

