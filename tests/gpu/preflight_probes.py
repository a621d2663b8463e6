#!/usr/bin/env python3
"""preflight's GPU probes for real, in one command, on a machine with an NVIDIA GPU.

    python tests/gpu/preflight_probes.py [--python /path/to/env/bin/python] [--json OUT]

Runs ``preflight`` on this machine with ``gpu_probe: true`` against the interpreter given (default: this
one, which must have torch): the bf16 matmul, the flash-attn forward and the NCCL all-reduce, plus the
driver, compute capability and free-memory checks, and prints each GPU check's status and value. Exit 0
when every GPU check is ok, warn or skip (a machine without a GPU says ``skip (needs a GPU)`` and exits 0);
1 when one fails. The suite's tests never run it (no GPU there); the bench prints its numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

GPU_CHECKS = ("gpu_driver", "gpu_compute_capability", "gpu_free_memory", "gpu_matmul", "gpu_flash_attn", "gpu_nccl",
              "torch", "flash_attn")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the environment's interpreter (needs torch)")
    parser.add_argument("--json", help="also write the whole answer here")
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args(argv)
    from skill_server.app.table import TOOLS_BY_NAME

    started = time.monotonic()
    answer = TOOLS_BY_NAME["preflight"].invoke({"python": args.python, "role": "swarm_server", "gpu_probe": True,
                                                "timeout_s": args.timeout}).model_dump()
    elapsed = time.monotonic() - started
    if args.json:
        Path(args.json).write_text(json.dumps(answer, indent=1))
    report = answer["hosts"][0]
    print(answer["summary"])
    failed = []
    for check in report["checks"]:
        if check["id"] not in GPU_CHECKS:
            continue
        print(f"  {check['id']:24} {check['status']:7} {check['value']}")
        if check["status"] == "fail" and check["id"].startswith("gpu_"):
            failed.append(check["id"])
    print(f"preflight with GPU probes took {elapsed:.1f} s")
    driver = next((c for c in report["checks"] if c["id"] == "gpu_driver"), None)
    if driver is not None and str(driver["value"]).startswith("no GPU here"):
        print("no GPU here: the GPU probes skip (needs a GPU)")
        return 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
