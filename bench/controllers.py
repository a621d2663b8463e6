"""Two (or more) controllers launching into one registry at once, as assistants on two login nodes of a cluster
whose registry folder is shared would: each controller is a loop of CLI processes (``python -m skill_server
call launch_experiment``, a one-line ``true`` run each) with its own controller identity
(``SKILL_SERVER_TEST_CONTROLLER``, the tests' stand-in for another machine), all loops at the same time.

Not a test: prints the wall time, the median and slowest launch, how many ids came back, how many rows the
registry holds, its ``integrity_check`` and how many launches failed (and how many said "database is
locked"). Everything runs on a private tmux socket and a temporary state directory, removed at the end.

    python bench/controllers.py [--controllers 2] [--launches 15]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def launch_loop(name: str, count: int, env: dict[str, str], work: Path, out: list[tuple[float, int, str, str]]
                ) -> None:
    """``count`` launches, one CLI process each, as controller ``name``: (seconds, exit code, id, stderr)."""
    for i in range(count):
        args = json.dumps({"name": f"{name}x{i}", "command": "true", "workdir": str(work)})
        start = time.monotonic()
        mine = {**env, "SKILL_SERVER_TEST_CONTROLLER": name}
        proc = subprocess.run([sys.executable, "-m", "skill_server", "call", "launch_experiment", "--json", args],
                              capture_output=True, text=True, cwd=REPO, env=mine, timeout=120, check=False)
        seconds = time.monotonic() - start
        exp_id = json.loads(proc.stdout)["id"] if proc.returncode == 0 else ""
        out.append((seconds, proc.returncode, exp_id, proc.stderr))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--controllers", type=int, default=2)
    ap.add_argument("--launches", type=int, default=15, help="launches per controller")
    opts = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ajsctl", dir="/tmp"))
    socket = f"bench-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "SKILL_SERVER_STATE_DIR": str(root / "state"), "TMUX_TMPDIR": str(root),
           "SKILL_SERVER_TMUX_SOCKET": socket, "SHELL": "/bin/sh",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("TMUX", None)
    work = root / "work"
    work.mkdir()
    results: dict[str, list[tuple[float, int, str, str]]] = {f"ctl{i}": [] for i in range(opts.controllers)}
    try:
        threads = [threading.Thread(target=launch_loop, args=(name, opts.launches, env, work, out))
                   for name, out in results.items()]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - start
        done = [r for out in results.values() for r in out]
        ids = {r[2] for r in done if r[1] == 0}
        failed = [r for r in done if r[1] != 0]
        locked = [r for r in done if "locked" in r[3]]
        with sqlite3.connect(str(root / "state" / "experiments.sqlite3")) as conn:
            rows = conn.execute("SELECT COUNT(*) FROM experiments").fetchone()[0]
            check = conn.execute("PRAGMA integrity_check").fetchone()[0]
        times = [r[0] for r in done]
        print(f"{opts.controllers} controllers x {opts.launches} launches at once: {wall:.1f} s wall; launch median "
              f"{statistics.median(times):.2f} s, slowest {max(times):.2f} s")
        print(f"ids returned {len(ids)}, registry rows {rows}, integrity_check {check}, failed {len(failed)}, "
              f"'database is locked' {len(locked)}")
        for r in failed[:3]:
            print("  failed:", r[3].strip()[-300:])
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
