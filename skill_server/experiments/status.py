"""experiment_status: states, new log lines by byte cursor, errors and metrics. Read-only.

Cursors: one byte offset per process log (``"1234"`` or ``"1234,88"``). Without ``since`` a call continues
from the cursor stored by the previous status or wait call of that experiment; an explicit ``since``
reads independently. Lines come from the bytes after the cursor (at most 200 lines and 16 KB), asked
for in the same per-host round trip as everything else.
"""

from __future__ import annotations

from typing import Any

from skill_server.errors import ToolInputError
from skill_server.experiments import blueprint as bp
from skill_server.experiments import logs
from skill_server.experiments.models import (
    ErrorHit,
    ExperimentStatus,
    ProcessInfo,
    RegistryProblem,
    StatusInput,
    StatusOutput,
)
from skill_server.experiments.observe import View, observe
from skill_server.experiments.signatures import SIGNATURES_BY_NAME
from skill_server.experiments.store import Registry, Row, open_registry

MAX_CURSOR_OFFSET = 2**62


def parse_cursor(text: str, n: int, field: str) -> list[int]:
    if text == "":
        return [0] * n
    parts = text.split(",")
    if len(parts) != n or not all(p.isascii() and p.isdigit() and len(p) <= 19 for p in parts):
        raise ToolInputError(f"{text!r} is not a cursor of this experiment (expected {n} comma-separated offsets)",
                             field=field)
    offsets = [int(p) for p in parts]
    if any(o > MAX_CURSOR_OFFSET for o in offsets):
        raise ToolInputError(f"{text!r} is not a cursor of this experiment (offset too large)", field=field)
    return offsets


def stored_cursor(row: Row) -> list[int]:
    try:
        return parse_cursor(row.read_cursor, len(row.processes), "cursor")
    except ToolInputError:
        return [0] * len(row.processes)


def line_reads(row: Row, offsets: list[int], max_lines: int) -> list[list[tuple[int, int]]]:
    """The extra read per process that yields its new lines (none when no lines are wanted)."""
    if max_lines == 0:
        return [[] for _ in row.processes]
    budget = max(1024, logs.MAX_BYTES // len(row.processes))
    return [[(offsets[i], budget)] for i in range(len(row.processes))]


def lines_from(view: View, offsets: list[int], max_lines: int, read_index: int = 0
               ) -> tuple[list[str], list[int], int]:
    """(lines, new cursor, skipped bytes) from the line reads that came back with ``view``."""
    if max_lines == 0:
        return [], offsets, 0
    n = len(view.procs)
    out: list[str] = []
    new = list(offsets)
    skipped = 0
    for i, p in enumerate(view.procs):
        if len(p.reads) <= read_index:
            continue  # host unreachable: the cursor stays where it was
        chunk = p.reads[read_index]
        new[i] = chunk.end
        skipped += chunk.skipped
        lines = logs.split_lines(chunk.text)
        if len(lines) > max_lines:
            skipped += sum(len(x.encode()) + 1 for x in lines[:-max_lines])
            lines = lines[-max_lines:]
        out += [f"[{p.role}] {x}" for x in lines] if n > 1 else lines
    if len(out) > max_lines:
        out = out[-max_lines:]
    return out, new, skipped


def status_fields(view: View, lines: list[str], cursor: list[int], skipped: int) -> dict[str, Any]:
    """Every ``ExperimentStatus`` field of one view (wait and stop add their own on top)."""
    row = view.row
    max_time = int(row.spec.get("max_time_s") or bp.DEFAULT_MAX_TIME_S)
    first_step_s = float(row.spec.get("first_step_timeout_s") or bp.DEFAULT_FIRST_STEP_S)
    scan = view.scan
    errors = []
    for name, hit in scan.errors.items():
        sig = SIGNATURES_BY_NAME.get(name)
        if sig is None:
            continue
        errors.append(ErrorHit(signature=name, title=sig.title, severity=sig.severity, line=str(hit.get("line", "")),
                               count=int(hit.get("count", 0)), hint=sig.hint, role=hit.get("role")))
    errors.sort(key=lambda e: (e.severity != "error", -e.count))
    overdue = not scan.first_step_seen and view.elapsed_s > first_step_s
    if scan.first_step_seen and scan.first_step_at is not None and scan.first_step_at - row.created > first_step_s:
        overdue = True
    hosts = row.spec.get("hosts") or {}
    return dict(
        id=row.id, session=row.session, socket=row.socket, host=row.host, attach=row.spec.get("attach", ""),
        state=view.state, exit_code=view.exit_code, started_at=row.started_at, elapsed_s=round(view.elapsed_s, 1),
        time_left_s=round(max(0.0, max_time - view.elapsed_s), 1) if view.state == "running" else None,
        max_time_s=max_time, first_step_seen=scan.first_step_seen, first_step_overdue=overdue,
        global_step=scan.global_step, last_metrics=scan.last_metrics, errors=errors, lines=lines,
        cursor=",".join(str(c) for c in cursor), skipped_bytes=skipped, unscanned_bytes=scan.unscanned_bytes,
        processes=[ProcessInfo(role=p.role, host=p.proc.host, state=p.state, exit_code=p.exit_code,  # type: ignore[arg-type]
                               log_path=p.log_path, pid=p.proc.pid,
                               attach=(hosts.get(p.proc.host) or {}).get("attach", ""), reason=p.reason)
                   for p in view.procs],
        log_path=view.procs[0].log_path if view.procs else "", result_dir=row.spec.get("result_dir", ""),
        note=view.note,
    )


def find(reg: Registry, key: str, field: str = "id") -> Row:
    row = reg.find(key)
    if row is None:
        raise ToolInputError(f"no experiment {key!r} in the registry (ids and session names are accepted)",
                             field=field)
    return row


def observe_with_lines(reg: Registry, rows: list[Row], since: str | None, max_lines: int) -> list[dict[str, Any]]:
    """Observe ``rows`` (one round trip per host) and build their status fields with new lines."""
    starts: dict[str, list[int]] = {}
    for row in rows:
        starts[row.id] = parse_cursor(since, len(row.processes), "since") if since is not None else stored_cursor(row)
    views = observe(reg, rows, extra_reads=lambda row: line_reads(row, starts[row.id], max_lines))
    out = []
    for view in views:
        offsets = starts[view.row.id]
        lines, new, skipped = lines_from(view, offsets, max_lines)
        if since is None and new != offsets:
            reg.save_cursor(view.row.id, ",".join(str(c) for c in new))
        out.append(status_fields(view, lines, new, skipped))
    return out


def experiment_status(inp: StatusInput) -> StatusOutput:
    if inp.since is not None and inp.id is None:
        raise ToolInputError("a cursor belongs to one experiment: give id too", field="since")
    problems: list[RegistryProblem] = []
    with open_registry() as reg:
        if inp.id is not None:
            rows = [find(reg, inp.id)]
            max_lines = logs.MAX_LINES if inp.max_lines is None else inp.max_lines
        else:
            rows, corrupt = reg.all_with_problems(inp.limit or 50)
            problems = [RegistryProblem(id=c.exp_id, message=c.message) for c in corrupt]
            max_lines = 20 if inp.max_lines is None else inp.max_lines
        fields = observe_with_lines(reg, rows, inp.since, max_lines)
    return StatusOutput(experiments=[ExperimentStatus(**f) for f in fields], problems=problems)
