"""Operations on experiment runs: launch (dry run or start), discard, observe, stop.

A run's processes on this host are windows of one tmux session, watched by the run's monitor
(``monitor``); its run directory holds the wrapper scripts, per role ``.pid``, ``.exit`` and marker files,
and the monitor's spec, findings (``monitor.json``) and metric points. A Slurm run (``slurm`` in the
launch) is one batch job submitted from this host, its login node (``slurm``): the same wrappers run inside
the allocation, and its processes' liveness comes from Slurm and the job's ``job.json``, not from pids.
"""

from __future__ import annotations

import json
import os
import sys

from . import deadline, files, procs, tmux
from .files import AgentError
from .generic import MAX_READ_BYTES
from .protocol import KILL_WAIT_S, TYPE_CHECKING, host_identity
from .request import need, need_or, number, objects, str_map, strings

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TypedDict

    from .protocol import (
        Appended,
        DiscardReply,
        LaunchPlan,
        LaunchStarted,
        ObservedProc,
        ObserveReply,
        Pane,
        SchedulerFacts,
        StartedProc,
        StopReply,
    )

    class _Proc(TypedDict):
        """One process of a launch, its paths resolved on this host."""

        role: str
        workdir: str
        log_path: str
        command: str
        env: dict[str, str]
        wait_for_url: str | None
        wait_for_url_timeout_s: int

    class _Plan(TypedDict):
        path_prepend: str | None
        virtual_env: str | None
        result_dir: str
        procs: list[_Proc]

MARKERS = ("gate", "started", "stopped", "timedout")


def _directory(raw: str, field: str) -> str:
    path = files.expand(raw)
    if not os.path.isabs(path):
        raise AgentError("give an absolute path (got %r)" % raw, field)
    if not os.path.isdir(path):
        what = "is not a directory" if os.path.lexists(path) else "does not exist"
        raise AgentError("%s %s on this host" % (path, what), field)
    return path


def _interpreter(python: str | None) -> tuple[str | None, str | None]:
    """(the directory to put first on PATH, the virtualenv) of the run's interpreter, checked on this host."""
    if python is None:
        return None, None
    py = files.expand(python)
    if not os.path.isabs(py):
        raise AgentError("give an absolute path (got %r)" % python, "python")
    if not (os.path.isfile(py) and os.access(py, os.X_OK)):
        raise AgentError("interpreter does not exist or is not executable on this host: " + py, "python")
    path_prepend = os.path.dirname(py)
    if os.path.isfile(os.path.join(os.path.dirname(path_prepend), "pyvenv.cfg")):
        return path_prepend, os.path.dirname(path_prepend)
    return path_prepend, None


def _resolve_proc(p: Mapping[str, object], result_dir: str) -> _Proc:
    workdir = _directory(need(p, "workdir", str), need(p, "workdir_field", str))
    log_path = os.path.normpath(os.path.join(result_dir, files.expand(need(p, "log_path", str))))
    if os.path.lexists(log_path) and not os.path.isfile(log_path):
        raise AgentError("exists and is not a regular file: " + log_path, need(p, "log_field", str))
    return {"role": need(p, "role", str), "workdir": workdir, "log_path": log_path,
            "command": need(p, "command", str), "env": str_map(p, "env"),
            "wait_for_url": need_or(p, "wait_for_url", str, None),
            "wait_for_url_timeout_s": need_or(p, "wait_for_url_timeout_s", int, 600)}


def _resolve_launch(req: Mapping[str, object]) -> _Plan:
    """Check and resolve a launch on this host without creating anything."""
    import shutil

    if req.get("slurm") is not None:
        from . import slurm

        slurm.check_clients()
    for tool in ("tmux", "bash") if req.get("procs") and req.get("slurm") is None else ():
        if shutil.which(tool) is None:
            raise AgentError("%s is not installed on this host (experiments run in tmux under bash)" % tool,
                             kind="no_" + tool)
    python = need_or(req, "python", str, None)
    path_prepend, virtual_env = _interpreter(python)
    top = files.expand(need(req, "workdir", str))
    result_dir = os.path.normpath(os.path.join(top, files.expand(need(req, "result_dir", str))))
    if os.path.exists(result_dir) and not os.path.isdir(result_dir):
        raise AgentError("exists but is not a directory: " + result_dir, "result_dir")
    resolved = [_resolve_proc(p, result_dir) for p in objects(req, "procs")]
    logs = [p["log_path"] for p in resolved]
    if len(set(logs)) != len(logs):
        raise AgentError("each process needs its own log_path", "processes")
    return {"path_prepend": path_prepend, "virtual_env": virtual_env, "result_dir": result_dir, "procs": resolved}


def _lingering(socket: str, session: str, previous_pids: list[object]) -> str | None:
    """The id of the session to replace when the name is taken by the finished session of an earlier run
    of ours (its panes are exactly the pids that run recorded, all dead); None when the name is free. Any
    other session of that name refuses the launch."""
    panes = [p for p in (tmux.list_panes(socket) or []) if p["session"] == session]
    if not panes:
        return None
    if previous_pids and all(p["pid"] in previous_pids and p["dead"] for p in panes) and len(
            {p["session_id"] for p in panes}) == 1:
        return panes[0]["session_id"]
    raise AgentError("a tmux session named %r already exists on %s" % (session, socket), "name", kind="duplicate")


#: In a host's run directory: held while a launch starts the run's windows, and taken by a discard.
LAUNCH_LOCK = "launch.lock"
#: Left by a discard: a launch of that run that reaches this host afterwards refuses to start.
DISCARDED = "discarded"


def op_launch(req: Mapping[str, object]) -> LaunchPlan | LaunchStarted:
    """Start the processes of one experiment that run on this host, as windows of one tmux session
    (``dry_run``: only check and resolve, and say where everything would go)."""
    exp_id = need(req, "exp_id", str)
    session = need(req, "session", str)
    socket = tmux.socket_path(need(req, "socket_name", str))
    plan = _resolve_launch(req)
    scheduled = need_or(req, "slurm", dict, None)
    if scheduled is not None:
        socket = ""  # a Slurm run has no tmux session
    replace = None if scheduled is not None else _lingering(socket, session, need_or(req, "replace_pids", list, []))
    rdir = files.run_dir(exp_id)
    if need_or(req, "dry_run", bool, False):
        if scheduled is not None:
            from . import slurm

            slurm.options(scheduled, exp_id, rdir, need(req, "max_time_s", int))  # extra_args refused here
            slurm.ray_for(scheduled, plan["path_prepend"])
        return {"run_dir": rdir, "socket_path": socket, "result_dir": plan["result_dir"], "python": sys.executable,
                "host_identity": host_identity(),
                "procs": [{"role": p["role"], "workdir": p["workdir"], "log_path": p["log_path"]}
                          for p in plan["procs"]]}
    max_time_s = need(req, "max_time_s", int)
    if scheduled is not None:
        return _submit(exp_id, rdir, plan, scheduled, max_time_s, need_or(req, "deadline_grace_s", int, 5),
                       need_or(req, "monitor", dict, None))
    grace_s = need_or(req, "deadline_grace_s", int, 5)
    from . import monitor  # loaded by the ops that use it: most calls never need the scanner's expressions

    _make_run_dir(rdir)
    with files.Locked(os.path.join(rdir, LAUNCH_LOCK), deadline.left(10.0)):
        if files.exists(os.path.join(rdir, DISCARDED)):
            raise AgentError("the launch of %s was rolled back before it reached this host" % exp_id)
        started: list[StartedProc] = []
        session_id: str | None = None
        try:
            _write_run_dir(exp_id, rdir, plan)
            if "max_resumes" in (need_or(req, "monitor", dict, {}).get("policy") or {}):
                from .actions import LAUNCH_REQUEST  # what the resume policy launches again (``relaunch_here``)

                files.write_atomic(os.path.join(rdir, LAUNCH_REQUEST), json.dumps(dict(req)).encode("utf-8"),
                                   replace=False, mode=0o600)
            if replace:  # the finished session of an earlier run of ours with this name
                tmux.kill_session(socket, replace)
            offsets = monitor.log_sizes({p["role"]: p["log_path"] for p in plan["procs"]})
            for i, p in enumerate(plan["procs"]):
                proc, sid = _start(exp_id, socket, session, rdir, p, first=i == 0)
                session_id = session_id or sid
                started.append(proc)
            monitor.start(rdir, monitor.spec_for(exp_id, socket, session, started, offsets, max_time_s, grace_s,
                                                 need_or(req, "monitor", dict, None), plan["result_dir"]))
        except BaseException:
            _discard_locked(exp_id, socket, session_id, rdir)
            raise
    return {"run_dir": rdir, "socket_path": socket, "result_dir": plan["result_dir"], "python": sys.executable,
            "host_identity": host_identity(), "procs": started, "session_id": session_id or "", "job_id": None}


def _submit(exp_id: str, rdir: str, plan: _Plan, options: Mapping[str, object], max_time_s: int, grace_s: int,
            config: Mapping[str, object] | None) -> LaunchStarted:
    """A Slurm run: the wrappers, the monitor's spec and the batch script in the run directory (on the shared
    filesystem), then sbatch; the monitor and the processes start when the job does, on its first node. A
    failure cancels whatever was submitted (by the job's name, the run's id) and leaves the run directory
    discarded."""
    from . import monitor, slurm

    started: list[StartedProc] = [
        {"window_id": "", "pane_id": "", "pid": None, "start": None, "role": p["role"], "workdir": p["workdir"],
         "log_path": p["log_path"]} for p in plan["procs"]]
    _make_run_dir(rdir)
    with files.Locked(os.path.join(rdir, LAUNCH_LOCK), deadline.left(10.0)):
        if files.exists(os.path.join(rdir, DISCARDED)):
            raise AgentError("the launch of %s was rolled back before it reached this host" % exp_id)
        try:
            _write_run_dir(exp_id, rdir, plan)
            # Slurm enforces the time limit (TIMEOUT), so the monitor's own max time is off (0)
            spec = monitor.spec_for(exp_id, "", "", started, monitor.log_sizes(
                {p["role"]: p["log_path"] for p in plan["procs"]}), 0, grace_s, config, plan["result_dir"])
            spec["slurm"] = True
            job_id = slurm.submit(options, exp_id, rdir, [p["role"] for p in plan["procs"]], max_time_s,
                                  ray=slurm.ray_for(options, plan["path_prepend"]),
                                  monitor=monitor.job_line(rdir, spec))
        except BaseException:
            _discard_slurm(exp_id, rdir)
            raise
    return {"run_dir": rdir, "socket_path": "", "result_dir": plan["result_dir"], "python": sys.executable,
            "host_identity": host_identity(), "procs": started, "session_id": "", "job_id": job_id}


def _discard_slurm(exp_id: str, rdir: str) -> DiscardReply:
    """Undo a Slurm launch: mark the run discarded first (a job that starts later exits at once), then cancel
    its job (by id, or by name when sbatch's answer was lost) and verify."""
    from . import slurm

    try:
        files.touch(os.path.join(rdir, DISCARDED))
    except OSError:
        pass
    try:
        ids, _ = slurm.cancel(slurm.job_of(rdir), exp_id, 5.0)
        confirmed = True
    except AgentError:
        ids, confirmed = [], False
    return {"interrupted": ["job " + i for i in ids], "terminated": [], "killed": [], "survivors": [],
            "session_removed": True, "confirmed": confirmed}


def _make_run_dir(rdir: str) -> None:
    """Create this host's run directory (a new one: an existing one means the id was used here)."""
    try:
        os.makedirs(os.path.dirname(rdir), mode=0o700, exist_ok=True)
        os.mkdir(rdir, 0o700)
    except FileExistsError:
        raise AgentError("the run directory %s exists already: this experiment id was started or rolled back on "
                         "this host before, or another machine that shares this home directory has the same host "
                         "identity %r (host name plus a digest of /etc/machine-id: compare 'hostname' and "
                         "/etc/machine-id on the hosts, cloned machines may share one)"
                         % (rdir, os.path.basename(rdir))) from None
    except OSError as exc:
        raise AgentError("cannot create the run directory %s: %s" % (rdir, exc.strerror or exc)) from None


def _write_run_dir(exp_id: str, rdir: str, plan: _Plan) -> None:
    """One wrapper script per process; the result directory."""
    from . import wrapper

    try:
        os.makedirs(plan["result_dir"], exist_ok=True)
    except OSError as exc:
        raise AgentError("cannot create %s: %s" % (plan["result_dir"], exc.strerror or exc), "result_dir") from None
    for p in plan["procs"]:
        script = wrapper.render(
            exp_id=exp_id, role=p["role"], run_dir=rdir, workdir=p["workdir"], env=p["env"],
            path_prepend=plan["path_prepend"], virtual_env=plan["virtual_env"], command=p["command"],
            log_path=p["log_path"], gate_url=p["wait_for_url"], gate_timeout_s=p["wait_for_url_timeout_s"],
            python=sys.executable)
        files.write_atomic(os.path.join(rdir, p["role"] + ".sh"), script.encode("utf-8"), replace=False, mode=0o600)


def _start(exp_id: str, socket: str, session: str, rdir: str, p: _Proc, first: bool) -> tuple[StartedProc, str]:
    """One process as a window of the run's session (the first one creates the session); and the
    session's id."""
    from . import wrapper

    argv = wrapper.pane_argv(exp_id, p["role"], os.path.join(rdir, p["role"] + ".sh"))
    if first:
        ids = tmux.new_session(socket, session, p["role"], rdir, argv)
    else:
        ids = tmux.new_window(socket, session, p["role"], rdir, argv)
    return {"window_id": ids["window_id"], "pane_id": ids["pane_id"], "pid": ids["pid"],
            "start": procs.start_time(ids["pid"]), "role": p["role"], "workdir": p["workdir"],
            "log_path": p["log_path"]}, ids["session_id"]


def _discard_locked(exp_id: str, socket: str, session_id: str | None, rdir: str) -> DiscardReply:
    """Undo run ``exp_id`` on this host (its launch lock held): end its sessions and marked processes,
    empty its run directory and leave the ``discarded`` mark in it."""
    import shutil

    removed, answered = tmux.kill_run_sessions(socket, exp_id, session_id, [])
    report = procs.terminate([], exp_id + "/", 0.0)
    try:
        entries = os.listdir(rdir)
    except OSError:
        entries = []
    for entry in entries:
        if entry in (LAUNCH_LOCK, DISCARDED):
            continue
        path = os.path.join(rdir, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
    try:
        files.touch(os.path.join(rdir, DISCARDED))
    except OSError:
        pass
    return {"interrupted": report["interrupted"], "terminated": report["terminated"], "killed": report["killed"],
            "survivors": report["survivors"], "session_removed": removed,
            "confirmed": answered and not report["survivors"]}


def op_discard(req: Mapping[str, object]) -> DiscardReply:
    """Undo a launch on this host (another host refused it, or it was interrupted): end the run's sessions
    (by identity) and marked processes, empty its run directory and mark it discarded, so that a start of
    that launch arriving later refuses. Waits for a start in progress here to finish first."""
    exp_id = need(req, "exp_id", str)
    rdir = need_or(req, "run_dir", str, None) or files.run_dir(exp_id)
    socket = need(req, "socket_path", str)
    try:
        _make_run_dir(rdir)  # the launch never got here: the mark makes it refuse if it still comes
    except AgentError:
        pass
    if need_or(req, "slurm", bool, False):
        with files.Locked(os.path.join(rdir, LAUNCH_LOCK), deadline.left(30.0)):
            return _discard_slurm(exp_id, rdir)
    if not os.path.isdir(rdir):  # cannot write here: still end what runs
        removed, answered = tmux.kill_run_sessions(socket, exp_id, need_or(req, "session_id", str, None), [])
        report = procs.terminate([], exp_id + "/", 0.0)
        return {"interrupted": report["interrupted"], "terminated": report["terminated"],
                "killed": report["killed"], "survivors": report["survivors"], "session_removed": removed,
                "confirmed": answered and not report["survivors"]}
    with files.Locked(os.path.join(rdir, LAUNCH_LOCK), deadline.left(30.0)):
        return _discard_locked(exp_id, socket, need_or(req, "session_id", str, None), rdir)


def op_observe(req: Mapping[str, object]) -> ObserveReply:
    """Everything status needs from this host in one go: panes per socket (asked only for processes recorded
    without a pid), and for each process its liveness, exit code, markers, the requested appended ranges of
    its log, and what the run's monitor found (or, for a run launched before monitors, the scan range)."""
    panes: dict[str, list[Pane] | None] = {}
    for socket in strings(req, "sockets"):
        panes[socket] = tmux.list_panes(socket)
    cache: dict[str, Any] = {}  # per run directory: its monitor's findings, read once; per Slurm job: its facts
    asked = objects(req, "procs")
    jobs = {need(p, "job_id", str): need(p, "run_dir", str) for p in asked if need_or(p, "job_id", str, None)}
    if jobs:
        from . import slurm

        cache.update({"slurm:" + job: facts for job, facts in slurm.query_all(jobs).items()})
    observed = [_observe_proc(p, cache) for p in asked]
    _remove_finished_sessions(asked, cache)
    return {"panes": panes, "procs": observed, "host_identity": host_identity()}


def _exit_code(p: Mapping[str, object], rdir: str, role: str, alive: bool | None) -> tuple[int | None, str | None]:
    """The exit code and where it was found: the exit file; else, once the wrapper has ended, what tmux
    kept (the option the wrapper set, the dead pane's status), written to the exit file when it can be."""
    path = os.path.join(rdir, role + ".exit")
    code = files.read_int(path)
    if code is not None:
        return code, "file"
    if alive is not False:
        return None, None
    from . import wrapper

    code, source = tmux.recorded_exit(need_or(p, "socket_path", str, ""), need_or(p, "session_id", str, None),
                                      need_or(p, "pane_id", str, None), wrapper.exit_option(role))
    if code is not None:
        try:  # whoever finds a code and no file writes the file, once there is space
            files.write_atomic(path, b"%d\n" % code, replace=False, mode=0o600)
        except AgentError:
            pass
    return code, source


def _observe_proc(p: Mapping[str, object], cache: dict[str, Any]) -> ObservedProc:
    from . import monitor, points

    rdir, role = need(p, "run_dir", str), need(p, "role", str)
    pid = need_or(p, "pid", int, None)
    start = need_or(p, "start", str, None)
    job_id = need_or(p, "job_id", str, None)
    markers = [m for m in MARKERS if files.exists(os.path.join(rdir, "%s.%s" % (role, m)))]
    scheduler: SchedulerFacts | None = None
    if job_id is not None:
        scheduler, alive, exit_code, exit_source = _scheduled(job_id, rdir, role, markers, cache)
        elapsed = _job_age(rdir, scheduler["state"]) if alive else None
    else:
        # Liveness first, exit code second: a wrapper records its exit code before it exits, so a dead
        # wrapper without one (in the file or in tmux) really died without recording one.
        alive = procs.alive(pid, start) if pid else None
        elapsed = procs.age(pid, start) if alive else None
        exit_code, exit_source = _exit_code(p, rdir, role, alive)
    if _survivors_alive(os.path.join(rdir, role + ".survivors")):
        markers.append("survivors")
    final = exit_code is not None or alive is False
    log_path = need(p, "log_path", str)
    reads = [_read(log_path, r, final) for r in objects(p, "reads", required=False)]
    out: ObservedProc = {"alive": alive, "exit_code": exit_code, "exit_source": exit_source, "elapsed_s": elapsed,
                         "markers": markers, "final": final, "size": files.file_size(log_path), "reads": reads}
    if scheduler is not None:
        out["scheduler"] = scheduler
    found = monitor.report(rdir, role, final=final, cache=cache)
    if found is None:
        scan = need_or(p, "scan", dict, None)
        if scan is not None:
            out["scan"] = _read(log_path, scan, final)
        return out
    out["monitor"] = found
    cursor = [x for x in need_or(p, "points", list, []) if isinstance(x, int)]
    new, out["points_cursor"], more = points.read_after(os.path.join(rdir, role + ".metrics.jsonl"), cursor)
    if new:
        out["points"] = new
    if more:
        out["points_more"] = True
    return out


def _scheduled(job_id: str, rdir: str, role: str, markers: list[str], cache: dict[str, Any]
               ) -> tuple[SchedulerFacts, bool | None, int | None, str | None]:
    """A Slurm run's process: (the job's facts, alive, exit code, its source). Queued: alive, marked
    ``queued``. Running: alive until its wrapper's exit file exists. Ended: the exit file's code, else
    Slurm's (a process killed with its job wrote none); cancelled and timed-out jobs mark their processes
    ``stopped`` and ``timedout``. Slurm cannot be asked and the record is not final: liveness unknown (None)."""
    from . import slurm

    key = "slurm:" + job_id
    if key not in cache:  # one scontrol per job and observation, whatever its number of processes
        cache[key] = slurm.query(job_id, rdir)
    facts: SchedulerFacts = cache[key]
    code = files.read_int(os.path.join(rdir, role + ".exit"))
    source = "file" if code is not None else None
    state = facts["state"]
    mine = slurm.record(rdir) if code is not None and state not in slurm.FINAL else None
    if mine is not None and mine.get("source") == "job" and mine.get("state") in slurm.FINAL:
        # the job recorded its own end (its SIGTERM trap: TIMEOUT or CANCELLED) while Slurm still winds it down
        # (the batch script waits for the monitor): that end decides, not the process's 143 alone
        state = str(mine["state"])
        facts = facts.copy()  # the cached answer stays Slurm's
        facts["state"], facts["reason"] = state, str(mine.get("reason") or facts["reason"])
        facts["exit_code"] = str(mine.get("exit_code") or facts["exit_code"])
        facts["nodes"] = str(mine.get("nodes") or facts["nodes"])  # all it got, not the node still completing
    if state in slurm.QUEUED:
        markers.append("queued")
        return facts, True, code, source
    if state not in slurm.FINAL:
        if facts["error"] is not None and state == "UNKNOWN":
            return facts, None, code, source
        return facts, code is None and state != "UNKNOWN", code, source
    if state == "CANCELLED" and "stopped" not in markers:
        markers.append("stopped")
    if state == "TIMEOUT" and "timedout" not in markers:
        markers.append("timedout")
    if code is None:  # killed with its job: Slurm's code, unless it says 0 for a job that did not complete
        code = slurm.exit_status(facts["exit_code"])
        if code == 0 and state != "COMPLETED":
            code = None
        source = "slurm" if code is not None else None
    return facts, False, code, source


def _job_age(rdir: str, state: str) -> float | None:
    """How long a Slurm run's job has run (0 while it is queued), by the start the job recorded: a run's clock
    (its max time, its first-step deadline) starts when its job does, not when it was queued."""
    from . import slurm

    if state in slurm.QUEUED:
        return 0.0
    mine = slurm.record(rdir)
    at = mine.get("at") if mine is not None and mine.get("source") == "job" else None
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        import time

        return max(0.0, time.time() - float(at))
    return None


def _read(log_path: str, span: Mapping[str, object], final: bool) -> Appended:
    budget = max(0, min(need(span, "budget", int), MAX_READ_BYTES))
    return files.read_appended(log_path, max(0, need(span, "offset", int)), budget, final)


def _remove_finished_sessions(asked: list[Mapping[str, object]], cache: dict[str, Any]) -> None:
    """A run whose every process here has its exit code on disk no longer needs its tmux session: its monitor
    removes it when it ends; for a run without a live monitor (launched before monitors, or its monitor
    gone) the observation that finds the codes does, once."""
    from .protocol import SESSION_REMOVED

    runs: dict[str, tuple[str, str, bool]] = {}
    for p in asked:
        rdir, exp_id = need(p, "run_dir", str), need_or(p, "exp_id", str, None)
        socket = need_or(p, "socket_path", str, None)
        if exp_id is None or not socket or need_or(p, "job_id", str, None) is not None:
            continue
        on_disk = files.exists(os.path.join(rdir, need(p, "role", str) + ".exit"))  # not only in tmux's memory
        done = runs.get(rdir, (exp_id, socket, True))[2] and on_disk
        runs[rdir] = (exp_id, socket, done)
    for rdir, (exp_id, socket, done) in runs.items():
        entry = cache.get(rdir)
        marker = os.path.join(rdir, SESSION_REMOVED)
        if not done or (entry is not None and entry["alive"]) or files.exists(marker):
            continue
        if tmux.remove_finished(socket, exp_id):
            try:
                files.touch(marker)
            except OSError:
                pass


def _survivors_alive(path: str) -> bool:
    """True while a process that survived a stop's SIGKILL (recorded by ``op_stop``) still lives."""
    if not files.exists(path):
        return False
    try:
        recorded = json.loads(files.read_small(path, 64 * 1024) or "[]")
        return any(procs.alive(int(x["pid"]), x.get("start")) for x in recorded)
    except (ValueError, TypeError, KeyError):
        return False


def _stop_job(job_id: str, exp_id: str, rdir: str, roles: list[str], grace: float) -> StopReply:
    """A Slurm run: cancel its job and verify that Slurm no longer queues or runs it (raises otherwise: the
    caller records nothing). The job's processes get SIGTERM from Slurm, SIGKILL after KillWait."""
    from . import slurm

    ids, killed = slurm.cancel(job_id, exp_id, grace)
    if job_id:
        slurm.query(job_id, rdir)  # Slurm's final word into job.json while it still remembers the job
    codes = {role: files.read_int(os.path.join(rdir, role + ".exit")) for role in roles}
    del killed  # Slurm's SIGKILL: the job's state says it (its ExitCode's signal)
    return {"interrupted": roles if ids else [], "terminated": [], "killed": [], "survivors": [],
            "exit_codes": codes, "session_removed": True}


def op_stop(req: Mapping[str, object]) -> StopReply:
    """Stop every process of one experiment on this host and verify (see ``procs.terminate``)."""
    exp_id = need(req, "exp_id", str)
    rdir = need(req, "run_dir", str)
    grace = number(req, "grace_s", 10)
    rest = deadline.remaining()
    if rest is not None:  # SIGTERM and SIGKILL still get their waits inside the caller's deadline
        grace = max(0.0, min(grace, rest - procs.TERM_WAIT_S - KILL_WAIT_S - 1.0))
    from .actions import STOP_REQUESTED, mark_stopped, stop_here

    if os.path.isdir(rdir):
        try:
            files.touch(os.path.join(rdir, STOP_REQUESTED))
        except OSError:
            pass
    roles: list[dict[str, object]] = [{"role": need(p, "role", str), "pid": need_or(p, "pid", int, None),
                                       "start": need_or(p, "start", str, None),
                                       "pane_id": need_or(p, "pane_id", str, None)} for p in objects(req, "procs")]
    job_id = need_or(req, "job_id", str, None)
    if job_id is not None:  # a Slurm run: Slurm stops the job's processes; the roles are marked stopped first
        names = [str(r["role"]) for r in roles]
        mark_stopped(rdir, names)
        return _stop_job(job_id, exp_id, rdir, names, grace)
    kill = need_or(req, "kill_session", bool, True)
    socket = need(req, "socket_path", str) if kill else ""
    return stop_here(exp_id, rdir, roles, grace, socket, need_or(req, "session_id", str, None), kill_session=kill)
