"""The agent's operations and its entry point: one JSON request in, one JSON reply out.

A request is ``{"v": PROTOCOL_VERSION, "ops": [{"op": NAME, ...}, ...]}``; the reply is
``{"v": ..., "results": [...]}`` with one result per op, in order: ``{"ok": true, ...}`` or
``{"ok": false, "error": "one line", "field": ..., "kind": ...}``. An op never raises past
:func:`handle`, so one bad op costs only its own result.

Generic ops (what any tool may use on any host): ``ping``, ``run`` (argv, bounded time and output),
``read`` (size plus one byte range, regular files only), ``write`` (atomic; create, or replace a regular
file), ``list_dir``. Experiment ops: ``launch``, ``discard``, ``observe``, ``stop``.
"""

from __future__ import annotations

import json
import os
import sys

from . import PROTOCOL_VERSION, files, procs, tmux
from .files import AgentError

# Imported where used (base64, shutil, subprocess, tempfile, wrapper): the agent starts on every call,
# and status needs none of them.

MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_READ_BYTES = 80 * 1024 * 1024
MAX_RUN_OUTPUT = 8 * 1024 * 1024
MAX_RUN_TIMEOUT_S = 3600
MARKERS = ("gate", "started", "stopped", "timedout")


# --------------------------------------------------------------------------------------------------
# request checking


def _need(req: dict, key: str, kind: type | tuple, default: object = ..., field: str | None = None) -> object:
    if key not in req or req[key] is None:
        if default is ...:
            raise AgentError("bad request: %r is required" % key, field or key)
        return default
    value = req[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise AgentError("bad request: %r has the wrong type" % key, field or key)
    return value


def _str_list(req: dict, key: str) -> list[str]:
    value = _need(req, key, list)
    if not value or not all(isinstance(v, str) for v in value):
        raise AgentError("bad request: %r must be a non-empty list of strings" % key, key)
    return value


# --------------------------------------------------------------------------------------------------
# generic ops


def op_ping(req: dict) -> dict:
    import shutil

    return {"python": sys.executable, "version": list(sys.version_info[:3]), "platform": sys.platform,
            "uid": os.getuid(), "pid": os.getpid(), "state_dir": files.state_dir(), "proc": procs.USE_PROC,
            "tmux": shutil.which("tmux"), "bash": shutil.which("bash")}


def _read_capped(handle: object, limit: int) -> tuple[str, bool]:
    handle.seek(0)  # type: ignore[attr-defined]
    data = handle.read(limit + 1)  # type: ignore[attr-defined]
    return data[:limit].decode("utf-8", "replace"), len(data) > limit


def op_run(req: dict) -> dict:
    """Run argv (no shell) with a time bound; the whole process group is killed at the bound."""
    import subprocess
    import tempfile

    argv = _str_list(req, "argv")
    timeout = float(_need(req, "timeout_s", (int, float), 30))
    timeout = max(0.1, min(timeout, MAX_RUN_TIMEOUT_S))
    limit = max(1024, min(int(_need(req, "max_output", int, 1024 * 1024)), MAX_RUN_OUTPUT))
    stdin = _need(req, "stdin", str, None)
    cwd = _need(req, "cwd", str, None)
    env = dict(os.environ)
    extra = _need(req, "env", dict, {})
    for key, value in extra.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise AgentError("bad request: env must map strings to strings", "env")
        env[key] = value
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            child = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                     stdout=out, stderr=err, cwd=files.expand(cwd) if cwd else None, env=env,
                                     start_new_session=True)
        except FileNotFoundError:
            return {"returncode": None, "stdout": "", "stderr": "", "timed_out": False, "truncated": False,
                    "error": "not found on this host: " + argv[0]}
        except OSError as exc:
            return {"returncode": None, "stdout": "", "stderr": "", "timed_out": False, "truncated": False,
                    "error": "cannot run %s: %s" % (argv[0], exc.strerror or exc)}
        timed_out = False
        try:
            child.communicate(stdin.encode("utf-8") if stdin is not None else None, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(child.pid, 9)
            except OSError:
                pass
            child.wait()
        stdout, cut_out = _read_capped(out, limit)
        stderr, cut_err = _read_capped(err, limit)
    return {"returncode": None if timed_out else child.returncode, "stdout": stdout, "stderr": stderr,
            "timed_out": timed_out, "truncated": cut_out or cut_err, "error": None}


def op_read(req: dict) -> dict:
    import base64

    path = files.expand(_need(req, "path", str))
    offset = _need(req, "offset", int, 0)
    length = max(0, min(_need(req, "length", int), MAX_READ_BYTES))
    try:
        size, data = files.read_range(path, offset, length)
    except FileNotFoundError:
        raise AgentError("file not found: " + path, kind="not_found") from None
    except OSError as exc:
        raise AgentError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    out = {"path": path, "size": size}
    if _need(req, "text", bool, False):
        out["text"] = data.decode("utf-8", "replace")
    else:
        out["data"] = base64.b64encode(data).decode("ascii")
    return out


def op_write(req: dict) -> dict:
    import base64

    path = _need(req, "path", str)
    if "text" in req:
        data = _need(req, "text", str).encode("utf-8")
    else:
        data = base64.b64decode(_need(req, "data", str))
    mode = _need(req, "mode", int, 0o644) & 0o777
    return {"path": files.write_atomic(path, data, replace=_need(req, "replace", bool), mode=mode)}


def op_list_dir(req: dict) -> dict:
    path = _need(req, "path", str)
    limit = max(1, min(_need(req, "limit", int, 1000), 10000))
    try:
        return {"entries": files.list_dir(path, limit)}
    except FileNotFoundError:
        raise AgentError("directory not found: " + files.expand(path), kind="not_found") from None
    except OSError as exc:
        raise AgentError("cannot list %s: %s" % (files.expand(path), exc.strerror or exc)) from None


# --------------------------------------------------------------------------------------------------
# experiment ops


def _directory(raw: str, field: str) -> str:
    path = files.expand(raw)
    if not os.path.isabs(path):
        raise AgentError("give an absolute path (got %r)" % raw, field)
    if not os.path.isdir(path):
        raise AgentError("directory does not exist on this host: " + path, field)
    return path


def _resolve_launch(req: dict) -> dict:
    """Check and resolve a launch on this host without creating anything."""
    import shutil

    for tool in ("tmux", "bash") if req.get("procs") else ():
        if shutil.which(tool) is None:
            raise AgentError("%s is not installed on this host (experiments run in tmux under bash)" % tool,
                             kind="no_" + tool)
    python = _need(req, "python", str, None)
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
    top = files.expand(_need(req, "workdir", str))
    result_dir = os.path.normpath(os.path.join(top, files.expand(_need(req, "result_dir", str))))
    if os.path.exists(result_dir) and not os.path.isdir(result_dir):
        raise AgentError("exists but is not a directory: " + result_dir, "result_dir")
    resolved = []
    for p in _need(req, "procs", list):
        workdir = _directory(_need(p, "workdir", str), _need(p, "workdir_field", str))
        log_path = os.path.normpath(os.path.join(result_dir, files.expand(_need(p, "log_path", str))))
        if os.path.lexists(log_path) and not os.path.isfile(log_path):
            raise AgentError("exists and is not a regular file: " + log_path, _need(p, "log_field", str))
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
    exp_id = _need(req, "exp_id", str)
    session = _need(req, "session", str)
    socket = tmux.socket_path(_need(req, "socket_name", str))
    plan = _resolve_launch(req)
    replace = _lingering(socket, session, _need(req, "replace_pids", list, []))
    rdir = files.run_dir(exp_id)
    if _need(req, "dry_run", bool, False):
        return {"run_dir": rdir, "socket_path": socket, "result_dir": plan["result_dir"], "python": sys.executable,
                "procs": [{"role": p["role"], "workdir": p["workdir"], "log_path": p["log_path"]}
                          for p in plan["procs"]]}
    max_time_s = _need(req, "max_time_s", int)
    grace_s = _need(req, "deadline_grace_s", int, 5)
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
                exp_id=exp_id, role=p["role"], run_dir=rdir, workdir=p["workdir"], env=_need(p, "env", dict, {}),
                path_prepend=plan["path_prepend"], virtual_env=plan["virtual_env"], command=_need(p, "command", str),
                log_path=p["log_path"], gate_url=_need(p, "wait_for_url", str, None),
                gate_timeout_s=_need(p, "wait_for_url_timeout_s", int, 600), python=sys.executable,
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
    exp_id = _need(req, "exp_id", str)
    return _discard(exp_id, _need(req, "socket_path", str), _need(req, "session", str), files.run_dir(exp_id))


def op_observe(req: dict) -> dict:
    """Everything status needs from this host in one go: panes per socket, and for each process its
    liveness, exit code, markers and the requested appended ranges of its log."""
    panes = {}
    for socket in _need(req, "sockets", list, []):
        panes[socket] = tmux.list_panes(socket)
    out = []
    for p in _need(req, "procs", list):
        rdir, role = _need(p, "run_dir", str), _need(p, "role", str)
        pid = _need(p, "pid", int, None)
        # Liveness first, exit file second: a wrapper writes its exit file before it exits, so a dead
        # wrapper without an exit file really died without recording one.
        alive = procs.alive(pid, _need(p, "start", str, None)) if pid else None
        exit_code = files.read_int(os.path.join(rdir, role + ".exit"))
        markers = [m for m in MARKERS if files.exists(os.path.join(rdir, "%s.%s" % (role, m)))]
        if _survivors_alive(os.path.join(rdir, role + ".survivors")):
            markers.append("survivors")
        final = exit_code is not None or alive is False
        log_path = _need(p, "log_path", str)
        reads = []
        for r in _need(p, "reads", list, []):
            budget = max(0, min(_need(r, "budget", int), MAX_READ_BYTES))
            reads.append(files.read_appended(log_path, max(0, _need(r, "offset", int)), budget, final))
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
    exp_id = _need(req, "exp_id", str)
    rdir = _need(req, "run_dir", str)
    grace = float(_need(req, "grace_s", (int, float), 10))
    wrappers = []
    for p in _need(req, "procs", list):
        role = _need(p, "role", str)
        if files.read_int(os.path.join(rdir, role + ".exit")) is None:
            try:
                files.touch(os.path.join(rdir, role + ".stopped"))
            except OSError:
                pass
        wrappers.append({"role": role, "pid": _need(p, "pid", int, None), "start": _need(p, "start", str, None)})
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
    if _need(req, "kill_session", bool, True):
        removed = tmux.kill_session(_need(req, "socket_path", str), _need(req, "session", str))
    return dict(report, exit_codes=codes, session_removed=removed)


OPS = {"ping": op_ping, "run": op_run, "read": op_read, "write": op_write, "list_dir": op_list_dir,
       "launch": op_launch, "discard": op_discard, "observe": op_observe, "stop": op_stop}


def handle(request: object) -> dict:
    """Answer one request; never raises."""
    if not isinstance(request, dict) or request.get("v") != PROTOCOL_VERSION or not isinstance(
            request.get("ops"), list):
        return {"v": PROTOCOL_VERSION, "error": "bad request (protocol version %d expected)" % PROTOCOL_VERSION}
    results = []
    for op in request["ops"]:
        name = op.get("op") if isinstance(op, dict) else None
        fn = OPS.get(name) if isinstance(name, str) else None
        if fn is None:
            results.append({"ok": False, "error": "unknown operation %r" % (name,), "field": None, "kind": "error"})
            continue
        try:
            result = fn(op)
            result["ok"] = True
        except AgentError as exc:
            result = {"ok": False, "error": exc.message, "field": exc.field, "kind": exc.kind}
        except Exception as exc:  # a bug or an unexpected OS error: one line, never a traceback
            result = {"ok": False, "error": "host agent error in %s: %s: %s" % (name, type(exc).__name__, exc),
                      "field": None, "kind": "internal"}
        results.append(result)
    return {"v": PROTOCOL_VERSION, "results": results}


#: A serving agent exits after this long without a request (the caller starts a new one when needed).
SERVE_IDLE_S = 300.0


def _encode(reply: dict) -> bytes:
    return json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _answer(raw: bytes) -> dict:
    try:
        return handle(json.loads(raw.decode("utf-8")))
    except ValueError as exc:
        return {"v": PROTOCOL_VERSION, "error": "request is not JSON: %s" % exc}


def serve() -> int:
    """Answer framed requests (a length line, then that many bytes of JSON; replies framed alike) until
    stdin closes or stays idle for ``SERVE_IDLE_S``: the caller keeps
    one such agent per host, so a call costs a round trip on the open connection, not a new process.
    ``ready`` is written first, once nothing of the program is left unread on stdin."""
    import select

    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    buf = b""
    while True:
        while b"\n" not in buf:
            if not select.select([0], [], [], SERVE_IDLE_S)[0]:
                return 0
            chunk = os.read(0, 65536)
            if not chunk:
                return 0
            buf += chunk
        head, buf = buf.split(b"\n", 1)
        try:
            size = int(head)
        except ValueError:
            return 2
        if size > MAX_REQUEST_BYTES:
            return 2
        while len(buf) < size:
            chunk = os.read(0, max(65536, size - len(buf)))
            if not chunk:
                return 0
            buf += chunk
        body, buf = buf[:size], buf[size:]
        reply = _encode(_answer(body))
        out.write(str(len(reply)).encode("ascii") + b"\n" + reply)
        out.flush()


def main(argv: list[str]) -> int:
    """Entry point of the shipped program: ``watchdog ...``, ``serve``, or one request on stdin and the
    reply on stdout."""
    if len(argv) > 1 and argv[1] == "watchdog":
        from . import watchdog

        return watchdog.main(argv[2:])
    if len(argv) > 1 and argv[1] == "serve":
        return serve()
    raw = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    if len(raw) > MAX_REQUEST_BYTES:
        reply = {"v": PROTOCOL_VERSION, "error": "request over %d bytes" % MAX_REQUEST_BYTES}
    else:
        reply = _answer(raw)
    sys.stdout.buffer.write(_encode(reply))
    sys.stdout.buffer.flush()
    return 0
