"""A host partitioned by a frozen TCP proxy (issue 19 items 2 and 5), against real OpenSSH servers on
loopback, one per node in its own PID namespace (so a stop on one node cannot see the other's processes,
as on two machines): every tool answers in its bound with ``unreachable`` and the reason, and a two-host
launch cut by the partition between its rounds is rolled back everywhere once the host is back."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from skill_server.core.errors import ToolFailure
from skill_server.experiments.store import DB_NAME, registry_dir
from skill_server.hosts.ssh import close_masters
from tests.experiment_helpers import call, wait_until
from tests.faults import FrozenProxy, timed
from tests.sshd import LoopbackSshd
from tests.test_experiments_remote import node_marked, remote, workdir_on  # noqa: F401  (fixtures)

CALL_BOUND_S = 55.0
WAIT_MARGIN_S = 5.0
TWO_HOSTS = [{"role": "a", "command": "sleep 300"}, {"role": "b", "command": "sleep 300", "host": "node2"}]

pytestmark = pytest.mark.skipif(os.getuid() != 0 or shutil.which("unshare") is None,
                                reason="one sshd per node needs root and unshare")


@pytest.fixture(scope="module")
def sshd():
    server = LoopbackSshd(one_per_node=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def proxied(remote: LoopbackSshd):
    """node2 reached through a proxy that a test can freeze (a network partition)."""
    proxy = FrozenProxy(remote.ports["node2"])
    remote.trust_port("node2", proxy.port)
    remote.set_port("node2", proxy.port)
    close_masters()
    try:
        yield proxy
    finally:
        proxy.stop()
        remote.set_port("node2", remote.ports["node2"])
        close_masters()


def _nothing_left(prefix: str) -> bool:
    return not node_marked("node1", prefix) and not node_marked("node2", prefix)


def test_every_tool_answers_in_its_bound_while_a_host_is_partitioned(remote: LoopbackSshd, proxied: FrozenProxy):
    work = workdir_on(remote)
    out = call("launch_experiment", host="node1", name="split", workdir=str(work), processes=TWO_HOSTS)
    wait_until(lambda: node_marked("node2", out["id"] + "/"), timeout=20)
    proxied.freeze()
    calls = {
        "status": ("experiment_status", {"id": out["id"]}, CALL_BOUND_S),
        "status_all": ("experiment_status", {}, CALL_BOUND_S),
        "wait": ("wait_experiment", {"id": out["id"], "timeout_s": 10}, 10 + WAIT_MARGIN_S),
        "wait_pattern": ("wait_experiment", {"id": out["id"], "timeout_s": 8, "until": "pattern", "pattern": "x"},
                         8 + WAIT_MARGIN_S),
        "launch": ("launch_experiment", {"host": "node1", "name": "split2", "workdir": str(work),
                                         "processes": TWO_HOSTS}, CALL_BOUND_S),
        "stop": ("stop_experiment", {"id": out["id"], "grace_s": 1}, CALL_BOUND_S),
    }
    try:
        with ThreadPoolExecutor(len(calls)) as pool:
            futures = {key: pool.submit(timed, call, tool, **args) for key, (tool, args, _) in calls.items()}
            results = {key: f.result() for key, f in futures.items()}
    finally:
        proxied.thaw()
    took = {key: round(t, 1) for key, (_, t) in results.items()}
    print("seconds per call under a partition:", took)
    for key, (_, _, bound) in calls.items():
        assert took[key] <= bound, (key, took)
    seen = results["status"][0]["experiments"][0]
    assert seen["state"] == "unreachable" and "node2" in seen["note"]
    assert results["wait"][0]["reason"] == "unreachable" and results["wait_pattern"][0]["reason"] == "unreachable"
    assert isinstance(results["launch"][0], ToolFailure) and "node2" in str(results["launch"][0])
    stopped = results["stop"][0]
    assert "could not stop on node2" in stopped["note"] and not node_marked("node1", out["id"] + "/")
    # The partition is over: the stop goes through, nothing of either launch is left on either node.
    done = call("stop_experiment", id=out["id"], grace_s=1)
    assert done["state"] == "stopped" and _nothing_left(out["id"] + "/")
    assert _nothing_left("ajet_split2-")


def _when_intent_row_appears(session: str, then) -> threading.Thread:
    """Run ``then()`` as soon as the launch of ``session`` has written its intent row (between its rounds)."""
    path = str(registry_dir() / DB_NAME)

    def watch() -> None:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                with sqlite3.connect(path, timeout=1) as conn:
                    if conn.execute("SELECT 1 FROM experiments WHERE session = ? AND phase = 'launching'",
                                    (session,)).fetchone():
                        then()
                        return
            except sqlite3.Error:
                pass
            time.sleep(0.002)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_two_host_launch_cut_by_a_partition_is_rolled_back_everywhere(remote: LoopbackSshd, proxied: FrozenProxy):
    work = workdir_on(remote)
    call("experiment_status")  # the registry exists before the watcher looks at it
    watcher = _when_intent_row_appears("ajet_cut", proxied.freeze)
    refused, took = timed(call, "launch_experiment", host="node1", name="cut", workdir=str(work), processes=TWO_HOSTS)
    watcher.join(5)
    print("a launch cut by a partition answered after", round(took, 1), "s:", refused)
    assert took <= CALL_BOUND_S and isinstance(refused, ToolFailure) and "node2" in str(refused)
    assert not node_marked("node1", "ajet_cut-")  # rolled back where it could be at once
    assert call("experiment_status")["experiments"] == []  # never visible: the launch did not complete
    proxied.thaw()  # node2 may now get the start it was sent; the next calls roll it back there too

    def rows() -> int:
        with sqlite3.connect(str(registry_dir() / DB_NAME)) as conn:
            return conn.execute("SELECT COUNT(*) FROM experiments WHERE session = 'ajet_cut'").fetchone()[0]

    # Every call of a tool retries the rollback (at most every 20 s) until both hosts confirm it.
    wait_until(lambda: call("experiment_status") is not None and _nothing_left("ajet_cut-") and rows() == 0,
               timeout=120, interval=3)
