"""Cost of experiment_status: a 2 GB log against a 2 MB log, and 20 running experiments in one call.

Not a test: prints the figures measured in one run (targets: the 2 GB / 2 MB ratio within 1.5x, 20
experiments under 1 s). Everything runs on a private tmux socket and a temporary state directory; the
2 GB log holds real log lines (written in 4 MB chunks, a few seconds) and is deleted at the end.

Each experiment appends a metric line every 50 ms while it runs, so every status call has new bytes to
read and scan. The first ("cold") call of a fresh experiment scans at most the newest 1 MiB of a log
that already existed; the steady-state ("warm") calls read only what was appended since the previous
call. Medians of several calls are reported.

    python bench/status.py [--big-gb 2] [--calls 30]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
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


def fill(path: Path, size: int) -> None:
    line = ("(TaskRunner pid=4821) Rollout progress (812.5 tokens/s): [0-5]:3 threads  //  [finished]:12 threads"
            " // episode 3f2a claimed, current global step: 7\n").encode()
    block = line * (4 * 1024 * 1024 // len(line))
    written = 0
    with open(path, "wb") as fh:
        while written < size:
            chunk = block[: size - written]
            fh.write(chunk)
            written += len(chunk)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-gb", type=float, default=2.0)
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="ajsbench", dir="/tmp"))
    os.environ["SKILL_SERVER_STATE_DIR"] = str(root / "state")
    os.environ["TMUX_TMPDIR"] = str(root)
    os.environ["SKILL_SERVER_TMUX_SOCKET"] = f"bench-{uuid.uuid4().hex[:6]}"
    os.environ.pop("TMUX", None)
    os.environ["SHELL"] = "/bin/sh"  # the tmux sessions' shell: no login start-up hooks in the measurement

    import libtmux

    from skill_server.tools import TOOLS_BY_NAME

    def call(tool: str, **kw):
        return TOOLS_BY_NAME[tool].invoke(kw)

    work = root / "work"
    work.mkdir()
    script = work / "appender.py"
    script.write_text(APPENDER)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    try:
        small, big = work / "small.log", work / "big.log"
        t0 = time.perf_counter()
        fill(small, 2 * 1024 * 1024)
        fill(big, int(args.big_gb * 1024 ** 3))
        sys.stderr.write(f"wrote logs of {small.stat().st_size} and {big.stat().st_size} bytes in "
                         f"{time.perf_counter() - t0:.1f} s\n")
        ids = {}
        for label, log in (("2 MB", small), (f"{args.big_gb:g} GB", big)):
            ids[label] = call("launch_experiment", name=f"bench_{label.split()[1].lower()}", command=command,
                              workdir=str(work), log_path=str(log)).id
        time.sleep(0.5)
        cold = {label: timed(lambda i=i: call("experiment_status", id=i)) for label, i in ids.items()}
        warm: dict[str, list[float]] = {label: [] for label in ids}
        for _ in range(args.calls):  # interleaved, so machine noise hits both alike
            for label, exp_id in ids.items():
                warm[label].append(timed(lambda i=exp_id: call("experiment_status", id=i)))
            time.sleep(0.1)
        med = {label: statistics.median(v) for label, v in warm.items()}
        labels = list(ids)
        ratio = med[labels[1]] / med[labels[0]]
        print(f"one experiment, warm status (median of {args.calls}): {labels[0]} log {med[labels[0]] * 1000:.1f} ms, "
              f"{labels[1]} log {med[labels[1]] * 1000:.1f} ms -> ratio {ratio:.2f}x (target <= 1.5x)")
        print(f"one experiment, cold first status: {labels[0]} {cold[labels[0]] * 1000:.1f} ms, "
              f"{labels[1]} {cold[labels[1]] * 1000:.1f} ms -> ratio {cold[labels[1]] / cold[labels[0]]:.2f}x")
        for exp_id in ids.values():
            call("stop_experiment", id=exp_id, grace_s=2)
        big.unlink()

        many = [call("launch_experiment", name=f"bench_many_{i}", command=command, workdir=str(work)).id
                for i in range(20)]
        time.sleep(1.0)
        cold20 = timed(lambda: call("experiment_status"))
        runs = []
        for _ in range(7):
            time.sleep(0.2)
            t0 = time.perf_counter()
            out = call("experiment_status")
            runs.append(time.perf_counter() - t0)
            running = sum(1 for e in out.experiments if e.state == "running")
        print(f"20 running experiments in one status call: median {statistics.median(runs) * 1000:.0f} ms, "
              f"max {max(runs) * 1000:.0f} ms, first call {cold20 * 1000:.0f} ms ({running} running; target < 1 s)")
    finally:
        srv = libtmux.Server(socket_name=os.environ["SKILL_SERVER_TMUX_SOCKET"])
        if srv.is_alive():
            srv.kill()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
