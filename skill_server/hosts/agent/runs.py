"""Operations on experiment runs: launch (dry run or start), discard, observe, stop.

A run's processes on this host are windows of one tmux session; its run directory holds the wrapper
scripts, the watchdog program (``agent.py``), and per role ``.pid``, ``.exit`` and marker files.
"""

from __future__ import annotations

import json
import os
import sys

from . import files, procs, tmux
from .files import AgentError
from .generic import MAX_READ_BYTES
from .request import need

MARKERS = ("gate", "started", "stopped", "timedout")


def _directory(raw: str, field: str) -> str:
    path = files.expand(raw)
    if not os.path.isabs(path):
        raise AgentError("give an absolute path (got %r)" % raw, field)
    if not os.path.isdir(path):
        what = "is not a directory" if os.path.lexists(path) else "does not exist"
        raise AgentError("%s %s on this host" % (path, what), field)
    return path


def _resolve_launch(req: dict) -> dict:
    """Check and resolve a launch on this host without creating anything."""
    import shutil

    for tool in ("tmux", "bash") if req.get("procs") else ():
        if shutil.which(tool) is None:
            raise AgentError("%s is not installed on this host (experiments run in tmux under bash)" % tool,
                             kind="no_" + tool)
    python = need(req, "python", str, None)
    path_prepend = virtual_env = None
    if python is not None:
        py = files.expand(python)
        if not os.path.isabs(py):
            raise AgentError("give an absolute path (got %r)" % python, "python")
        if not (os.path.isfile(py) and os.access(py, os.X_OK)):
            raise AgentError("interpreter does not exist or is not executable on this host: " + py, "python")
        path_prepend = os.path.dirname(py)
        if os.path.isfile(os.path.join(os.path.dirname(path_prepend), "pyvenv.cfg")):
            virtual_env = os.path.dirname(path_prepend)
    top = files.expand(need(req, "workdir", str))
    result_dir = os.path.normpath(os.path.join(top, files.expand(need(req, "result_dir", str))))
    if os.path.exists(result_dir) and not os.path.isdir(result_dir):
        raise AgentError("exists but is not a directory: " + result_dir, "result_dir")
    resolved = []
    for p in need(req, "procs", list):
        workdir = _directory(need(p, "workdir", str), need(p, "workdir_field", str))
        log_path = os.path.normpath(os.path.join(result_dir, files.expand(need(p, "log_path", str))))
        if os.path.lexists(log_path) and not os.path.isfile(log_path):
            raise AgentError("exists and is not a regular file: " + log_path, need(p, "log_field", str))
        resolved.append(dict(p, workdir=workdir, log_path=log_path))
    logs = [p["log_path"] for p in resolved]
    if len(set(logs)) != len(logs):
        raise AgentError("each process needs its own log_path", "processes")
    return {"python": python, "path_prepend": path_prepend, "virtual_env": virtual_env, "result_dir": result_dir,
            "procs": resolved}


def _lingering(socket: str, session: str, previous_pids: list) -> bool:
    """Whether the session name is taken by the finished session of an earlier run of ours (its panes are
    exactly the pids that run recorded, all dead): then it may be replaced. Any other session of that
    name refuses the launch."""
    panes = [p for p in (tmux.list_panes(socket) or []) if p["session"] == session]
    if not panes:
        return False
    if previous_pids and all(p["pid"] in previous_pids and p["dead"] for p in panes):
        return True
    raise AgentError("a tmux session named %r already exists on %s" % (session, socket), "name", kind="duplicate")


def op_launch(req: dict) -> dict:
    """Start the processes of one experiment that run on this host, as windows of one tmux session."""
    exp_id = need(req, "exp_id", str)
    session = need(req, "session", str)
    socket = tmux.socket_path(need(req, "socket_name", str))
    plan = _resolve_launch(req)
    replace = _lingering(socket, session, need(req, "replace_pids", list, []))
    rdir = files.run_dir(exp_id)
    if need(req, "dry_run", bool, False):
        return {"run_dir": rdir, "socket_path": socket, "result_dir": plan["result_dir"], "python": sys.executable,
                "procs": [{"role": p["role"], "workdir": p["workdir"], "log_path": p["log_path"]}
                          for p in plan["procs"]]}
    max_time_s = need(req, "max_time_s", int)
    grace_s = need(req, "deadline_grace_s", int, 5)
    try:
        os.makedirs(os.path.dirname(rdir), mode=0o700, exist_ok=True)
        os.mkdir(rdir, 0o700)
    except OSError as exc:
        raise AgentError("cannot create the run directory %s: %s" % (rdir, exc.strerror or exc)) from None
    started: list[dict] = []
    try:
        from . import program, wrapper

        files.write_atomic(os.path.join(rdir, "agent.py"), program.program_text().encode("utf-8"), replace=False)
        try:
            os.makedirs(plan["result_dir"], exist_ok=True)
        except OSError as exc:
            raise AgentError("cannot create %s: %s" % (plan["result_dir"], exc.strerror or exc), "result_dir") from None
        for p in plan["procs"]:
            script = wrapper.render(
                exp_id=exp_id, role=p["role"], run_dir=rdir, workdir=p["workdir"], env=need(p, "env", dict, {}),
                path_prepend=plan["path_prepend"], virtual_env=plan["virtual_env"], command=need(p, "command", str),
                log_path=p["log_path"], gate_url=need(p, "wait_for_url", str, None),
                gate_timeout_s=need(p, "wait_for_url_timeout_s", int, 600), python=sys.executable,
                max_time_s=max_time_s, deadline_grace_s=grace_s)
            files.write_atomic(os.path.join(rdir, p["role"] + ".sh"), script.encode("utf-8"), replace=False,
                               mode=0o600)
        if replace:  # the finished session of an earlier run of ours with this name
            tmux.kill_session(socket, session)
        for i, p in enumerate(plan["procs"]):
            argv = wrapper.pane_argv(exp_id, p["role"], os.path.join(rdir, p["role"] + ".sh"))
            if i == 0:
                ids = tmux.new_session(socket, session, p["role"], rdir, argv)
            else:
                ids = tmux.new_window(socket, session, p["role"], rdir, argv)
            ids["start"] = procs.start_time(ids["pid"])
            started.append(dict(ids, role=p["role"], workdir=p["workdir"], log_path=p["log_path"]))
    except BaseException:
        _discard(exp_id, socket, session if started else None, rdir)
        raise
    return {"run_dir": rdir, "socket_path": socket, "result_dir": plan["result_dir"], "python": sys.executable,
            "procs": started}


def _discard(exp_id: str, socket: str, session: str | None, rdir: str) -> dict:
    import shutil

    removed = tmux.kill_session(socket, session) if session else False
    report = procs.terminate([], exp_id + "/", 0.0)
    shutil.rmtree(rdir, ignore_errors=True)
    return dict(report, session_removed=removed)


def op_discard(req: dict) -> dict:
    """Undo a launch (another host of the same experiment refused it): kill, remove the run directory."""
    exp_id = need(req, "exp_id", str)
    return _discard(exp_id, need(req, "socket_path", str), need(req, "session", str), files.run_dir(exp_id))


def op_observe(req: dict) -> dict:
    """Everything status needs from this host in one go: panes per socket, and for each process its
    liveness, exit code, markers and the requested appended ranges of its log."""
    panes = {}
    for socket in need(req, "sockets", list, []):
        panes[socket] = tmux.list_panes(socket)
    out = []
    for p in need(req, "procs", list):
        rdir, role = need(p, "run_dir", str), need(p, "role", str)
        pid = need(p, "pid", int, None)
        # Liveness first, exit file second: a wrapper writes its exit file before it exits, so a dead
        # wrapper without an exit file really died without recording one.
        alive = procs.alive(pid, need(p, "start", str, None)) if pid else None
        exit_code = files.read_int(os.path.join(rdir, role + ".exit"))
        markers = [m for m in MARKERS if files.exists(os.path.join(rdir, "%s.%s" % (role, m)))]
        if _survivors_alive(os.path.join(rdir, role + ".survivors")):
            markers.append("survivors")
        final = exit_code is not None or alive is False
        log_path = need(p, "log_path", str)
        reads = []
        for r in need(p, "reads", list, []):
            budget = max(0, min(need(r, "budget", int), MAX_READ_BYTES))
            reads.append(files.read_appended(log_path, max(0, need(r, "offset", int)), budget, final))
        out.append({"alive": alive, "exit_code": exit_code, "markers": markers, "final": final,
                    "size": files.file_size(log_path), "reads": reads})
    return {"panes": panes, "procs": out}


def _survivors_alive(path: str) -> bool:
    """True while a process that survived a stop's SIGKILL (recorded by ``op_stop``) still lives."""
    if not files.exists(path):
        return False
    try:
        recorded = json.loads(files.read_small(path, 64 * 1024) or "[]")
        return any(procs.alive(int(x["pid"]), x.get("start")) for x in recorded)
    except (ValueError, TypeError, KeyError):
        return False


def op_stop(req: dict) -> dict:
    """Stop every process of one experiment on this host and verify (see ``procs.terminate``)."""
    exp_id = need(req, "exp_id", str)
    rdir = need(req, "run_dir", str)
    grace = float(need(req, "grace_s", (int, float), 10))
    wrappers = []
    for p in need(req, "procs", list):
        role = need(p, "role", str)
        if files.read_int(os.path.join(rdir, role + ".exit")) is None:
            try:
                files.touch(os.path.join(rdir, role + ".stopped"))
            except OSError:
                pass
        wrappers.append({"role": role, "pid": need(p, "pid", int, None), "start": need(p, "start", str, None)})
    report = procs.terminate([w for w in wrappers if w["pid"]], exp_id + "/", grace)
    for w in wrappers:  # what survived SIGKILL keeps its role "running" in every later observation
        left = [{"pid": x["pid"], "start": x["start"]} for x in report["survivors"] if x["role"] == w["role"]]
        path = os.path.join(rdir, w["role"] + ".survivors")
        if left:
            files.write_atomic(path, json.dumps(left).encode("utf-8"), replace=True, mode=0o600)
        elif files.exists(path):
            os.unlink(path)
    codes = {w["role"]: files.read_int(os.path.join(rdir, w["role"] + ".exit")) for w in wrappers}
    removed = False
    if need(req, "kill_session", bool, True):
        removed = tmux.kill_session(need(req, "socket_path", str), need(req, "session", str))
    return dict(report, exit_codes=codes, session_removed=removed)
