"""What a run's policies do to the run where it runs: the one place that stops it on this host.

The run monitor's policies (``policy``) act only through these primitives, so a place where runs execute
differently (a Slurm job, where the monitor runs inside the allocation) slots in its own variant here and
every policy works unchanged. ``stop_here`` is the complete stop ``stop_experiment`` does (``op_stop`` is
built on it): each role not yet ended is marked ``stopped``, its processes get Ctrl-C, a grace, SIGTERM,
SIGKILL, and what survives is recorded, then the run's tmux session is removed. It touches only the recorded
identities of its own run: the wrappers (pid plus start time) and the processes carrying its run marker.
"""

from __future__ import annotations

import json
import os

from . import files, procs, tmux
from .protocol import SESSION_REMOVED, TYPE_CHECKING

if TYPE_CHECKING:
    from .protocol import StopReply


def stop_here(exp_id: str, run_dir: str, roles: list[dict[str, object]], grace_s: float, socket_path: str,
              session_id: str | None, kill_session: bool = True) -> StopReply:
    """Stop every process of run ``exp_id`` on this host and verify; ``roles``: [{role, pid, start, pane_id}]
    as the launch recorded them."""
    wrappers: list[procs.Wrapper] = []
    recorded: list[tmux.RecordedPane] = []
    names = []
    for p in roles:
        role = str(p["role"])
        names.append(role)
        raw_pid, raw_start, raw_pane = p.get("pid"), p.get("start"), p.get("pane_id")
        pid = raw_pid if isinstance(raw_pid, int) else None
        start = raw_start if isinstance(raw_start, str) else None
        recorded.append({"pane_id": raw_pane if isinstance(raw_pane, str) else None, "pid": pid, "start": start})
        if files.read_int(os.path.join(run_dir, role + ".exit")) is None:
            try:
                files.touch(os.path.join(run_dir, role + ".stopped"))
            except OSError:
                pass
        if pid:
            wrappers.append({"role": role, "pid": pid, "start": start})
    report = procs.terminate(wrappers, exp_id + "/", grace_s)
    for role in names:  # what survived SIGKILL keeps its role "running" in every later observation
        left = [{"pid": x["pid"], "start": x["start"]} for x in report["survivors"] if x["role"] == role]
        path = os.path.join(run_dir, role + ".survivors")
        if left:
            files.write_atomic(path, json.dumps(left).encode("utf-8"), replace=True, mode=0o600)
        elif files.exists(path):
            os.unlink(path)
    codes = {role: files.read_int(os.path.join(run_dir, role + ".exit")) for role in names}
    removed = False
    if kill_session:  # the run's monitor may have removed it as the run ended
        removed = tmux.kill_run_sessions(socket_path, exp_id, session_id, recorded)[0] or files.exists(
            os.path.join(run_dir, SESSION_REMOVED))
    return {"interrupted": report["interrupted"], "terminated": report["terminated"], "killed": report["killed"],
            "survivors": report["survivors"], "exit_codes": codes, "session_removed": removed}
