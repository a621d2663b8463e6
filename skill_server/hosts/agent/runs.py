"""Operations on experiment runs: launch (dry run or start), discard, observe, stop.

What is the same for every run is here: the launch's paths checked and resolved, the run directory
(``rundir``: a wrapper script per process, pid, exit and marker files, the monitor's documents), a process's
markers, survivors, log reads and what its monitor found. Where the processes execute is the run's backend's
(``backend``: tmux windows beside the run's monitor, or a scheduler's job), named by the run's ``Handle``: each
op dispatches to it and never asks which one it is.
"""

from __future__ import annotations

import os
import sys

from . import backend, deadline, files, procs
from .backend import Launch
from .files import AgentError
from .generic import MAX_READ_BYTES
from .protocol import KILL_WAIT_S, TYPE_CHECKING, host_identity
from .request import need, need_or, number, objects, str_map
from .rundir import DISCARDED, LAUNCH_LOCK, LAUNCH_REQUEST, PID_SPACE, SCRIPT, SESSION_REMOVED, STOP_REQUESTED, RunDir

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TypedDict

    from .protocol import Appended, DiscardReply, LaunchPlan, LaunchStarted, ObservedProc, ObserveReply, StopReply

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
    """Check and resolve a launch's paths on this host without creating anything."""
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


def op_launch(req: Mapping[str, object]) -> LaunchPlan | LaunchStarted:
    """Start the processes of one experiment that run on this host in its backend (``dry_run``: only check and
    resolve, and say where everything would go)."""
    exp_id = need(req, "exp_id", str)
    choice = need_or(req, "backend", dict, None) or {}
    runner = backend.of(choice.get("kind") or backend.DEFAULT)
    rdir = files.run_dir(exp_id)
    launch = Launch(req, exp_id, need(req, "session", str), rdir, {"procs": req.get("procs")},
                    dict(choice.get("options") or {}))
    runner.check(launch)
    plan = launch.plan = dict(_resolve_launch(req))
    runner.prepare(launch)
    where = {"run_dir": rdir, "result_dir": plan["result_dir"], "python": sys.executable,
             "host_identity": host_identity()}
    if need_or(req, "dry_run", bool, False):
        planned = [{"role": p["role"], "workdir": p["workdir"], "log_path": p["log_path"]} for p in plan["procs"]]
        return dict(where, procs=planned, handle=launch.handle,  # type: ignore[return-value]
                    attach=runner.attach(launch.handle, planned))
    from . import monitor  # loaded by the ops that use it: most calls never need the scanner's expressions

    config = need_or(req, "monitor", dict, None)
    monitor_spec = {"offsets": monitor.log_sizes({p["role"]: p["log_path"] for p in plan["procs"]}),
                    "max_time_s": need(req, "max_time_s", int), "grace_s": need_or(req, "deadline_grace_s", int, 5),
                    "config": config, "result_dir": plan["result_dir"]}
    _make_run_dir(rdir)
    with files.Locked(os.path.join(rdir, LAUNCH_LOCK), deadline.left(10.0)):
        if RunDir(rdir).has(DISCARDED):
            raise AgentError("the launch of %s was rolled back before it reached this host" % exp_id)
        try:
            _write_pid_space(rdir)
            _write_run_dir(exp_id, rdir, plan)  # type: ignore[arg-type]
            if "max_resumes" in ((config or {}).get("policy") or {}):  # what a resume launches again (``actions``)
                RunDir(rdir).write_json(LAUNCH_REQUEST, dict(req), replace=False)
            started = runner.start(launch, monitor_spec)
        except BaseException:
            runner.discard(launch.handle, exp_id, rdir)
            raise
    return dict(where, procs=started, handle=launch.handle,  # type: ignore[return-value]
                attach=runner.attach(launch.handle, list(started)))


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


def _write_pid_space(rdir: str) -> None:
    """Where (``procs.pid_space``) and when the launch ran: a machine that shares this one's host identity and
    home reads the run's pids as another machine's (``started_elsewhere``)."""
    import time

    text = "%s %.3f\n" % (procs.pid_space(), time.time())
    files.write_atomic(RunDir(rdir).file(PID_SPACE), text.encode("ascii"), replace=False, mode=0o600)


def started_elsewhere(run: RunDir) -> str | None:
    """Why this host cannot judge the run's processes by their pids: its launch ran in another pid space (another
    machine, or container, with this host's name and machine id and a shared home: its pids mean nothing here),
    unless this machine simply rebooted since (then its processes died with it, and are judged here). None: here."""
    import time

    space, wall = run.pid_space()
    mine = procs.pid_space()
    if not space or not mine or space == mine:
        return None
    if not procs.same_boot(space) and wall is not None and procs.uptime() < time.time() - wall:
        return None  # rebooted since the launch
    return ("its launch ran on another machine (or container) with this host's identity %s: this one cannot see "
            "its processes; ask there" % host_identity())


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
        files.write_atomic(RunDir(rdir).of(p["role"], SCRIPT), script.encode("utf-8"), replace=False, mode=0o600)


def op_discard(req: Mapping[str, object]) -> DiscardReply:
    """Undo a launch on this host (another host refused it, or it was interrupted): the backend ends what it
    started (by the run's identity) and the run directory is left marked discarded, so that a start of that
    launch arriving later refuses. Waits for a start in progress here to finish first."""
    exp_id = need(req, "exp_id", str)
    rdir = need_or(req, "run_dir", str, None) or files.run_dir(exp_id)
    handle = need(req, "handle", dict)
    runner = backend.of_handle(handle)
    try:
        _make_run_dir(rdir)  # the launch never got here: the mark makes it refuse if it still comes
    except AgentError:
        pass
    if not os.path.isdir(rdir):  # cannot write here: still end what runs
        return runner.discard(handle, exp_id, rdir)
    with files.Locked(os.path.join(rdir, LAUNCH_LOCK), deadline.left(30.0)):
        return runner.discard(handle, exp_id, rdir)


def op_observe(req: Mapping[str, object]) -> ObserveReply:
    """Everything status needs from this host in one go: for each process its liveness and exit code (from its
    backend), markers, the requested appended ranges of its log, and what the run's monitor found (or, for a
    run launched before monitors, the scan range). With ``heal`` it also starts the monitor of a run whose
    monitor died and releases what holds a run that ended without one (``healed`` says what it did)."""
    heal = need_or(req, "heal", bool, False)
    asked = objects(req, "procs")
    cache: dict[str, Any] = {}  # per run directory: its monitor's findings, read once; per backend: what it asked
    by_kind: dict[str, list[tuple[Mapping[str, Any], str]]] = {}
    for p in asked:
        handle = need(p, "handle", dict)
        by_kind.setdefault(str(handle.get("kind") or backend.DEFAULT), []).append((handle, need(p, "run_dir", str)))
    for kind, handles in by_kind.items():
        backend.of(kind).prefetch(handles, cache)
    healed: list[str] = []
    observed = [_observe_proc(p, cache, heal, healed) for p in asked]
    if heal:
        _release_finished(asked, cache, healed)
    return {"procs": observed, "host_identity": host_identity(), "healed": healed}


def _observe_proc(p: Mapping[str, object], cache: dict[str, Any], heal: bool, healed: list[str]) -> ObservedProc:
    from . import observer, points

    rdir, role = need(p, "run_dir", str), need(p, "role", str)
    run = RunDir(rdir)
    elsewhere = started_elsewhere(run)
    if elsewhere is not None:  # another machine's run: nothing here is its truth, nothing here heals it
        return {"alive": None, "exit_code": None, "exit_source": None, "elapsed_s": None, "markers": [],
                "final": False, "size": None, "reads": [], "elsewhere": elsewhere}
    seen = backend.of_handle(need(p, "handle", dict)).observe(p, need(p, "handle", dict), cache)
    markers = run.markers(role)
    markers += [m for m in seen.markers if m not in markers]
    if _survivors_alive(run, role):
        markers.append("survivors")
    final = seen.exit_code is not None or seen.alive is False
    log_path = need(p, "log_path", str)
    reads = [_read(log_path, r, final) for r in objects(p, "reads", required=False)]
    out: ObservedProc = {"alive": seen.alive, "exit_code": seen.exit_code, "exit_source": seen.exit_source,
                         "elapsed_s": seen.elapsed_s, "markers": markers, "final": final,
                         "size": files.file_size(log_path), "reads": reads}
    if seen.job is not None:
        out["scheduler"] = seen.job
    found = observer.report(rdir, role, final=final, cache=cache, heal=heal, healed=healed)
    if found is None:
        scan = need_or(p, "scan", dict, None)
        if scan is not None:
            out["scan"] = _read(log_path, scan, final)
        return out
    out["monitor"] = found
    cursor = [x for x in need_or(p, "points", list, []) if isinstance(x, int)]
    new, out["points_cursor"], more = points.read_after(run.points(role), cursor)
    if new:
        out["points"] = new  # type: ignore[typeddict-item]  # points.point's shape (protocol.MetricPoint)
    if more:
        out["points_more"] = True
    return out


def _read(log_path: str, span: Mapping[str, object], final: bool) -> Appended:
    budget = max(0, min(need(span, "budget", int), MAX_READ_BYTES))
    return files.read_appended(log_path, max(0, need(span, "offset", int)), budget, final)


def _release_finished(asked: list[Mapping[str, object]], cache: dict[str, Any], healed: list[str]) -> None:
    """A run whose every process here has its exit code on disk no longer needs what holds it (its tmux session):
    its monitor releases it when it ends; for a run without a live monitor (launched before monitors, or its
    monitor gone) the healing observation that finds the codes does, once."""
    runs: dict[str, tuple[str, Mapping[str, Any], bool]] = {}
    for p in asked:
        rdir, exp_id = need(p, "run_dir", str), need_or(p, "exp_id", str, None)
        if exp_id is None:
            continue
        on_disk = RunDir(rdir).has_exit(need(p, "role", str))  # not only in tmux's memory
        done = runs.get(rdir, (exp_id, {}, True))[2] and on_disk
        runs[rdir] = (exp_id, need(p, "handle", dict), done)
    for rdir, (exp_id, handle, done) in runs.items():
        entry = cache.get(rdir)
        run = RunDir(rdir)
        if not done or (entry is not None and entry["alive"]) or run.has(SESSION_REMOVED) or started_elsewhere(run):
            continue
        if backend.of_handle(handle).release(handle, exp_id) and run.touch(SESSION_REMOVED):
            healed.append("released what held the ended run %s" % exp_id)


def _survivors_alive(run: RunDir, role: str) -> bool:
    """True while a process that survived a stop's SIGKILL (recorded by the stop) still lives."""
    try:
        return any(procs.alive(int(x["pid"]), x.get("start")) for x in run.survivors(role))
    except (ValueError, TypeError, KeyError):
        return False


def op_stop(req: Mapping[str, object]) -> StopReply:
    """Stop every process of one experiment on this host and verify, as its backend stops them."""
    exp_id = need(req, "exp_id", str)
    rdir = need(req, "run_dir", str)
    handle = need(req, "handle", dict)
    grace = number(req, "grace_s", 10)
    rest = deadline.remaining()
    if rest is not None:  # SIGTERM and SIGKILL still get their waits inside the caller's deadline
        grace = max(0.0, min(grace, rest - procs.TERM_WAIT_S - KILL_WAIT_S - 1.0))
    if os.path.isdir(rdir):
        elsewhere = started_elsewhere(RunDir(rdir))
        if elsewhere is not None:
            raise AgentError("not stopped from here: %s" % elsewhere)
        RunDir(rdir).touch(STOP_REQUESTED)  # a resume waiting for its backoff is cancelled
    roles: list[dict[str, object]] = [{"role": need(p, "role", str), "pid": need_or(p, "pid", int, None),
                                       "start": need_or(p, "start", str, None),
                                       "pane_id": need_or(p, "pane_id", str, None)} for p in objects(req, "procs")]
    return backend.of_handle(handle).stop(handle, exp_id, rdir, roles, grace,
                                          keep_session=need_or(req, "keep_session", bool, False))
