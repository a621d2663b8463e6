"""Runs on ssh hosts that can be left alone (issue 19) against a real OpenSSH server on loopback: a stop of
an old attempt never touches the relaunch, interrupted launches are rolled back, calls end in their bound
under a partition and a hung tmux, noisy login shells work. See tests/faults.py for the faults."""

from __future__ import annotations

import threading

import pytest

from skill_server.core.errors import ToolFailure
from skill_server.hosts import get_host
from skill_server.hosts.ssh import close_masters
from tests.experiment_helpers import call, status, wait_until
from tests.faults import JUNK_BASHRC, NOISY_BASHRC, READING_BASHRC, clear_bashrc, write_bashrc
from tests.sshd import LoopbackSshd
from tests.test_experiments_remote import node_marked, remote, workdir_on  # noqa: F401  (fixtures)


def test_stopping_the_finished_attempt_on_a_node_leaves_the_relaunch_running(remote: LoopbackSshd):
    work = workdir_on(remote)
    old = call("launch_experiment", host="node1", name="same", workdir=str(work), command="echo first")
    assert call("wait_experiment", id=old["id"], timeout_s=30)["state"] == "succeeded"
    new = call("launch_experiment", host="node1", name="same", workdir=str(work), command="sleep 300")
    wait_until(lambda: node_marked("node1", new["id"] + "/"), timeout=20)
    stopped = call("stop_experiment", id=old["id"], grace_s=1)
    # its own session went when it ended (its monitor removed it); the one of that name now is the relaunch's
    assert stopped["killed_processes"] == [] and stopped["state"] == "succeeded"
    assert status(new["id"], max_lines=0)["state"] == "running" and node_marked("node1", new["id"] + "/")
    done = call("stop_experiment", id=new["id"], grace_s=1)
    assert done["state"] == "stopped" and done["session_removed"] and node_marked("node1", new["id"] + "/") == []



# ---- login shells that print or read (issue 19 item 4) -----------------------------------------------

@pytest.fixture(scope="module")
def sshd():
    """The nodes' login shell is bash, which runs ``~/.bashrc`` for an ssh command (as on Debian and RHEL)."""
    server = LoopbackSshd(shell="/bin/bash").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("bashrc", [NOISY_BASHRC, READING_BASHRC], ids=["prints", "reads-stdin"])
def test_a_login_shell_that_prints_or_reads_stdin_leaves_the_channel_working(remote: LoopbackSshd, bashrc: str):
    ran = remote.home / "bashrc-ran"
    write_bashrc(remote.home, bashrc + f"touch {ran}\n")
    try:
        close_masters()
        work = workdir_on(remote)
        out = call("launch_experiment", host="node1", name="noisy", workdir=str(work),
                   processes=[{"role": "a", "command": "echo hello from a"},
                              {"role": "b", "command": "echo hello from b", "host": "node2"}])
        done = call("wait_experiment", id=out["id"], timeout_s=30)
        assert done["state"] == "succeeded", done
        assert "[a] hello from a" in done["lines"] and "[b] hello from b" in done["lines"]
        assert get_host("node2").run(["echo", "plain"]).stdout == "plain\n"
        assert ran.is_file()  # the start-up file did run on the way
    finally:
        ran.unlink(missing_ok=True)
        clear_bashrc(remote.home)


def test_a_login_shell_that_never_starts_python_is_quoted_in_the_error(remote: LoopbackSshd):
    write_bashrc(remote.home, JUNK_BASHRC)
    try:
        close_masters()
        with pytest.raises(ToolFailure) as err:
            call("launch_experiment", host="node1", name="junk", workdir=str(workdir_on(remote)), command="true")
        message = str(err.value)
        assert err.value.field == "host" and "\n" not in message and "\x1b" not in message and "\x01" not in message
        assert "the login shell of node1 exited (status 3) before starting the host agent" in message
        assert "it printed: 'module: command not found ?[31m??junk'" in message
    finally:
        clear_bashrc(remote.home)


# ---- wait_experiment until a pattern

def test_a_pattern_wait_looks_again_after_the_host_came_back(remote: LoopbackSshd):
    """The known bug: one failed look made the pattern search stop for good."""
    out = call("launch_experiment", host="node2", name="back", workdir=str(workdir_on(remote)),
               command="sh -c 'sleep 6; echo READY; sleep 120'")
    remote.set_port("node2", remote.down_port)
    close_masters()
    restore = threading.Timer(2.0, remote.set_port, ("node2", remote.ports["node2"]))
    restore.start()
    try:
        done = call("wait_experiment", id=out["id"], until="pattern", pattern="READY", timeout_s=20)
    finally:
        restore.join()
    assert done["reason"] == "pattern" and done["matched_line"] == "READY" and done["state"] == "running"
    call("stop_experiment", id=out["id"], grace_s=1)
