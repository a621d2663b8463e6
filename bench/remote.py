"""Cost of experiment_status over SSH: 10 runs on 2 ssh hosts against the same 10 runs on this machine.

Not a test: prints figures measured in one run. The "hosts" are a real OpenSSH server on loopback
(tests/sshd.py: two aliases, each its own state and tmux directories), so the figure is the protocol's
own cost (ssh multiplexed channel, the agent's work), without network latency; on a real network add
one round trip per host (hosts are asked in parallel). Goal: the warm remote call within 3x the local
one. Also reported: the first call's cost, which opens the connections and starts the host agents,
and the one-shot cost (a fresh ssh invocation and Python start per call, as a CLI call pays it).

Each run appends a metric line every 50 ms, so every call has new bytes to read and scan. The local
and the remote runs live in two registries (two state directories) so each call covers exactly its
ten runs. Calls alternate, so machine noise hits both alike; medians are reported.

    python bench/remote.py [--calls 30]
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

APPENDER = (
    "import time, itertools\n"
    "for i in itertools.count(1):\n"
    "    print(f'(TaskRunner pid=1) step:{i} - critic/real_reward:0.25 - actor/kl_loss:0.0 - "
    "training/global_step:{i}', flush=True)\n"
    "    time.sleep(0.05)\n"
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args()

    from tests.sshd import NODES, LoopbackSshd

    sshd = LoopbackSshd().start()
    root = sshd.root
    local_state, remote_state = root / "L", root / "R"
    os.environ.update(SKILL_SERVER_SSH_CONFIG=str(sshd.config), HOME=str(root / "home"), SHELL="/bin/sh",
                      TMUX_TMPDIR=str(root), SKILL_SERVER_TMUX_SOCKET=f"bench-{uuid.uuid4().hex[:6]}")
    os.environ.pop("SSH_AUTH_SOCK", None)
    os.environ.pop("TMUX", None)

    from skill_server.app.table import TOOLS_BY_NAME
    from skill_server.hosts.ssh import close_masters, close_sessions

    def call(tool: str, **kw):
        return TOOLS_BY_NAME[tool].invoke(kw)

    def use(state: Path) -> None:
        os.environ["SKILL_SERVER_STATE_DIR"] = str(state)

    work = Path(tempfile.mkdtemp(prefix="w", dir=root))
    script = work / "appender.py"
    script.write_text(APPENDER)
    local_cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    remote_cmd = f"python3 {shlex.quote(str(script))}"
    try:
        use(local_state)
        for i in range(10):
            call("launch_experiment", name=f"bench_local_{i}", command=local_cmd, workdir=str(work))
        use(remote_state)
        for i in range(10):
            call("launch_experiment", name=f"bench_remote_{i}", host=NODES[i % 2], command=remote_cmd,
                 workdir=str(work))
        time.sleep(1.0)
        close_masters()  # the first call below opens both connections itself
        t0 = time.perf_counter()
        first = call("experiment_status")
        cold = time.perf_counter() - t0
        assert sum(e.state == "running" for e in first.experiments) == 10, [e.note for e in first.experiments]
        samples: dict[str, list[float]] = {"local": [], "remote": []}
        for _ in range(args.calls):
            for label, state in (("local", local_state), ("remote", remote_state)):
                use(state)
                t0 = time.perf_counter()
                out = call("experiment_status")
                samples[label].append(time.perf_counter() - t0)
                assert sum(e.state == "running" for e in out.experiments) == 10
            time.sleep(0.1)
        med = {k: statistics.median(v) for k, v in samples.items()}
        print(f"experiment_status, 10 running experiments, median of {args.calls} calls: "
              f"local {med['local'] * 1000:.1f} ms, 2 ssh hosts {med['remote'] * 1000:.1f} ms "
              f"-> ratio {med['remote'] / med['local']:.2f}x (goal <= 3x)")
        print(f"first remote call, opening both ssh connections: {cold * 1000:.0f} ms "
              f"({cold / med['remote']:.1f}x a warm call)")
        use(remote_state)
        shots = []
        for _ in range(max(5, args.calls // 3)):  # what a one-shot CLI process pays on an open connection
            close_sessions()
            t0 = time.perf_counter()
            call("experiment_status")
            shots.append(time.perf_counter() - t0)
        print(f"one-shot remote call (no agent session kept, master connection open): "
              f"{statistics.median(shots) * 1000:.1f} ms ({statistics.median(shots) / med['local']:.2f}x local)")
        for state in (local_state, remote_state):
            use(state)
            for e in call("experiment_status").experiments:
                call("stop_experiment", id=e.id, grace_s=1)
    finally:
        close_masters()
        subprocess.run(["tmux", "-S", str(root / f"tmux-{os.getuid()}" / os.environ["SKILL_SERVER_TMUX_SOCKET"]),
                        "kill-server"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        sshd.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
