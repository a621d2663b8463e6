"""Slurm runs as the tools see them, on the real two-node Slurm of tests/slurm_cluster.py (started and stopped
here, every path under a temp dir; needs root, slurm-wlm and munge, as the tests do).

``status``: one ``experiment_status`` call (no id: every run) over 10 running Slurm jobs, against the same
call over 10 running tmux runs (a private tmux socket), in-process, median of ``--calls`` calls. A Slurm
run's status asks ``scontrol show job`` once per job and reads its ``job.json``; a tmux run's reads its
wrapper's /proc entry.

``latency``: from sbatch's answer (the launch returned) to the first status that says the job is running
(polled every 0.1 s), and from a job's end (its process's exit file, written as it ends, on the shared
folder) to the first status that reports its final state; ``--runs`` runs each, median and worst.

    sudo python bench/slurm.py [--calls 15] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _call(tool: str, **arguments: Any) -> dict[str, Any]:
    from skill_server.app.table import TOOLS_BY_NAME

    return TOOLS_BY_NAME[tool].invoke(arguments).model_dump()


def _launch(name: str, command: str, workdir: str, slurm: bool) -> str:
    extra: dict[str, Any] = {"slurm": {}} if slurm else {}
    return str(_call("launch_experiment", name=name, command=command, workdir=workdir, max_time_s=3600, **extra)["id"])


def _median_status(calls: int) -> float:
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        _call("experiment_status")
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def _status_part(workdir: str, slurm: bool, calls: int) -> dict[str, Any]:
    ids = [_launch(f"bench{i}", "sleep 600", workdir, slurm) for i in range(10)]
    deadline = time.monotonic() + 120
    while True:  # every job running (not queued) before timing
        states = [p["state"] for e in _call("experiment_status")["experiments"] for p in e["processes"]]
        if states.count("running") >= 10:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"not all running: {states}")
        time.sleep(0.5)
    seconds = _median_status(calls)
    for run_id in ids:
        _call("stop_experiment", id=run_id, grace_s=2)
    return {"runs": len(ids), "status_s": round(seconds, 4)}


def _latency_part(workdir: str, runs: int) -> dict[str, Any]:
    to_running, to_final = [], []
    for i in range(runs):
        out = _call("launch_experiment", name=f"lat{i}", command="sleep 2", workdir=workdir, max_time_s=3600,
                    slurm={})
        submitted = time.time()
        run_id = str(out["id"])
        seen_running = None
        while True:
            status = _call("experiment_status", id=run_id, checkpoints=False)["experiments"][0]
            now = time.time()
            if seen_running is None and status["processes"][0]["state"] == "running":
                seen_running = now
                to_running.append(now - submitted)
            if status["state"] != "running":
                break
            time.sleep(0.1)
        rdir = next(Path(os.environ["SKILL_SERVER_STATE_DIR"], "runs", run_id).iterdir())
        ended = (rdir / "main.exit").stat().st_mtime
        to_final.append(now - ended)
    return {"runs": runs, "sbatch_to_running_s": _spread(to_running), "end_to_final_s": _spread(to_final)}


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "max": round(max(values), 2)}


def inside(args: argparse.Namespace) -> None:
    """Runs in the cluster's network, as a tool server on its login node would."""
    workdir = os.environ["AJS_BENCH_WORK"]
    results: dict[str, Any] = {"slurm": _status_part(workdir, True, args.calls)}
    os.environ["SKILL_SERVER_STATE_DIR"] = os.environ["AJS_BENCH_TMUX_STATE"]
    results["tmux"] = _status_part(workdir, False, args.calls)
    os.environ["SKILL_SERVER_STATE_DIR"] = os.environ["AJS_BENCH_SLURM_STATE"]
    results["latency"] = _latency_part(workdir, args.runs)
    print(json.dumps(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args)
        return
    import tempfile

    from tests.slurm_cluster import SlurmCluster

    with SlurmCluster(cpus_per_node=16) as cluster, tempfile.TemporaryDirectory(prefix="ajstmux") as tmux_dir:
        work = cluster.shared / "work"
        work.mkdir()
        env = cluster.client_env(os.environ)
        env.update(PYTHONPATH=str(REPO), AJS_BENCH_WORK=str(work), TMUX_TMPDIR=tmux_dir, SHELL="/bin/sh",
                   SKILL_SERVER_STATE_DIR=str(cluster.shared / "state"),
                   AJS_BENCH_SLURM_STATE=str(cluster.shared / "state"),
                   AJS_BENCH_TMUX_STATE=str(cluster.shared / "tmux-state"),
                   SKILL_SERVER_TMUX_SOCKET=f"ajsbench-{uuid.uuid4().hex[:8]}")
        env.pop("TMUX", None)
        proc = subprocess.run(cluster.argv([sys.executable, __file__, "--inside", "--calls", str(args.calls),
                                            "--runs", str(args.runs)]), env=env, capture_output=True, text=True,
                              timeout=1800, check=False)
        subprocess.run(["tmux", "-S", os.path.join(tmux_dir, f"tmux-{os.getuid()}",
                                                   env["SKILL_SERVER_TMUX_SOCKET"]), "kill-server"],
                       capture_output=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        print(json.dumps(json.loads(proc.stdout.strip().splitlines()[-1]), indent=2))


if __name__ == "__main__":
    main()
