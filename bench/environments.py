"""Cost of preflight on three hosts against the same checks by hand, and an interrupted install's resume.

Not a test: prints figures measured in one run. Root only (the ssh hosts are real sshd nodes on loopback,
tests/sshd.py, each in its own PID namespace). The environment checked is a real venv made by uv from the
tests' stand-in wheels (tests/env_stubs.py); on a real torch and vLLM the imports take seconds more on both
sides.

* preflight of this machine and two ssh hosts at once (one call, the hosts in parallel, warm connections)
  against a shell script that runs the same checks as a person would, host after host (python3, tmux, git,
  uv and conda, disks, memory, open files, /dev/shm, the three ports, stale processes, nvcc, nvidia-smi,
  the environment's torch/CUDA/ABI, flash_attn and its kernels, ajet, and the versions of vLLM, verl, Ray and
  transformers): medians of --calls runs each, and the ratio.
* install_agentjet run (uv, a stand-in flash-attn source build that takes --build-s seconds) from nothing
  to installed, against the same install stopped in the middle of its build and run again: the resume
  verifies the stages done before (checkout, env, agentjet) instead of redoing them, and redoes the stage
  it was stopped in from its start (a build is not resumed halfway). Also a finished install run again:
  the cost of verifying every stage.

    sudo python bench/environments.py [--calls 7] [--build-s 8]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NODES = ("n1", "n2")

#: What a person types to check a host by hand for the same facts preflight reports (PY: the env's python).
BY_HAND = r"""
PY="$1"
python3 --version; tmux -V; git --version
uv --version 2>/dev/null || echo no uv; conda --version 2>/dev/null || echo no conda
df -h "$(dirname "$(dirname "$PY")")" ~/.cache /tmp ~ 2>/dev/null
free -g; ulimit -n; ulimit -Hn; df -h /dev/shm
ss -ltnp 'sport = :10086' 'or sport = :6379' 'or sport = :8265'
ps -eo pid,user,args | grep -E 'raylet|gcs_server|ajet-swarm|ajet.launcher' | grep -v grep || true
echo "CUDA_HOME=$CUDA_HOME"; nvcc --version 2>/dev/null | tail -1 || echo no nvcc
nvidia-smi --query-gpu=index,uuid,memory.used,memory.total,utilization.gpu,name,compute_cap,driver_version \
  --format=csv 2>/dev/null || echo no nvidia-smi
"$PY" -c 'import sys; print(sys.version, sys.prefix, sys.base_prefix)'
"$PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch._C._GLIBCXX_USE_CXX11_ABI)'
"$PY" -c 'import flash_attn, flash_attn_2_cuda; print(flash_attn.__version__)'
"$PY" -c 'import ajet, os; print(ajet.__version__, os.path.dirname(ajet.__file__))'
"$PY" -m pip show vllm verl ray transformers 2>/dev/null | grep -E '^(Name|Version|Requires)' \
  || uv pip show --python "$PY" vllm verl ray transformers
"""


def median_s(fn: Any, calls: int) -> float:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def bench_preflight(calls: int, python: str, sshd: Any) -> None:
    from skill_server.app.table import TOOLS_BY_NAME

    hosts = ["local", *NODES]

    def tool() -> None:
        out = TOOLS_BY_NAME["preflight"].invoke({"hosts": hosts, "python": python, "role": "swarm_server",
                                                 "timeout_s": 60}).model_dump()
        assert all(r["reachable"] for r in out["hosts"]), out["summary"]

    ssh = ["ssh", "-F", str(sshd.config), "-o", "BatchMode=yes"]

    def by_hand() -> None:
        subprocess.run(["bash", "-c", BY_HAND, "bash", python], capture_output=True, check=False, timeout=120)
        for node in NODES:  # one login per host, the script on its stdin, as a person pastes it
            subprocess.run([*ssh, node, "bash", "-s", "--", shlex.quote(python)], input=BY_HAND.encode(),
                           capture_output=True, check=False, timeout=120)

    started = time.perf_counter()
    tool()
    cold = time.perf_counter() - started
    by_hand()  # warm the script's ssh logins as the tool's connections are warm
    tool_s, hand_s = median_s(tool, calls), median_s(by_hand, calls)
    print(f"preflight, this machine + {len(NODES)} ssh hosts in one call: first call {cold:.2f} s, then median "
          f"{tool_s:.2f} s ({calls} calls)")
    print(f"the same checks by hand, host after host (bash, ssh): median {hand_s:.2f} s ({calls} runs)")
    print(f"ratio tool / by hand: {tool_s / hand_s:.2f} (and the tool's answer is judged: {len(hosts)} summary lines,"
          " every check with expected, evidence and fix)")


def bench_install(build_s: float, stubs: Any, cuda: Path, root: Path) -> None:
    from skill_server.app.table import TOOLS_BY_NAME
    from tests.env_stubs import pip_isolation

    def call(tool: str, **kw: Any) -> dict[str, Any]:
        return TOOLS_BY_NAME[tool].invoke(kw).model_dump()

    def wait(run_id: str) -> str:
        while True:
            out = call("wait_experiment", id=run_id, timeout_s=30)
            if out["state"] not in ("running", "queued", "stalled"):
                return str(out["state"])

    for name in [n for n in os.environ if n.startswith(("PIP_", "UV_"))]:
        del os.environ[name]
    os.environ.update(pip_isolation(root / "cache"))
    os.environ.update(CUDA_HOME=str(cuda), STUB_BUILD_SECONDS=str(build_s))
    base = {"manager": "uv", "python_version": f"{sys.version_info[0]}.{sys.version_info[1]}",
            "agentjet_root": str(stubs.checkout), "index_url": stubs.index.url, "flash_attn": "source"}

    started = time.perf_counter()
    run_id = call("install_agentjet", action="run", env_path=str(root / "full"), **base)["id"]
    assert wait(run_id) == "succeeded"
    full = time.perf_counter() - started

    env = str(root / "resumed")
    started = time.perf_counter()
    run_id = call("install_agentjet", action="run", env_path=env, **base)["id"]
    log = Path(call("experiment_status", id=run_id, max_lines=0)["experiments"][0]["log_path"])
    while "[1/4]" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.05)
    call("stop_experiment", id=run_id, grace_s=1)
    before = time.perf_counter() - started
    started = time.perf_counter()
    run_id = call("install_agentjet", action="run", env_path=env, **base)["id"]
    assert wait(run_id) == "succeeded"
    resume = time.perf_counter() - started
    started = time.perf_counter()
    run_id = call("install_agentjet", action="run", env_path=str(root / "full"), **base)["id"]
    assert wait(run_id) == "succeeded"
    again = time.perf_counter() - started
    print(f"install_agentjet (uv, a {build_s:g} s stand-in flash-attn build): full install {full:.2f} s; the same "
          f"install run again once finished (every stage verified, none redone): {again:.2f} s")
    print(f"stopped at the build's first step after {before:.2f} s, then run again: resume {resume:.2f} s "
          f"({resume / full:.2f} of a full install; the build itself is {build_s:g} s of it, the stages done before "
          "are verified, not redone)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=7)
    ap.add_argument("--build-s", type=float, default=8.0)
    args = ap.parse_args()
    if os.getuid() != 0:
        print("needs root (sshd nodes on loopback)")
        return 2

    from tests.env_stubs import StubSet, cuda_toolkit, isolated_pip_env
    from tests.sshd import LoopbackSshd

    root = Path(tempfile.mkdtemp(prefix="benv", dir="/tmp"))
    stubs = StubSet(root / "stubs")
    cuda = cuda_toolkit(root / "cuda-12.4", "12.4")
    uv = str(Path(sys.executable).with_name("uv"))
    python = root / "env" / "bin" / "python"
    pip_env = isolated_pip_env(root / "cache")
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(root / "env")], check=True, env=pip_env)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(python), "--index-url", stubs.index.url, "-e",
                    f"{stubs.checkout}[verl]", str(next(stubs.good.glob("*.whl")))], check=True, env=pip_env)
    sshd = LoopbackSshd(NODES, one_per_node=True).start()
    os.environ.update(SKILL_SERVER_SSH_CONFIG=str(sshd.config), SHELL="/bin/sh", SKILL_SERVER_STATE_DIR=str(root / "s"),
                      SKILL_SERVER_TMUX_SOCKET=f"be-{uuid.uuid4().hex[:6]}", TMUX_TMPDIR=str(root))
    os.environ.pop("SSH_AUTH_SOCK", None)
    os.environ.pop("TMUX", None)
    from skill_server.hosts.ssh import close_masters

    try:
        bench_preflight(args.calls, str(python), sshd)
        bench_install(args.build_s, stubs, cuda, root)
    finally:
        close_masters()
        sshd.stop()
        subprocess.run(["tmux", "-L", os.environ["SKILL_SERVER_TMUX_SOCKET"], "kill-server"], capture_output=True,
                       check=False)
        subprocess.run(["rm", "-rf", str(root)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
