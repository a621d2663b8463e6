"""install_agentjet: real uv, real ``python -m venv``, conda through a shim, from a ``file://`` index of stand-in
wheels (``tests/env_stubs.py``), each install a real experiment in a private tmux server.

Faults: a prebuilt flash-attn whose extension the loader refuses, GitHub behind a dead proxy, a disk that
fills during the install (a small tmpfs), an install stopped in the middle of its flash-attn build and run
again, two installs into one folder at once, a folder the tool did not create. Hostile inputs: paths with
spaces, quotes and ``$``, a mirror URL with shell metacharacters, a Python version that does not exist.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from skill_server.core.errors import ToolFailure, ToolInputError
from tests.env_stubs import PIP_VARIABLES, PackageIndex, StubSet, conda_shim, cuda_toolkit, pip_isolation, tree_digest
from tests.experiment_helpers import call, status, tmux_socket, wait_until  # noqa: F401  (fixture by name)
from tests.faults import FullDisk, have_root_mounts

UV = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="uv is a test dependency (pip install '.[test]')")
#: a folder name as hostile as a user's can be: spaces, quotes and a dollar sign
ODD = "env 'q' \"dq\" $HOME x"


class Lab(StubSet):
    """The stand-ins and two CUDA toolkits (once a module), and the arguments of an install from them."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.cuda = cuda_toolkit(root / "cuda-12.4", "12.4")
        self.cuda_old = cuda_toolkit(root / "cuda-11.8", "11.8")

    def arguments(self, env_path: Path, **extra: Any) -> dict[str, Any]:
        base = {"env_path": str(env_path), "python_version": f"{sys.version_info[0]}.{sys.version_info[1]}",
                "agentjet_root": str(self.checkout), "index_url": self.index.url,
                "flash_attn_wheels": str(self.good)}
        return {**base, **extra}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return Lab(tmp_path_factory.mktemp("install"))


@pytest.fixture
def clean(tmux_socket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # noqa: F811
    """A private tmux server whose environment has no pip or uv configuration of this machine, its own caches,
    and CUDA_HOME at the stand-in toolkit of torch's CUDA; the folder the test installs into."""
    for name in list(os.environ):
        if name.startswith(PIP_VARIABLES) or name.lower() in ("http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.delenv(name)
    for name, value in pip_isolation(tmp_path / "cache").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("STUB_BUILD_SECONDS_FILE", str(tmp_path / "build-seconds"))
    return tmp_path


def install(action: str, **arguments: Any) -> dict[str, Any]:
    return call("install_agentjet", action=action, **arguments)


def finish(run_id: str, timeout: float = 240) -> dict[str, Any]:
    """Wait (bounded waits, as an assistant does) until the install's run ended; its last status, with every
    line of its log in ``lines``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = call("wait_experiment", id=run_id, timeout_s=30)
        if out["state"] not in ("running", "queued", "stalled"):
            final = status(run_id, max_lines=0)
            final["lines"] = Path(final["log_path"]).read_text(errors="replace").splitlines()
            return final
    raise AssertionError(f"{run_id} did not end in {timeout} s")


def log_of(run_id: str) -> list[str]:
    return Path(status(run_id, max_lines=0)["log_path"]).read_text(errors="replace").splitlines()


def log_lines(run: dict[str, Any]) -> list[str]:
    return [line for line in run["lines"] if line.startswith("[install]")]


# ---- plan --------------------------------------------------------------------------------------------

def test_plan_gives_exact_commands_per_manager_and_changes_nothing(lab: Lab, clean: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):
    shim, _ = conda_shim(clean / "conda")
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    env = clean / ODD
    for manager, made in (("uv", "venv --allow-existing --python"), ("venv", "-m venv"),
                          ("conda", "create -y -p")):
        out = install("plan", **lab.arguments(env, manager=manager))
        stages = {s["name"]: s for s in out["stages"]}
        assert list(stages) == ["checkout", "env", "network", "agentjet", "flash_attn", "lock", "verify"]
        assert made in stages["env"]["commands"][0] and out["blockers"] == []
        assert "'" in stages["env"]["commands"][0]  # the odd path quoted for a shell
        install_line = stages["agentjet"]["commands"][0]
        assert f"--index-url {lab.index.url}" in install_line and "[verl]" in install_line
        assert all(s["status"] == "planned" for s in out["stages"]) and out["summary"].startswith("Plan: AgentJet")
        assert "FLASH_ATTN_CUDA_ARCHS" in stages["flash_attn"]["commands"][1]
    assert not env.exists() and not (Path(os.environ["SKILL_SERVER_STATE_DIR"]) / "installs").exists()
    client = install("plan", **lab.arguments(env, role="client"))
    assert [s["name"] for s in client["stages"]] == ["checkout", "env", "network", "agentjet", "lock", "verify"]


def test_bad_arguments_are_one_line_errors_naming_the_field(lab: Lab, clean: Path):
    env = clean / "e"
    for extra, field in (({"index_url": "https://mirror.example/simple;rm -rf ~"}, "index_url"),
                         ({"index_url": "https://mirror.example/simple $(reboot)"}, "index_url"),
                         ({"python_version": "3.99"}, "python_version"), ({"manager": "mamba"}, "manager"),
                         ({"env_path": "relative/env"}, "env_path"), ({"agentjet_ref": "x y"}, "agentjet_ref"),
                         ({"slurm": {"partition": "gpu"}}, "slurm"), ({"flash_attn_wheels": "ftp://x"},
                                                                     "flash_attn_wheels")):
        with pytest.raises(ToolInputError) as err:
            install("plan", **{**lab.arguments(env), **extra})
        assert err.value.field == field and "\n" not in str(err.value), (extra, str(err.value))
    assert not env.exists()


def test_a_folder_it_did_not_create_is_refused_and_left_untouched(lab: Lab, clean: Path):
    mine = clean / "users-env"
    mine.mkdir()
    (mine / "keep.txt").write_text("the user's")
    before = tree_digest(mine)
    plan = install("plan", **lab.arguments(mine))
    assert plan["blockers"] and "was not created by install_agentjet" in plan["blockers"][0]
    with pytest.raises(ToolFailure) as err:
        install("run", **lab.arguments(mine))
    assert err.value.field == "env_path" and "never touched" in str(err.value)
    assert tree_digest(mine) == before and (mine / "keep.txt").read_text() == "the user's"


# ---- run, status, resume -------------------------------------------------------------------------

def test_uv_installs_as_a_tracked_run_into_an_odd_path_and_a_second_run_redoes_nothing(lab: Lab, clean: Path):
    env = clean / ODD
    out = install("run", **lab.arguments(env, manager="uv"))
    assert out["id"] and out["summary"].startswith("Installing AgentJet") and "tmux -S" in out["summary"]
    run = finish(out["id"])
    assert run["state"] == "succeeded", run["lines"][-40:]
    lines = log_lines(run)
    assert any("flash_attn: torch 2.6.0+cu124, CUDA 12.4, C++11 ABI False" in x for x in lines)
    lock = (env / ".agentjet-swarm-skill" / "requirements.lock").read_text()
    assert "torch==2.6.0" in lock and "verl==0.7.1" in lock and "flash-attn" in lock.replace("_", "-")
    state = install("status", **lab.arguments(env, manager="uv"))
    assert [s["status"] for s in state["stages"]] == ["done"] * 7 and state["summary"].startswith("Installed")
    assert state["id"] == out["id"]
    verified = {c["id"]: c["status"] for c in state["checks"]}  # preflight's environment checks, on verify.json
    assert verified["flash_attn"] == verified["verl"] == verified["torch"] == verified["ajet"] == "ok", verified
    assert "verification: " in state["summary"] and "failing" not in state["summary"]
    ready = call("preflight", python=state["python"], role="client", agentjet_root=str(lab.checkout))
    assert ready["hosts"][0]["ready_for"] == {"client": True}
    again = finish(install("run", **lab.arguments(env, manager="uv"))["id"])
    assert again["state"] == "succeeded"
    redone = log_lines(again)
    for stage in ("checkout", "env", "agentjet", "flash_attn", "lock"):
        assert any(f"{stage}: done earlier, verified" in x for x in redone), (stage, redone)
    assert not any(" -e " in x for x in redone if x.startswith("[install] $"))  # no second pip install -e


def test_a_broken_prebuilt_wheel_falls_back_to_a_source_build_with_torch_s_cuda(lab: Lab, clean: Path,
                                                                                monkeypatch: pytest.MonkeyPatch):
    cuda_home = clean / "cuda"  # the user's CUDA_HOME: first another CUDA than torch's, then torch's
    cuda_home.symlink_to(lab.cuda_old)
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    env = clean / "venv-env"
    arguments = lab.arguments(env, manager="venv", flash_attn_wheels=str(lab.bad))
    first = finish(install("run", **arguments)["id"])
    assert first["state"] == "failed"
    lines = log_lines(first)
    assert any("installed but does not import" in x and "undefined symbol: _ZN3c10" in x for x in lines)
    assert any("refusing to build: no CUDA toolkit of torch's CUDA 12.4" in x for x in lines), lines
    assert "torch_abi_mismatch" in {e["signature"] for e in first["errors"]}
    state = install("status", **arguments)
    assert {s["name"]: s["status"] for s in state["stages"]}["flash_attn"] == "failed"
    assert state["summary"].startswith("Failed at stage flash_attn")
    cuda_home.unlink()
    cuda_home.symlink_to(lab.cuda)
    second = finish(install("run", **arguments)["id"])
    assert second["state"] == "succeeded", second["lines"][-30:]
    built = log_lines(second)
    assert any(f"CUDA_HOME={cuda_home} (CUDA 12.4)" in x and "MAX_JOBS=" in x for x in built), built
    assert any("[1/4]" in x for x in second["lines"])
    assert any("agentjet: done earlier, verified" in x for x in built)


def test_github_behind_a_dead_proxy_means_no_wheel_download_and_a_source_build(lab: Lab, clean: Path,
                                                                               monkeypatch: pytest.MonkeyPatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{dead}")
    monkeypatch.setenv("CUDA_HOME", str(lab.cuda))
    env = clean / "proxied"
    run = finish(install("run", **lab.arguments(env, manager="uv", flash_attn_wheels=None))["id"])
    assert run["state"] == "succeeded", run["lines"][-30:]
    lines = log_lines(run)
    assert any("network: github NOT reachable" in x for x in lines)
    assert any("GitHub was not reachable" in x for x in lines) and any("building from source" in x for x in lines)


def test_conda_through_a_shim_stopped_mid_build_resumes_creates_once_and_leaves_base_alone(
        lab: Lab, clean: Path, monkeypatch: pytest.MonkeyPatch):
    shim, base = conda_shim(clean / "conda")
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    monkeypatch.setenv("CONDA_SHIM_LOG", str(clean / "conda.log"))
    monkeypatch.setenv("CUDA_HOME", str(lab.cuda))
    (clean / "build-seconds").write_text("120")
    before = tree_digest(base)
    env = clean / "conda-env"
    arguments = lab.arguments(env, manager="conda", flash_attn="source")
    started = install("run", **arguments)["id"]
    wait_until(lambda: any("[1/4]" in x for x in log_of(started)), timeout=120,
               interval=0.5)
    middle = install("status", **arguments)
    by_name = {s["name"]: s["status"] for s in middle["stages"]}
    assert by_name["flash_attn"] == "running" and by_name["agentjet"] == "done", middle
    stopped = call("stop_experiment", id=started, grace_s=2)
    assert stopped["state"] == "stopped" and not stopped["still_alive"]
    assert install("status", **arguments)["summary"].startswith("Stopped at stage flash_attn")
    (clean / "build-seconds").write_text("0")
    again = finish(install("run", **arguments)["id"])
    assert again["state"] == "succeeded", again["lines"][-30:]
    lines = log_lines(again)
    for stage in ("checkout", "env", "agentjet"):
        assert any(f"{stage}: done earlier, verified" in x for x in lines), (stage, lines)
    creates = [json.loads(x) for x in (clean / "conda.log").read_text().splitlines()]
    version = f"python={sys.version_info[0]}.{sys.version_info[1]}"
    assert [c for c in creates if c[:1] == ["create"]] == [["create", "-y", "-p", str(env), version]]
    assert tree_digest(base) == before
    assert (env / "conda-meta" / "history").is_file()


def test_two_installs_into_one_folder_at_once_one_is_refused(lab: Lab, clean: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CUDA_HOME", str(lab.cuda))
    (clean / "build-seconds").write_text("60")
    env = clean / "shared-env"
    arguments = lab.arguments(env, manager="uv", flash_attn="source")
    results: list[Any] = []

    def one() -> None:
        try:
            results.append(install("run", **arguments))
        except (ToolFailure, ToolInputError) as exc:  # the launch refuses a name that runs or is being started
            results.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    started = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if not isinstance(r, dict)]
    assert len(started) == 1 and len(refused) == 1, results
    assert "already" in str(refused[0]) and refused[0].field == "name"
    run_id = started[0]["id"]
    wait_until(lambda: any("[1/4]" in x for x in log_of(run_id)), timeout=120,
               interval=0.5)
    # another server (or a user) starting the same installer on the same folder: its lock refuses it
    folder = next((Path(os.environ["SKILL_SERVER_STATE_DIR"]) / "installs").iterdir())
    second = subprocess.run([sys.executable, "-I", str(folder / "installer.py"), str(folder / "plan.json")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert second.returncode == 75 and "another install into this environment is running" in second.stdout
    call("stop_experiment", id=run_id, grace_s=2)


@pytest.mark.skipif(not have_root_mounts(), reason="a small tmpfs needs root")
def test_a_disk_that_fills_mid_install_fails_with_its_signature_and_the_rerun_resumes(lab: Lab, clean: Path,
                                                                                     tmp_path: Path):
    heavy = PackageIndex(tmp_path / "heavy-index", torch_padding_mb=48)
    disk = FullDisk(tmp_path / "disk", "24m")
    try:
        env = tmp_path / "disk" / "env"
        arguments = lab.arguments(env, manager="uv", index_url=heavy.url, flash_attn="skip")
        first = finish(install("run", **arguments)["id"])
        assert first["state"] == "failed"
        assert "no_space_left" in {e["signature"] for e in first["errors"]}, first["errors"]
        assert any("stage 4/6 agentjet: FAILED" in x for x in log_lines(first))
        subprocess.run(["mount", "-o", "remount,size=200m", str(disk.path)], check=True, timeout=20)
        again = finish(install("run", **arguments)["id"])
        assert again["state"] == "succeeded", "\n".join(again["lines"][-30:])
        lines = log_lines(again)
        assert any("env: done earlier, verified" in x for x in lines)
    finally:
        disk.unmount()


@pytest.mark.skipif(os.getuid() != 0, reason="the loopback sshd node needs root")
def test_an_install_over_ssh_runs_on_the_node_with_its_own_python(lab: Lab, clean: Path,
                                                                    monkeypatch: pytest.MonkeyPatch):
    from skill_server.hosts.ssh import close_masters
    from tests.sshd import LoopbackSshd

    node = LoopbackSshd(("node1",)).start()
    try:
        monkeypatch.setenv("SKILL_SERVER_SSH_CONFIG", str(node.config))
        monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
        env = clean / "remote env"
        arguments = lab.arguments(env, host="node1", manager="venv")
        plan = install("plan", **arguments)
        assert plan["blockers"] == [] and plan["manager"] == "venv"
        out = install("run", **arguments)
        assert out["summary"].startswith("Installing") and "ssh" in out["summary"]
        run = finish(out["id"])
        assert run["state"] == "succeeded" and run["host"] == "node1", run.get("lines", [])[-20:]
        state = install("status", **arguments)
        assert [s["status"] for s in state["stages"]] == ["done"] * 7
    finally:
        close_masters()
        node.stop()


def test_the_installer_runs_on_python_3_8(lab: Lab, clean: Path):
    from skill_server.environments import install as install_mod
    from skill_server.environments.plan import InstallRequest
    from skill_server.environments.shipping import installer_files
    from tests.test_preflight import python38

    python = python38()
    if python is None:
        pytest.skip("no Python 3.8 on this machine")
    env = clean / "py38-host"
    req = InstallRequest(host="local", env_path=str(env), manager="venv", python_version=lab.arguments(env)[
        "python_version"], role="client", agentjet_root=str(lab.checkout), agentjet_ref=None, repo_url=None,
        index_url=lab.index.url, flash_attn="skip", flash_attn_wheels=None, max_jobs=None)
    plan, _ = install_mod.plan_only(req)
    assert plan.blockers == []
    job = clean / "job"
    job.mkdir()
    for name, text in {**installer_files(), "plan.json": json.dumps(plan.data)}.items():
        (job / name).write_text(text)
    done = subprocess.run([python, "-I", str(job / "installer.py"), str(job / "plan.json")], capture_output=True,
                          text=True, timeout=300, check=False, env={**os.environ})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "[install] installed:" in done.stdout and (env / ".agentjet-swarm-skill" / "verify.json").is_file()
