"""ray_cluster with the real ``ray`` CLI (PyPI ray, a test dependency) on two nodes reached over real sshd.

Ray allows two nodes on one machine (each ``ray start`` is its own raylet with its own node id), so a
head and a worker really join here. What keeps this from touching the machine's own network, Ray or
processes:

* A private network namespace with only loopback (``tests.sshd.PrivateNetwork``). On the machine's
  network Ray would replace 127.0.0.1 with the routable address and listen on every interface; here
  it binds 127.0.0.1. Both nodes' sshd and every tool call (the CLI, run with ``nsenter --net``) live
  in it; the pytest process itself never talks to the nodes.
* One sshd per node, each in its own PID and mount namespace with its own /tmp and /dev/shm
  (``LoopbackSshd(one_per_node=True, private_tmp=True)``): ``ray stop`` ends every Ray process it can
  see, so a node sees only its own; Ray's session files stay in the node's /tmp. Killing the
  namespaces at teardown ends whatever is left.

A stand-in nvidia-smi (``tests/fixtures/fake_nvidia_smi.py``) is on both nodes' PATH, so stop reports
what still holds GPU memory; a "GPU process" is a real process holding the stand-in's device file.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.hosts.ssh import close_masters
from tests.conftest import REPO, cli_env
from tests.experiment_helpers import call
from tests.gpu_helpers import A100, install_fake_smi
from tests.sshd import LoopbackSshd, PrivateNetwork

RAY = str(Path(sys.executable).parent / "ray")
PORT = 6380
NODE_STATE = {"gpus": [{"uuid": f"GPU-r{i}", "name": A100, "memory_total": 81920, "memory_used": 0, "utilization": 0}
                       for i in range(2)],
              # a pid of another container: listed by nvidia-smi, not a process of this node
              "processes": [{"gpu": 0, "pid": 4194000, "name": "/usr/bin/python3", "used_memory": 500}]}
RAY_OPTIONS = {"ray": RAY, "num_gpus": 2, "num_cpus": 1, "ray_args": ["--object-store-memory=100000000"],
               "head_args": ["--include-dashboard=false"], "env": {"RAY_USAGE_STATS_ENABLED": "0"}}


@contextmanager
def ray_nodes(shared_home: bool = False) -> Iterator[LoopbackSshd]:
    """node1 and node2 in a private network, the stand-in nvidia-smi first on their PATH; ``server.env`` is
    the environment the CLI runs with (its own state, home and tmux socket; no ssh agent). At the end the
    CLI's ssh masters, the nodes and the network end. Shared with bench/ray_cluster.py. ``shared_home``:
    the nodes share one home and state directory, each with its own host name and machine id."""
    network = PrivateNetwork()
    server = None
    try:
        server = LoopbackSshd(("node1", "node2"), one_per_node=True, network=network, private_tmp=True,
                              shared_home=shared_home)
        for node in server.nodes:
            install_fake_smi(server.root / node / "bin", NODE_STATE)
        server.node_paths = {node: [str(server.root / node / "bin")] for node in server.nodes}
        for path in (server.root, server.root / "node2"):  # a holder running as nobody reaches its device
            path.chmod(0o711)
        server.start()
        client = Path(tempfile.mkdtemp(prefix="c", dir=server.root))
        (client / "home").mkdir()
        env = cli_env(SKILL_SERVER_SSH_CONFIG=str(server.config), SKILL_SERVER_STATE_DIR=str(client / "s"),
                      HOME=str(client / "home"), SKILL_SERVER_TMUX_SOCKET=f"ajr-{uuid.uuid4().hex[:6]}",
                      SHELL="/bin/sh")
        env.pop("SSH_AUTH_SOCK", None)
        server.env = env  # type: ignore[attr-defined]
        yield server
    finally:
        if server is not None:
            if hasattr(server, "env"):
                saved = dict(os.environ)
                os.environ.update(server.env)  # close the CLI's ssh masters (their sockets are files here)
                try:
                    close_masters()
                finally:
                    os.environ.clear()
                    os.environ.update(saved)
            server.stop()
        network.stop()


@pytest.fixture(scope="module")
def cluster():
    if os.getuid() != 0:
        pytest.skip("private network and PID namespaces need root; CI runs as root")
    assert Path(RAY).is_file(), f"{RAY} is missing: pip install ray (a test dependency; .ci/run installs it)"
    with ray_nodes() as server:
        yield server


def cli(server: LoopbackSshd, tool: str, arguments: dict[str, Any], timeout: float = 180) -> tuple[int, Any, str]:
    """``python -m skill_server call TOOL --json ...`` inside the private network, as an assistant runs it."""
    argv = server.network.argv([sys.executable, "-m", "skill_server", "call", tool, "--json", json.dumps(arguments)])
    done = subprocess.run(argv, capture_output=True, text=True, env=server.env, cwd=REPO, timeout=timeout, check=False)
    return done.returncode, json.loads(done.stdout) if done.returncode == 0 else None, done.stderr


def on_node(server: LoopbackSshd, node: str, code: str, *args: str) -> str:
    done = server.node_exec(node, ["python3", "-c", code, *args])
    assert done.returncode == 0, done.stderr
    return done.stdout


PROCESSES = """\
import json, os
found = []
for e in os.listdir('/proc'):
    if not e.isdigit():
        continue
    try:
        cmd = open('/proc/%s/cmdline' % e, 'rb').read().replace(b'\\0', b' ').decode()
        env = open('/proc/%s/environ' % e, 'rb').read().split(b'\\0')
        st = open('/proc/%s/stat' % e).read().rsplit(')', 1)[1].split()[0]
    except OSError:
        continue
    if st == 'Z':
        continue
    marker = [x.decode() for x in env if x.startswith(b'AGENTJET_SKILL_RUN=')]
    found.append([int(e), marker[0] if marker else '-', cmd[:300]])
print(json.dumps(found))
"""


def node_processes(server: LoopbackSshd, node: str) -> list[tuple[int, str, str]]:
    return [(pid, marker, cmd) for pid, marker, cmd in json.loads(on_node(server, node, PROCESSES))]


def ray_processes(server: LoopbackSshd, node: str) -> list[tuple[int, str, str]]:
    return [p for p in node_processes(server, node) if "site-packages/ray/" in p[2] or "bin/ray start" in p[2]]


def hold_gpu(server: LoopbackSshd, node: str, gpu: int, mib: int, *, as_nobody: bool = False) -> int:
    """A process on ``node`` holding GPU ``gpu`` (the stand-in's device), started outside any tool; its pid."""
    box = Path(tempfile.mkdtemp(prefix="g", dir=server.root))
    box.chmod(0o777)
    device = server.root / node / "dev" / f"nvidia{gpu}"
    code = f"import os,time; fd=os.open({str(device)!r}, os.O_RDWR); open('pid','w').write(str(os.getpid())); " \
           "time.sleep(900)"
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if as_nobody else []
    argv = ["setsid", "-f", "env", f"FAKE_GPU_MEMORY_MIB={mib}", *prefix, "python3", "-c", code]
    done = server.node_exec(node, ["sh", "-c", f"cd {shlex.quote(str(box))} && exec {shlex.join(argv)} >log 2>&1 <&-"])
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 30
    while not (box / "pid").is_file() or not (box / "pid").read_text():
        assert time.monotonic() < deadline, "the GPU holder did not start"
        time.sleep(0.1)
    return int((box / "pid").read_text())


def alive_on(server: LoopbackSshd, node: str, pid: int) -> bool:
    return any(p[0] == pid for p in node_processes(server, node))


def test_a_head_and_a_worker_join_over_ssh_and_stop_cleans_both_nodes(cluster: LoopbackSshd):
    work = tempfile.mkdtemp(prefix="w", dir=cluster.root)
    mine = hold_gpu(cluster, "node2", 1, 1000)
    nobodys = hold_gpu(cluster, "node2", 1, 2000, as_nobody=True)
    start = {"action": "start", "head": "node1", "workers": ["node2"], "port": PORT, "workdir": work, **RAY_OPTIONS}

    rc, _, err = cli(cluster, "ray_cluster", {**start, "require_free_gpus": 0.99})
    assert rc == 1 and "require_free_gpus" in err and f"pid {mine} (" in err and f"pid {nobodys} (" in err
    assert "node2 GPU 1" in err and "node1" not in err.split("refusing to start:")[1].split("node2")[0]
    rc, listed, err = cli(cluster, "experiment_status", {})
    assert rc == 0 and listed["experiments"] == []  # a refusal starts nothing

    rc, out, err = cli(cluster, "ray_cluster", {**start, "timeout_s": 50})
    assert rc == 0, err
    first_id = out["id"]
    deadline = time.monotonic() + 300
    while not out["ready"]:
        assert out["next_wait_s"] > 0 and out["state"] == "running", out
        assert time.monotonic() < deadline, out
        rc, out, err = cli(cluster, "ray_cluster", {**start, "timeout_s": 50})  # resumes: nothing new starts
        assert rc == 0 and out["id"] == first_id, err
    assert out["alive_nodes"] == out["expected_nodes"] == 2 and out["reason"] is None
    assert out["address"] == f"127.0.0.1:{PORT}" and out["session"] == f"ajet_ray_{PORT}"
    import ray

    assert out["ray_version"] == ray.__version__
    assert out["resources"]["GPU"] == {"used": 0.0, "total": 4.0, "unit": "count"}
    assert out["resources"]["CPU"]["total"] == 2.0 and out["resources"]["memory"]["unit"] == "bytes"
    assert sorted(n["resources"]["GPU"]["total"] for n in out["nodes"]) == [2.0, 2.0]
    assert [(p["role"], p["host"], p["state"]) for p in out["processes"]] == [("head", "node1", "running"),
                                                                              ("worker1", "node2", "running")]

    for node, role in (("node1", "head"), ("node2", "worker1")):  # Ray's daemons carry the run's marker
        procs = ray_processes(cluster, node)
        assert len(procs) >= 3, procs
        assert {marker for _, marker, _ in procs} == {f"AGENTJET_SKILL_RUN={first_id}/{role}"}, procs

    rc, status, err = cli(cluster, "ray_cluster", {"action": "status", "head": "node1", "port": PORT})
    assert rc == 0 and status["id"] == first_id and status["ready"] and status["alive_nodes"] == 2, err
    rc, again, err = cli(cluster, "ray_cluster", {**start, "timeout_s": 5})
    assert rc == 0 and again["id"] == first_id and again["ready"] and "already running" in again["note"]
    rc, _, err = cli(cluster, "ray_cluster", {**start, "workers": []})
    assert rc == 1 and "workers" in err and "already running with workers" in err
    rc, listed, err = cli(cluster, "experiment_status", {"id": first_id})
    assert rc == 0 and listed["experiments"][0]["state"] == "running"

    rc, stopped, err = cli(cluster, "ray_cluster", {"action": "stop", "head": "node1", "port": PORT, "grace_s": 5})
    assert rc == 0, err
    assert stopped["state"] == "stopped" and stopped["still_alive"] == [] and stopped["gpu_processes_killed"] == []
    assert [(r["host"], r["ok"]) for r in stopped["ray_stop"]] == [("node1", True), ("node2", True)]
    left = {(p["host"], p["pid"]) for p in stopped["gpu_processes_left"]}
    assert {("node2", mine), ("node2", nobodys), ("node1", 4194000), ("node2", 4194000)} == left
    gpus = {h["host"]: h for h in stopped["gpus"]}
    assert {p["pid"] for p in gpus["node2"]["gpus"][1]["processes"]} == {mine, nobodys}
    for node in ("node1", "node2"):
        assert ray_processes(cluster, node) == []
        assert [p for p in node_processes(cluster, node) if p[1].startswith(f"AGENTJET_SKILL_RUN={first_id}/")] == []
    assert alive_on(cluster, "node2", mine) and alive_on(cluster, "node2", nobodys)  # not Ray's: left alone
    rc, after, err = cli(cluster, "ray_cluster", {"action": "status", "head": "node1", "port": PORT})
    assert rc == 0 and after["state"] == "stopped" and after["alive_nodes"] is None and "stopped" in after["reason"]

    rc, cleaned, err = cli(cluster, "ray_cluster", {"action": "stop", "head": "node1", "port": PORT, "grace_s": 2,
                                                     "kill_gpu_processes": True})
    assert rc == 0, err
    assert [(p["host"], p["pid"], p["signal"]) for p in cleaned["gpu_processes_killed"]] == [("node2", mine, "SIGTERM")]
    reasons = {(p["host"], p["pid"]): p["reason"] for p in cleaned["gpu_processes_left"]}
    assert "owned by uid 65534" in reasons[("node2", nobodys)]
    assert "no such process" in reasons[("node1", 4194000)] and "no such process" in reasons[("node2", 4194000)]
    assert not alive_on(cluster, "node2", mine) and alive_on(cluster, "node2", nobodys)
    gpus = {h["host"]: h for h in cleaned["gpus"]}
    assert {p["pid"] for p in gpus["node2"]["gpus"][1]["processes"]} == {nobodys}


def test_failures_are_bounded_named_and_start_nothing(cluster: LoopbackSshd):
    rc, out, err = cli(cluster, "ray_cluster", {"action": "status", "head": "node1", "port": 6391, "ray": RAY})
    assert rc == 0, err
    assert out["id"] is None and out["alive_nodes"] is None and not out["ready"]
    assert "ray status on node1" in out["reason"] and "not a cluster this server started" in out["note"]
    rc, _, err = cli(cluster, "ray_cluster", {"action": "start", "head": "node1", "workers": ["node2"],
                                              "ray": "/nonexistent/venv/bin/ray", "port": 6392})
    assert rc == 1 and "ray: /nonexistent/venv/bin/ray --version failed on node1" in err, err
    assert "not found on this host" in err
    rc, _, err = cli(cluster, "ray_cluster", {"action": "start", "head": "node1", "workers": ["down"], "ray": RAY,
                                              "port": 6392})
    assert rc == 1 and "workers.0: host 'down' is unreachable" in err
    rc, listed, _ = cli(cluster, "experiment_status", {})
    assert [e for e in listed["experiments"] if "6392" in e["session"]] == []
    rc, _, err = cli(cluster, "ray_cluster", {"action": "stop", "head": "node2", "port": 6393})
    assert rc == 1 and "only stops clusters it started" in err and "ray stop --force" in err


@pytest.mark.parametrize("arguments,field", [
    ({"action": "start", "head": "node1", "workers": ["node1"]}, "workers.0"),
    ({"action": "start", "head": "node1", "workers": ["node2", "node2"]}, "workers.1"),
    ({"action": "start", "workers": ["node2"]}, "head_address"),
    ({"action": "start", "ray_args": ["--head"]}, "ray_args.0"),
    ({"action": "start", "head_args": ["--port=1"]}, "head_args.0"),
    ({"action": "start", "ray_args": ["oops"]}, "ray_args.0"),
    ({"action": "start", "ray": "ray; rm -rf /"}, "ray"),
    ({"action": "start", "head_address": "-oProxyCommand=x", "workers": ["node2"]}, "head_address"),
    ({"action": "start", "kill_gpu_processes": True}, "kill_gpu_processes"),
    ({"action": "status", "timeout_s": 5}, "timeout_s"),
    ({"action": "stop", "require_free_gpus": 0.9}, "require_free_gpus"),
    ({"action": "start", "id": "x"}, "id"),
    ({"action": "start", "port": 0}, "port"),
    ({"action": "start", "port": "6379"}, "port"),
    ({"action": "launch"}, "action"),
    ({"action": "start", "env": {"AGENTJET_SKILL_RUN": "x"}}, "env.AGENTJET_SKILL_RUN"),
    ({"action": "start", "workers": [f"n{i}" for i in range(8)]}, "workers"),
])
def test_bad_arguments_name_their_field_before_anything_runs(arguments: dict[str, Any], field: str):
    with pytest.raises(ToolInputError) as err:
        call("ray_cluster", **arguments)
    assert err.value.field == field, (arguments, str(err.value))


def test_stop_and_status_need_a_cluster_of_this_server(monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(ToolInputError) as err:
        call("ray_cluster", action="status", id="nope")
    assert err.value.field == "id"
    with pytest.raises(ToolFailure) as failure:
        call("ray_cluster", action="stop")
    assert failure.value.field == "head" and "ray stop --force" in str(failure.value)


# ---- reading ray's output alone (texts in the shapes ray 2.x prints)

V2_STATUS = """\
======== Autoscaler status: 2026-01-01 10:00:00.000000 ========
Node status
---------------------------------------------------------------
Active:
 (no active nodes)
Idle:
 1 head
 2 gpu-workers
Pending:
 gpu-workers, 1 launching
Recent failures:
 node 10.0.0.9: RayletUnexpectedlyDied
Resources
---------------------------------------------------------------
Usage:
 0.0/96.0 CPU
 8.0/16.0 GPU
 1.50KiB/1.20TiB memory
 0B/372.53GiB object_store_memory
Demands:
 {'GPU': 1.0}: 2+ pending tasks/actors
"""


def test_ray_status_text_is_read_without_guessing():
    from skill_server.tools.ray_cluster.status_text import last_message, parse_status, parse_version

    status = parse_status(V2_STATUS)
    assert status is not None and status.alive == 3 and status.node_types == ["head", "gpu-workers"]
    assert status.pending == ["gpu-workers, 1 launching"]
    assert status.failures == ["node 10.0.0.9: RayletUnexpectedlyDied"]
    assert (status.resources["GPU"].used, status.resources["GPU"].total) == (8.0, 16.0)
    assert status.resources["memory"].used == 1536.0 and status.resources["memory"].total == float(round(1.2 * 2**40))
    assert status.resources["memory"].unit == "bytes" and status.resources["CPU"].unit == "count"
    assert status.nodes == {}
    assert parse_status("ConnectionError: Could not find any running Ray instance.") is None
    weird = parse_status("Node status\nActive:\n 1 node_x\nResources\nUsage:\n 1.0/2.0Qb strange\n")
    assert weird is not None and weird.alive == 1 and weird.resources["strange"].total is None
    assert parse_version("ray, version 2.60.0\n") == "2.60.0" and parse_version("nothing") is None
    assert last_message("2026-11-30 10:44:32,575\tINFO scripts.py:1493 -- Did not find any active Ray processes.\n") \
        == "Did not find any active Ray processes."


def test_a_head_and_a_worker_that_share_a_home_start_report_and_stop():
    """Issue 20: the nodes share one home (and state directory); each keeps its run folder under its own
    identity, and start, status and stop work as on separate homes."""
    if os.getuid() != 0:
        pytest.skip("private network and PID namespaces need root; CI runs as root")
    with ray_nodes(shared_home=True) as server:
        work = tempfile.mkdtemp(prefix="w", dir=server.home)
        os.chmod(work, 0o755)
        start = {"action": "start", "head": "node1", "workers": ["node2"], "port": PORT, "workdir": work,
                 **RAY_OPTIONS}
        rc, out, err = cli(server, "ray_cluster", {**start, "timeout_s": 50})
        assert rc == 0, err
        deadline = time.monotonic() + 300
        while not out["ready"]:
            assert out["state"] == "running" and time.monotonic() < deadline, out
            rc, out, err = cli(server, "ray_cluster", {**start, "timeout_s": 50})
            assert rc == 0, err
        assert out["alive_nodes"] == 2
        folders = sorted(p.name for p in (server.shared_state / "runs" / out["id"]).iterdir() if p.is_dir())
        assert len(folders) == 2 and folders[0].startswith("node1-") and folders[1].startswith("node2-"), folders
        rc, status, err = cli(server, "ray_cluster", {"action": "status", "head": "node1", "port": PORT})
        assert rc == 0 and status["id"] == out["id"] and status["ready"] and status["alive_nodes"] == 2, err
        rc, stopped, err = cli(server, "ray_cluster", {"action": "stop", "head": "node1", "port": PORT,
                                                       "grace_s": 5})
        assert rc == 0 and stopped["state"] == "stopped" and stopped["still_alive"] == [], err
        for node in ("node1", "node2"):
            assert ray_processes(server, node) == []
