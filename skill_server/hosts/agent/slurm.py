"""Slurm's commands, seen from the login node: submit a run's batch job, query it, cancel it (stdlib only; the
Slurm backend, ``backend_slurm``, is built on them).

The run directory is on the filesystem every node shares (the user's home): the batch script
(``job.sh``), generated there, runs each process's wrapper (pid, exit and log files as under tmux) inside
the allocation, and records the job's own state in ``job.json`` (atomically): ``RUNNING`` with its nodes
when it starts, and its end (``COMPLETED``, ``FAILED`` with the exit code, or, when Slurm signalled it,
``CANCELLED``/``TIMEOUT`` as ``scontrol`` names it then). Without accounting storage Slurm forgets a
finished job ``MinJobAge`` after its end (``scontrol`` then says "Invalid job id specified") and
``sacct`` has nothing, so the job's file is what is left; while Slurm still knows the job, its word wins and
whoever sees a final state first writes it to ``job.json`` (``source: slurm``). scancel's exit code says
nothing (0 for an unknown job), so a cancel is verified by looking again.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time

from . import deadline, files, rundir
from .files import AgentError
from .protocol import RUN_MARKER, TYPE_CHECKING
from .rundir import (
    BEAT,
    DISCARDED,
    EXIT,
    LOCK,
    MARKERS,
    PID,
    RESTART,
    STOP_HERE,
    SUPERVISOR_BEAT,
    SUPERVISOR_LOCK,
    SURVIVORS,
    RunDir,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .protocol import JobFacts

#: In a Slurm run's directory: the batch script, the job id sbatch gave, the job's own record, its output, and
#: sbatch's refusal (nothing was submitted).
SCRIPT, JOB_ID, RECORD, OUTPUT, REFUSED = "job.sh", "job.id", "job.json", "job.out", "job.refused"
#: Slurm's JobStates that are over (the rest are PENDING, RUNNING, CONFIGURING, COMPLETING, SUSPENDED, ...).
#: How long a monitor in the job waits for the batch script to record why its processes were signalled.
RECORD_WAIT_S = 3.0
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
         "DEADLINE", "SPECIAL_EXIT", "REVOKED")
QUEUED = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED")
CLIENT_TIMEOUT_S = 20.0
_FIELD = re.compile(r"([A-Za-z][\w/:]*)=(\S*)")
#: sbatch options the tool sets itself (extra_args must not set them again): the job's name (a rollback finds the
#: job by it), its output and cwd (the run directory), its time limit (the run's max time), its script; and an
#: array, which would run the whole run once per task in one run directory, each writing the same files.
_OWN = ("--output", "--error", "--chdir", "--job-name", "--time", "--parsable", "--wrap", "--array")
#: Their short forms, and sbatch's other short options that take a value (after one of those, the rest of a
#: cluster like ``-vJname`` is the value).
_OWN_SHORT = "oeDJta"
_VALUE_SHORT = "AabBcCdDeFGiJLmMnNopqSstwx"


def client(argv: list[str], cap: float = CLIENT_TIMEOUT_S) -> tuple[int, str, str]:
    """A Slurm client command, bounded; (exit code, stdout, stderr); 127 when the command is missing."""
    limit = deadline.left(cap)
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=limit, check=False)
    except FileNotFoundError:
        return 127, "", "%s is not installed on this host (is this the cluster's login node?)" % argv[0]
    except subprocess.TimeoutExpired:
        return 124, "", "%s did not answer in %.0f s" % (argv[0], limit)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def check_clients() -> None:
    """Refuse a Slurm launch on a host without sbatch (or bash for the batch script)."""
    import shutil

    for tool in ("sbatch", "squeue", "scontrol", "scancel", "bash"):
        if shutil.which(tool) is None:
            raise AgentError("%s is not installed on this host (a Slurm run is submitted from the cluster's login "
                             "node)" % tool, "host", kind="no_slurm")


def options(slurm: Mapping[str, Any], exp_id: str, rdir: str, max_time_s: int) -> list[str]:
    """sbatch's options for this run: the job's name is the run's id (a rollback finds it by that), its output
    and cwd are the run directory, its time limit the run's max time (whole minutes, rounded up)."""
    out = ["--parsable", "--job-name=" + exp_id, "--output=" + os.path.join(rdir, OUTPUT), "--chdir=" + rdir,
           "--time=%d" % max(1, -(-int(max_time_s) // 60)), "--nodes=%d" % int(slurm.get("nodes") or 1)]
    for key, flag in (("partition", "--partition"), ("account", "--account"), ("qos", "--qos"),
                      ("mem", "--mem"), ("cpus_per_task", "--cpus-per-task")):
        if slurm.get(key) is not None:
            out.append("%s=%s" % (flag, slurm[key]))
    if slurm.get("gpus_per_node"):
        out.append("--gres=gpu:%d" % int(slurm["gpus_per_node"]))
    for arg in slurm.get("extra_args") or []:
        if not isinstance(arg, str) or not arg.startswith("-"):
            raise AgentError("each extra argument is one sbatch option starting with '-' (got %r)" % (arg,),
                             "slurm.extra_args")
        own = _sets_own(arg)
        if own is not None:
            raise AgentError("%s sets %s, which the tool sets (the job's name, its files in the run directory, the "
                             "run's max time as its time limit) or a run cannot take (an array would run it once per "
                             "task in one run directory)" % (arg, own), "slurm.extra_args")
        out.append(arg)
    return out


def _sets_own(arg: str) -> str | None:
    """The option of ``_OWN`` that ``arg`` sets, in any form sbatch reads: ``--time=1``, an abbreviation
    (``--ti=1``, getopt accepts any unambiguous prefix), a short form with its value attached or after a space
    (``-Jname``, ``-o path``), or inside a cluster of short options (``-vJname``); None when it sets none."""
    if arg.startswith("--"):
        name = arg[2:].split("=", 1)[0].split(None, 1)[0]
        return next(("--" + o[2:] for o in _OWN if name and o[2:].startswith(name)), None)
    for letter in arg[1:]:
        if letter in _OWN_SHORT:
            return "-" + letter
        if letter in _VALUE_SHORT or not letter.isalpha():
            return None
    return None


#: How long the batch script waits, once the processes have ended, for the run's monitor to finish.
MONITOR_END_WAIT_S = 60
#: Of a multi-node run: how long the batch script waits for every node to join Ray before it starts the processes.
RAY_JOIN_S = 300
#: A node's address for Ray: Slurm's NodeAddr of the node the command runs on, resolved to an IP.
_NODE_IP = ("$(%(py)s -c 'import socket, sys; print(socket.gethostbyname(sys.argv[1]))' "
            "\"$(scontrol show node \"$SLURMD_NODENAME\" -o | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)\")")


def _ray_lines(ray: str, python: str, rdir: str) -> list[str]:
    """A run on several nodes: Ray's head on this (the first) node, a worker on each other node (one
    ``srun --overlap`` step), then wait (bounded) until ``ray status`` counts every node; RAY_ADDRESS for the
    processes. Each node joins with its own NodeAddr (Ray's own guess of an address can be one others cannot
    reach). Slurm ends Ray with the job."""
    q = shlex.quote
    ip = _NODE_IP % {"py": q(python)}
    head_log, workers_log = q(os.path.join(rdir, "ray-head.log")), q(os.path.join(rdir, "ray-workers.log"))
    port = "$(%s -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); print(s.getsockname()[1])')" % q(python)
    worker = "exec %s start --address=\"$0\" --node-ip-address=%s --block" % (q(ray), ip)
    return [
        "__ajs_ip=" + ip,
        "__ajs_port=" + port,
        "export RAY_ADDRESS=\"$__ajs_ip:$__ajs_port\"",
        "echo \"starting Ray on $SLURM_JOB_NUM_NODES nodes, head at $RAY_ADDRESS\"",
        "%s start --head --node-ip-address=\"$__ajs_ip\" --port=\"$__ajs_port\" --block > %s 2>&1 &"
        % (q(ray), head_log),
        "__ajs_until=$((SECONDS + %d))" % RAY_JOIN_S,
        "until %s status --address=\"$RAY_ADDRESS\" >/dev/null 2>&1 || [ \"$SECONDS\" -ge \"$__ajs_until\" ]; "
        "do sleep 1; done" % q(ray),
        "srun --nodes=$((SLURM_JOB_NUM_NODES - 1)) --ntasks-per-node=1 --overlap --exclude=\"$SLURMD_NODENAME\" "
        "bash -c %s \"$RAY_ADDRESS\" > %s 2>&1 &" % (q(worker), workers_log),
        "until [ \"$(%s status --address=\"$RAY_ADDRESS\" 2>/dev/null | grep -c ' node_')\" -ge "
        "\"$SLURM_JOB_NUM_NODES\" ]; do" % q(ray),
        "  if [ \"$SECONDS\" -ge \"$__ajs_until\" ]; then echo 'not every node joined Ray within %d s (see "
        "ray-workers.log)'; __ajs_record FAILED 1:0 RayJoin; exit 1; fi" % RAY_JOIN_S,
        "  sleep 1",
        "done",
        "echo \"Ray has $SLURM_JOB_NUM_NODES nodes\"",
    ]


def _requeued_lines(run: RunDir, logs: Mapping[str, str]) -> list[str]:
    """Slurm requeued the job (``SLURM_RESTART_COUNT`` > 0: it runs again, the same run): what the previous run
    left per process (its exit code, pid, markers) goes to ``requeued.<N>/``, with the locks of its monitor and
    supervisor (which fences them off, should they still run), and ``restart.json`` gives the new monitor each
    log's size now, so that it watches this run's output only (``runstate.new_life``)."""
    q = shlex.quote
    moved = [role + suffix for role in logs for suffix in (EXIT, PID, SURVIVORS)]
    moved += [role + "." + marker for role in logs for marker in MARKERS]
    moved += [LOCK, SUPERVISOR_LOCK, BEAT, SUPERVISOR_BEAT, STOP_HERE]
    sizes = ", ".join('%s: %s' % (json.dumps(role), "$(stat -c %%s -- %s 2>/dev/null || echo 0)" % q(path))
                      for role, path in logs.items())
    return [
        "if [ \"$__ajs_restarts\" -gt 0 ]; then",
        "  __ajs_old=\"$__ajs_run/requeued.$__ajs_restarts\"",
        "  mkdir -p \"$__ajs_old\"",
        "  for __ajs_f in %s; do [ -e \"$__ajs_run/$__ajs_f\" ] && mv -f \"$__ajs_run/$__ajs_f\" \"$__ajs_old/\"; done"
        % " ".join(q(m) for m in moved),
        "  printf '{\"generation\": %%s, \"offsets\": {%%s}}\\n' \"$__ajs_restarts\" \"%s\" > \"$__ajs_run/%s.tmp\" && "
        "mv -f \"$__ajs_run/%s.tmp\" \"$__ajs_run/%s\"" % (sizes.replace('"', '\\"'), RESTART, RESTART, RESTART),
        "  echo \"Slurm requeued job $SLURM_JOB_ID (restart $__ajs_restarts): the run starts again\"",
        "fi",
    ]


def render(exp_id: str, rdir: str, roles: list[str], ray: str | None = None, python: str = "python3",
           monitor: str | None = None, logs: Mapping[str, str] | None = None) -> str:
    """The batch script: refuse to start a run that was rolled back, set aside what a previous run of the job left
    when Slurm requeued it (``logs``: each role's log), record RUNNING and the nodes, start the run's monitor
    (``monitor``: its shell line; it detaches and watches the job's processes on this node), start Ray across the
    nodes (``ray``: a run on several nodes), start each process's wrapper (with the run's marker), wait for all,
    and record the end in ``job.json``. A SIGTERM is recorded as Slurm says why: the time limit (``TIMEOUT``), a
    requeue (``REQUEUED``: its ``Restarts`` moved past this run's), else a cancel (``CANCELLED``)."""
    q = shlex.quote
    run = RunDir(rdir)
    lines = [
        "#!/bin/bash",
        "# agentjet-swarm-skill batch script of experiment %s. Generated; do not edit." % exp_id,
        "__ajs_run=" + q(rdir),
        "__ajs_signalled=",
        "__ajs_restarts=${SLURM_RESTART_COUNT:-0}",
        "__ajs_record() {  # STATE EXITCODE REASON: job.json, atomically",
        "  printf '{\"job_id\": \"%s\", \"state\": \"%s\", \"exit_code\": \"%s\", \"reason\": \"%s\", "
        "\"nodes\": \"%s\", \"source\": \"job\", \"restarts\": %s, \"at\": %s}\\n' \"$SLURM_JOB_ID\" \"$1\" "
        "\"$2\" \"$3\" \"$SLURM_JOB_NODELIST\" \"$__ajs_restarts\" \"$(date +%s)\" > \"$__ajs_run/job.json.tmp\" && "
        "mv -f \"$__ajs_run/job.json.tmp\" \"$__ajs_run/job.json\"",
        "}",
        "__ajs_term() {  # scancel, a requeue and the time limit send SIGTERM first: record which, as Slurm says",
        "  __ajs_signalled=1",
        "  __ajs_why=$(scontrol show job -o \"$SLURM_JOB_ID\" 2>/dev/null)",
        "  case \"$__ajs_why\" in *Reason=TimeLimit*) __ajs_record TIMEOUT 0:15 TimeLimit;; "
        "*\" Restarts=$__ajs_restarts \"*|'') __ajs_record CANCELLED 0:15 None;; "
        "*) __ajs_record REQUEUED 0:15 Requeued;; esac",
        "}",
        "trap __ajs_term TERM",
        "trap : INT",
        "if [ -e \"$__ajs_run/%s\" ]; then echo 'this launch was rolled back before the job started'; "
        "__ajs_record CANCELLED 0:0 RolledBack; exit 0; fi" % DISCARDED,
        *_requeued_lines(run, logs or {}),
        "__ajs_record RUNNING 0:0 None",
        *([monitor] if monitor else []),
        *(_ray_lines(ray, python, rdir) if ray else []),
        "__ajs_pids=()",
    ]
    for role in roles:
        lines.append("env %s=%s bash %s &" % (RUN_MARKER, q(exp_id + "/" + role), q(run.of(role, rundir.SCRIPT))))
        lines.append("__ajs_pids+=($!)")
    lines += [
        "for __ajs_p in \"${__ajs_pids[@]}\"; do",
        "  wait \"$__ajs_p\"",
        "  while kill -0 \"$__ajs_p\" 2>/dev/null; do wait \"$__ajs_p\"; done  # a trapped signal ends wait early",
        "done",
        "__ajs_code=0",
    ]
    for role in roles:  # the first non-zero exit code of a process is the job's
        path = q(run.of(role, EXIT))
        lines.append("if [ \"$__ajs_code\" = 0 ]; then __ajs_code=$(cat %s 2>/dev/null); "
                     "case \"$__ajs_code\" in ''|*[!0-9]*) __ajs_code=1;; esac; fi" % path)
    lines += [
        "if [ -z \"$__ajs_signalled\" ]; then",
        "  if [ \"$__ajs_code\" = 0 ]; then __ajs_record COMPLETED 0:0 None; "
        "else __ajs_record FAILED \"$__ajs_code:0\" NonZeroExitCode; fi",
        "fi",
        # the job's end ends what runs in its cgroup: give the monitor (holding its lock) the time to read the
        # logs to their end, tell the notify command and collect (bounded; at once when it is gone)
        "if command -v flock >/dev/null 2>&1; then flock -w %d \"$__ajs_run/%s\" true 2>/dev/null; fi"
        % (MONITOR_END_WAIT_S, LOCK),
        "exit \"$__ajs_code\"",
    ]
    return "\n".join(lines) + "\n"


def ray_for(slurm: Mapping[str, Any], path_prepend: str | None) -> str | None:
    """The ``ray`` a run on several nodes starts (beside the run's interpreter, else on PATH); None for one
    node; refused when there is none."""
    import shutil

    if int(slurm.get("nodes") or 1) <= 1:
        return None
    beside = os.path.join(path_prepend, "ray") if path_prepend else None
    found = beside if beside and os.access(beside, os.X_OK) else shutil.which("ray")
    if found is None:
        raise AgentError("a run on several nodes starts Ray across them: no ray beside python or on PATH here",
                         "slurm.nodes")
    return found


def submit(slurm: Mapping[str, Any], exp_id: str, rdir: str, logs: Mapping[str, str], max_time_s: int,
           ray: str | None = None, monitor: str | None = None) -> str:
    """Write the batch script and submit it (``logs``: role -> its log); the job id (also written to ``job.id``)."""
    import sys

    argv = ["sbatch"] + options(slurm, exp_id, rdir, max_time_s)
    script = os.path.join(rdir, SCRIPT)
    text = render(exp_id, rdir, list(logs), ray=ray, python=sys.executable, monitor=monitor, logs=logs)
    files.write_atomic(script, text.encode("utf-8"), replace=False, mode=0o700)
    code, out, err = client(argv + [script], 60.0)
    if code != 0:
        said = (err.strip().splitlines() or ["exit %d" % code])[-1]
        if "submission failed" in said and "timed out" not in said:  # its own refusal: nothing was submitted
            files.write_atomic(os.path.join(rdir, REFUSED), (said + "\n").encode("utf-8"), replace=True, mode=0o600)
        raise AgentError("sbatch refused the job: %s" % said, "slurm")
    job_id = out.strip().split(";")[0]
    if not job_id.isdigit():
        raise AgentError("sbatch answered no job id: %r" % out.strip()[:200], "slurm")
    files.write_atomic(os.path.join(rdir, JOB_ID), (job_id + "\n").encode("ascii"), replace=True, mode=0o600)
    return job_id


def _show(job_id: str) -> dict[str, str] | None | str:
    """``scontrol show job -o``'s fields; None once Slurm has forgotten the job; a string: why it cannot say."""
    code, out, err = client(["scontrol", "show", "job", "-o", job_id])
    if code != 0:
        if "Invalid job id" in err:
            return None
        return (err.strip().splitlines() or ["scontrol exit %d" % code])[-1]
    return dict(_FIELD.findall(out))


def record(rdir: str) -> dict[str, Any] | None:
    """The job's own ``job.json`` (None when missing or unreadable)."""
    try:
        data = json.loads(files.read_small(os.path.join(rdir, RECORD), 64 * 1024) or "null")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _write_record(rdir: str, facts: JobFacts) -> None:
    """Slurm's word on the end into ``job.json``, so that it outlives Slurm's memory of the job."""
    data = {"job_id": facts["job_id"], "state": facts["state"], "exit_code": facts["exit_code"],
            "reason": facts["reason"], "nodes": facts["nodes"], "source": "slurm", "at": int(time.time())}
    try:
        files.write_atomic(os.path.join(rdir, RECORD), json.dumps(data).encode("utf-8"), replace=True, mode=0o600)
    except (AgentError, OSError):
        pass


def query(job_id: str, rdir: str) -> JobFacts:
    """What is known of the job: Slurm's word while it remembers the job (written to ``job.json`` once it is
    final), else the job's own record; a job Slurm forgot whose record was cut short is judged from what remains
    (``judged``); ``error`` says why neither could tell."""
    mine = record(rdir)
    if mine is not None and mine.get("source") in ("slurm", "judged"):
        return _facts(job_id, mine, "record")
    shown = _show(job_id)
    if isinstance(shown, dict):
        facts = facts_of(job_id, shown.get("JobState", "UNKNOWN"), shown.get("Reason", "None"),
                         shown.get("ExitCode", ""), _nodes(shown.get("NodeList", "")), "slurm",
                         restarts=_count(shown.get("Restarts")))
        if facts["state"] in FINAL:
            _write_record(rdir, facts)
        return facts
    if mine is not None:
        if shown is None and mine.get("state") not in FINAL:
            return judged(job_id, rdir, mine)
        facts = _facts(job_id, mine, "record")
        if shown is not None and facts["state"] not in FINAL:
            facts["error"] = shown
        return facts
    if shown is None:  # forgotten, and the job never wrote a word: it never started (or its node died at once)
        return facts_of(job_id, "UNKNOWN", "None", "", "", "none")
    return facts_of(job_id, "UNKNOWN", "None", "", "", "none", error=shown)


#: slurmstepd's own words in a job's output, newest first wins: the end it says, and why.
_SAID = (("DUE TO TIME LIMIT", "TIMEOUT", "TimeLimit"), ("DUE TO NODE FAILURE", "NODE_FAIL", "NodeFail"),
         ("DUE TO PREEMPTION", "PREEMPTED", "Preempted"), ("oom-kill", "OUT_OF_MEMORY", "OutOfMemory"),
         ("CANCELLED AT", "CANCELLED", "None"))
#: The tools' word for a job Slurm no longer knows whose own record was cut short and nothing of it runs.
LOST = "LOST"


def judged(job_id: str, rdir: str, mine: Mapping[str, Any]) -> JobFacts:
    """A job Slurm no longer knows (it forgot it after ``MinJobAge``, or its controller lost it) whose own record
    never said how it ended (``RUNNING``: its batch shell was killed without a word, by the OOM killer, a node's
    reboot, a SIGKILL): judged from what remains. While the run's monitor still holds its lock something of it
    runs on its node: still running, with the reason. Otherwise its end is what slurmstepd wrote in the job's
    output, else ``LOST``; the judgement is written to ``job.json`` (``source: judged``), so that every later call
    says the same."""
    from .heartbeat import lock_free

    if not lock_free(os.path.join(rdir, LOCK)):
        return facts_of(job_id, str(mine.get("state") or "RUNNING"), "None", "", str(mine.get("nodes") or ""),
                        "record", error="Slurm no longer knows job %s, but its monitor still runs on its node" % job_id)
    tail = ""
    size = files.file_size(os.path.join(rdir, OUTPUT)) or 0
    try:
        tail = files.read_range(os.path.join(rdir, OUTPUT), max(0, size - 64 * 1024), 64 * 1024)[1].decode(
            "utf-8", "replace")
    except (OSError, AgentError):
        pass
    said = [(tail.rfind(needle), state, reason) for needle, state, reason in _SAID if needle in tail]
    state, reason = (max(said)[1], max(said)[2]) if said else (LOST, "Forgotten")
    words = ("Slurm no longer knows job %s and its own record stops at %s: %s" % (
        job_id, mine.get("state") or "RUNNING", "slurmstepd's last word in job.out is %s" % state if said else
        "it was killed without a word (SIGKILL: the OOM killer, a node's reboot) or its controller lost it, and "
        "nothing of it runs (its monitor's lock is free)"))
    facts = facts_of(job_id, state, reason, "0:9" if state == "OUT_OF_MEMORY" else "", str(mine.get("nodes") or ""),
                     "judged", restarts=_count(mine.get("restarts")))
    data = {"job_id": job_id, "state": state, "exit_code": facts["exit_code"], "reason": reason,
            "nodes": facts["nodes"], "source": "judged", "said": words, "restarts": facts["restarts"],
            "at": int(time.time())}
    try:
        files.write_atomic(os.path.join(rdir, RECORD), json.dumps(data).encode("utf-8"), replace=True, mode=0o600)
    except (AgentError, OSError):
        pass
    facts["said"] = words
    return facts


def _count(value: object) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


#: squeue's fields for many jobs at once: id, state, reason, restarts (a requeue counts one), nodes.
_SQUEUE_FIELDS = "JobID:|,State:|,Reason:|,RestartCnt:|,NodeList:|"


def query_all(jobs: Mapping[str, str]) -> dict[str, JobFacts]:
    """``query`` for many jobs (job id -> run directory) at the cost of one ``squeue`` of the user's jobs, plus
    one ``scontrol`` per job seen final for the first time (squeue has no exit code); a job whose final word
    is recorded already costs nothing. A single job is asked directly."""
    out: dict[str, JobFacts] = {}
    ask = {}
    for job_id, rdir in jobs.items():
        mine = record(rdir)
        if mine is not None and mine.get("source") in ("slurm", "judged"):
            out[job_id] = _facts(job_id, mine, "record")
        else:
            ask[job_id] = rdir
    if len(ask) <= 1:
        out.update({job_id: query(job_id, rdir) for job_id, rdir in ask.items()})
        return out
    code, listing, err = client(["squeue", "-h", "-t", "all", "--me", "-O", _SQUEUE_FIELDS])
    seen: dict[str, list[str]] = {}
    for line in listing.splitlines():
        row = [cell.strip() for cell in line.split("|")]
        if len(row) >= 5 and row[0] in ask:
            seen[row[0]] = row
    for job_id, rdir in ask.items():
        cells = seen.get(job_id)
        if code != 0 or (cells is not None and cells[1] in FINAL) or cells is None:
            # squeue failed, the job is final (its exit code), or forgotten (its record): as for one job
            out[job_id] = query(job_id, rdir) if code == 0 else _unasked(job_id, rdir, err)
            continue
        out[job_id] = facts_of(job_id, cells[1], cells[2], "", _nodes(cells[4]), "slurm", restarts=_count(cells[3]))
    return out


def _unasked(job_id: str, rdir: str, err: str) -> JobFacts:
    """What the job's record says when squeue failed (``error`` says why, unless the record is final)."""
    why = (err.strip().splitlines() or ["squeue failed"])[-1]
    mine = record(rdir)
    if mine is not None:
        facts = _facts(job_id, mine, "record")
        if facts["state"] not in FINAL:
            facts["error"] = why
        return facts
    return facts_of(job_id, "UNKNOWN", "None", "", "", "none", error=why)


def _nodes(value: str) -> str:
    return "" if value in ("(null)", "None") else value


def facts_of(job_id: str, state: str, reason: str, exit_code: str, nodes: str, source: str,
             error: str | None = None, restarts: int = 0) -> JobFacts:
    """The job in the shape no backend owns (``protocol.JobFacts``): Slurm's words, and whether it is queued or over."""
    return {"scheduler": "Slurm", "job_id": job_id, "state": state, "queued": state in QUEUED,
            "final": state in FINAL or state == LOST, "reason": reason, "exit_code": exit_code, "nodes": nodes,
            "source": source, "error": error, "restarts": restarts}


def _facts(job_id: str, data: Mapping[str, Any], source: str) -> JobFacts:
    facts = facts_of(job_id, str(data.get("state") or "UNKNOWN"), str(data.get("reason") or "None"),
                     str(data.get("exit_code") or ""), str(data.get("nodes") or ""), source,
                     restarts=_count(data.get("restarts")))
    if data.get("said"):
        facts["said"] = str(data["said"])
    return facts


def exit_status(exit_code: str) -> int | None:
    """Slurm's ``EXIT:SIGNAL`` as a shell would say it (a signal N is 128+N); None when it says nothing."""
    code, _, signal = exit_code.partition(":")
    if not code.isdigit():
        return None
    return 128 + int(signal) if signal.isdigit() and int(signal) else int(code)


def ran_to_its_end(rdir: str) -> str | None:
    """The job id of a run whose job ran and ended (its own record, or Slurm's word on it, says a final state other
    than a rollback's); None otherwise."""
    mine = record(rdir)
    if mine is None or mine.get("state") not in FINAL or mine.get("reason") == "RolledBack":
        return None
    found = str(mine.get("job_id") or job_of(rdir) or "")
    return found if found.isdigit() else None


def job_of(rdir: str) -> str | None:
    """The job id sbatch gave this run (None: it was never submitted, or the answer was lost)."""
    text = files.read_small(os.path.join(rdir, JOB_ID), 64)
    value = (text or "").strip()
    return value if value.isdigit() else None


def _active(job_id: str | None, name: str) -> list[str]:
    """The ids of the job (by id, or by name when the id is unknown) that Slurm still queues or runs; raises
    when Slurm cannot be asked."""
    argv = ["squeue", "-h", "-o", "%i|%T"] + (["-j", job_id] if job_id else ["-n", name])
    code, out, err = client(argv)
    if code != 0:
        if "Invalid job id" in err:
            return []
        raise AgentError("squeue cannot say whether the job still runs: %s" % (err.strip().splitlines() or [""])[-1])
    return [line.split("|")[0] for line in out.splitlines() if "|" in line]


def cancel(job_id: str | None, name: str, grace_s: float) -> tuple[list[str], bool]:
    """End the job (by id, or every job named ``name`` when the id was never learnt): ``scancel`` (SIGTERM to
    its processes, SIGKILL after KillWait), then ``grace_s`` and ``scancel --signal=KILL --full``, each
    verified with squeue. (the ids signalled, whether SIGKILL was needed); raises while one still runs."""
    ids = _active(job_id, name)
    if not ids:
        return [], False
    client(["scancel"] + ids)
    end = time.monotonic() + deadline.left(grace_s)
    while time.monotonic() < end:
        if not _active(job_id, name):
            return ids, False
        time.sleep(0.25)
    client(["scancel", "--signal=KILL", "--full"] + ids)
    end = time.monotonic() + deadline.left(15.0)
    while time.monotonic() < end:
        left = _active(job_id, name)
        if not left:
            return ids, True
        time.sleep(0.25)
    raise AgentError("Slurm job %s is still in the queue after scancel and SIGKILL (nothing recorded; call stop "
                     "again)" % ", ".join(ids))
