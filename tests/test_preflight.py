"""preflight: what a host has for AgentJet, judged per role, from real interpreters, real /proc, real ssh.

The environments are real venvs made by real uv from a ``file://`` index of stand-in wheels
(``tests/env_stubs.py``): a torch that reports a CUDA build, metadata-only vLLM/verl/Ray/transformers, and
flash-attn wheels, one of which carries a compiled extension the dynamic loader refuses with its own
``undefined symbol`` message. GPUs come from the suite's stand-in nvidia-smi. Ports, /dev/shm and the
network are changed only inside namespaces (``unshare``) that the tests make and end.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from skill_server.core.errors import ToolInputError
from skill_server.environments import shipping
from skill_server.environments.facts import parse_driver, parse_probe
from skill_server.hosts.ssh import close_masters
from tests.conftest import REPO, cli_env
from tests.env_stubs import C10_SYMBOL, TORCH_FILES, StubSet, build_wheel, conda_shim, cuda_toolkit, isolated_pip_env
from tests.experiment_helpers import call
from tests.gpu_helpers import A100, install_fake_smi
from tests.sshd import LoopbackSshd

UV = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="uv is a test dependency (pip install '.[test]')")


class Stubs(StubSet):
    """The stand-ins (once a module) and environments made from them."""

    def env(self, name: str, *, flash: str | None = "good", after: tuple[str, ...] = ()) -> Path:
        """A venv with AgentJet's [verl] extra (and flash-attn from the good or broken wheel), by real uv; ``after``:
        requirements installed over it with --no-deps (what a user's later `pip install x==y` does)."""
        prefix = self.root / name
        if (prefix / "bin" / "python").exists():
            return prefix / "bin" / "python"
        env = isolated_pip_env(self.root / "cache")
        subprocess.run([UV, "venv", "-q", "--python", sys.executable, str(prefix)], check=True, env=env, timeout=120)
        python = prefix / "bin" / "python"
        install = [UV, "pip", "install", "-q", "--python", str(python), "--index-url", self.index.url]
        subprocess.run([*install, "-e", f"{self.checkout}[verl]"], check=True, env=env, timeout=300)
        if after:
            subprocess.run([*install, "--no-deps", "--reinstall", *after], check=True, env=env, timeout=300)
        if flash:
            wheel = next((self.good if flash == "good" else self.bad).glob("*.whl"))
            subprocess.run([*install, "--no-deps", str(wheel)], check=True, env=env, timeout=120)
        return python


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Stubs:
    return Stubs(tmp_path_factory.mktemp("preflight"))


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["checks"]}


def preflight(**arguments: Any) -> dict[str, Any]:
    return call("preflight", **arguments)


# ---- the host-side programs -------------------------------------------------------------------------

def test_the_host_side_programs_are_stdlib_only_python_3_8():
    """Only the standard library, besides the packages under test that the probes import inside a try."""
    probed = {"torch", "flash_attn", "flash_attn_2_cuda", "ajet"}
    stdlib = set(sys.stdlib_module_names) | probed
    for path in shipping.HOSTSIDE.glob("*.py"):
        tree = ast.parse(path.read_text(), feature_version=(3, 8))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if (
                isinstance(node, ast.ImportFrom) and node.level == 0) else []
            assert all(n.split(".")[0] in stdlib or n == "__future__" for n in names), (path.name, names)


def test_the_probe_travels_in_its_argv_and_prints_facts_as_it_finds_them(tmp_path: Path):
    argv = shipping.probe_argv(sys.executable, {"budget_s": 20, "sections": ["host"], "ports": [1],
                                                "paths": {"tmp": str(tmp_path / "not" / "yet")}})
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    facts = parse_probe(done.stdout)
    assert facts.complete and facts.one("host", "python3")["version"][:2] == list(sys.version_info[:2])
    disk = facts.one("host", "disk:tmp")
    assert disk["checked"] == str(tmp_path) and disk["free"] > 0  # the nearest folder that exists
    assert facts.one("host", "port:1") == {"section": "host", "name": "port:1", "port": 1, "listening": False,
                                           "holders": []}
    assert not list(tmp_path.iterdir())  # it wrote nothing


def test_driver_facts_are_read_from_nvidia_smi_s_query_and_table():
    driver = parse_driver("0, 8.0, 550.54.15\n1, 7.0, 550.54.15\nbad line\n",
                          "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4     |", None)
    assert (driver.version, driver.cuda, driver.capabilities) == ("550.54.15", "12.4", {0: "8.0", 1: "7.0"})


# ---- this machine -----------------------------------------------------------------------------------

def test_without_python_the_environment_is_skipped_and_no_role_is_called_ready():
    out = preflight(role="client")
    report = out["hosts"][0]
    found = checks(report)
    assert found["python"]["status"] == "skip" and found["python"]["value"] == "no python given"
    assert found["ajet"]["status"] == "skip"
    assert report["ready_for"] == {"client": None} and "ajet" in report["blocked_by"]["client"]
    assert out["summary"].startswith("local: client unknown (") and out["agentjet"].startswith("AgentJet 0.1.0")
    for check in report["checks"]:
        assert set(check) == {"id", "status", "value", "expected", "evidence", "fix", "node"}
        assert check["status"] != "ok" or check["evidence"] is not None  # an ok always says how it knows


def test_a_good_environment_is_ready_for_the_client_and_its_versions_are_judged(stubs: Stubs):
    python = stubs.env("good")
    out = preflight(python=str(python), agentjet_root=str(stubs.checkout))
    found = checks(out["hosts"][0])
    assert found["torch"]["status"] == "ok" and "CUDA 12.4" in found["torch"]["value"]
    assert "C++11 ABI False" in found["torch"]["value"]
    assert (found["verl"]["status"], found["verl"]["value"]) == ("ok", "0.7.1")
    assert "0.7.1" in found["verl"]["expected"] and "c68c154f" in found["verl"]["expected"]
    assert found["flash_attn"]["status"] == "ok" and found["pins"]["status"] == "ok"
    assert found["ajet"]["status"] == "ok" and stubs.commit[:8] in found["ajet"]["value"]
    assert found["not_base_conda"]["status"] == "ok" and found["python"]["status"] == "ok"
    ready = out["hosts"][0]["ready_for"]
    assert ready["client"] is True
    assert ready["swarm_server"] is False and "gpu_driver" in out["hosts"][0]["blocked_by"]["swarm_server"]


def test_a_flash_attn_built_for_another_torch_is_caught_without_a_gpu(stubs: Stubs):
    python = stubs.env("abi", flash="bad")
    found = checks(preflight(python=str(python), role="swarm_server")["hosts"][0])
    flash = found["flash_attn"]
    assert flash["status"] == "fail" and "undefined symbol" in flash["value"]
    assert C10_SYMBOL in flash["evidence"]["excerpt"] or "undefined symbol" in flash["evidence"]["excerpt"]
    assert "flash_attn-<version>+cu12torch2.6cxx11abiFALSE" in flash["fix"] and "--no-build-isolation" in flash["fix"]


def test_a_verl_agentjet_refuses_and_a_broken_vllm_pin_fail_with_the_release_named(stubs: Stubs):
    stubs.index.add("verl", build_wheel(stubs.index.files, "verl", "0.9.0", {}))
    stubs.index.add("torch", build_wheel(stubs.index.files, "torch", "2.5.1", {
        **TORCH_FILES, "torch/__init__.py": "from . import version, cuda, _C\n__version__ = '2.5.1+cu124'\n"}))
    stubs.index.write()
    python = stubs.env("drifted", after=("verl==0.9.0", "torch==2.5.1"))
    found = checks(preflight(python=str(python), role="swarm_server")["hosts"][0])
    assert found["verl"]["status"] == "fail" and found["verl"]["value"] == "0.9.0"
    assert "[verl]" in found["verl"]["fix"] and "c68c154f" in found["verl"]["expected"]
    assert found["pins"]["status"] == "fail" and "torch 2.5.1 (vLLM 0.8.5 pins 2.6.0)" in found["pins"]["value"]


def test_the_base_conda_env_fails_not_base_conda(tmp_path: Path):
    _, base = conda_shim(tmp_path)
    found = checks(preflight(python=str(base / "bin" / "python"), role="client")["hosts"][0])
    assert found["not_base_conda"]["status"] == "fail" and "base" in found["not_base_conda"]["value"]


def test_gpus_driver_and_config_are_judged_with_the_stand_in_nvidia_smi(stubs: Stubs, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch):
    state = {"gpus": [{"uuid": "GPU-0", "name": A100, "memory_total": 81920, "memory_used": 4, "compute_cap": "8.0"},
                      {"uuid": "GPU-1", "name": "Tesla V100-SXM2-32GB", "memory_total": 32768, "memory_used": 20000,
                       "compute_cap": "7.0"}],
             "processes": [{"gpu": 1, "pid": 4242, "name": "python", "used_memory": 20000}],
             "driver_version": "535.104.05", "cuda_version": "12.2"}
    install_fake_smi(tmp_path / "smi" / "bin", state)
    monkeypatch.setenv("PATH", f"{tmp_path / 'smi' / 'bin'}:{os.environ['PATH']}")
    model = tmp_path / "models" / "qwen"
    model.mkdir(parents=True)
    config = tmp_path / "exp.yaml"
    config.write_text(f"ajet:\n  model:\n    path: {model}\n  trainer_common:\n    n_gpus_per_node: 8\n"
                      "    logger: swanlab\n")
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    out = preflight(python=str(stubs.env("good")), role="swarm_server", config=str(config))
    found = checks(out["hosts"][0])
    assert found["gpu_driver"]["status"] == "warn" and "CUDA 12.2" in found["gpu_driver"]["value"]  # torch: 12.4
    assert found["gpu_compute_capability"]["status"] == "fail" and "7.0" in found["gpu_compute_capability"]["value"]
    assert found["gpu_count"]["status"] == "fail" and "8 GPUs" in found["gpu_count"]["expected"]
    assert found["gpu_free_memory"]["status"] == "fail" and "pid 4242" in found["gpu_free_memory"]["value"]
    assert found["model_path"]["status"] == "fail" and "config.json" in found["model_path"]["value"]
    assert found["swanlab_key"]["status"] == "warn" and "launch_experiment's env" in found["swanlab_key"]["fix"]
    (model / "config.json").write_text("{}")
    monkeypatch.setenv("SWANLAB_API_KEY", "secret-value")
    again = preflight(python=str(stubs.env("good")), role="swarm_server", config=str(config))
    found = checks(again["hosts"][0])
    assert found["model_path"]["status"] == "ok" and found["swanlab_key"]["value"] == "set"
    assert "secret-value" not in json.dumps(again)  # a key's value never leaves the host


def test_a_probe_cut_by_the_time_limit_says_unknown_never_ok(tmp_path: Path):
    slow = tmp_path / "python"
    slow.write_text("#!/bin/sh\nsleep 60\n")
    slow.chmod(0o755)
    started = time.monotonic()
    out = preflight(python=str(slow), role="client", timeout_s=6)
    assert time.monotonic() - started < 15
    found = checks(out["hosts"][0])
    assert found["python"]["status"] == "unknown" and found["ajet"]["status"] == "unknown"
    assert found["python3"]["status"] == "ok"  # what came before the cut is kept
    assert out["hosts"][0]["ready_for"] == {"client": None}


# ---- faults in namespaces -------------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.getuid() != 0 or shutil.which("unshare") is None,
                                reason="namespaces need root and unshare")


def in_namespace(flags: list[str], script: str, arguments: dict[str, Any], env: dict[str, str] | None = None
                 ) -> dict[str, Any]:
    """``script`` then ``preflight`` (the CLI) inside new namespaces; the namespaces end with the command."""
    call_cli = " ".join(shlex.quote(x) for x in [sys.executable, "-m", "skill_server", "call", "preflight", "--json",
                                                 json.dumps(arguments)])
    # the CLI's output is kept, then whatever the script started in the background is ended
    line = f"{script}\nout=$({call_cli}); code=$?; kill $(jobs -p) 2>/dev/null; printf '%s' \"$out\"; exit $code"
    proc = subprocess.run(["unshare", *flags, "--", "sh", "-c", line], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=env or cli_env(), check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@needs_root
def test_a_port_held_by_another_process_is_named_with_its_pid():
    hold = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 10086)); s.listen(); "
            "print('ready', flush=True); time.sleep(60)")
    script = (f"ip link set lo up; {shlex.quote(sys.executable)} -c {shlex.quote(hold)} > /dev/null 2>&1 & "
              "sleep 0.5")
    out = in_namespace(["--net"], script, {"role": "swarm_server"})
    port = checks(out["hosts"][0])["port_10086"]
    assert port["status"] == "fail" and "pid" in port["value"] and "socket.socket()" in port["value"]
    assert checks(out["hosts"][0])["port_6379"]["status"] == "ok"
    assert "port_10086" in out["hosts"][0]["blocked_by"]["swarm_server"]


@needs_root
def test_a_tiny_dev_shm_fails_and_no_network_is_said_per_target():
    out = in_namespace(["--mount", "--net", "--propagation", "private"],
                       "mount -t tmpfs -o size=1m tmpfs /dev/shm", {"role": "swarm_server", "network": True,
                                                                   "timeout_s": 30})
    found = checks(out["hosts"][0])
    assert found["shm"]["status"] == "fail" and "1.0 GiB" not in found["shm"]["value"]
    assert "--shm-size" in found["shm"]["fix"]
    for target in ("net_github", "net_huggingface", "net_modelscope"):
        assert found[target]["status"] == "warn" and found[target]["value"], found[target]
    assert found["net_index"]["status"] == "fail" and "index_url" in found["net_index"]["fix"]


def test_github_unreachable_through_a_dead_proxy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:pw@127.0.0.1:{dead}")
    monkeypatch.setenv("https_proxy", f"http://user:pw@127.0.0.1:{dead}")
    monkeypatch.setenv("NO_PROXY", "")
    mirror = tmp_path / "mirror"
    (mirror / "pip").mkdir(parents=True)
    out = preflight(role="client", network=True, index_url=mirror.as_uri(), timeout_s=30)
    found = checks(out["hosts"][0])
    assert found["net_github"]["status"] == "warn" and "refused" in found["net_github"]["value"].lower()
    assert found["net_index"]["status"] == "ok"  # the local mirror needs no proxy
    assert "pw" not in found["net_proxy"]["value"] and "***" in found["net_proxy"]["value"]


# ---- several hosts ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nodes() -> Any:
    if os.getuid() != 0:
        pytest.skip("the loopback sshd nodes need root")
    sshd = LoopbackSshd(("node1", "node2"), one_per_node=True).start()
    yield sshd
    sshd.stop()


@pytest.fixture
def remote(nodes: LoopbackSshd, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The nodes, with this test's ssh settings; its control masters end with the test (its state dir does)."""
    monkeypatch.setenv("SKILL_SERVER_SSH_CONFIG", str(nodes.config))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    yield nodes
    close_masters()


def test_local_and_two_ssh_hosts_in_parallel_with_ray_compared(stubs: Stubs, remote: LoopbackSshd):
    python = stubs.env("good")
    stubs.index.add("ray", build_wheel(stubs.index.files, "ray", "2.44.1", {}))
    stubs.index.write()
    python2 = stubs.env("ray244", after=("ray==2.44.1",))
    started = time.monotonic()
    out = preflight(hosts=["local", "node1", "node2", "down"], python=str(python), role="swarm_server", timeout_s=40)
    elapsed = time.monotonic() - started
    by_host = {r["host"]: r for r in out["hosts"]}
    assert list(by_host) == ["local", "node1", "node2", "down"] and elapsed < 45
    assert by_host["down"]["reachable"] is False and by_host["down"]["ready_for"]["swarm_server"] is None
    assert checks(by_host["node1"])["torch"]["status"] == "ok"  # the same path, seen from the node
    assert checks(by_host["local"])["ray_same"]["status"] == "ok"
    assert len(out["summary"].splitlines()) == 4 and out["summary"].splitlines()[3].startswith("down: unreachable")
    mixed = preflight(hosts=["local", "node1"], python=str(python2), role="swarm_server", timeout_s=40)
    assert checks(mixed["hosts"][0])["ray"]["status"] == "warn"  # 2.44: a regression vLLM excluded


def test_bad_arguments_are_one_line_errors_naming_the_field():
    for arguments, field in (({"hosts": ["-oProxyCommand=x"]}, "hosts.0"), ({"python": "a\nb"}, "python"),
                             ({"slurm_job": "1;2"}, "slurm_job"), ({"timeout_s": 0}, "timeout_s"),
                             ({"role": "server"}, "role"), ({"hosts": ["a", "b"], "slurm_job": "5"}, "hosts"),
                             ({"config": "/nonexistent/exp.yaml"}, "config")):
        with pytest.raises(ToolInputError) as err:
            call("preflight", **arguments)
        assert err.value.field == field and "\n" not in str(err.value), (arguments, str(err.value))


def test_cuda_home_of_another_major_than_torch_fails(stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CUDA_HOME", str(cuda_toolkit(tmp_path / "cuda-11.8", "11.8")))
    found = checks(preflight(python=str(stubs.env("good")), role="swarm_server")["hosts"][0])
    assert found["cuda_toolkit"]["status"] == "fail" and "12.4" in found["cuda_toolkit"]["expected"]
    monkeypatch.setenv("CUDA_HOME", str(cuda_toolkit(tmp_path / "cuda-12.4", "12.4")))
    found = checks(preflight(python=str(stubs.env("good")), role="swarm_server")["hosts"][0])
    assert found["cuda_toolkit"]["status"] == "ok"


def python38() -> str | None:
    """A Python 3.8 here (the oldest a host may have), as tests/test_hosts.py finds one."""
    import glob

    for candidate in [shutil.which("python3.8"), *sorted(glob.glob(os.path.expanduser(
            "~/.pyenv/versions/3.8*/bin/python3.8")))]:
        if candidate and subprocess.run([candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                                        capture_output=True, timeout=30, check=False).returncode == 0:
            return candidate
    return None


def test_the_probe_runs_on_python_3_8_and_checks_a_python_3_8_env(tmp_path: Path):
    python = python38()
    if python is None:
        pytest.skip("no Python 3.8 on this machine")
    argv = shipping.probe_argv(python, {"budget_s": 30, "sections": ["host", "env", "install", "network"],
                                        "python": python, "paths": {"env": str(tmp_path)}, "ports": [10086],
                                        "install": {"env_path": str(tmp_path / "e"), "python_version": "3.8"},
                                        "network": [{"id": "index", "url": tmp_path.as_uri()}]})
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    facts = parse_probe(done.stdout)
    assert facts.complete and facts.one("host", "python3")["version"][:2] == [3, 8]
    assert facts.one("env", "python")["version"][:2] == [3, 8] and facts.one("env", "exit")["returncode"] == 0
    assert facts.one("env", "import:torch")["ok"] is False and facts.one("install", "env_path")["exists"] is False
    assert facts.one("network", "index")["ok"] is True
