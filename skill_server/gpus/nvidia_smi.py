"""The two ``nvidia-smi`` queries as host operations, and reading their answers (pure functions).

Both queries use ``--format=csv,noheader,nounits``: one line per GPU (or per compute process), values
separated by ``", "``, numbers without units. nvidia-smi writes ``[N/A]``, ``[Not Supported]``,
``[Insufficient Permissions]`` and similar bracketed words where it has no value; those become null.
The free-form name is requested last, so a name that contains ``", "`` stays whole. Output is bounded
(by the host's run op and by the counts below); lines that cannot be read are skipped and named in
the host's notes, never guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from skill_server.gpus.models import Gpu, GpuHost, GpuProcess, GpuState
from skill_server.hosts import client

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skill_server.hosts.agent.protocol import Failure, RunReply

GPU_FIELDS = ("index", "uuid", "memory.used", "memory.total", "utilization.gpu", "name")
APP_FIELDS = ("pid", "gpu_uuid", "used_memory", "process_name")
QUERY_TIMEOUT_S = 20
MAX_OUTPUT = 256 * 1024
MAX_GPUS = 256
MAX_PROCESSES = 4096
MAX_NOTES = 20
NOT_INSTALLED = ("nvidia-smi is not installed on this host (a machine without NVIDIA GPUs, a login node, or a "
                 "container without the driver tools)")


def query_ops(prefix: Sequence[str] = ()) -> list[client.Op[RunReply]]:
    """The two ``run`` ops (GPUs, then compute processes) to append to a host's request; ``prefix`` runs
    nvidia-smi through another command (a scheduler's step on a node of its job, say)."""
    fmt = "--format=csv,noheader,nounits"
    return [client.run([*prefix, "nvidia-smi", "--query-gpu=" + ",".join(GPU_FIELDS), fmt],
                       timeout_s=QUERY_TIMEOUT_S, max_output=MAX_OUTPUT),
            client.run([*prefix, "nvidia-smi", "--query-compute-apps=" + ",".join(APP_FIELDS), fmt],
                       timeout_s=QUERY_TIMEOUT_S, max_output=MAX_OUTPUT)]


def _number(text: str) -> int | None:
    """An integer value, or None for nvidia-smi's bracketed "no value" words (and anything unreadable)."""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 15:
        return int(text)
    try:  # some drivers print a decimal point for integral values
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() and 0 <= value < 2**53 else None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return " ".join(line.split())[:300]
    return ""


def run_failure(result: RunReply | Failure | None) -> str | None:
    """Why a ``run`` of nvidia-smi gave no usable output, or None when it did."""
    if result is None:
        return "no answer"
    if not result["ok"]:
        return result["error"] or "the host could not run nvidia-smi"
    error = result["error"]
    if error:
        return NOT_INSTALLED if error.startswith("not found on this host") else error
    if result["timed_out"]:
        return f"nvidia-smi did not answer within {QUERY_TIMEOUT_S} s (a hung driver or GPU?)"
    code = result["returncode"]
    if code != 0:
        message = _first_line(result["stdout"]) or _first_line(result["stderr"])
        return f"nvidia-smi failed (exit {code}): {message or 'no message'}"
    return None


@dataclass
class _Parsed:
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _rows(text: str, columns: int, what: str, limit: int) -> _Parsed:
    out = _Parsed()
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(", ", columns - 1)]
        if len(parts) != columns:
            bad += 1
            if bad <= 3:
                out.notes.append(f"unreadable {what} line: {line.strip()[:200]!r}")
            continue
        if len(out.rows) >= limit:
            out.notes.append(f"more than {limit} {what}s listed; the rest are left out")
            break
        out.rows.append(parts)
    if bad > 3:
        out.notes.append(f"{bad - 3} more unreadable {what} lines")
    return out


def _free_fraction(used: int | None, total: int | None) -> float | None:
    if used is None or total is None or total <= 0:
        return None
    return round(min(1.0, max(0.0, (total - used) / total)), 6)


def parse_gpus(text: str) -> tuple[list[Gpu], list[str]]:
    """GPUs from ``--query-gpu`` output (fields as ``GPU_FIELDS``); lines without an index are skipped."""
    parsed = _rows(text, len(GPU_FIELDS), "GPU", MAX_GPUS)
    gpus = []
    for index, uuid, used, total, util, name in parsed.rows:
        number = _number(index)
        if number is None or not uuid:
            parsed.notes.append(f"GPU line without an index or uuid: {f'{index}, {uuid}, {name}'[:200]!r}")
            continue
        used_mib, total_mib = _number(used), _number(total)
        gpus.append(Gpu(index=number, uuid=uuid, name=name, memory_used_mib=used_mib, memory_total_mib=total_mib,
                        utilization_pct=_number(util), free_fraction=_free_fraction(used_mib, total_mib),
                        processes=[]))
    return gpus, parsed.notes


def parse_processes(text: str) -> tuple[list[tuple[str, GpuProcess]], list[str]]:
    """(gpu uuid, process) pairs from ``--query-compute-apps`` output (fields as ``APP_FIELDS``)."""
    parsed = _rows(text, len(APP_FIELDS), "process", MAX_PROCESSES)
    out = []
    for pid, uuid, used, name in parsed.rows:
        number = _number(pid)
        if number is None:
            parsed.notes.append(f"process line without a pid: {f'{pid}, {uuid}, {name}'[:200]!r}")
            continue
        out.append((uuid, GpuProcess(pid=number, used_memory_mib=_number(used), name=name)))
    return out, parsed.notes


def host_gpus(host: str, gpu_result: RunReply | Failure | None, app_result: RunReply | Failure | None) -> GpuHost:
    """What one host's two query results say (the host answered; see ``unreachable`` otherwise)."""
    failure = run_failure(gpu_result)
    if failure is not None or gpu_result is None or not gpu_result["ok"]:
        status: GpuState = "no_nvidia_smi" if failure == NOT_INSTALLED else "nvidia_smi_failed"
        return GpuHost(host=host, status=status, reachable=True, reason=failure, gpus=None)
    gpus, notes = parse_gpus(gpu_result["stdout"])
    if gpu_result["truncated"]:
        notes.append(f"nvidia-smi's GPU list was cut at {MAX_OUTPUT} bytes")
    reason = None
    app_failure = run_failure(app_result)
    if app_failure is not None or app_result is None or not app_result["ok"]:
        reason = f"the compute-process query failed: {app_failure}"
        for gpu in gpus:
            gpu.processes = None
    else:
        pairs, app_notes = parse_processes(app_result["stdout"])
        notes += app_notes
        if app_result["truncated"]:
            notes.append(f"nvidia-smi's process list was cut at {MAX_OUTPUT} bytes")
        by_uuid = {gpu.uuid: gpu for gpu in gpus}
        for uuid, proc in pairs:
            holder = by_uuid.get(uuid)
            if holder is None or holder.processes is None:
                notes.append(f"pid {proc.pid} ({proc.name}) uses GPU {uuid!r}, which the GPU list does not show")
                continue
            holder.processes.append(proc)
    if len(notes) > MAX_NOTES:
        notes = notes[:MAX_NOTES] + [f"{len(notes) - MAX_NOTES} more notes left out"]
    return GpuHost(host=host, status="ok" if gpus else "no_gpu", reachable=True, reason=reason, gpus=gpus,
                   notes=notes)


def unreachable(host: str, reason: str) -> GpuHost:
    return GpuHost(host=host, status="unreachable", reachable=False, reason=reason, gpus=None)
