"""gpu_status and launch_experiment(require_free_gpus) through real sshd nodes, with a stand-in nvidia-smi.

Four nodes, each its own sshd in its own PID namespace (tests/sshd.py, ``one_per_node``): ``gpu1`` and
``gpu2`` have ``tests/fixtures/fake_nvidia_smi.py`` first on their PATH (NVIDIA's documented CSV output;
the only stand-in here, since this machine has no GPU), ``cpu1`` has no nvidia-smi at all, and on
``sick`` nvidia-smi fails as it does when the driver is not loaded. A "GPU process" is a real process on
the node holding the stand-in's device file open, exactly how the stand-in (like the driver) finds it.
The parser is also tested alone against odd output.
"""

from __future__ import annotations

import os
import shlex
import stat
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.gpus import nvidia_smi
from skill_server.gpus.query import free_problems
from skill_server.hosts.ssh import close_masters
from tests.conftest import call_cli, cli_env
from tests.experiment_helpers import call, wait_until
from tests.gpu_helpers import A100, install_fake_smi
from tests.sshd import LoopbackSshd
from tests.tmp_dirs import short_tmp_dir

GPU_NODES = {
    "gpu1": {"gpus": [{"uuid": "GPU-11111111-aaaa", "name": A100, "memory_total": 81920, "memory_used": 4,
                       "utilization": 0},
                      {"uuid": "GPU-11111111-bbbb", "name": A100, "memory_total": 81920, "memory_used": 4,
                       "utilization": 0},
                      {"uuid": "GPU-11111111-cccc", "name": "NVIDIA H100, PCIe", "memory_total": 81559,
                       "memory_used": 0, "utilization": "[Not Supported]"}],
             # a process of another container: nvidia-smi lists it, this node's /proc does not show it
             "processes": [{"gpu": 2, "pid": 4194000, "name": "/usr/bin/python3", "used_memory": 20000}]},
    "gpu2": {"gpus": [{"uuid": f"GPU-22222222-{i}", "name": A100, "memory_total": 81920, "memory_used": 4,
                       "utilization": 3} for i in range(2)], "processes": []},
    "sick": {"fail": {"exit": 9, "message": "NVIDIA-SMI has failed because it couldn't communicate with the "
                                            "NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
                                            "and running."}},
}
NODE_PY = "python3"


@pytest.fixture(scope="module")
def nodes():
    if os.getuid() != 0:
        pytest.skip("one sshd per node needs PID namespaces (root); CI runs as root")
    probe = LoopbackSshd(("gpu1", "gpu2", "cpu1", "sick"), one_per_node=True)
    for node, state in GPU_NODES.items():
        install_fake_smi(probe.root / node / "bin", state)
    probe.node_paths = {node: [str(probe.root / node / "bin")] for node in GPU_NODES}
    server = probe.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def remote(nodes: LoopbackSshd, monkeypatch: pytest.MonkeyPatch):
    client = Path(tempfile.mkdtemp(prefix="c", dir=nodes.root))
    (client / "home").mkdir()
    monkeypatch.setenv("SKILL_SERVER_SSH_CONFIG", str(nodes.config))
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", str(client / "s"))
    monkeypatch.setenv("HOME", str(client / "home"))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("SKILL_SERVER_TMUX_SOCKET", f"ajg-{uuid.uuid4().hex[:6]}")
    monkeypatch.setenv("SHELL", "/bin/sh")
    yield nodes
    close_masters()


def hold_gpu(node: str, nodes: LoopbackSshd, gpu: int, mib: int, name: str) -> tuple[str, int]:
    """Launch a process on ``node`` that holds GPU ``gpu`` (its device file) with ``mib`` MiB; (run id, pid)."""
    work = Path(tempfile.mkdtemp(prefix="w", dir=nodes.root))
    device = nodes.root / node / "dev" / f"nvidia{gpu}"
    code = (f"import os,time; fd=os.open({str(device)!r}, os.O_RDWR); "
            f"open('pid','w').write(str(os.getpid())); time.sleep(600)")
    out = call("launch_experiment", host=node, name=name, workdir=str(work),
               env={"FAKE_GPU_MEMORY_MIB": str(mib)}, command=f"exec {NODE_PY} -c {shlex.quote(code)}")
    pid = int(wait_until(lambda: (work / "pid").is_file() and (work / "pid").read_text(), timeout=30))
    return out["id"], pid


def by_host(answer: dict) -> dict[str, dict]:
    return {h["host"]: h for h in answer["hosts"]}


def test_every_host_is_answered_in_one_call_each_with_its_own_reason(remote: LoopbackSshd):
    hosts = by_host(call("gpu_status", hosts=["gpu1", "gpu2", "cpu1", "sick", "down"]))
    assert list(hosts) == ["gpu1", "gpu2", "cpu1", "sick", "down"]
    assert [h["status"] for h in hosts.values()] == ["ok", "ok", "no_nvidia_smi", "nvidia_smi_failed", "unreachable"]
    gpu1 = hosts["gpu1"]
    assert gpu1["reachable"] and gpu1["reason"] is None and gpu1["notes"] == []
    assert [(g["index"], g["uuid"], g["name"]) for g in gpu1["gpus"]] == [
        (0, "GPU-11111111-aaaa", A100), (1, "GPU-11111111-bbbb", A100), (2, "GPU-11111111-cccc", "NVIDIA H100, PCIe")]
    first = gpu1["gpus"][0]
    assert (first["memory_used_mib"], first["memory_total_mib"], first["utilization_pct"]) == (4, 81920, 0)
    assert first["free_fraction"] == round((81920 - 4) / 81920, 6) and first["processes"] == []
    third = gpu1["gpus"][2]  # [Not Supported] is unknown, not zero; the other container's process is listed
    assert third["utilization_pct"] is None and third["memory_used_mib"] == 20000
    assert third["processes"] == [{"pid": 4194000, "used_memory_mib": 20000, "name": "/usr/bin/python3"}]
    assert [g["free_fraction"] for g in hosts["gpu2"]["gpus"]] == [round((81920 - 4) / 81920, 6)] * 2
    cpu = hosts["cpu1"]
    assert cpu["reachable"] and cpu["gpus"] is None and "nvidia-smi is not installed" in cpu["reason"]
    sick = hosts["sick"]
    assert sick["reachable"] and sick["gpus"] is None
    assert "exit 9" in sick["reason"] and "couldn't communicate with the NVIDIA driver" in sick["reason"]
    down = hosts["down"]
    assert not down["reachable"] and down["gpus"] is None and "Connection refused" in down["reason"]


def test_a_process_holding_memory_is_named_with_its_pid(remote: LoopbackSshd):
    run_id, pid = hold_gpu("gpu1", remote, 1, 30000, "holder")
    try:
        gpu = by_host(call("gpu_status", hosts=["gpu1"]))["gpu1"]["gpus"][1]
        assert gpu["memory_used_mib"] == 30004 and gpu["free_fraction"] == round((81920 - 30004) / 81920, 6)
        assert [(p["pid"], p["used_memory_mib"]) for p in gpu["processes"]] == [(pid, 30000)]
        assert gpu["processes"][0]["name"].endswith("python3")
    finally:
        call("stop_experiment", id=run_id, grace_s=1)
    gpu = by_host(call("gpu_status", hosts=["gpu1"]))["gpu1"]["gpus"][1]
    assert gpu["processes"] == [] and gpu["memory_used_mib"] == 4


def test_launch_refuses_busy_or_unknown_gpus_and_leaves_nothing_behind(remote: LoopbackSshd):
    run_id, pid = hold_gpu("gpu1", remote, 1, 30000, "holder2")
    work = tempfile.mkdtemp(prefix="w", dir=remote.root)
    try:
        with pytest.raises(ToolFailure) as err:
            call("launch_experiment", host="gpu1", name="wants_gpus", workdir=work, command="true",
                 require_free_gpus=0.95)
        message = str(err.value)
        assert err.value.field == "require_free_gpus" and "\n" not in message
        assert "GPU 1" in message and f"pid {pid} (" in message and "30000 MiB" in message and "below 95%" in message
        assert "GPU 2" in message and "pid 4194000 (/usr/bin/python3, 20000 MiB)" in message
        assert "GPU 0" not in message  # free enough
        runs = remote.node_dir("gpu1") / "state" / "runs"
        assert [p.name for p in runs.iterdir() if p.name.startswith("ajet_wants_gpus")] == []
        listed = [e["session"] for e in call("experiment_status")["experiments"]]
        assert "ajet_wants_gpus" not in listed
        for host, needle in (("cpu1", "host cpu1 has no nvidia-smi"), ("sick", "exit 9"),
                             ("down", "Connection refused")):
            with pytest.raises(ToolFailure) as err:
                call("launch_experiment", host=host, name="wants_gpus", workdir=work, command="true",
                     require_free_gpus=0.5)
            assert needle in str(err.value), host
        # a lower bar passes every GPU (GPU 1 is 63% free, GPU 2 75%)
        ok = call("launch_experiment", host="gpu1", name="wants_gpus", workdir=work, command="true",
                  require_free_gpus=0.5)
        assert call("wait_experiment", id=ok["id"], timeout_s=30)["state"] == "succeeded"
        fine = call("launch_experiment", host="gpu2", name="wants_gpus2", workdir=work, command="true",
                    require_free_gpus=0.95)
        assert call("wait_experiment", id=fine["id"], timeout_s=30)["state"] == "succeeded"
    finally:
        call("stop_experiment", id=run_id, grace_s=1)


def test_a_host_without_nvidia_smi_has_a_stated_path(remote: LoopbackSshd):
    """A CPU box, a login node or a container without the driver tools: gpu_status answers (exit 0) with the
    status and what to do; a launch that asks for free GPUs there is refused in one line saying the way out,
    nothing started; the same launch without it runs."""
    rc, out, err = call_cli("gpu_status", {"hosts": ["cpu1"]}, env=cli_env())
    assert rc == 0, err
    (cpu,) = out["hosts"]
    assert (cpu["status"], cpu["reachable"], cpu["gpus"]) == ("no_nvidia_smi", True, None)
    assert "a login node, or a container without the driver tools" in cpu["reason"]
    assert out["summary"].startswith("cpu1: no nvidia-smi, GPUs cannot be checked there")
    assert "leave out require_free_gpus" in out["summary"] and "slurm.gpus_per_node" in out["summary"]
    work = tempfile.mkdtemp(prefix="w", dir=remote.root)
    with pytest.raises(ToolFailure) as err_info:
        call("launch_experiment", host="cpu1", name="cpu_box", workdir=work, command="true", require_free_gpus=0.95)
    message = str(err_info.value)
    assert err_info.value.field == "require_free_gpus" and "\n" not in message
    assert "host cpu1 has no nvidia-smi" in message and "leave out require_free_gpus" in message
    assert not list((remote.node_dir("cpu1") / "state" / "runs").glob("ajet_cpu_box*"))
    ok = call("launch_experiment", host="cpu1", name="cpu_box", workdir=work, command="true")
    assert call("wait_experiment", id=ok["id"], timeout_s=30)["state"] == "succeeded"


def test_both_front_ends_check_arguments_the_same_way(remote: LoopbackSshd):
    rc, out, err = call_cli("gpu_status", {"hosts": ["gpu2", "cpu1"]}, env=cli_env())
    assert rc == 0, err
    assert [h["host"] for h in out["hosts"]] == ["gpu2", "cpu1"] and len(out["hosts"][0]["gpus"]) == 2
    for bad, field in (({"hosts": ["-oProxyCommand=touch x"]}, "hosts.0"), ({"hosts": []}, "hosts"),
                       ({"hosts": "gpu1"}, "hosts"), ({"hosts": ["gpu1", 7]}, "hosts.1"), ({"host": "x"}, "host")):
        with pytest.raises(ToolInputError) as exc:
            call("gpu_status", **bad)
        assert exc.value.field == field, bad
        rc, _, err = call_cli("gpu_status", bad, env=cli_env())
        assert rc == 1 and field in err and err.count("\n") == 1, bad
    for bad in (0, 1.5, "0.9", True, float("nan")):
        with pytest.raises(ToolInputError) as exc:
            call("launch_experiment", name="x", workdir="/tmp", command="true", require_free_gpus=bad)
        assert exc.value.field == "require_free_gpus", bad


def test_this_machine_is_the_default_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    empty = tmp_path / "nothing"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    only = call("gpu_status")["hosts"]
    assert [(h["host"], h["reachable"], h["gpus"]) for h in only] == [("local", True, None)]
    assert "nvidia-smi is not installed" in only[0]["reason"]
    install_fake_smi(tmp_path / "bin", GPU_NODES["gpu2"])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    local = call("gpu_status", hosts=["local"])["hosts"][0]
    assert [g["uuid"] for g in local["gpus"]] == ["GPU-22222222-0", "GPU-22222222-1"]


# ---- parsing alone


def run_result(stdout: str = "", returncode: int | None = 0, **kw) -> dict:
    return {"ok": True, "returncode": returncode, "stdout": stdout, "stderr": kw.get("stderr", ""),
            "timed_out": kw.get("timed_out", False), "truncated": kw.get("truncated", False),
            "error": kw.get("error")}


def test_odd_output_is_skipped_and_named_never_guessed():
    gpus = ("0, GPU-a, 1024, 2048, 50, Tesla V100\n"
            "1, GPU-b, [N/A], [N/A], [N/A], Tesla V100\n"
            "garbage without commas\n"
            "x, GPU-c, 1, 2, 3, Broken Index\n"
            "2, GPU-d, 100.0, 1000, [Insufficient Permissions], Name, with, commas\n")
    apps = "17, GPU-a, 1000, python\n18, GPU-zzz, 5, ghost\n19, GPU-a, [N/A], /opt/x, y\nnot a pid, GPU-a, 1, z\n"
    host = nvidia_smi.host_gpus("h", run_result(gpus, truncated=True), run_result(apps))
    assert [(g.index, g.name) for g in host.gpus] == [(0, "Tesla V100"), (1, "Tesla V100"), (2, "Name, with, commas")]
    assert host.gpus[0].free_fraction == 0.5 and host.gpus[1].free_fraction is None
    assert host.gpus[2].memory_used_mib == 100 and host.gpus[2].utilization_pct is None
    assert [(p.pid, p.used_memory_mib, p.name) for p in host.gpus[0].processes] == [(17, 1000, "python"),
                                                                                  (19, None, "/opt/x, y")]
    notes = " | ".join(host.notes)
    assert "garbage without commas" in notes and "Broken Index" in notes and "cut at" in notes
    assert "pid 18 (ghost)" in notes and "not a pid" in notes


def test_what_failed_is_said_per_query():
    assert nvidia_smi.run_failure(run_result(error="not found on this host: nvidia-smi")) == nvidia_smi.NOT_INSTALLED
    assert "did not answer within" in nvidia_smi.run_failure(run_result(returncode=None, timed_out=True))
    assert nvidia_smi.run_failure(run_result("No devices were found\n", returncode=6)) == \
        "nvidia-smi failed (exit 6): No devices were found"
    host = nvidia_smi.host_gpus("h", run_result("0, GPU-a, 0, 100, 0, T4\n"), run_result(returncode=4,
                                                                                        stderr="Unknown Error"))
    assert host.gpus[0].processes is None and "compute-process query failed" in host.reason
    empty = nvidia_smi.host_gpus("h", run_result(""), run_result(""))
    assert empty.gpus == [] and free_problems(empty, 0.9) == ["host h: nvidia-smi lists no GPU"]
    assert (empty.status, host.status) == ("no_gpu", "ok")
    timed_out = nvidia_smi.host_gpus("h", run_result(returncode=None, timed_out=True), None)
    assert timed_out.status == "nvidia_smi_failed" and timed_out.gpus is None
    unknown = nvidia_smi.host_gpus("h", run_result("0, GPU-a, [N/A], 100, 0, T4\n"), run_result(""))
    assert "free memory unknown" in free_problems(unknown, 0.9)[0]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789, -[]NA/\nGPUxé")), max_size=400),
       st.text(alphabet=st.sampled_from(list("0123456789, -[]NA/\nGPUxé")), max_size=400))
def test_the_parser_never_fails_and_returns_only_well_formed_gpus(gpu_text: str, app_text: str):
    host = nvidia_smi.host_gpus("h", run_result(gpu_text), run_result(app_text))
    for gpu in host.gpus or []:
        assert isinstance(gpu.index, int) and gpu.uuid
        assert gpu.free_fraction is None or 0.0 <= gpu.free_fraction <= 1.0
    assert len(host.notes) <= nvidia_smi.MAX_NOTES + 1


def test_reclaim_ends_only_this_users_gpu_processes():
    """The host agent's reclaim_gpus op on this machine, with real processes: one holding an ``nvidia0``
    character device (made with mknod under a temp dir: the kernel's null device under that name) and
    ignoring SIGTERM, one holding it as another user, one holding no device, and a pid that does not exist."""
    import shutil
    import signal
    import subprocess
    import sys

    from skill_server.hosts.agent import ops
    from skill_server.hosts.agent.protocol import PROTOCOL_VERSION

    if os.getuid() != 0:
        pytest.skip("mknod and running a process as another user need root; CI runs as root")
    box = Path(short_tmp_dir("ajs-reclaim-"))  # not under pytest's 0700 base: nobody must reach it
    box.chmod(0o711)
    device = box / "nvidia0"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    device.chmod(0o666)  # the umask narrowed it
    children: list[subprocess.Popen] = []
    hold = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); fd = os.open(sys.argv[1], "
            "os.O_RDWR); print('ready', flush=True); time.sleep(120)")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    try:
        children = [subprocess.Popen(prefix + [sys.executable, "-c", hold, str(device)], stdout=subprocess.PIPE,
                                     text=True) for prefix in ([], as_nobody)]
        children.append(subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); "
                                          "time.sleep(120)"], stdout=subprocess.PIPE, text=True))
        idle = children[2]
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        mine, nobodys = children[0].pid, children[1].pid
        gone = 4194000
        reply = ops.handle({"v": PROTOCOL_VERSION, "ops": [
            {"op": "reclaim_gpus", "pids": [mine, nobodys, idle.pid, gone, mine], "grace_s": 0.5},
            {"op": "reclaim_gpus", "pids": [0]}]})
        report, bad = reply["results"]
        assert report["ok"], report
        assert [(k["pid"], k["signal"]) for k in report["killed"]] == [(mine, "SIGKILL")]  # SIGTERM was ignored
        assert report["survivors"] == []
        skipped = {s["pid"]: s["reason"] for s in report["skipped"]}
        assert "owned by uid 65534" in skipped[nobodys] and "holds no nvidia device" in skipped[idle.pid]
        assert "no such process" in skipped[gone] and set(skipped) == {nobodys, idle.pid, gone}
        assert children[0].wait(timeout=10) == -signal.SIGKILL
        assert children[1].poll() is None and idle.poll() is None
        assert not bad["ok"] and bad["field"] == "pids"
    finally:
        for child in children:
            child.kill()
            child.wait()
        shutil.rmtree(box)
