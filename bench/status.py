"""Cost of experiment_status and of watching runs: the error scanner's throughput, a 2 GB log against a 2 MB log,
20 running experiments in one call, one run among 10 and among 1,000 finished ones, the metric history
(10,000 steps returned downsampled to 200 points), and the run monitor's CPU for a run logging 1 MB/min.

Not a test: prints the figures measured in one run (targets: the scanner at 20 MiB/s or more on one core;
the 2 GB / 2 MB ratio within 1.5x with the metric history kept; 20 experiments under 1 s; 1,000 finished
runs within 1.2x of 10). Everything runs on a private tmux socket and a temporary state directory; the
2 GB log holds real log lines (written in 4 MB chunks, a few seconds) and is deleted at the end.

``scanner``: every error signature over 32 MiB of verl-like step lines (60 metrics each, as AgentJet's
trainer prints them) and of short INFO lines, in this process on one core: the signatures alone
(``hosts.agent.scanner``) and everything the run monitor does with a chunk (signatures, step lines,
progress: ``hosts.agent.findings.fold``), in MiB/s and as a ratio to a plain ``re`` pass over the same
text (one compiled pattern, ``CUDA out of memory|Traceback``, ``findall`` over it: what any regular
expression that looks at every byte costs at least).

``logs``: each experiment appends a verl step line every 50 ms while it runs, so every status call has
new findings and metric points to copy from the run's monitor. A log that already existed before the
launch is not this run's output: the monitor starts at its end. Medians of several calls are reported.

``finished``: one running experiment's status (the median of 25 calls) with 10, then with 1,000 finished
runs in the registry and as many finished sessions left on the tmux server (as runs from before session
clean-up left them; finished runs now remove their own).

``listing``: the listing (``experiment_status`` without an id, a page of 10) with 10 finished runs, then with
5,000 (``--history-runs``): 10 real launches, then older history rows copied from them straight into the
registry (launching 5,000 runs would take an hour; listing reads only the newest page of rows, so copies
cost what real rows cost). Target: within 1.5x.

``history``: one run prints 10,000 step lines at once; its monitor stores them as metric points while
status calls poll, then ``metrics_history`` asks for 1 and for 5 metrics over all 10,000 steps,
downsampled to 200 points.

``cpu``: a run logging 1 MB a minute (step lines and INFO lines) for ``--cpu-minutes``; the CPU seconds
its monitor used (utime + stime from /proc), scaled to an hour.

    python bench/status.py [--parts scanner,logs,many,finished,listing,history,cpu] [--big-gb 2] [--calls 30]
                           [--history-steps 10000] [--finished 1000] [--history-runs 5000] [--cpu-minutes 3]
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


INFO_LINE = "2026-05-26 17:07:12.482 | INFO     | ajet.task_rollout.native_parallel_worker:run:212 - episode {} claimed"


def scanner_bench() -> None:
    """The signatures alone and the monitor's whole fold, over verl step lines and over short lines."""
    import re

    from skill_server.experiments.logs import ScanState, signature_table
    from skill_server.hosts.agent import findings

    namespace: dict = {}
    exec(STEP_LINE, namespace)  # noqa: S102 - the bench's own step-line generator above
    size = 32 * 1024 * 1024
    texts = {}
    for label, make in (("verl step lines", namespace["step_line"]), ("short lines", INFO_LINE.format)):
        lines, total, i = [], 0, 0
        while total < size:
            i += 1
            lines.append(make(i))
            total += len(lines[-1]) + 1
        texts[label] = "\n".join(lines) + "\n"
    table = signature_table()
    plain = re.compile(r"CUDA out of memory|Traceback")
    chunk = 4 * 1024 * 1024  # what the monitor reads per look

    def per_chunk(text: str, fn) -> float:
        t0 = time.process_time()
        for lo in range(0, len(text), chunk):
            fn(text[lo: lo + chunk])
        return time.process_time() - t0

    for label, text in texts.items():
        mib = len(text.encode()) / 2**20
        base = min(per_chunk(text, plain.findall) for _ in range(3))
        scan = min(per_chunk(text, table.scan) for _ in range(3))
        state = ScanState(offsets=[0])
        fold = per_chunk(text, lambda t, s=state: findings.fold(s, t, table, None, role="main", now=1.0))
        print(f"scanner, {label} ({mib:.0f} MiB): signatures {mib / scan:.0f} MiB/s ({scan / base:.1f}x a plain re "
              f"pass at {mib / base:.0f} MiB/s); the monitor's whole fold {mib / fold:.0f} MiB/s ({fold / base:.1f}x)")


def finished_bench(call, work: Path, counts: list[int]) -> None:
    """One running run's status with ``counts`` finished runs (real launches) and as many finished sessions."""
    import subprocess

    running = call("launch_experiment", name="bench_one", workdir=str(work), command="sleep 3600").id
    socket = call("experiment_status", id=running).experiments[0].attach.split(" -S ", 1)[1].split(" ")[0]
    subprocess.run(["tmux", "-S", socket, "set-option", "-g", "remain-on-exit", "on"], check=True)
    made = 0
    results = {}
    for count in counts:
        t0 = time.perf_counter()
        while made < count:
            batch = []
            for _ in range(min(20, count - made)):
                batch.append(call("launch_experiment", name=f"bench_done_{made}", workdir=str(work),
                                  command="true").id)
                made += 1
            cmd = ["tmux", "-S", socket]
            for i in range(made - len(batch), made):
                cmd += ["new-session", "-d", "-s", f"bench_old_{i}", "true", ";"]
            subprocess.run(cmd[:-1], check=True, capture_output=True)
            for exp_id in batch:
                call("wait_experiment", id=exp_id, timeout_s=30)
        sys.stderr.write(f"{count} finished runs in {time.perf_counter() - t0:.0f} s\n")
        times = []
        for _ in range(25):
            times.append(timed(lambda: call("experiment_status", id=running, max_lines=0, checkpoints=False)))
        results[count] = statistics.median(times)
    lo, hi = counts[0], counts[-1]
    print(f"one running experiment's status: with {lo} finished runs {results[lo] * 1000:.1f} ms, with {hi} "
          f"{results[hi] * 1000:.1f} ms -> ratio {results[hi] / results[lo]:.2f}x (target <= 1.2x)")
    call("stop_experiment", id=running, grace_s=1)


def listing_bench(call, work: Path, runs: int) -> None:
    """A page of the listing with 10 finished runs, then with ``runs`` (older rows copied in SQL)."""
    import sqlite3

    from skill_server.experiments.store import DB_NAME, registry_dir

    ids = [call("launch_experiment", name=f"bench_list_{i}", workdir=str(work), command="true").id for i in range(10)]
    for exp_id in ids:
        call("wait_experiment", id=exp_id, timeout_s=30)

    def page() -> float:
        times = []
        for _ in range(25):
            t0 = time.perf_counter()
            out = call("experiment_status", limit=10)
            times.append(time.perf_counter() - t0)
            assert [e.id for e in out.experiments] == ids[::-1], "the page is the 10 real runs"
        return statistics.median(times)

    small = page()
    conn = sqlite3.connect(str(registry_dir() / DB_NAME), isolation_level=None)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(experiments)") if r[1] not in ("id", "seq")]
    names = ", ".join(columns)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE experiments SET seq = seq + ?", (runs,))  # the real runs stay the newest
    for i in range(runs - len(ids)):
        conn.execute(f"INSERT INTO experiments (id, seq, {names}) SELECT ?, ?, {names} FROM experiments WHERE id = ?",
                     (f"old{i:06d}", i + 1, ids[i % len(ids)]))
    conn.execute("COMMIT")
    conn.close()
    big = page()
    print(f"listing (a page of 10, median of 25): with 10 finished runs {small * 1000:.1f} ms, with {runs} "
          f"{big * 1000:.1f} ms -> ratio {big / small:.2f}x (target <= 1.5x)")


#: Logs about ``rate`` bytes a second: one step line then INFO lines, every half second.
STEADY_WRITER = STEP_LINE + (
    "import sys, time, itertools\n"
    "rate = float(sys.argv[1])\n"
    "info = " + repr(INFO_LINE + "\n") + "\n"
    "for i in itertools.count(1):\n"
    "    text = step_line(i) + '\\n'\n"
    "    while len(text) < rate / 2:\n"
    "        text += info.format(i)\n"
    "    sys.stdout.write(text)\n"
    "    sys.stdout.flush()\n"
    "    time.sleep(0.5)\n"
)


def cpu_bench(call, work: Path, minutes: float, policy: dict | None = None) -> None:
    """The CPU its monitor uses while a run logs 1 MB a minute (with ``policy``: its stall watch and policies
    on as well)."""
    import json

    script = work / "steady.py"
    script.write_text(STEADY_WRITER)
    extra = {"policy": policy} if policy else {}
    exp_id = call("launch_experiment", name="bench_cpu", workdir=str(work),
                  command=f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {1024 * 1024 / 60:.0f}",
                  **extra).id
    from skill_server.experiments.store import open_registry

    with open_registry() as reg:
        state = Path(reg.get(exp_id).processes[0].run_dir) / "monitor.json"
    deadline = time.monotonic() + 30
    while not state.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = json.loads(state.read_text())["pid"]
    tick = os.sysconf("SC_CLK_TCK")

    def cpu_s() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    first, t0 = cpu_s(), time.monotonic()
    while time.monotonic() - t0 < minutes * 60:
        time.sleep(5)
        call("experiment_status", id=exp_id, max_lines=0)  # a caller looking now and then, as an assistant does
    used, span = cpu_s() - first, time.monotonic() - t0
    log = Path(call("experiment_status", id=exp_id, max_lines=0).experiments[0].log_path)
    with_policy = " (with a policy)" if policy else ""
    rate = log.stat().st_size / 2**20 / (span / 60)
    print(f"the run monitor's CPU{with_policy} for a run logging {rate:.2f} MiB/min: "
          f"{used:.2f} s in {span / 60:.1f} min -> {used * 3600 / span:.1f} CPU seconds per hour")
    call("stop_experiment", id=exp_id, grace_s=1)


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
    while time.monotonic() < deadline:  # polled while it prints: each call copies the points the monitor wrote
        t0 = time.perf_counter()
        out = call("experiment_status", id=exp_id, max_lines=0, checkpoints=False,
                   metrics_history=["training/global_step"], history_points=1).experiments[0]
        scans.append(time.perf_counter() - t0)
        if out.global_step == steps and out.metrics_history.series and out.metrics_history.series[0].points == steps:
            break
    size = Path(out.log_path).stat().st_size
    print(f"metric history: {steps} step lines of {len(out.last_metrics)} metrics ({size / 2**20:.1f} MiB) scanned by "
          f"the run's monitor and copied by {len(scans)} status calls polling while they were printed (median call "
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


def logs_bench(call, work: Path, command: str, args) -> None:
    """Warm and cold status of a run logging into a 2 MB and into a 2 GB log."""
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


def many_bench(call, work: Path, command: str) -> None:
    """20 running experiments in one status call."""
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="scanner,logs,many,finished,listing,history,cpu")
    ap.add_argument("--big-gb", type=float, default=2.0)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--history-steps", type=int, default=10_000)
    ap.add_argument("--finished", type=int, default=1000)
    ap.add_argument("--history-runs", type=int, default=5000)
    ap.add_argument("--cpu-minutes", type=float, default=3.0)
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if "scanner" in parts:
        scanner_bench()

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
        if "logs" in parts:
            logs_bench(call, work, command, args)
        if "many" in parts:
            many_bench(call, work, command)
        if "finished" in parts:
            finished_bench(call, work, [10, args.finished])
        if "listing" in parts:
            listing_bench(call, work, args.history_runs)
        if "history" in parts:
            history_bench(call, work, args.history_steps)
        if "cpu" in parts:
            cpu_bench(call, work, args.cpu_minutes)
    finally:
        srv = libtmux.Server(socket_name=os.environ["SKILL_SERVER_TMUX_SOCKET"])
        if srv.is_alive():
            srv.kill()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
