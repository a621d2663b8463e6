"""preflight of a Slurm allocation and install_agentjet inside a Slurm job, on the real two-node cluster
(``tests/slurm_cluster.py``): the login node is this machine in the controller's network; the nodes see the
shared folder, where the stand-in nvidia-smi, the package index and the environments live."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, cli_env
from tests.env_stubs import PIP_VARIABLES, StubSet, cuda_toolkit, pip_isolation
from tests.gpu_helpers import A100, install_fake_smi
from tests.slurm_cluster import SlurmCluster, slurm  # noqa: F401  (the fixture is used by name)


class Site:
    """The cluster, the stand-ins on its shared folder, and tool calls from its login node."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.stubs = StubSet(cluster.shared / "stubs")
        self.cuda = cuda_toolkit(cluster.shared / "cuda-12.4", "12.4")
        smi = cluster.shared / "smi" / "bin"
        install_fake_smi(smi, {"gpus": [{"uuid": f"GPU-{i}", "name": A100, "memory_total": 81920, "memory_used": 4,
                                          "compute_cap": "8.0"} for i in range(2)], "cuda_version": "12.4"})
        base = {k: v for k, v in cli_env().items() if not k.startswith(PIP_VARIABLES)}
        self.env = cluster.client_env({**base, **pip_isolation(cluster.shared / "cache"),
                                       "SKILL_SERVER_STATE_DIR": str(cluster.shared / "state"),
                                       "PATH": f"{smi}:{os.environ['PATH']}", "CUDA_HOME": str(self.cuda)})

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        proc = subprocess.run(self.cluster.argv([sys.executable, "-m", "skill_server", "call", tool, "--json",
                                                 json.dumps(arguments)]), env=self.env, capture_output=True,
                              text=True, cwd=REPO, timeout=300, check=False, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def site(slurm: SlurmCluster) -> Iterator[Site]:  # noqa: F811
    yield Site(slurm)


def test_preflight_of_an_allocation_checks_the_login_node_and_every_node_of_the_job(site: Site):
    job = site.cluster.sbatch("--nodes=2", "--wrap", "sleep 300", "--output=/dev/null")
    try:
        site.cluster.wait_job(job, {"RUNNING"}, timeout=60)
        out = site.call("preflight", slurm_job=str(job), role="swarm_server", timeout_s=60)
        report = out["hosts"][0]
        assert report["host"] == f"local (Slurm job {job})"
        on_nodes = [c for c in report["checks"] if c["node"]]
        assert {c["node"] for c in on_nodes} == set(site.cluster.nodes)
        for node in site.cluster.nodes:
            found = {c["id"]: c for c in on_nodes if c["node"] == node}
            assert found["gpu_count"]["status"] == "skip" and found["gpu_count"]["value"].startswith("2 GPUs")
            assert found["gpu_compute_capability"]["status"] == "ok" and found["shm"]["status"] in ("ok", "warn")
            assert found["gpu_driver"]["status"] in ("ok", "warn") and "CUDA 12.4" in found["gpu_driver"]["value"]
        login = {c["id"] for c in report["checks"] if not c["node"]}
        assert {"python3", "tmux", "port_10086", "python"} <= login and "gpu_count" not in login
    finally:
        site.cluster.run("scancel", str(job))


def test_a_finished_job_has_no_nodes_to_check(site: Site):
    job = site.cluster.sbatch("--wrap", "true", "--output=/dev/null")
    site.cluster.wait_job(job, {"COMPLETED"}, timeout=60)
    report = site.call("preflight", slurm_job=str(job), role="swarm_server", timeout_s=30)["hosts"][0]
    allocation = next(c for c in report["checks"] if c["id"] == "allocation")
    assert allocation["status"] == "fail" and "no running nodes" in allocation["value"]
    assert report["ready_for"]["swarm_server"] is False


def test_an_install_runs_inside_a_slurm_job_and_is_followed_like_any_run(site: Site):
    env = site.cluster.shared / "envs" / "in-job"
    env.parent.mkdir(exist_ok=True)
    arguments = {"env_path": str(env), "manager": "uv", "python_version": f"{sys.version_info[0]}."
                 f"{sys.version_info[1]}", "agentjet_root": str(site.stubs.checkout), "index_url": site.stubs.index.url,
                 "flash_attn_wheels": str(site.stubs.good)}
    out = site.call("install_agentjet", action="run", slurm={"nodes": 1}, **arguments)
    end = time.monotonic() + 240
    while True:
        waited = site.call("wait_experiment", id=out["id"], timeout_s=30)
        if waited["state"] not in ("running", "queued", "stalled") or time.monotonic() > end:
            break
    assert waited["state"] == "succeeded", waited
    assert waited["scheduler"]["nodes"] in site.cluster.nodes  # it ran on a node of the allocation
    state = site.call("install_agentjet", action="status", **arguments)
    assert [s["status"] for s in state["stages"]] == ["done"] * 7 and Path(state["python"]).exists()
