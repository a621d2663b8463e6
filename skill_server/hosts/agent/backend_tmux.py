"""The tmux backend: a run's processes on this host are windows of one tmux session, its monitor beside them.

Its handle: the tmux server's socket path, the session's name, and tmux's id of the session (``$3``, known once
the first window exists; with the recorded panes it is the session's identity, a name alone never is). Each
process is its pane's command (the wrapper, ``wrapper.pane_argv``), so its pid and start time are known at once
and its liveness is the wrapper's; a wrapper that could not write its exit code (a full disk) left it in tmux
(``tmux.recorded_exit``). Stdlib only, Python 3.8.
"""

from __future__ import annotations

import os
import shutil

from . import procs, tmux
from .backend import Backend, Launch, Liveness
from .files import AgentError
from .protocol import TYPE_CHECKING
from .request import need_or
from .rundir import DISCARDED, SCRIPT, SESSION_REMOVED, RunDir

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from .protocol import DiscardReply, Handle, StartedProc, StopReply


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


class Tmux(Backend):
    kind = "tmux"

    def check(self, launch: Launch) -> None:
        for tool in ("tmux", "bash") if launch.plan["procs"] else ():
            if shutil.which(tool) is None:
                raise AgentError("%s is not installed on this host (experiments run in tmux under bash)" % tool,
                                 kind="no_" + tool)

    def prepare(self, launch: Launch) -> None:
        """Options: ``socket_name`` (the tmux server's) and ``replace_pids`` (the panes of an earlier run of ours
        whose finished session may be replaced); a launch request kept from before backends had them at its top
        level (a resume relaunches it)."""
        options, req = launch.options, launch.req
        name = options.get("socket_name") or req.get("socket_name")
        if not isinstance(name, str) or not name:
            raise AgentError("bad request: 'socket_name' is required", "socket_name")
        socket = tmux.socket_path(name)
        launch.handle = {"kind": self.kind, "socket_path": socket, "session": launch.session, "session_id": None}
        previous = options.get("replace_pids", req.get("replace_pids")) or []
        options["replace"] = _lingering(socket, launch.session, list(previous) if isinstance(previous, list) else [])

    def attach(self, handle: Mapping[str, Any], procs: Sequence[Mapping[str, Any]]) -> list[str]:
        return ["tmux", "-S", str(handle.get("socket_path") or ""), "attach", "-t", str(handle.get("session") or "")]

    def start(self, launch: Launch, monitor_spec: dict[str, Any]) -> list[StartedProc]:
        from . import monitor, wrapper

        socket, session = launch.handle["socket_path"], launch.session
        if launch.options.get("replace"):  # the finished session of an earlier run of ours with this name
            tmux.kill_session(socket, str(launch.options["replace"]))
        run = RunDir(launch.rdir)
        started: list[StartedProc] = []
        for i, p in enumerate(launch.plan["procs"]):
            argv = wrapper.pane_argv(launch.exp_id, p["role"], run.of(p["role"], SCRIPT))
            if i == 0:
                ids = tmux.new_session(socket, session, p["role"], launch.rdir, argv)
                launch.handle["session_id"] = ids["session_id"]
            else:
                ids = tmux.new_window(socket, session, p["role"], launch.rdir, argv)
            started.append({"window_id": ids["window_id"], "pane_id": ids["pane_id"], "pid": ids["pid"],
                            "start": procs.start_time(ids["pid"]), "role": p["role"], "workdir": p["workdir"],
                            "log_path": p["log_path"]})
        monitor.start(launch.rdir, monitor.spec_for(launch.exp_id, launch.handle, started, monitor_spec))
        return started

    def discard(self, handle: Mapping[str, Any], exp_id: str, rdir: str) -> DiscardReply:
        """End the run's sessions (by identity: the session id when known, else the run's marker in its panes) and
        marked processes; empty its run directory and leave it marked discarded."""
        removed, answered = tmux.kill_run_sessions(str(handle.get("socket_path") or ""), exp_id,
                                                   handle.get("session_id"), [])
        report = procs.terminate([], exp_id + "/", 0.0)
        if os.path.isdir(rdir):
            run = RunDir(rdir)
            run.clear()
            run.touch(DISCARDED)
        return {"interrupted": report["interrupted"], "terminated": report["terminated"], "killed": report["killed"],
                "survivors": report["survivors"], "session_removed": removed,
                "confirmed": answered and not report["survivors"]}

    def observe(self, p: Mapping[str, object], handle: Mapping[str, Any], cache: dict[str, Any]) -> Liveness:
        """Liveness first, exit code second: a wrapper records its exit code before it exits, so a dead wrapper
        without one (in the file or in tmux) really died without recording one. A process recorded without a pid
        (the oldest runs) is alive while its pane is."""
        pid, start = need_or(p, "pid", int, None), need_or(p, "start", str, None)
        pane_id = need_or(p, "pane_id", str, None)
        alive: bool | None
        if pid:
            alive = procs.alive(pid, start)
        elif pane_id:
            socket = str(handle.get("socket_path") or "")
            key = "panes:" + socket
            if key not in cache:
                cache[key] = tmux.list_panes(socket) or []
            alive = any(x["pane_id"] == pane_id and not x["dead"] for x in cache[key])
        else:
            alive = None
        elapsed = procs.age(pid, start) if alive and pid else None
        role = str(p["role"])
        run = RunDir(str(p["run_dir"]))
        code = run.exit_code(role)
        if code is not None:
            return Liveness(alive, elapsed, code, "file")
        if alive is not False:
            return Liveness(alive, elapsed)
        from . import wrapper

        code, source = tmux.recorded_exit(str(handle.get("socket_path") or ""), handle.get("session_id"), pane_id,
                                          wrapper.exit_option(role))
        if code is not None:  # whoever finds a code and no file writes the file, once there is space
            run.write_exit(role, code)
        return Liveness(alive, elapsed, code, source)

    def release(self, handle: Mapping[str, Any], exp_id: str) -> bool | None:
        return tmux.remove_finished(str(handle.get("socket_path") or ""), exp_id)

    def stop(self, handle: Mapping[str, Any], exp_id: str, rdir: str, procs_: list[dict[str, object]],
             grace_s: float, keep_session: bool = False) -> StopReply:
        """Every role not yet ended is marked ``stopped``, its processes get Ctrl-C, a grace, SIGTERM, SIGKILL, and
        what survives is recorded; then the run's tmux session is removed. Only the recorded identities of its own
        run are touched: the wrappers (pid plus start time) and the processes carrying its run marker."""
        run = RunDir(rdir)
        wrappers: list[procs.Wrapper] = []
        recorded: list[tmux.RecordedPane] = []
        names = []
        for p in procs_:
            role = str(p["role"])
            names.append(role)
            raw_pid, raw_start, raw_pane = p.get("pid"), p.get("start"), p.get("pane_id")
            pid = raw_pid if isinstance(raw_pid, int) else None
            start = raw_start if isinstance(raw_start, str) else None
            recorded.append({"pane_id": raw_pane if isinstance(raw_pane, str) else None, "pid": pid, "start": start})
            if pid:
                wrappers.append({"role": role, "pid": pid, "start": start})
        unmarked = run.mark_stopped(names)
        report = procs.terminate(wrappers, exp_id + "/", grace_s)
        for role in names:  # what survived SIGKILL keeps its role "running" in every later observation
            run.write_survivors(role, [{"pid": x["pid"], "start": x["start"]} for x in report["survivors"]
                                       if x["role"] == role])
        codes = {role: run.exit_code(role) for role in names}
        removed = False
        if not keep_session:  # the run's monitor may have removed it as the run ended, maybe a moment ago
            gone, none_left = tmux.kill_run_sessions(str(handle.get("socket_path") or ""), exp_id,
                                                     handle.get("session_id"), recorded)
            removed = gone or none_left or run.has(SESSION_REMOVED)
        return {"interrupted": report["interrupted"], "terminated": report["terminated"], "killed": report["killed"],
                "survivors": report["survivors"], "exit_codes": codes, "session_removed": removed,
                "unmarked": unmarked}

    def legacy_handle(self, spec: Mapping[str, Any]) -> Handle | None:
        if not spec.get("socket_path"):
            return None
        handle: dict[str, Any] = {"kind": self.kind, "socket_path": str(spec["socket_path"]),
                                  "session": str(spec.get("session") or ""), "session_id": None}
        return handle  # type: ignore[return-value]  # tmux's own keys besides kind


BACKEND = Tmux()
