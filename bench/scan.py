"""The run monitor over a log backlog of 100 and 500 MiB, every byte scanned, against grep over the same file.

Not a test: prints figures measured in one run (this machine is shared and noisy). What is timed is what a
run's monitor does with a log that grew while it looked away, or that floods: ``LogTail`` reads it in
chunks of ``CHUNK`` bytes and folds each one (ANSI codes removed, error signatures on every line, step
lines parsed, sampled while the backlog is over ``SAMPLE_BACKLOG``; metric points written to the run's
points file), in this process, on one core, as CPU time (``time.process_time``).

The log is what an AgentJet swarm run prints into its log (a pipe: loguru and vLLM print no colours there,
Ray colours its ``(TaskRunner pid=N)`` prefixes anyway), generated: loguru lines, the swarm server's
"clients connected" polls (the needle ``connect``), vLLM's throughput lines, rollout progress, tqdm bars
redrawn with carriage returns, verl step lines of about 60 metrics, the wrapper's own lines (the needle
``kill`` in agentjet-swarm-skill), and now and then a warning, a traceback and a NaN loss (so the signatures
have lines to count, and lines that only look alike).

grep is the floor any follower pays: ``grep -c -i -F -f NEEDLES`` (every needle of the signature table, in
any case: the same question the monitor's first pass asks) and ``grep -c -E 'CUDA out of memory|Traceback'``
(one expression), as the CPU time of the child process. Goal: the monitor at 60 MiB/s or more at 500 MiB.

    python bench/scan.py [--sizes 100,500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ESC = "\x1b"
STEP_KEYS = (["critic/llm_call_cnt", "critic/madness_rate", "critic/success_rate", "critic/real_success_rate",
              "critic/real_reward", "actor/entropy", "perf/mfu/actor_infer", "actor/pg_loss", "actor/kl_loss",
              "actor/kl_coef", "actor/grad_norm", "actor/lr", "perf/mfu/actor", "perf/max_memory_allocated_gb"]
             + [f"critic/{g}/{s}" for g in ("score", "rewards", "advantages", "returns")
                for s in ("mean", "max", "min")]
             + [f"{g}/{s}" for g in ("response_length", "prompt_length")
                for s in ("mean", "max", "min", "clip_ratio")]
             + [f"timing_s/{s}" for s in ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights",
                                          "step")]
             + [f"global_seqlen/{s}" for s in ("min", "max", "minmax_diff", "balanced_min", "balanced_max", "mean")]
             + ["perf/total_num_tokens", "perf/time_per_step", "perf/throughput", "training/epoch"])


def _loguru(clock: str, level: str, where: str, message: str) -> str:
    return f"2026-05-26 {clock} | {level:<8} | {where} - {message}"


def _ray(actor: str, line: str) -> str:
    return f"{ESC}[36m({actor}){ESC}[0m {line}"


def _lines(rng: random.Random, i: int) -> list[str]:
    """One stretch of a swarm run's output (about 40 lines), the ``i``-th."""
    clock = f"17:{i // 3600 % 60:02d}:{i // 60 % 60:02d}.{i % 1000:03d}"
    episode = f"{rng.getrandbits(32):08x}"
    out = []
    for k in range(8):
        out.append(_loguru(clock, "INFO", "ajet.task_rollout.native_parallel_worker:run:212",
                           f"episode {episode}{k} claimed by worker {rng.randrange(128)}"))
        out.append(f"Received workflow output for episode {episode}{k} (Reward: {rng.random():.3f})")
    for _ in range(6):
        out.append(f"2026-05-26 {clock} | INFO     | ajet.swarm.server:poll_loop:88 - {rng.randrange(1, 64)} clients "
                   f"connected, engine status ENGINE.ROLLING, {rng.randrange(500)} episodes in flight")
    for _ in range(6):
        out.append(f"INFO 05-26 {clock} [metrics.py:455] Avg prompt throughput: {rng.random() * 5000:.1f} tokens/s, "
                   f"Avg generation throughput: {rng.random() * 3000:.1f} tokens/s, Running: {rng.randrange(64)} reqs, "
                   f"Swapped: 0 reqs, Pending: {rng.randrange(8)} reqs, GPU KV cache usage: {rng.random() * 100:.1f}%, "
                   "CPU KV cache usage: 0.0%.")
    for _ in range(6):
        out.append(_ray("TaskRunner pid=4821", f"Rollout progress ({rng.random() * 900:.1f} tokens/s): [0-5]:"
                        f"{rng.randrange(9)} threads  //  [finished]:{rng.randrange(40)} threads // episode {episode} "
                        f"claimed, current global step: {i // 40}"))
    if i % 10 == 0:
        out.append(f"[agentjet-swarm-skill] {clock} checkpoint poll: nothing new")  # the needle 'kill', no match
    if i % 5 == 0:
        pairs = " - ".join(f"{k}:{0.001 * (i % 997) + n / 7:.6f}" for n, k in enumerate(STEP_KEYS))
        out.append(_ray("TaskRunner pid=1", f"step:{i // 5} - {pairs} - training/global_step:{i // 5}"))
        done = i // 5 % 200
        out.append("".join(f"\rTraining Progress:  {done // 2:>2}%|{'#' * (done // 20):<10}| {done}/200 "
                           f"[00:{n:02d}<05:01, 13.70s/it]" for n in range(4)) + "\r")
    if i % 50 == 0:
        out.append(f"WARNING 05-26 {clock} [scheduler.py:1560] Sequence group {episode} is preempted by "
                   "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space; the driver retries")
    if i % 400 == 0:
        out += ["Traceback (most recent call last):", '  File "/opt/ajet/ajet/task_runner.py", line 88, in run',
                "    reward = judge(output)", f"ValueError: judge returned no score for episode {episode}"]
    if i % 1000 == 0:
        out.append(_ray("TaskRunner pid=1", f"step:{i // 5} - actor/pg_loss:nan - actor/grad_norm:inf - "
                        f"training/global_step:{i // 5}"))
    return out


def write_log(path: Path, size: int) -> None:
    rng = random.Random(28)
    written, i = 0, 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < size:
            block = "\n".join(line for k in range(50) for line in _lines(rng, i + k)) + "\n"
            i += 50
            handle.write(block)
            written += len(block.encode())


def monitor_pass(log: Path, work: Path) -> tuple[float, dict]:
    """CPU seconds of the monitor's LogTail reading ``log`` from 0 to its end, and what it found."""
    import shutil

    from skill_server.experiments.signatures import monitor_rows
    from skill_server.hosts.agent import monitor

    run_dir = work / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    spec = {"format": monitor.FORMAT, "exp_id": "bench-scan", "signatures": monitor_rows(),
            "roles": [{"role": "main", "log_path": str(log), "start_offset": 0}]}
    run = monitor.Run(str(run_dir), spec, None)
    tail = monitor.LogTail(run, run.roles[0])
    t0 = time.process_time()
    while tail.read(run, run.clock(), final=False):
        pass
    used = time.process_time() - t0
    found = run.roles[0].found
    assert found.offset == log.stat().st_size and found.unscannable == 0, "every byte read"
    return used, {"errors": {k: v["count"] for k, v in sorted(found.errors.items())}, "points": found.points,
                  "sampled_mib": found.sampled_bytes / 2**20, "global_step": found.global_step}


def child_cpu(argv: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.PIPE, check=False)  # not /dev/null: grep stops at a first match there
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,500", help="log sizes in MiB")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from skill_server.experiments.signatures import monitor_rows

    with tempfile.TemporaryDirectory(prefix="ajsscan") as tmp:
        work = Path(tmp)
        needles = work / "needles.txt"
        needles.write_text("\n".join(sorted({n.lower() for r in monitor_rows() for n in r["needles"]})) + "\n")
        for size in (int(s) for s in args.sizes.split(",")):
            log = work / f"{size}.log"
            write_log(log, size * 2**20)
            mib = log.stat().st_size / 2**20
            ours, fixed, one = [], [], []
            found: dict = {}
            for _ in range(args.repeats):  # interleaved, so machine noise hits all three alike
                used, found = monitor_pass(log, work)
                ours.append(used)
                fixed.append(child_cpu(["grep", "-c", "-i", "-F", "-f", str(needles), str(log)]))
                one.append(child_cpu(["grep", "-c", "-E", "CUDA out of memory|Traceback", str(log)]))
            o, f, e = min(ours), min(fixed), min(one)
            print(f"{mib:.0f} MiB log: the monitor {mib / o:.1f} MiB/s ({o:.2f} CPU s, best of {args.repeats}); "
                  f"grep -ciF of the {len(needles.read_text().split(chr(10))) - 1} needles {mib / f:.0f} MiB/s "
                  f"-> {o / f:.1f}x; grep -cE of one expression {mib / e:.0f} MiB/s -> {o / e:.1f}x")
            print(f"  found: {found['errors']}; points [seq, in file, dropped] {found['points']}; global step "
                  f"{found['global_step']}; step lines sampled in {found['sampled_mib']:.0f} MiB")
            log.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
