"""When nobody is watching (issue 23): how fast a run's monitor acts on a failure with nobody calling, and what
its watching costs.

Not a test: prints the figures measured in one run. Everything runs on a private tmux socket and a temporary
state directory.

``reaction``: ``--runs`` runs that print three step lines, then an NCCL collective timeout line, then hang
(processes alive, as a hung rank). Each is launched with ``policy={"on_error": "stop", "notify_command": ...}``
and then left alone (no tool call): the seconds from the failure line (its wall time, written by the run
itself just before the line) to the ``failure`` and the ``stopped`` happenings told to the notify command (it
writes the time it runs), and to the run's wrapper being gone (the stop done: Ctrl-C, its processes ended).
Measured twice: the failure right after the step lines, and after ``--quiet-s`` seconds of silence (an idle
monitor looks less often: its reaction must not be slower).

``idle``: the CPU of monitors whose runs print nothing (a hung rank, a long step) with the stall watch and a
policy on, each with its supervisor (the process that replaces it if it dies or freezes: their sum is a run's
watching cost), all measured over the same ``--idle-minutes`` with no tool call, scaled to CPU seconds per hour:
this version's monitor as it is, and as it ticks with every watcher at the probe's pace (4 Hz, as monitors did
before they slept while nothing changed: ``SKILL_SERVER_MONITOR_IDLE_S=0.25``); with ``--baseline DIR`` (a
checkout of an earlier version) that version's monitor too, launched through its own CLI.

``cpu``: the monitor's CPU (utime + stime from /proc) for a run logging 1 MB a minute with the stall watch
and a policy on, scaled to an hour (``bench/status.py``'s measurement, with a policy).

    python bench/unattended.py [--parts reaction,idle,cpu] [--runs 5] [--quiet-s 15] [--idle-minutes 3]
                               [--baseline DIR] [--cpu-minutes 3]
"""

from __future__ import annotations

import argparse
import importlib.util
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

HANGS = r'''
import sys, time
mark, quiet = sys.argv[1], float(sys.argv[2])
for step in range(1, 4):
    print("step:%d - critic/score/mean:0.1 - timing_s/step:0.2 - training/global_step:%d" % (step, step), flush=True)
    time.sleep(0.2)
time.sleep(quiet)
open(mark, "w").write(repr(time.time()))
print("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE) ran for "
      "600000 milliseconds before timing out.", flush=True)
time.sleep(600)
'''
#: The notify command: the happening's kind and the time it ran, one line each.
TELL = "python3 -c 'import json,sys,time; e=json.load(sys.stdin); print(e[\"kind\"], repr(time.time()))' >> {out}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def reaction_bench(call, work: Path, runs: int, quiet_s: float = 0.0) -> None:
    script = work / "hang.py"
    script.write_text(HANGS)
    failure_s, told_s, stopped_s = [], [], []
    for i in range(runs):
        mark, out = work / f"failed.{quiet_s:g}.{i}", work / f"told.{quiet_s:g}.{i}"
        launched = call("launch_experiment", name=f"bench_react_{i}", workdir=str(work),
                        command=f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {mark} {quiet_s}",
                        policy={"on_error": "stop", "notify_command": TELL.format(out=shlex.quote(str(out)))})
        wrapper = launched.processes[0].pid
        end = time.monotonic() + 60 + quiet_s
        while time.monotonic() < end and (not mark.exists() or _alive(wrapper)):
            time.sleep(0.01)
        gone = time.time()
        while time.monotonic() < end and not (out.exists() and "stopped" in out.read_text()):
            time.sleep(0.01)
        failed = float(mark.read_text())
        said = {line.split()[0]: float(line.split()[1]) for line in out.read_text().splitlines()}
        failure_s.append(said["failure"] - failed)
        told_s.append(said["stopped"] - failed)
        stopped_s.append(gone - failed)
    after = f" after {quiet_s:g} s of silence" if quiet_s else ""
    print(f"failure line{after} -> 'failure' told, nobody calling: median {statistics.median(failure_s):.2f} s, "
          f"max {max(failure_s):.2f} s; -> 'stopped' told: median {statistics.median(told_s):.2f} s, "
          f"max {max(told_s):.2f} s; -> run stopped: median {statistics.median(stopped_s):.2f} s, "
          f"max {max(stopped_s):.2f} s ({runs} runs)")


#: A run that prints one step line, then nothing for as long as it lives (a hung rank, a very long step).
SILENT = ("import time; print('step:1 - critic/score/mean:0.1 - training/global_step:1', flush=True); "
          "time.sleep(86400)")
IDLE_POLICY = {"on_error": "stop", "on_stall": "notify", "notify_command": "cat >/dev/null"}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _monitor_pid(run_dir: Path) -> int:
    import json

    state = run_dir / "monitor.json"
    deadline = time.monotonic() + 30
    while not state.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return int(json.loads(state.read_text())["pid"])


def _supervisor_pid(run_dir: Path) -> int | None:
    """The pid of the run monitor's supervisor (a version from before supervisors has none: None)."""
    try:
        from skill_server.hosts.agent import heartbeat
    except ImportError:
        return None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        record = heartbeat.read(str(run_dir / "supervisor.beat"))[0]
        if record is not None:
            return int(record["pid"])
        time.sleep(0.1)
    return None


def _launch_silent(call, work: Path, name: str) -> tuple[str, Path]:
    from skill_server.experiments.store import open_registry

    exp_id = call("launch_experiment", name=name, workdir=str(work), policy=IDLE_POLICY,
                  command=f"{shlex.quote(sys.executable)} -c {shlex.quote(SILENT)}").id
    with open_registry() as reg:
        return exp_id, Path(reg.get(exp_id).processes[0].run_dir)


def _launch_baseline(baseline: Path, root: Path, work: Path) -> tuple[dict[str, str], str, Path]:
    """A silent run launched by an earlier version (``baseline``: its checkout) through its own CLI, with its own
    state directory and tmux socket; (its environment, its id, its run directory)."""
    import json
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(baseline), SKILL_SERVER_STATE_DIR=str(root / "baseline-state"),
               SKILL_SERVER_TMUX_SOCKET=os.environ["SKILL_SERVER_TMUX_SOCKET"] + "-base")
    env.pop("SKILL_SERVER_MONITOR_IDLE_S", None)
    args = {"name": "bench_idle_base", "workdir": str(work), "policy": IDLE_POLICY,
            "command": f"{shlex.quote(sys.executable)} -c {shlex.quote(SILENT)}"}
    done = subprocess.run([sys.executable, "-m", "skill_server", "call", "launch_experiment", "--json",
                           json.dumps(args)], env=env, cwd=str(baseline), capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    runs = root / "baseline-state" / "runs" / out["id"]
    return env, out["id"], next(p for p in runs.iterdir() if p.is_dir())


def idle_bench(call, work: Path, root: Path, minutes: float, baseline: Path | None) -> None:
    """Idle monitors side by side over one window: this version as it is, at the old fixed pace, and (given) an
    earlier version's."""
    import subprocess

    from skill_server.hosts.agent.watchers import IDLE_ENV, TICK_S

    runs: dict[str, tuple[str, Path]] = {}
    os.environ[IDLE_ENV] = str(TICK_S)  # read by the monitor this launch starts (it inherits the environment)
    try:
        runs["this version, every watcher at 4 Hz"] = _launch_silent(call, work, "bench_idle_fixed")
    finally:
        os.environ.pop(IDLE_ENV, None)
    runs["this version"] = _launch_silent(call, work, "bench_idle")
    base = None
    if baseline is not None:
        base_env, base_id, base_dir = _launch_baseline(baseline, root, work)
        runs["baseline " + str(baseline)] = (base_id, base_dir)
        base = (base_env, base_id)
    pids = {label: _monitor_pid(run_dir) for label, (_, run_dir) in runs.items()}
    keepers = {label: _supervisor_pid(run_dir) for label, (_, run_dir) in runs.items()
               if not label.startswith("baseline")}
    time.sleep(5)  # past the first look and the monitor's first seconds
    first = {label: _cpu_s(pid) for label, pid in pids.items()}
    kept = {label: _cpu_s(pid) for label, pid in keepers.items() if pid is not None}
    t0 = time.monotonic()
    time.sleep(minutes * 60)
    span = time.monotonic() - t0
    rate = {label: (_cpu_s(pid) - first[label]) * 3600 / span for label, pid in pids.items()}
    for label, pid in keepers.items():
        if pid is not None:  # the monitor's supervisor (issue 31): a watcher's cost is both processes'
            supervised = (_cpu_s(pid) - kept[label]) * 3600 / span
            print(f"idle supervisor ({label}): {supervised:.2f} CPU s per hour")
            print(f"idle run monitor alone ({label}): {rate[label]:.2f} CPU s per hour")
            rate[label] += supervised
    for label, per_hour in rate.items():
        print(f"idle run monitor ({label}): {per_hour:.2f} CPU s per hour ({span / 60:.1f} min, nothing printed)")
    fixed, now = rate["this version, every watcher at 4 Hz"], rate["this version"]
    print(f"idle monitor CPU, this version / every watcher at 4 Hz: {now / fixed:.2f}")
    if baseline is not None:
        print(f"idle monitor CPU, this version / baseline: {now / rate['baseline ' + str(baseline)]:.2f}")
    for exp_id, _ in (v for k, v in runs.items() if not k.startswith("baseline")):
        call("stop_experiment", id=exp_id, grace_s=1)
    if base is not None:
        subprocess.run([sys.executable, "-m", "skill_server", "call", "stop_experiment", f"id={base[1]}",
                        "grace_s=1"], env=base[0], cwd=str(baseline), capture_output=True, check=False)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="reaction,idle,cpu")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quiet-s", type=float, default=15.0)
    ap.add_argument("--idle-minutes", type=float, default=3.0)
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--cpu-minutes", type=float, default=3.0)
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    root = Path(tempfile.mkdtemp(prefix="ajsbench", dir="/tmp"))
    os.environ["SKILL_SERVER_STATE_DIR"] = str(root / "state")
    os.environ["TMUX_TMPDIR"] = str(root)
    os.environ["SKILL_SERVER_TMUX_SOCKET"] = f"bench-{uuid.uuid4().hex[:6]}"
    os.environ.pop("TMUX", None)
    os.environ["SHELL"] = "/bin/sh"

    import libtmux

    from skill_server.app.table import TOOLS_BY_NAME

    def call(tool: str, **kw):
        return TOOLS_BY_NAME[tool].invoke(kw)

    work = root / "work"
    work.mkdir()
    try:
        if "reaction" in parts:
            reaction_bench(call, work, args.runs)
            reaction_bench(call, work, args.runs, args.quiet_s)
        if "idle" in parts:
            idle_bench(call, work, root, args.idle_minutes, args.baseline)
        if "cpu" in parts:
            spec = importlib.util.spec_from_file_location("bench_status", REPO / "bench" / "status.py")
            assert spec is not None and spec.loader is not None
            status = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(status)
            status.cpu_bench(call, work, args.cpu_minutes, policy={
                "on_error": "stop", "on_stall": "stop", "notify_command": "cat >/dev/null"})
    finally:
        for name in (os.environ["SKILL_SERVER_TMUX_SOCKET"], os.environ["SKILL_SERVER_TMUX_SOCKET"] + "-base"):
            srv = libtmux.Server(socket_name=name)
            if srv.is_alive():
                srv.kill()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
