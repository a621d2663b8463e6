"""Cost of experiment_status: a 2 GB log against a 2 MB log, 20 running experiments in one call, and the
metric history (10,000 steps returned downsampled to 200 points).

Not a test: prints the figures measured in one run (targets: the 2 GB / 2 MB ratio within 1.5x with the
metric history kept, 20 experiments under 1 s). Everything runs on a private tmux socket and a temporary
state directory; the 2 GB log holds real log lines (written in 4 MB chunks, a few seconds) and is
deleted at the end.

Each experiment appends a verl step line (about 60 metrics, as AgentJet's trainer prints them) every
50 ms while it runs, so every status call has new bytes to read, scan and store in the metric history.
The first ("cold") call of a fresh experiment scans at most the newest 1 MiB of a log that already
existed; the steady-state ("warm") calls read only what was appended since the previous call. Medians
of several calls are reported.

The history part: one run prints 10,000 step lines at once; status calls scan them (1 MiB per call,
each call storing its lines' metrics), then ``metrics_history`` asks for 1 and for 5 metrics over all
10,000 steps, downsampled to 200 points.

    python bench/status.py [--big-gb 2] [--calls 30] [--history-steps 10000]
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

#: A verl step line with AgentJet's and verl's usual keys (about 60 metrics, 2.4 KB).
STEP_LINE = (
    "def step_line(i):\n"
    "    keys = ['critic/llm_call_cnt', 'critic/madness_rate', 'critic/success_rate', 'critic/real_success_rate',\n"
    "            'critic/real_reward', 'actor/entropy', 'perf/mfu/actor_infer', 'actor/pg_loss', 'actor/kl_loss',\n"
    "            'actor/kl_coef', 'actor/grad_norm', 'actor/lr', 'perf/mfu/actor', 'perf/max_memory_allocated_gb']\n"
    "    keys += [f'critic/{g}/{s}' for g in ('score', 'rewards', 'advantages', 'returns')\n"
    "             for s in ('mean', 'max', 'min')]\n"
    "    keys += [f'{g}/{s}' for g in ('response_length', 'prompt_length')\n"
    "             for s in ('mean', 'max', 'min', 'clip_ratio')]\n"
    "    keys += [f'timing_s/{s}' for s in ('gen', 'old_log_prob', 'ref', 'adv', 'update_actor', 'update_weights',\n"
    "                                       'step')]\n"
    "    keys += [f'timing_per_token_ms/{s}' for s in ('gen', 'ref', 'adv', 'update_actor')]\n"
    "    keys += [f'global_seqlen/{s}' for s in ('min', 'max', 'minmax_diff', 'balanced_min', 'balanced_max',\n"
    "                                            'mean')]\n"
    "    keys += ['perf/total_num_tokens', 'perf/time_per_step', 'perf/throughput', 'training/epoch']\n"
    "    pairs = [f'{k}:{0.001 * (i % 997) + n / 7:.6f}' for n, k in enumerate(keys)] + [f'training/global_step:{i}']\n"
    "    return f'(TaskRunner pid=1) step:{i} - ' + ' - '.join(pairs)\n"
)
APPENDER = STEP_LINE + (
    "import time, itertools\n"
    "for i in itertools.count(1):\n"
    "    print(step_line(i), flush=True)\n"
    "    time.sleep(0.05)\n"
)
#: Prints N step lines at about 1,000 a second (a fast run, compressed), then waits to be stopped.
HISTORY_WRITER = STEP_LINE + (
    "import sys, time\n"
    "for i in range(1, int(sys.argv[1]) + 1):\n"
    "    print(step_line(i), flush=True)\n"
    "    time.sleep(0.001)\n"
    "time.sleep(3600)\n"
)


def fill(path: Path, size: int) -> None:
    line = (b"(TaskRunner pid=4821) Rollout progress (812.5 tokens/s): [0-5]:3 threads  //  [finished]:12 threads"
            b" // episode 3f2a claimed, current global step: 7\n")
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


def history_bench(call, work: Path, steps: int) -> None:
    """Scan ``steps`` step lines into the metric history, then ask for them downsampled to 200 points."""
    script = work / "history_writer.py"
    script.write_text(HISTORY_WRITER)
    exp_id = call("launch_experiment", name="bench_history", workdir=str(work),
                  command=f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {steps}").id
    scans = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # polled while it prints: each call scans and stores what was appended
        t0 = time.perf_counter()
        out = call("experiment_status", id=exp_id, max_lines=0, checkpoints=False).experiments[0]
        scans.append(time.perf_counter() - t0)
        if out.global_step == steps:
            break
    size = Path(out.log_path).stat().st_size
    print(f"metric history: {steps} step lines of {len(out.last_metrics)} metrics ({size / 2**20:.1f} MiB) scanned and "
          f"stored by {len(scans)} status calls polling while they were printed (median call "
          f"{statistics.median(scans) * 1000:.0f} ms, {out.unscanned_bytes} bytes left unscanned)")
    for metrics in (["critic/score/mean"], ["critic/score/*", "actor/pg_loss", "actor/entropy"]):
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            got = call("experiment_status", id=exp_id, max_lines=0, checkpoints=False, metrics_history=metrics,
                       history_points=200).experiments[0].metrics_history
            times.append(time.perf_counter() - t0)
        sizes = " or ".join(str(n) for n in sorted({len(s.steps) for s in got.series}))  # points per metric
        bare = []
        for _ in range(7):
            t0 = time.perf_counter()
            call("experiment_status", id=exp_id, max_lines=0, checkpoints=False)
            bare.append(time.perf_counter() - t0)
        print(f"metrics_history of {len(got.series)} metric(s) x {got.series[0].points} steps -> {sizes} points: "
              f"status with it median {statistics.median(times) * 1000:.1f} ms, without it "
              f"{statistics.median(bare) * 1000:.1f} ms (history part about "
              f"{(statistics.median(times) - statistics.median(bare)) * 1000:.1f} ms)")
    call("stop_experiment", id=exp_id, grace_s=1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-gb", type=float, default=2.0)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--history-steps", type=int, default=10_000)
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="ajsbench", dir="/tmp"))
    os.environ["SKILL_SERVER_STATE_DIR"] = str(root / "state")
    os.environ["TMUX_TMPDIR"] = str(root)
    os.environ["SKILL_SERVER_TMUX_SOCKET"] = f"bench-{uuid.uuid4().hex[:6]}"
    os.environ.pop("TMUX", None)
    os.environ["SHELL"] = "/bin/sh"  # the tmux sessions' shell: no login start-up hooks in the measurement

    import libtmux

    from skill_server.app.table import TOOLS_BY_NAME

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
        for exp_id in many:
            call("stop_experiment", id=exp_id, grace_s=1)
        history_bench(call, work, args.history_steps)
    finally:
        srv = libtmux.Server(socket_name=os.environ["SKILL_SERVER_TMUX_SOCKET"])
        if srv.is_alive():
            srv.kill()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
