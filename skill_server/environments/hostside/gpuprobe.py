"""GPU probes, run inside the interpreter under test (opt-in: preflight's ``gpu_probe``).

``matmul``: a 4096 x 4096 bf16 matrix product on GPU 0, checked against a float32 product of the same
inputs, with its speed. ``flash_attn``: one ``flash_attn_func`` forward on GPU 0, checked against torch's
own attention. ``nccl``: an all-reduce over two ranks, one per GPU, started as two processes of this
interpreter (one rank on a single GPU: NCCL forbids two on one device). Each prints one JSON line; a probe
that cannot run says why (no torch, no GPU, no flash-attn), never that it passed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: never evaluated on the host's Python 3.8
    from collections.abc import Callable

    #: (passed: True, False, or None when it could not run; what it measured; why it failed or was skipped)
    Outcome = tuple[bool | None, str | None, str | None]

#: One NCCL rank: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment; prints the reduced sum.
NCCL_RANK = """
import os, sys, datetime, torch, torch.distributed as dist
rank = int(os.environ["RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=int(os.environ["PROBE_TIMEOUT_S"])))
value = torch.ones(1024, device="cuda") * (rank + 1)
dist.all_reduce(value)
torch.cuda.synchronize()
print(float(value[0]), flush=True)
dist.destroy_process_group()
"""


def emit(name: str, **fields: Any) -> None:
    fields["name"] = name
    sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
    sys.stdout.flush()


def describe(exc: BaseException) -> str:
    text = "%s: %s" % (type(exc).__name__, exc)
    return text if len(text) <= 800 else text[:400] + " ... " + text[-400:]


def matmul(torch: Any) -> Outcome:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, b)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(10):
        out = torch.matmul(a, b)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - started) / 10
    reference = torch.matmul(a.float(), b.float())
    error = float(((out.float() - reference).abs().max() / reference.abs().max()).item())
    ok = bool(torch.isfinite(out).all().item()) and error < 0.05
    return ok, "%.1f TFLOP/s, max relative error %.4f" % (2 * 4096 ** 3 / seconds / 1e12, error), None


def flash_forward(torch: Any) -> Outcome:
    try:
        from flash_attn import flash_attn_func  # type: ignore[import-not-found]
    except BaseException as exc:
        return None, None, "flash_attn is not importable: " + describe(exc)
    q, k, v = (torch.randn(2, 512, 8, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           is_causal=True).transpose(1, 2)
    diff = float((out.float() - ref.float()).abs().max().item())
    return diff < 0.05, "max difference from torch's attention %.4f" % diff, None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def nccl(torch: Any, timeout_s: float) -> Outcome:
    world = min(2, torch.cuda.device_count())
    env = dict(os.environ, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               PROBE_TIMEOUT_S=str(int(max(10, timeout_s))))
    procs = [subprocess.Popen([sys.executable, "-c", NCCL_RANK], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/") for r in range(world)]
    results: list[tuple[int, str, str]] = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            return False, None, "no result within %.0f s (a hung NCCL init: NCCL_DEBUG=INFO says why)" % timeout_s
        results.append((proc.returncode, out.decode().strip(), err.decode("utf-8", "replace").strip()))
    expected = float(sum(range(1, world + 1)))
    bad = [r for r in results if r[0] != 0 or r[1] != str(expected)]
    if bad:
        return False, None, "rank exited %s: %s" % (bad[0][0], (bad[0][2].splitlines() or ["no message"])[-1][:600])
    note = "" if world > 1 else " (one GPU: a single rank; two ranks need two GPUs)"
    return True, "%d rank(s) all-reduced to %g%s" % (world, expected, note), None


def main() -> None:
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    probes = args.get("gpu_probes") or ["matmul", "flash_attn", "nccl"]
    try:
        import torch  # type: ignore[import-not-found]
    except BaseException as exc:
        for probe in probes:
            emit("gpu:" + probe, ok=None, skip="torch is not importable: " + describe(exc))
        return
    if not torch.cuda.is_available():
        for probe in probes:
            emit("gpu:" + probe, ok=None, skip="needs a GPU (torch sees none)")
        return
    runners: dict[str, Callable[[], Outcome]] = {
        "matmul": lambda: matmul(torch), "flash_attn": lambda: flash_forward(torch),
               "nccl": lambda: nccl(torch, float(args.get("nccl_timeout_s") or 60))}
    for probe in probes:
        started = time.monotonic()
        try:
            ok, value, skip = runners[probe]()
        except BaseException as exc:
            ok, value, skip = False, None, None
            emit("gpu:" + probe, ok=False, error=describe(exc), elapsed=round(time.monotonic() - started, 3))
            continue
        fields: dict[str, Any] = {"ok": ok, "value": value, "elapsed": round(time.monotonic() - started, 3)}
        if skip:
            fields["skip" if ok is None else "error"] = skip
        emit("gpu:" + probe, **fields)


if __name__ == "__main__":
    main()
