"""Launching a run: check the arguments here, let every host check its paths, then start everywhere.

A launch is two rounds, each one call per host in parallel: a dry run (each host resolves and checks
its workdirs, interpreter, result and log paths, that tmux and bash exist, that the session name is
free; with ``require_free_gpus`` the experiment's host also answers nvidia-smi's GPU and process
queries in that round, and a GPU below the fraction refuses the launch) and the real start (run
directory, wrapper scripts, the agent program for the watchdog, one tmux session per host with one
window per process). tmux is the arbiter of names: of two concurrent launches of one name on a host,
one gets the session and the other is refused. If any host refuses or fails to start, the hosts that
did start are rolled back (processes killed, run directory removed), so a refused launch leaves
nothing behind; the registry row is written once every host has started.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.experiments import blueprint as bp
from skill_server.experiments.checks import (
    check_env,
    compile_pattern,
    host_path,
    relative_path,
    session_name,
    socket_name,
)
from skill_server.experiments.models import LaunchInput, LaunchOutput, ProcessInfo
from skill_server.experiments.observe import observe
from skill_server.experiments.progress import iso
from skill_server.experiments.store import Registry, open_registry
from skill_server.gpus import nvidia_smi
from skill_server.gpus.query import free_problems, from_reply
from skill_server.hosts import LOCAL, HostUnreachable, call_hosts, expect, get_host, normalise

log = logging.getLogger(__name__)

DEFAULT_ENV = {"PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "LOGURU_COLORIZE": "NO"}
#: Grace between Ctrl-C and SIGTERM when the watchdog ends a run at its max time.
DEADLINE_GRACE_S = 5
LAUNCH_TIMEOUT_S = 60.0


@dataclass
class _Proc:
    role: str
    command: str
    host: str
    host_field: str
    workdir: str
    workdir_field: str
    env: dict[str, str]
    log_path: str
    log_field: str
    wait_for_url: str | None
    wait_for_url_timeout_s: int

    def request(self) -> dict[str, Any]:
        return {"role": self.role, "command": self.command, "workdir": self.workdir, "workdir_field": self.workdir_field,
                "env": self.env, "log_path": self.log_path, "log_field": self.log_field,
                "wait_for_url": self.wait_for_url, "wait_for_url_timeout_s": self.wait_for_url_timeout_s}


def _blueprint_defaults(path: str, main_host: str) -> dict[str, Any]:
    text, where = bp.read_blueprint(path, "blueprint")
    checked = bp.validate_text(text, where.parent, check_paths=main_host == LOCAL)
    errors = [f"[{p.field}] {p.message}" for p in checked.problems if p.severity == "error"]
    if errors:
        raise ToolInputError("blueprint has problems: " + "; ".join(errors), field="blueprint")
    return {
        "purpose": checked.values.get("exp_purpose"),
        "command": checked.values.get("exp_launch_command"),
        "workdir": checked.resolved.get("exp_codebase_dir"),
        "python": checked.resolved.get("exp_venv_exe"),
        "result_dir": checked.resolved.get("exp_result_dir"),
        "yaml_path": checked.resolved.get("exp_yaml_path"),
        "max_time_s": checked.max_time_s,
        "first_step_timeout_s": checked.first_step_timeout_s,
    }


def _seconds(value: float | None, default: int) -> int:
    return default if value is None else max(1, int(round(value)))


def _plan(inp: LaunchInput, main_host: str, defaults: dict[str, Any], session: str, exp_id: str
          ) -> tuple[list[_Proc], str, str | None, str]:
    """Processes, workdir, python and result_dir (host paths, resolved later on the host), checked for form.
    A log without an explicit path goes into the run's own folder, ``<result_dir>/<exp_id>/``, so no two runs
    share one (session names repeat across runs; ids never do)."""
    if inp.processes and inp.command:
        raise ToolInputError("give either command or processes, not both", field="processes")
    command = inp.command or (None if inp.processes else defaults.get("command"))
    if not inp.processes and not command:
        raise ToolInputError("command is required (or processes, or a blueprint)", field="command")
    if command is not None and "\x00" in command:
        raise ToolInputError("contains a NUL character", field="command")
    workdir_value = inp.workdir or defaults.get("workdir")
    if not workdir_value:
        raise ToolInputError("workdir is required (absolute directory the command runs in)", field="workdir")
    workdir = host_path(workdir_value, "workdir")
    python = inp.python or defaults.get("python")
    if python is not None:
        python = host_path(python, "python")
    result_dir = relative_path(inp.result_dir or defaults.get("result_dir") or bp.DEFAULT_RESULT_DIR, "result_dir")
    env = {**DEFAULT_ENV, **check_env(inp.env, "env")}
    procs: list[_Proc] = []
    if inp.processes:
        roles = [p.role for p in inp.processes]
        dupes = sorted({r for r in roles if roles.count(r) > 1})
        if dupes:
            raise ToolInputError(f"roles must be unique (repeated: {', '.join(dupes)})", field="processes")
        if inp.log_path is not None:
            raise ToolInputError("with processes, give log_path per process", field="log_path")
        for i, p in enumerate(inp.processes):
            at = f"processes.{i}"
            if "\x00" in p.command:
                raise ToolInputError("contains a NUL character", field=f"{at}.command")
            if p.wait_for_url is not None and not re.match(r"^https?://[^\s/]+\S*$", p.wait_for_url):
                raise ToolInputError("must be an http:// or https:// URL", field=f"{at}.wait_for_url")
            procs.append(_Proc(
                role=p.role, command=p.command, host=normalise(p.host, field=f"{at}.host") if p.host else main_host,
                host_field=f"{at}.host" if p.host else "host",
                workdir=host_path(p.workdir, f"{at}.workdir") if p.workdir else workdir,
                workdir_field=f"{at}.workdir" if p.workdir else "workdir",
                env={**env, **check_env(p.env, f"{at}.env")},
                log_path=(relative_path(p.log_path, f"{at}.log_path") if p.log_path
                          else f"{exp_id}/{session}.{p.role}.log"),
                log_field=f"{at}.log_path", wait_for_url=p.wait_for_url,
                wait_for_url_timeout_s=int(p.wait_for_url_timeout_s or 600)))
    else:
        assert command is not None
        procs.append(_Proc(
            role="main", command=command, host=main_host, host_field="host", workdir=workdir, workdir_field="workdir",
            env=env, log_path=relative_path(inp.log_path, "log_path") if inp.log_path else f"{exp_id}/{session}.log",
            log_field="log_path", wait_for_url=None, wait_for_url_timeout_s=0))
    return procs, workdir, python, result_dir


def _check_previous(reg: Registry, socket: str, session: str, hosts: list[str]) -> dict[str, list[int]]:
    """Refuse a name that is running on any of these hosts. For a finished run of ours whose session may
    linger, the pane pids it had on each host: only a session made of exactly those panes is replaced."""
    replace: dict[str, list[int]] = {h: [] for h in hosts}
    previous = [row for row in reg.session_runs(socket, session) if set(row.hosts) & set(hosts)]
    if not previous:
        return replace
    for view in observe(reg, previous):
        if view.state == "running" or view.state == "unreachable":
            why = "is already running" if view.state == "running" else "may still be running (its host cannot be asked)"
            raise ToolFailure(f"an experiment named {session!r} {why} (id {view.row.id}); stop_experiment it or "
                              "choose another name", field="name")
    for row in reversed(previous):  # newest last: each host's session belongs to the newest run there
        for h in replace:
            pids = [p.pid for p in row.processes if p.host == h and p.pid]
            if pids:
                replace[h] = pids
    return replace


def _host_error(exc: HostUnreachable, procs: list[_Proc], main_host: str) -> ToolFailure:
    field = next((p.host_field for p in procs if p.host == exc.host), "host" if exc.host == main_host else None)
    return ToolFailure(exc.message, field=field)


def launch(inp: LaunchInput) -> LaunchOutput:
    socket = socket_name()
    main_host = normalise(inp.host, field="host")
    defaults = _blueprint_defaults(inp.blueprint, main_host) if inp.blueprint is not None else {}
    session = session_name(inp.name, defaults.get("purpose"))
    created = time.time()
    exp_id = f"{session}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(created))}-{secrets.token_hex(2)}"
    procs, workdir, python, result_dir = _plan(inp, main_host, defaults, session, exp_id)
    max_time_s = _seconds(inp.max_time_s or defaults.get("max_time_s"), bp.DEFAULT_MAX_TIME_S)
    first_step_s = _seconds(inp.first_step_timeout_s or defaults.get("first_step_timeout_s"), bp.DEFAULT_FIRST_STEP_S)
    first_step_pattern = inp.first_step_pattern  # None: the first step:N line proves the first step
    if first_step_pattern is not None:
        compile_pattern(first_step_pattern, "first_step_pattern")

    hosts = [main_host] + [h for h in dict.fromkeys(p.host for p in procs) if h != main_host]

    def request(host: str, dry_run: bool, replace: list[int]) -> list[dict[str, Any]]:
        check_gpus = dry_run and host == main_host and inp.require_free_gpus is not None
        gpu_ops = nvidia_smi.query_ops() if check_gpus else []
        return [{"op": "launch", "exp_id": exp_id, "session": session, "socket_name": socket, "dry_run": dry_run,
                 "replace_pids": replace, "python": python, "workdir": workdir, "result_dir": result_dir,
                 "max_time_s": max_time_s, "deadline_grace_s": DEADLINE_GRACE_S,
                 "procs": [p.request() for p in procs if p.host == host]}] + gpu_ops

    with open_registry() as reg:
        replace = _check_previous(reg, socket, session, hosts)
        checked = call_hosts({h: request(h, True, replace[h]) for h in hosts}, timeout_s=LAUNCH_TIMEOUT_S)
        plans = {}
        for h in hosts:
            reply = checked[h]
            if isinstance(reply, HostUnreachable):
                raise _host_error(reply, procs, main_host)
            plans[h] = expect(reply[0])
        if inp.require_free_gpus is not None:
            _check_free_gpus(main_host, checked[main_host], inp.require_free_gpus)
        resolved = {(h, p["role"]): p for h in hosts for p in plans[h]["procs"]}
        spec: dict[str, Any] = {
            "format": 2, "host": main_host, "result_dir": plans[main_host]["result_dir"],
            "workdir": workdir, "python": python, "blueprint": inp.blueprint, "yaml_path": defaults.get("yaml_path"),
            "max_time_s": max_time_s, "first_step_timeout_s": first_step_s, "first_step_pattern": first_step_pattern,
            "hosts": {h: {"run_dir": plans[h]["run_dir"], "socket_path": plans[h]["socket_path"],
                          "attach": get_host(h).attach_command(plans[h]["socket_path"], session),
                          "python": plans[h]["python"]} for h in hosts},
            "processes": [{"role": p.role, "command": p.command, "host": p.host,
                           "workdir": resolved[(p.host, p.role)]["workdir"],
                           "log_path": resolved[(p.host, p.role)]["log_path"], "wait_for_url": p.wait_for_url}
                          for p in procs],
        }
        spec["attach"] = spec["hosts"][procs[0].host]["attach"]
        starting = [h for h in hosts if any(p.host == h for p in procs)]
        sockets = {h: plans[h]["socket_path"] for h in starting}
        started = call_hosts({h: request(h, False, replace[h]) for h in starting}, timeout_s=LAUNCH_TIMEOUT_S)
        failure: Exception | None = None
        for h in starting:
            reply = started[h]
            if isinstance(reply, HostUnreachable):
                failure = failure or _host_error(reply, procs, main_host)
            elif not reply[0].get("ok"):
                try:
                    expect(reply[0])
                except (ToolFailure, ToolInputError) as exc:
                    failure = failure or exc
        if failure is not None:
            _roll_back(exp_id, session, sockets, started)
            raise failure
        for p in spec["processes"]:
            ids = next(x for x in started[p["host"]][0]["procs"] if x["role"] == p["role"])  # type: ignore[index]
            p.update(window_id=ids["window_id"], pane_id=ids["pane_id"], pid=ids["pid"], start=ids["start"])
        try:
            reg.insert(id=exp_id, session=session, socket=socket, created=created, started_at=iso(created),
                       spec=spec)
        except BaseException:
            _roll_back(exp_id, session, sockets, started)
            raise
    log.info("launched %s (session %s) on %s", exp_id, session, ", ".join(starting))
    return LaunchOutput(
        id=exp_id, session=session, socket=socket, host=main_host, log_path=spec["processes"][0]["log_path"],
        result_dir=spec["result_dir"], attach=spec["attach"], started_at=iso(created),
        processes=[ProcessInfo(role=p["role"], host=p["host"], state="running", exit_code=None, log_path=p["log_path"],
                               pid=p["pid"], attach=spec["hosts"][p["host"]]["attach"]) for p in spec["processes"]],
        max_time_s=max_time_s, first_step_timeout_s=first_step_s,
    )


def _check_free_gpus(host: str, reply: Any, required: float) -> None:
    """Refuse the launch (nothing has started yet) unless every GPU of ``host`` is free enough; the
    nvidia-smi queries rode along with the host's check op."""
    problems = free_problems(from_reply(host, reply, first=1), required)
    if problems:
        raise ToolFailure("refusing to start: " + "; ".join(problems), field="require_free_gpus")


def _roll_back(exp_id: str, session: str, sockets: dict[str, str], started: dict[str, Any]) -> None:
    """Undo the hosts that did start (another host refused): kill, remove their run directories."""
    undo = [h for h, reply in started.items() if not isinstance(reply, HostUnreachable) and reply[0].get("ok")]
    if undo:
        call_hosts({h: [{"op": "discard", "exp_id": exp_id, "socket_path": sockets[h], "session": session}]
                    for h in undo}, timeout_s=LAUNCH_TIMEOUT_S)
