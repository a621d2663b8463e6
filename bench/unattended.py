"""When nobody is watching (issue 23): how fast a run's monitor acts on a failure with nobody calling, and what
its watching costs.

Not a test: prints the figures measured in one run. Everything runs on a private tmux socket and a temporary
state directory.

``reaction``: ``--runs`` runs that print three step lines, then an NCCL collective timeout line, then hang
(processes alive, as a hung rank). Each is launched with ``policy={"on_error": "stop", "notify_command": ...}``
and then left alone (no tool call): the seconds from the failure line (its wall time, written by the run
itself just before the line) to the monitor's ``action`` notification (the notify command writes the time it
runs), and to the run's wrapper being gone (the stop done: Ctrl-C, its processes ended).

``cpu``: the monitor's CPU (utime + stime from /proc) for a run logging 1 MB a minute with the stall watch
and a policy on, scaled to an hour (``bench/status.py``'s measurement, with a policy).

    python bench/unattended.py [--parts reaction,cpu] [--runs 5] [--cpu-minutes 3]
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
mark = sys.argv[1]
for step in range(1, 4):
    print("step:%d - critic/score/mean:0.1 - timing_s/step:0.2 - training/global_step:%d" % (step, step), flush=True)
    time.sleep(0.2)
open(mark, "w").write(repr(time.time()))
print("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE) ran for "
      "600000 milliseconds before timing out.", flush=True)
time.sleep(600)
'''
#: The notify command: the event and the time it ran, one line each.
TELL = "python3 -c 'import json,sys,time; e=json.load(sys.stdin); print(e[\"event\"], repr(time.time()))' >> {out}"


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


def reaction_bench(call, work: Path, runs: int) -> None:
    script = work / "hang.py"
    script.write_text(HANGS)
    told_s, stopped_s = [], []
    for i in range(runs):
        mark, out = work / f"failed.{i}", work / f"told.{i}"
        launched = call("launch_experiment", name=f"bench_react_{i}", workdir=str(work),
                        command=f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {mark}",
                        policy={"on_error": "stop", "notify_command": TELL.format(out=shlex.quote(str(out)))})
        wrapper = launched.processes[0].pid
        end = time.monotonic() + 60
        while time.monotonic() < end and (not mark.exists() or _alive(wrapper)):
            time.sleep(0.01)
        gone = time.time()
        while time.monotonic() < end and not (out.exists() and "action" in out.read_text()):
            time.sleep(0.01)
        failed = float(mark.read_text())
        action = next(float(line.split()[1]) for line in out.read_text().splitlines() if line.startswith("action"))
        told_s.append(action - failed)
        stopped_s.append(gone - failed)
    print(f"failure line -> policy action notified, nobody calling: median {statistics.median(told_s):.2f} s, "
          f"max {max(told_s):.2f} s; -> run stopped: median {statistics.median(stopped_s):.2f} s, "
          f"max {max(stopped_s):.2f} s ({runs} runs)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="reaction,cpu")
    ap.add_argument("--runs", type=int, default=5)
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
        if "cpu" in parts:
            spec = importlib.util.spec_from_file_location("bench_status", REPO / "bench" / "status.py")
            assert spec is not None and spec.loader is not None
            status = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(status)
            status.cpu_bench(call, work, args.cpu_minutes, policy={
                "on_error": "stop", "on_stall": "stop", "notify_command": "cat >/dev/null"})
    finally:
        srv = libtmux.Server(socket_name=os.environ["SKILL_SERVER_TMUX_SOCKET"])
        if srv.is_alive():
            srv.kill()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
