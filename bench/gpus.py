"""Cost of gpu_status across hosts, and of launch_experiment's require_free_gpus check.

Not a test: prints figures measured in one run. The hosts are real sshd nodes on loopback, one per
node in its own PID namespace (tests/sshd.py, root only), each with the stand-in nvidia-smi of the
tests (8 GPUs, a busy one among them) first on its PATH; on a real network add one round trip per host.

* gpu_status on 4 hosts against 1 host, warm connections, medians: the hosts are asked in parallel,
  so the ratio should stay well below 4.
* launch_experiment with require_free_gpus against without, on one host: the nvidia-smi queries ride
  in the launch's own check round, so the difference is nvidia-smi's run time, not a round trip.

    python bench/gpus.py [--calls 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NODES = ("g1", "g2", "g3", "g4")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()

    from tests.gpu_helpers import A100, install_fake_smi
    from tests.sshd import LoopbackSshd

    state = {"gpus": [{"uuid": f"GPU-{i}", "name": A100, "memory_total": 81920, "memory_used": 4,
                       "utilization": 0} for i in range(8)],
             "processes": [{"gpu": 0, "pid": 4194000, "name": "/usr/bin/python3", "used_memory": 59996}]}
    sshd = LoopbackSshd(NODES, one_per_node=True)
    for node in NODES:
        install_fake_smi(sshd.root / node / "bin", state)
    sshd.node_paths = {node: [str(sshd.root / node / "bin")] for node in NODES}
    sshd.start()
    root = sshd.root
    os.environ.update(SKILL_SERVER_SSH_CONFIG=str(sshd.config), HOME=str(root / "home"), SHELL="/bin/sh",
                      SKILL_SERVER_STATE_DIR=str(root / "s"), SKILL_SERVER_TMUX_SOCKET=f"bg-{uuid.uuid4().hex[:6]}")
    os.environ.pop("SSH_AUTH_SOCK", None)
    os.environ.pop("TMUX", None)

    from skill_server.app.table import TOOLS_BY_NAME
    from skill_server.hosts.ssh import close_masters

    def call(tool: str, **kw):
        return TOOLS_BY_NAME[tool].invoke(kw)

    def timed(tool: str, **kw) -> float:
        t0 = time.perf_counter()
        call(tool, **kw)
        return time.perf_counter() - t0

    try:
        t0 = time.perf_counter()
        first = call("gpu_status", hosts=list(NODES))
        cold = time.perf_counter() - t0
        assert all(len(h.gpus or []) == 8 for h in first.hosts), first
        one, four = [], []
        for _ in range(args.calls):
            one.append(timed("gpu_status", hosts=[NODES[0]]))
            four.append(timed("gpu_status", hosts=list(NODES)))
        m1, m4 = statistics.median(one), statistics.median(four)
        print(f"gpu_status, median of {args.calls} warm calls: 1 host {m1 * 1000:.0f} ms, 4 hosts {m4 * 1000:.0f} ms "
              f"-> ratio {m4 / m1:.2f}x (4 would be one host after another)")
        print(f"first call, opening 4 ssh connections and agents: {cold * 1000:.0f} ms")

        work = tempfile.mkdtemp(prefix="w", dir=root)
        plain, checked = [], []
        for i in range(args.calls):
            plain.append(timed("launch_experiment", host=NODES[1], name=f"plain{i}", workdir=work, command="true"))
            checked.append(timed("launch_experiment", host=NODES[1], name=f"checked{i}", workdir=work,
                                 command="true", require_free_gpus=0.2))
        mp, mc = statistics.median(plain), statistics.median(checked)
        from skill_server.gpus.nvidia_smi import query_ops

        smi = []
        for _ in range(args.calls):  # what the check costs on the node itself: the two queries, one after the other
            t0 = time.perf_counter()
            for op in query_ops():
                subprocess.run([str(root / NODES[1] / "bin" / "nvidia-smi"), *op["argv"][1:]], capture_output=True,
                               check=True)
            smi.append(time.perf_counter() - t0)
        ms = statistics.median(smi)
        print(f"launch_experiment on one ssh host, median of {args.calls}: {mp * 1000:.0f} ms without, "
              f"{mc * 1000:.0f} ms with require_free_gpus -> ratio {mc / mp:.2f}x; the difference "
              f"({(mc - mp) * 1000:.0f} ms) is the two nvidia-smi queries, {ms * 1000:.0f} ms when run alone "
              "(the stand-in is a Python script): no extra round trip")
        refused = []
        for _ in range(max(5, args.calls // 4)):
            t0 = time.perf_counter()
            try:
                call("launch_experiment", host=NODES[1], name="refused", workdir=work, command="true",
                     require_free_gpus=0.95)
            except Exception:
                refused.append(time.perf_counter() - t0)
        print(f"a refused launch (GPU 0 busy): {statistics.median(refused) * 1000:.0f} ms")
        for e in call("experiment_status", limit=500).experiments:
            call("stop_experiment", id=e.id, grace_s=0)
    finally:
        close_masters()
        sshd.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
