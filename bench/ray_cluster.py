"""How long ray_cluster takes with the real ray CLI: start until ready, status, stop; and Ray's memory.

Not a test: prints figures measured in one run (root only). The nodes are those of
tests/test_ray_cluster.py: two sshd nodes, each in its own PID, mount and network-isolated namespace,
a head and one worker, each call a CLI process inside the private network (as an assistant's shell
runs it). Timings include the CLI's own start and ssh; on real nodes Ray's start-up dominates too.

    python bench/ray_cluster.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    from tests.test_ray_cluster import RAY_OPTIONS, cli, on_node, ray_nodes, ray_processes

    with ray_nodes() as server:
        work = tempfile.mkdtemp(prefix="w", dir=server.root)
        start = {"action": "start", "head": "node1", "workers": ["node2"], "port": 6381, "workdir": work, **RAY_OPTIONS}
        ready_s, status_s, stop_s, rss = [], [], [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            rc, out, err = cli(server, "ray_cluster", {**start, "timeout_s": 50})
            while rc == 0 and not out["ready"] and out["next_wait_s"]:
                rc, out, err = cli(server, "ray_cluster", {**start, "timeout_s": 50})
            assert rc == 0 and out["ready"], (err, out)
            ready_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            rc, out, err = cli(server, "ray_cluster", {"action": "status", "head": "node1", "port": 6381})
            assert rc == 0 and out["alive_nodes"] == 2, err
            status_s.append(time.perf_counter() - t0)
            kib = 0
            for node in server.nodes:
                pids = [str(p[0]) for p in ray_processes(server, node)]
                code = ("import sys\nt=0\nfor p in sys.argv[1:]:\n    try: t+=int([l for l in open('/proc/%s/status'%p)"
                        " if l.startswith('VmRSS')][0].split()[1])\n    except Exception: pass\nprint(t)")
                kib += int(on_node(server, node, code, *pids))
            rss.append(kib / 1024 / 1024)
            t0 = time.perf_counter()
            rc, out, err = cli(server, "ray_cluster", {"action": "stop", "head": "node1", "port": 6381, "grace_s": 5})
            assert rc == 0 and out["state"] == "stopped", err
            stop_s.append(time.perf_counter() - t0)
        print(f"ray {RAY_OPTIONS['ray']}: head + 1 worker over ssh, {args.repeat} rounds")
        print(f"start until both nodes show (CLI calls included): median {statistics.median(ready_s):.1f} s "
              f"(each: {', '.join(f'{x:.1f}' for x in ready_s)})")
        print(f"status: median {statistics.median(status_s):.2f} s; stop (run, ray stop --force on both, "
              f"nvidia-smi): median {statistics.median(stop_s):.1f} s")
        print(f"Ray's resident memory, head + worker: {statistics.median(rss):.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
