"""Hosts that share a home directory (issue 20), against real OpenSSH servers on loopback: two fake nodes,
each its own machine (its own sshd in its own PID, mount and UTS namespaces, its own host name and
/etc/machine-id, its own tmux socket folder), with one home and one state directory between them, as
the compute nodes of a cluster whose home is on NFS (``LoopbackSshd(shared_home=True)``).

A multi-host launch keeps one run folder per host identity; two same-named runs, one per node, in one
working directory keep their own logs, result folders, errors and metrics; stopping one leaves the other;
a controller killed in the middle of a launch is rolled back on every node by the next call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from skill_server.hosts.ssh import close_masters
from tests.conftest import REPO, cli_env
from tests.experiment_helpers import FAKE, call, status, wait_until
from tests.sshd import LoopbackSshd

NODES = ("node1", "node2")


@pytest.fixture(scope="module")
def cluster():
    if os.getuid() != 0:
        pytest.skip("one sshd per node with its own host name needs PID and UTS namespaces (root); CI runs as root")
    server = LoopbackSshd(NODES, one_per_node=True, shared_home=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def shared(cluster: LoopbackSshd, monkeypatch: pytest.MonkeyPatch):
    """This test's controller: its own state directory and tmux socket name, the nodes' ssh config."""
    client = Path(tempfile.mkdtemp(prefix="c", dir=cluster.root))  # short: control sockets live under it
    (client / "home").mkdir()
    monkeypatch.setenv("SKILL_SERVER_SSH_CONFIG", str(cluster.config))
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", str(client / "s"))
    monkeypatch.setenv("HOME", str(client / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("SKILL_SERVER_TMUX_SOCKET", f"ajh-{uuid.uuid4().hex[:6]}")
    monkeypatch.setenv("SHELL", "/bin/sh")
    cluster.client = client  # type: ignore[attr-defined]
    yield cluster
    close_masters()


def common_workdir(cluster: LoopbackSshd) -> Path:
    """A working directory in the common home: both nodes see it at the same path."""
    work = Path(tempfile.mkdtemp(prefix="w", dir=cluster.home))
    work.chmod(0o755)
    return work


def trainer(*args: str) -> str:
    return f"python3 {FAKE} " + " ".join(args)


def node_pids(cluster: LoopbackSshd, node: str, exp_id: str) -> list[int]:
    """Pids on ``node`` carrying the run marker of ``exp_id`` (asked on the node itself, not through the tool)."""
    code = ("import os\n"
            "for e in os.listdir('/proc'):\n"
            "    try: env=open('/proc/'+e+'/environ','rb').read(); st=open('/proc/'+e+'/stat').read()\n"
            "    except Exception: continue\n"
            f"    if st.rsplit(')',1)[-1].split()[0] != 'Z' and b'AGENTJET_SKILL_RUN={exp_id}/' in env: print(e)\n")
    out = cluster.node_exec(node, ["python3", "-c", code])
    return [int(x) for x in out.stdout.split()]


def test_the_nodes_are_two_machines_with_one_home(shared: LoopbackSshd):
    names = {node: shared.node_exec(node, ["hostname"]).stdout.strip() for node in NODES}
    ids = {node: shared.node_exec(node, ["cat", "/etc/machine-id"]).stdout.strip() for node in NODES}
    assert names == {"node1": "node1", "node2": "node2"} and ids["node1"] != ids["node2"]


def test_a_launch_on_two_nodes_of_one_home_keeps_one_run_folder_per_host(shared: LoopbackSshd):
    work = common_workdir(shared)
    out = call("launch_experiment", host="node1", name="both", workdir=str(work),
               processes=[{"role": "a", "command": "echo hello from a"},
                          {"role": "b", "command": "echo hello from b", "host": "node2"}])
    done = call("wait_experiment", id=out["id"], timeout_s=60)
    assert done["state"] == "succeeded", done
    assert "[a] hello from a" in done["lines"] and "[b] hello from b" in done["lines"]
    folders = sorted(p.name for p in (shared.shared_state / "runs" / out["id"]).iterdir() if p.is_dir())
    assert len(folders) == 2 and folders[0].startswith("node1-") and folders[1].startswith("node2-")
    for folder in folders:
        assert (shared.shared_state / "runs" / out["id"] / folder / ("a" if "node1" in folder else "b")
                ).with_suffix(".exit").read_text().strip() == "0"


def test_same_named_runs_on_two_nodes_of_one_home_keep_their_own_logs_results_and_states(shared: LoopbackSshd):
    work = common_workdir(shared)
    good = call("launch_experiment", host="node1", name="twin", workdir=str(work),
                command=trainer("--steps", "4", "--delay", "0.2"))
    bad = call("launch_experiment", host="node2", name="twin", workdir=str(work),
               command=trainer("--mode", "oom", "--steps", "2", "--delay", "0.2"))
    assert good["log_path"] != bad["log_path"]
    good_done = call("wait_experiment", id=good["id"], timeout_s=60)
    bad_done = call("wait_experiment", id=bad["id"], timeout_s=60)
    assert good_done["state"] == "succeeded" and bad_done["state"] == "failed", (good_done, bad_done)
    assert "cuda_oom" in [e["signature"] for e in bad_done["errors"]]
    assert good_done["errors"] == [] and good_done["global_step"] == 4 and bad_done["global_step"] < 4
    assert good_done["last_metrics"] and good_done["last_metrics"] != bad_done["last_metrics"]
    good_log, bad_log = Path(good["log_path"]).read_text(), Path(bad["log_path"]).read_text()
    assert "OutOfMemoryError" in bad_log and "OutOfMemoryError" not in good_log
    assert Path(good["log_path"]).parent.name == good["id"] and Path(bad["log_path"]).parent.name == bad["id"]
    results = {}
    for run in (good, bad):
        out = call("collect_results", id=run["id"])
        results[run["id"]] = out
        assert Path(out["results_path"]).parent.name == run["id"]
    assert results[good["id"]]["results_path"] != results[bad["id"]]["results_path"]
    assert (Path(results[good["id"]]["results_path"]).parent.parent / "finish.flag").is_file()
    compared = call("compare_experiments", ids=[good["id"], bad["id"]])
    assert compared["leader"] is None or compared["leader"]["leader"] == good["id"], compared


def test_stopping_one_of_two_same_named_runs_on_one_home_leaves_the_other(shared: LoopbackSshd):
    work = common_workdir(shared)
    one = call("launch_experiment", host="node1", name="pair", workdir=str(work), command="sleep 300")
    two = call("launch_experiment", host="node2", name="pair", workdir=str(work), command="sleep 300")
    wait_until(lambda: node_pids(shared, "node1", one["id"]) and node_pids(shared, "node2", two["id"]), timeout=30)
    stopped = call("stop_experiment", id=one["id"], grace_s=1)
    assert stopped["state"] == "stopped" and node_pids(shared, "node1", one["id"]) == []
    assert status(two["id"], max_lines=0)["state"] == "running" and node_pids(shared, "node2", two["id"])
    assert call("stop_experiment", id=two["id"], grace_s=1)["state"] == "stopped"
    assert node_pids(shared, "node2", two["id"]) == []


def test_a_controller_killed_mid_launch_on_one_home_leaves_the_run_registered_or_gone(shared: LoopbackSshd):
    """The CLI is killed as soon as a node has started a process of the run (it carries the run marker): after
    the next call of any tool the run is either listed (and stops on both nodes) or rolled back on both
    nodes and forgotten; nothing of it is left running on either node."""
    work = common_workdir(shared)
    args = {"host": "node1", "name": "killed", "workdir": str(work),
            "processes": [{"role": "a", "command": "sleep 300"},
                          {"role": "b", "command": "sleep 300", "host": "node2"}]}
    runs = shared.shared_state / "runs"
    before = set(os.listdir(runs)) if runs.is_dir() else set()
    proc = subprocess.Popen([sys.executable, "-m", "skill_server", "call", "launch_experiment", "--json",
                             json.dumps(args)], cwd=REPO, env=cli_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        def started() -> str | None:
            for name in (set(os.listdir(runs)) if runs.is_dir() else set()) - before:
                if node_pids(shared, "node1", name) or node_pids(shared, "node2", name):
                    return name
            return None

        exp_id = wait_until(started, timeout=60, interval=0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    listed = [e for e in call("experiment_status", max_lines=0)["experiments"] if e["id"] == exp_id]
    if listed:
        assert listed[0]["state"] == "running", listed
        assert call("stop_experiment", id=exp_id, grace_s=1)["state"] == "stopped"
    else:  # rolled back by that call: every node confirmed nothing of it is left
        assert all(e["id"] != exp_id for e in call("experiment_status", max_lines=0)["experiments"])
    assert node_pids(shared, "node1", exp_id) == [] and node_pids(shared, "node2", exp_id) == []


def test_another_controller_observes_and_stops_a_run_on_an_ssh_node(shared: LoopbackSshd,
                                                                      monkeypatch: pytest.MonkeyPatch):
    """Any controller may ask a remote host: a run that login node 1 launched on node1 is running (not
    unreachable) for login node 2 sharing the registry, and login node 2 can stop it."""
    from skill_server.experiments import store

    def as_controller(name: str) -> None:
        monkeypatch.setenv(store.CONTROLLER_ENV, name)
        store.controller_identity.cache_clear()

    try:
        as_controller("login1")
        run = call("launch_experiment", host="node1", name="remote", workdir=str(common_workdir(shared)),
                   command="sleep 300")
        wait_until(lambda: node_pids(shared, "node1", run["id"]), timeout=30)
        with store.open_registry() as reg:
            row = reg.get(run["id"])
            assert row is not None and row.controller == "login1"
        as_controller("login2")
        seen = status(run["id"], max_lines=0)
        assert seen["state"] == "running" and seen["processes"][0]["reason"] is None, seen
        assert call("stop_experiment", id=run["id"], grace_s=1)["state"] == "stopped"
        assert node_pids(shared, "node1", run["id"]) == []
    finally:
        monkeypatch.delenv(store.CONTROLLER_ENV)
        store.controller_identity.cache_clear()
