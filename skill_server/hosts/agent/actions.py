"""What a run's policies do to the run where it runs: the one place that stops and relaunches it on this host.

The run monitor's policies (``policy``) act only through these two primitives, so a place where runs execute
differently (a Slurm job, where the monitor runs inside the allocation) slots in its own variant here and
every policy works unchanged:

* ``stop_here`` is the complete stop ``stop_experiment`` does (``op_stop`` is built on it): each role not yet
  ended is marked ``stopped``, its processes get Ctrl-C, a grace, SIGTERM, SIGKILL, and what survives is
  recorded, then the run's tmux session is removed. It touches only the recorded identities of its own run:
  the wrappers (pid plus start time) and the processes carrying its run marker.
* ``cancel_own_job`` is ``stop_here`` for a Slurm run, whose monitor runs inside the job: the roles are marked
  ``stopped`` (``mark_stopped``), then the job cancels itself (``scancel $SLURM_JOB_ID``); Slurm ends its
  processes (SIGTERM, SIGKILL after KillWait), and the monitor with them.
* ``relaunch_here`` starts the same processes again as a new run (its own id, run directory, session and
  monitor): the launch request that started the run here (``LAUNCH_REQUEST``, kept by ``op_launch``) goes
  through the same ``launch`` op a controller sends, in a child agent process, with the new id.
"""

from __future__ import annotations

import json
import os

from . import files, procs, tmux
from .files import AgentError
from .protocol import PROTOCOL_VERSION, SESSION_REMOVED, TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .protocol import StopReply

#: In a run directory: the launch request that started the run on this host.
LAUNCH_REQUEST = "launch.json"
#: In a run directory: ``stop_experiment`` was called (``op_stop``); a resume waiting for its backoff is cancelled.
STOP_REQUESTED = "stop.requested"
RELAUNCH_TIMEOUT_S = 120.0
#: The child agent a relaunch runs: this version's install, one request on stdin, the reply on stdout.
_AGENT = "import sys; sys.path.insert(0, sys.argv[1]); from ajs_agent import ops; sys.exit(ops.main(sys.argv[1:]))"


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
    if kill_session:  # the run's monitor may have removed it as the run ended, maybe a moment ago
        gone, none_left = tmux.kill_run_sessions(socket_path, exp_id, session_id, recorded)
        removed = gone or none_left or files.exists(os.path.join(run_dir, SESSION_REMOVED))
    return {"interrupted": report["interrupted"], "terminated": report["terminated"], "killed": report["killed"],
            "survivors": report["survivors"], "exit_codes": codes, "session_removed": removed}


def mark_stopped(run_dir: str, roles: list[str]) -> None:
    """Each role without an exit code is marked ``stopped`` (what it ends with is then a stop, not a failure)."""
    for role in roles:
        if files.read_int(os.path.join(run_dir, role + ".exit")) is None:
            try:
                files.touch(os.path.join(run_dir, role + ".stopped"))
            except OSError:
                pass


def cancel_own_job(run_dir: str) -> str:
    """Cancel the Slurm job this process runs in (``SLURM_JOB_ID``, else the run's ``job.id``); its id. Raises
    ``AgentError`` with scancel's word when it refused (its exit code says nothing of a job it does not know,
    but this one runs)."""
    from . import slurm

    job_id = os.environ.get("SLURM_JOB_ID") or slurm.job_of(run_dir)
    if not job_id:
        raise AgentError("no Slurm job id here (SLURM_JOB_ID unset, no job.id)")
    code, _, err = slurm.client(["scancel", job_id])
    if code != 0:
        raise AgentError("scancel %s: %s" % (job_id, (err.strip().splitlines() or ["exit %d" % code])[-1]))
    return job_id


def relaunch_here(run_dir: str, new_id: str, policy: Mapping[str, Any]) -> dict[str, Any]:
    """Start the processes the launch recorded in ``run_dir`` again as run ``new_id`` (same commands, workdirs,
    environment, logs and session name; ``policy`` replaces the monitor's policy), through the ``launch``
    op; its reply (``LaunchStarted``). Raises ``AgentError`` with one line when it did not start."""
    import subprocess
    import sys

    from . import program

    text = files.read_small(os.path.join(run_dir, LAUNCH_REQUEST), 16 * 1024 * 1024)
    try:
        req = json.loads(text or "")
        if not isinstance(req, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        raise AgentError("cannot read the launch request %s: %s" % (LAUNCH_REQUEST, exc)) from None
    monitor = dict(req.get("monitor") or {})
    monitor["policy"] = dict(policy)
    req.update(exp_id=new_id, dry_run=False, monitor=monitor)
    base = program.install_dir()
    if not os.path.isfile(os.path.join(base, program.PACKAGE, "ops.py")):
        raise AgentError("the host agent is not installed under %s" % base)
    body = json.dumps({"v": PROTOCOL_VERSION, "ops": [req], "budget_s": RELAUNCH_TIMEOUT_S}).encode("utf-8")
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _AGENT, base], input=body, capture_output=True,
                              timeout=RELAUNCH_TIMEOUT_S + 10, cwd=run_dir, start_new_session=True, check=False)
        reply = json.loads(done.stdout.decode("utf-8", "replace") or "{}")
        result = (reply.get("results") or [{}])[0]
    except (OSError, ValueError, subprocess.SubprocessError, IndexError, AttributeError) as exc:
        raise AgentError("the relaunch did not answer: %s" % exc) from None
    if not isinstance(result, dict) or not result.get("ok"):
        said = result.get("error") if isinstance(result, dict) else None
        raise AgentError("the relaunch was refused: %s" % (said or reply.get("error") or "no answer"))
    return result
