"""Cold start of the MCP server relative to a one-tool hello MCPServer, the CLI's wall time, and what the server's
start-up imports of the plotting stack (matplotlib is a plot's: never at start-up).

Not a test: prints ratios measured in one run (this machine is shared and noisy). Cold start is the
time from spawning the process to reading its ``initialize`` result over stdio; runs of the two
servers are interleaved and the median of 5 is reported.

    python bench/startup.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = 5
INIT = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def cold_start(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            cwd=REPO, env=env())
    assert proc.stdin and proc.stdout
    proc.stdin.write((json.dumps(INIT) + "\n").encode())
    proc.stdin.flush()
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(timeout=10)
    reply = json.loads(line)
    assert reply.get("id") == 1 and "result" in reply, reply
    return elapsed


def cli_call() -> tuple[float, list[str]]:
    code = (
        "import sys, time; t=time.perf_counter(); from skill_server.app import cli; "
        "rc = cli.main(['call','episode_cap','max_env_worker=128','num_repeat=6','train_batch_size=32']); "
        "mods = sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types'))); "
        "import json; sys.stderr.write(json.dumps(mods))"
    )
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env(),
                          check=False)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    return elapsed, json.loads(proc.stderr.strip() or "[]")


#: ``python -m skill_server``, telling on its way out which plotting modules it imported.
TELLS_ITS_IMPORTS = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: sys.stderr.write(repr(sorted(m for m in sys.modules\n"
    "    if m.split('.')[0] in ('matplotlib', 'numpy', 'PIL')))))\n"
    "runpy.run_module('skill_server', run_name='__main__')\n")


def plotting_at_start() -> list[str]:
    """The plotting modules the MCP server imported by the time it answered initialize."""
    proc = subprocess.run([sys.executable, "-c", TELLS_ITS_IMPORTS], input=json.dumps(INIT) + "\n",
                          capture_output=True, text=True, cwd=REPO, env=env(), timeout=60, check=False)
    tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "[]"
    return list(json.loads(tail.replace("'", '"')))


def main() -> None:
    ours_argv = [sys.executable, "-m", "skill_server"]
    hello_argv = [sys.executable, str(REPO / "bench" / "hello_server.py")]
    cold_start(ours_argv), cold_start(hello_argv)  # warm the OS file cache for both
    ours, hello = [], []
    for _ in range(RUNS):
        ours.append(cold_start(ours_argv))
        hello.append(cold_start(hello_argv))
    m_ours, m_hello = statistics.median(ours), statistics.median(hello)
    print(f"server cold start (spawn -> initialize result), median of {RUNS}:")
    print(f"  skill_server  {m_ours * 1000:7.1f} ms")
    print(f"  hello server  {m_hello * 1000:7.1f} ms")
    print(f"  ratio         {m_ours / m_hello:7.3f}   (target <= 1.10)")
    calls = [cli_call() for _ in range(RUNS)]
    wall = statistics.median(c[0] for c in calls)
    mcp_modules = calls[0][1]
    print(f"CLI `call episode_cap` wall time, median of {RUNS}: {wall * 1000:.1f} ms")
    print(f"  mcp modules imported on the CLI path: {len(mcp_modules)} {mcp_modules[:5]}")
    print(f"  ratio to hello server cold start: {wall / m_hello:.3f}")
    plotting = plotting_at_start()
    print(f"plotting modules imported by the MCP server's start-up: {len(plotting)} {plotting[:5]} (target 0)")


if __name__ == "__main__":
    main()
