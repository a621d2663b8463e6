"""The experiment tools: blueprint, launch_experiment, wait_experiment, experiment_status, stop_experiment.

(``collect_results`` lives in ``results``.) Every tool is a plain function of its pydantic input model.
State lives in three places: the registry (``store``), the run directory of each experiment (wrapper
scripts, pid and exit-code files) and tmux. ``observe`` combines them into one view per experiment;
it is the only place that derives states, scans logs and enforces deadlines.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, StrictBool, StrictStr

from skill_server.errors import ToolFailure, ToolInputError
from skill_server.experiments import blueprint as bp
from skill_server.experiments import logs, tmux, wrapper
from skill_server.experiments.signatures import SIGNATURES_BY_NAME
from skill_server.experiments.store import Registry, Row, open_registry, run_dir
from skill_server.fsutil import write_text_atomic
from skill_server.models import NonNegativeInt, PositiveInt, Progress, ToolInput, ToolOutput

log = logging.getLogger(__name__)

State = Literal["running", "succeeded", "failed", "stopped", "timed_out", "lost"]
ProcessState = Literal["running", "waiting", "succeeded", "failed", "stopped", "timed_out", "lost"]
TERMINAL = ("succeeded", "failed", "stopped", "timed_out", "lost")
WAIT_SCHEDULE_S = (30, 60, 120, 240, 480, 960)
WAIT_DEFAULT_S, WAIT_MAX_S = 30, 50
DEADLINE_GRACE_S = 5.0
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ROLE_RE = r"^[A-Za-z0-9_-]{1,32}$"
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_PROCESSES = 8
DEFAULT_ENV = {"PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "LOGURU_COLORIZE": "NO"}


# ==================================================================================================
# Models


class ProcessSpec(ToolInput):
    role: StrictStr = Field(pattern=ROLE_RE, description="Window name and log suffix, e.g. 'server', 'client1'.")
    command: StrictStr = Field(min_length=1, max_length=16000, description="Shell command of this process.")
    workdir: StrictStr | None = Field(default=None, description="Absolute directory; default: the top-level workdir.")
    env: dict[str, StrictStr] | None = Field(default=None, description="Extra variables (on top of the top-level env).")
    wait_for_url: StrictStr | None = Field(
        default=None, description="Start only once this http(s) URL answers (e.g. the swarm server's port).")
    wait_for_url_timeout_s: PositiveInt | None = Field(
        default=None, le=3600, description="Give up waiting after this many seconds (default 600); exit code 124.")
    log_path: StrictStr | None = Field(default=None, description="Default: <result_dir>/<session>.<role>.log.")


class LaunchInput(ToolInput):
    blueprint: StrictStr | None = Field(default=None, description="Absolute path of a blueprint markdown file; "
                                        "its fields are defaults that explicit arguments override.")
    name: StrictStr | None = Field(default=None, description="Session name ([A-Za-z0-9_-]); 'ajet_' is prefixed "
                                   "unless it contains 'ajet'. Default: from the blueprint purpose.")
    command: StrictStr | None = Field(default=None, max_length=16000, description="Command of a one-process run.")
    workdir: StrictStr | None = Field(default=None, description="Absolute working directory.")
    python: StrictStr | None = Field(default=None, description="Venv interpreter; its bin dir is put first on PATH.")
    env: dict[str, StrictStr] | None = Field(default=None, description="Environment set explicitly in the session.")
    result_dir: StrictStr | None = Field(default=None, description="Default: <workdir>/auto_agent/exp_results/.")
    log_path: StrictStr | None = Field(default=None, description="Default: <result_dir>/<session>.log.")
    max_time_s: PositiveInt | None = Field(default=None, description="Wall-clock budget (default 86400).")
    first_step_timeout_s: PositiveInt | None = Field(default=None, description="First-step deadline (default 1200).")
    first_step_pattern: StrictStr | None = Field(default=None, max_length=500,
                                                 description="Regex proving step 1 (default: a kl_loss value).")
    processes: list[ProcessSpec] | None = Field(default=None, min_length=1, max_length=MAX_PROCESSES,
                                                description="Several processes as windows of one session, in order.")


class ProcessInfo(ToolOutput):
    role: str
    state: ProcessState
    exit_code: int | None
    log_path: str


class LaunchOutput(ToolOutput):
    id: str
    session: str
    socket: str
    log_path: str
    result_dir: str
    attach: str
    started_at: str
    processes: list[ProcessInfo]
    max_time_s: int
    first_step_timeout_s: int


class ErrorHit(ToolOutput):
    signature: str
    title: str
    severity: str
    line: str
    count: int
    hint: str
    role: str | None = None


class ExperimentStatus(ToolOutput):
    id: str
    session: str
    socket: str
    attach: str
    state: State
    exit_code: int | None
    started_at: str
    elapsed_s: float
    time_left_s: float | None
    max_time_s: int
    first_step_seen: bool
    first_step_overdue: bool
    global_step: int | None
    last_metrics: dict[str, float | int | None]
    errors: list[ErrorHit]
    lines: list[str]
    cursor: str
    skipped_bytes: int = Field(description="Log bytes between the cursor and the returned lines that were skipped.")
    unscanned_bytes: int = Field(description="Log bytes never scanned for errors/metrics (backlog over budget).")
    processes: list[ProcessInfo]
    log_path: str
    result_dir: str
    note: str | None = None


class StatusInput(ToolInput):
    id: StrictStr | None = Field(default=None, description="Experiment id or session name; all when absent.")
    since: StrictStr | None = Field(default=None, description="Cursor from a previous result (needs id); "
                                    "default: the cursor stored by the previous status call.")
    max_lines: NonNegativeInt | None = Field(default=None, le=logs.MAX_LINES,
                                             description="New lines to return (default 200 for one id, 20 each for all).")
    limit: PositiveInt | None = Field(default=None, le=500, description="When listing all: at most this many "
                                      "(every unfinished one plus the newest finished; default 50).")


class StatusOutput(ToolOutput):
    experiments: list[ExperimentStatus]


class WaitInput(ToolInput):
    id: StrictStr = Field(description="Experiment id or session name.")
    timeout_s: NonNegativeInt | None = Field(default=None, description="Default 30; values above 50 are clamped.")
    until: Literal["exit", "first_step", "pattern"] | None = Field(default=None, description="Default 'exit'.")
    pattern: StrictStr | None = Field(default=None, max_length=500, description="Regex, for until='pattern'.")
    since: StrictStr | None = Field(default=None, description="For until='pattern': also search output after this "
                                    "cursor (default: only output appended while waiting).")


class WaitOutput(ExperimentStatus):
    reason: Literal["exited", "first_step", "pattern", "error", "timeout"]
    next_wait_s: int = Field(description="Suggested seconds before the next check (0 when finished).")
    waited_s: float
    timeout_s: int
    matched_line: str | None = None


class StopInput(ToolInput):
    id: StrictStr = Field(description="Experiment id or session name (only experiments this server launched).")
    grace_s: NonNegativeInt | None = Field(default=None, le=120, description="Seconds after Ctrl-C before killing "
                                           "(default 10).")


class StopOutput(ExperimentStatus):
    interrupted: list[str]
    killed: list[str]
    session_removed: bool


class BlueprintInput(ToolInput):
    action: Literal["validate", "template"]
    path: StrictStr | None = Field(default=None, description="validate: the blueprint to read; template: where to "
                                   "write it (optional, absolute).")
    text: StrictStr | None = Field(default=None, max_length=bp.MAX_BLUEPRINT_BYTES,
                                   description="validate: blueprint text instead of a file.")
    purpose: StrictStr | None = None
    codebase_dir: StrictStr | None = None
    venv_exe: StrictStr | None = None
    yaml_path: StrictStr | None = None
    launch_command: StrictStr | None = None
    result_dir: StrictStr | None = None
    max_time: StrictStr | None = Field(default=None, description="e.g. '24 hours' (default), '90 min', '1.5h'.")
    first_step_timeout: StrictStr | None = Field(default=None, description="e.g. '20 min' (default).")
    notes: StrictStr | None = None
    overwrite: StrictBool | None = Field(default=None, description="template: replace an existing file.")


class BlueprintProblem(ToolOutput):
    field: str
    severity: Literal["error", "warning"]
    message: str


class BlueprintOutput(ToolOutput):
    action: str
    ok: bool
    fields: dict[str, str]
    resolved: dict[str, str]
    max_time_s: float | None
    first_step_timeout_s: float | None
    notes: str
    problems: list[BlueprintProblem]
    text: str | None = None
    path: str | None = None


# ==================================================================================================
# blueprint


def blueprint_tool(inp: BlueprintInput) -> BlueprintOutput:
    template_fields = ("purpose", "codebase_dir", "venv_exe", "yaml_path", "launch_command", "result_dir",
                       "max_time", "first_step_timeout", "notes")
    if inp.action == "validate":
        given = [f for f in template_fields if getattr(inp, f) is not None]
        if given:
            raise ToolInputError("only used by action='template'", field=given[0])
        if (inp.path is None) == (inp.text is None):
            raise ToolInputError("give exactly one of path or text", field="path")
        if inp.path is not None:
            text, base = bp.read_blueprint(inp.path, "path")
        else:
            text, base = inp.text or "", Path.cwd()
        return _blueprint_output("validate", bp.validate_text(text, base), None, inp.path)
    if inp.text is not None:
        raise ToolInputError("only used by action='validate'", field="text")
    fields = {
        "exp_purpose": inp.purpose, "exp_codebase_dir": inp.codebase_dir, "exp_venv_exe": inp.venv_exe,
        "exp_yaml_path": inp.yaml_path, "exp_launch_command": inp.launch_command, "exp_result_dir": inp.result_dir,
        "exp_max_time": inp.max_time, "first_step_timeout": inp.first_step_timeout, "notes": inp.notes,
    }
    for name in ("max_time", "first_step_timeout"):
        value = getattr(inp, name)
        if value is not None and bp.parse_duration(value) is None:
            raise ToolInputError(f"cannot read a duration from {value!r} (try '24 hours', '90 min', '1.5h')",
                                 field=name)
    text = bp.render(fields)
    base = Path.cwd()
    written = None
    if inp.path is not None:
        target = Path(inp.path).expanduser()
        if not target.is_absolute():
            raise ToolInputError(f"give an absolute path (got {inp.path!r})", field="path")
        written = str(write_text_atomic(target, text, overwrite=bool(inp.overwrite), field="path"))
        base = target.parent
    return _blueprint_output("template", bp.validate_text(text, base), text, written)


def _blueprint_output(action: str, v: bp.Validated, text: str | None, path: str | None) -> BlueprintOutput:
    return BlueprintOutput(
        action=action, ok=v.ok, fields=v.values, resolved=v.resolved, max_time_s=v.max_time_s,
        first_step_timeout_s=v.first_step_timeout_s, notes=v.notes,
        problems=[BlueprintProblem(field=p.field, severity=p.severity, message=p.message) for p in v.problems],  # type: ignore[arg-type]
        text=text, path=path,
    )


# ==================================================================================================
# launch


def _now_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


def _slug(text: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9]+", "_", text.lower())).strip("_")[:40]


def session_name(name: str | None, purpose: str | None) -> str:
    if name is not None:
        if not NAME_RE.match(name):
            raise ToolInputError(
                f"{name!r} is not a usable session name: use 1-64 letters, digits, '_' or '-' "
                "(tmux treats '.' and ':' as separators)", field="name")
        return name if "ajet" in name else ("ajet_" + name)[:64]
    if purpose:
        slug = _slug(purpose)
        if slug:
            return slug if "ajet" in slug else "ajet_" + slug
    raise ToolInputError("a session name is required (or a blueprint with [exp_purpose])", field="name")


def _abs_dir(value: str, field: str, *, must_exist: bool = True) -> str:
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise ToolInputError(f"give an absolute path (got {value!r})", field=field)
    if must_exist and not path.is_dir():
        raise ToolInputError(f"directory does not exist: {path}", field=field)
    return os.path.normpath(str(path))


def _resolve(value: str, base: str) -> str:
    path = Path(value).expanduser()
    return os.path.normpath(str(path if path.is_absolute() else Path(base) / path))


def _check_env(env: dict[str, str] | None, field: str) -> dict[str, str]:
    for key, value in (env or {}).items():
        if not ENV_KEY_RE.match(key):
            raise ToolInputError(f"{key!r} is not a valid environment variable name", field=f"{field}.{key}")
        if "\x00" in value:
            raise ToolInputError("contains a NUL character", field=f"{field}.{key}")
    return dict(env or {})


def _compile(pattern: str, field: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise ToolInputError(f"not a valid regular expression: {exc}", field=field) from None


@dataclass
class _Proc:
    role: str
    command: str
    workdir: str
    env: dict[str, str]
    log_path: str
    wait_for_url: str | None
    wait_for_url_timeout_s: int


def launch_experiment(inp: LaunchInput) -> LaunchOutput:
    socket = tmux.socket_name()
    defaults: dict[str, Any] = {}
    if inp.blueprint is not None:
        text, base = bp.read_blueprint(inp.blueprint, "blueprint")
        checked = bp.validate_text(text, base)
        errors = [f"[{p.field}] {p.message}" for p in checked.problems if p.severity == "error"]
        if errors:
            raise ToolInputError("blueprint has problems: " + "; ".join(errors), field="blueprint")
        defaults = {
            "purpose": checked.values.get("exp_purpose"),
            "command": checked.values.get("exp_launch_command"),
            "workdir": checked.resolved.get("exp_codebase_dir"),
            "python": checked.resolved.get("exp_venv_exe"),
            "result_dir": checked.resolved.get("exp_result_dir"),
            "yaml_path": checked.resolved.get("exp_yaml_path"),
            "max_time_s": checked.max_time_s,
            "first_step_timeout_s": checked.first_step_timeout_s,
        }
    session = session_name(inp.name, defaults.get("purpose"))
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
    workdir = _abs_dir(workdir_value, "workdir")

    python = inp.python or defaults.get("python")
    path_prepend = virtual_env = None
    if python:
        py = Path(python).expanduser()
        if not py.is_absolute():
            raise ToolInputError(f"give an absolute path (got {python!r})", field="python")
        if not (py.is_file() and os.access(py, os.X_OK)):
            raise ToolInputError(f"interpreter does not exist or is not executable: {py}", field="python")
        path_prepend = str(py.parent)
        if (py.parent.parent / "pyvenv.cfg").is_file():
            virtual_env = str(py.parent.parent)

    env = {**DEFAULT_ENV, **_check_env(inp.env, "env")}
    result_dir = _resolve(inp.result_dir or defaults.get("result_dir") or bp.DEFAULT_RESULT_DIR, workdir)
    max_time_s = int(inp.max_time_s or defaults.get("max_time_s") or bp.DEFAULT_MAX_TIME_S)
    first_step_s = int(inp.first_step_timeout_s or defaults.get("first_step_timeout_s") or bp.DEFAULT_FIRST_STEP_S)
    first_step_pattern = inp.first_step_pattern or logs.DEFAULT_FIRST_STEP_PATTERN
    _compile(first_step_pattern, "first_step_pattern")

    procs: list[_Proc] = []
    if inp.processes:
        roles = [p.role for p in inp.processes]
        dupes = sorted({r for r in roles if roles.count(r) > 1})
        if dupes:
            raise ToolInputError(f"roles must be unique (repeated: {', '.join(dupes)})", field="processes")
        if inp.log_path is not None:
            raise ToolInputError("with processes, give log_path per process", field="log_path")
        for i, p in enumerate(inp.processes):
            pworkdir = _abs_dir(p.workdir, f"processes.{i}.workdir") if p.workdir else workdir
            if "\x00" in p.command:
                raise ToolInputError("contains a NUL character", field=f"processes.{i}.command")
            if p.wait_for_url is not None and not re.match(r"^https?://[^\s/]+", p.wait_for_url):
                raise ToolInputError("must be an http:// or https:// URL", field=f"processes.{i}.wait_for_url")
            procs.append(_Proc(
                role=p.role, command=p.command, workdir=pworkdir,
                env={**env, **_check_env(p.env, f"processes.{i}.env")},
                log_path=_resolve(p.log_path, result_dir) if p.log_path else
                os.path.join(result_dir, f"{session}.{p.role}.log"),
                wait_for_url=p.wait_for_url, wait_for_url_timeout_s=int(p.wait_for_url_timeout_s or 600),
            ))
        logs_seen = [p.log_path for p in procs]
        if len(set(logs_seen)) != len(logs_seen):
            raise ToolInputError("each process needs its own log_path", field="processes")
    else:
        assert command is not None
        procs.append(_Proc(
            role="main", command=command, workdir=workdir, env=env,
            log_path=_resolve(inp.log_path, result_dir) if inp.log_path else os.path.join(result_dir, f"{session}.log"),
            wait_for_url=None, wait_for_url_timeout_s=0,
        ))

    bash = shutil.which("bash") or "/bin/bash"
    created = time.time()
    exp_id = f"{session}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(created))}-{secrets.token_hex(2)}"
    rdir = run_dir(exp_id)
    try:
        Path(result_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolFailure(f"cannot create {result_dir}: {exc.strerror or exc}", field="result_dir") from None
    try:
        rdir.mkdir(parents=True, exist_ok=False, mode=0o700)
    except OSError as exc:
        raise ToolFailure(f"cannot create the run directory {rdir}: {exc.strerror or exc}") from None
    for p in procs:
        script = wrapper.render(
            exp_id=exp_id, role=p.role, run_dir=rdir, workdir=p.workdir, env=p.env, path_prepend=path_prepend,
            virtual_env=virtual_env, command=p.command, log_path=p.log_path, gate_url=p.wait_for_url,
            gate_timeout_s=p.wait_for_url_timeout_s, gate_python=sys.executable,
        )
        write_text_atomic(rdir / f"{p.role}.sh", script, overwrite=False)

    spec: dict[str, Any] = {
        "result_dir": result_dir, "workdir": workdir, "python": python, "blueprint": inp.blueprint,
        "yaml_path": defaults.get("yaml_path"), "max_time_s": max_time_s, "first_step_timeout_s": first_step_s,
        "first_step_pattern": first_step_pattern, "run_dir": str(rdir),
        "attach": tmux.attach_command(socket, session),
        "processes": [{"role": p.role, "command": p.command, "workdir": p.workdir, "log_path": p.log_path,
                       "wait_for_url": p.wait_for_url} for p in procs],
    }
    with open_registry() as reg:
        _make_room(reg, socket, session)
        window_id, pane_id = tmux.create_session(socket, session, procs[0].role, procs[0].workdir)
        spec["processes"][0].update(window_id=window_id, pane_id=pane_id)
        spec["socket_path"] = tmux.socket_path(socket)
        try:
            reg.insert(id=exp_id, session=session, socket=socket, created=created, started_at=_now_iso(created),
                       spec=spec)
            tmux.type_line(socket, pane_id, wrapper.typed_line(bash, rdir / f"{procs[0].role}.sh"))
            for i, p in enumerate(procs[1:], start=1):
                window_id, pane_id = tmux.new_window(socket, session, p.role, p.workdir)
                spec["processes"][i].update(window_id=window_id, pane_id=pane_id)
                tmux.type_line(socket, pane_id, wrapper.typed_line(bash, rdir / f"{p.role}.sh"))
            reg.update_spec(exp_id, spec)
        except BaseException:
            tmux.kill_session(socket, session)
            reg.delete(exp_id)
            raise
    log.info("launched %s in tmux session %s (socket %s)", exp_id, session, socket)
    return LaunchOutput(
        id=exp_id, session=session, socket=socket, log_path=procs[0].log_path, result_dir=result_dir,
        attach=spec["attach"], started_at=_now_iso(created),
        processes=[ProcessInfo(role=p.role, state="running", exit_code=None, log_path=p.log_path) for p in procs],
        max_time_s=max_time_s, first_step_timeout_s=first_step_s,
    )


def _make_room(reg: Registry, socket: str, session: str) -> None:
    """Refuse a name that is running; clear the finished session of an earlier run of ours."""
    previous = reg.latest_for_session(socket, session)
    if previous is None:
        return  # tmux itself refuses a session that exists but is not ours
    view = observe(reg, [previous], enforce=True)[0]
    if view.state == "running":
        raise ToolFailure(f"an experiment named {session!r} is already running (id {previous.id}); "
                          "stop_experiment it or choose another name", field="name")
    panes = tmux.list_panes(_target(previous)) or []
    if any(p.session == session for p in panes):
        _stop_processes(previous, view, grace_s=2.0)
        tmux.kill_session(_target(previous), session)


# ==================================================================================================
# observation: state derivation, scanning, deadlines


@dataclass
class _ProcView:
    role: str
    state: str
    exit_code: int | None
    log_path: str
    pane_id: str | None
    alive: bool
    final: bool  # no more output will come


@dataclass
class View:
    row: Row
    state: str
    exit_code: int | None
    procs: list[_ProcView]
    scan: logs.ScanState
    elapsed_s: float
    note: str | None = None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _target(row: Row) -> str:
    """How tmux is addressed for this experiment: the socket path recorded at launch, else the name."""
    return row.spec.get("socket_path") or row.socket


def _procs_of(row: Row, panes: list[tmux.PaneInfo] | None) -> list[_ProcView]:
    rdir = Path(row.spec["run_dir"])
    live = {p.pane_id: p for p in (panes or []) if p.session == row.session}
    out = []
    for p in row.spec["processes"]:
        role = p["role"]
        code = _read_int(rdir / f"{role}.exit")
        pane = live.get(p.get("pane_id", ""))
        alive = pane is not None and not pane.dead
        if code is not None:
            state = "succeeded" if code == 0 else "failed"
        elif alive:
            waiting = (rdir / f"{role}.gate").exists() and not (rdir / f"{role}.started").exists()
            state = "waiting" if waiting else "running"
        else:
            state = "lost"
        out.append(_ProcView(role, state, code, p["log_path"], p.get("pane_id"), alive, final=state != "running"
                             and state != "waiting"))
    return out


def _derive(procs: list[_ProcView]) -> tuple[str, int | None]:
    states = [p.state for p in procs]
    codes = [p.exit_code for p in procs]
    failed = [c for p, c in zip(procs, codes) if p.state == "failed"]
    if failed:
        return "failed", failed[0]
    if all(s == "succeeded" for s in states):
        return "succeeded", 0
    if any(s == "lost" for s in states):
        return "lost", None
    return "running", None


def observe(reg: Registry, rows: list[Row], *, enforce: bool = True, now: float | None = None) -> list[View]:
    """Current view of each experiment: states, scan (only appended bytes), deadlines enforced."""
    panes_by_socket: dict[str, list[tmux.PaneInfo] | None] = {}
    views = []
    for row in rows:
        target = _target(row)
        if target not in panes_by_socket:
            panes_by_socket[target] = tmux.list_panes(target)
        views.append(_observe_one(reg, row, panes_by_socket[target], enforce=enforce, now=now))
    return views


def _observe_one(reg: Registry, row: Row, panes: list[tmux.PaneInfo] | None, *, enforce: bool,
                 now: float | None) -> View:
    now = time.time() if now is None else now
    procs = _procs_of(row, panes)
    derived, code = _derive(procs)
    state, exit_code, note = derived, code, row.note
    if row.final_state:
        state = row.final_state
        exit_code = row.final_exit_code if row.final_exit_code is not None else (
            code if row.final_state in ("succeeded", "failed") else None)
        if state in ("stopped", "timed_out"):
            rdir = Path(row.spec["run_dir"])
            for p in procs:  # ended by our stop (marker), or never recorded an exit
                if p.state in ("running", "waiting", "lost") or (rdir / f"{p.role}.stopped").exists():
                    p.state = state
    elif derived in TERMINAL:
        if derived == "failed" and any(p.state in ("running", "waiting") for p in procs):
            note = "a process failed while others still run; stop_experiment ends them"
        reg.finish(row.id, derived, code, now, note)
    scan = _scan(reg, row, procs, now)
    end = row.ended if row.ended else (now if state == "running" else now)
    elapsed = max(0.0, end - row.created)
    view = View(row, state, exit_code, procs, scan, elapsed, note)
    max_time = float(row.spec.get("max_time_s") or bp.DEFAULT_MAX_TIME_S)
    if enforce and state == "running" and elapsed > max_time:
        _stop(reg, row, view, "timed_out", DEADLINE_GRACE_S,
              note=f"stopped after its max time of {int(max_time)} s")
        fresh = reg.get(row.id)
        assert fresh is not None
        return _observe_one(reg, fresh, tmux.list_panes(_target(row)), enforce=False, now=time.time())
    return view


def _scan(reg: Registry, row: Row, procs: list[_ProcView], now: float) -> logs.ScanState:
    state = logs.ScanState.from_json(row.scan, len(procs))
    pattern = re.compile(row.spec.get("first_step_pattern") or logs.DEFAULT_FIRST_STEP_PATTERN, re.MULTILINE)
    changed = False
    for i, p in enumerate(procs):
        chunk = logs.read_appended(p.log_path, state.offsets[i], logs.SCAN_BUDGET, final=p.final)
        if chunk.end != state.offsets[i] or chunk.skipped:
            logs.scan_text(chunk.text, state, pattern, role=p.role, now=now)
            state.offsets[i] = chunk.end
            state.unscanned_bytes += chunk.skipped
            changed = True
    if changed and not reg.save_scan(row.id, state.to_json(), row.scan_version):
        fresh = reg.get(row.id)  # another caller scanned the same bytes first: use its result
        if fresh is not None:
            state = logs.ScanState.from_json(fresh.scan, len(procs))
    return state


# ==================================================================================================
# status output


def _parse_cursor(text: str, n: int, field: str) -> list[int]:
    if text == "":
        return [0] * n
    parts = text.split(",")
    if len(parts) != n or not all(p.isdigit() for p in parts):
        raise ToolInputError(f"{text!r} is not a cursor of this experiment (expected {n} comma-separated offsets)",
                             field=field)
    return [int(p) for p in parts]


def _lines(view: View, offsets: list[int], max_lines: int) -> tuple[list[str], list[int], int]:
    if max_lines == 0:
        return [], offsets, 0
    n = len(view.procs)
    budget = max(1024, logs.MAX_BYTES // n)
    out: list[str] = []
    new = list(offsets)
    skipped = 0
    for i, p in enumerate(view.procs):
        chunk = logs.read_appended(p.log_path, offsets[i], budget, final=p.final)
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


def _status_model(view: View, lines: list[str], cursor: list[int], skipped: int, now: float) -> dict[str, Any]:
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
    seen_at = scan.first_step_at
    overdue = not scan.first_step_seen and view.elapsed_s > first_step_s
    if scan.first_step_seen and seen_at is not None and seen_at - row.created > first_step_s:
        overdue = True
    return dict(
        id=row.id, session=row.session, socket=row.socket, attach=row.spec.get("attach", ""), state=view.state,
        exit_code=view.exit_code, started_at=row.started_at, elapsed_s=round(view.elapsed_s, 1),
        time_left_s=round(max(0.0, max_time - view.elapsed_s), 1) if view.state == "running" else None,
        max_time_s=max_time, first_step_seen=scan.first_step_seen, first_step_overdue=overdue,
        global_step=scan.global_step, last_metrics=scan.last_metrics, errors=errors, lines=lines,
        cursor=",".join(str(c) for c in cursor), skipped_bytes=skipped, unscanned_bytes=scan.unscanned_bytes,
        processes=[ProcessInfo(role=p.role, state=p.state, exit_code=p.exit_code, log_path=p.log_path)  # type: ignore[arg-type]
                   for p in view.procs],
        log_path=view.procs[0].log_path if view.procs else "", result_dir=row.spec.get("result_dir", ""),
        note=view.note,
    )


def _status_for(reg: Registry, view: View, since: str | None, max_lines: int) -> dict[str, Any]:
    n = len(view.procs)
    if since is not None:
        offsets = _parse_cursor(since, n, "since")
    else:
        try:
            offsets = _parse_cursor(view.row.read_cursor, n, "cursor")
        except ToolInputError:
            offsets = [0] * n
    lines, new, skipped = _lines(view, offsets, max_lines)
    if since is None and new != offsets:
        reg.save_cursor(view.row.id, ",".join(str(c) for c in new))
    return _status_model(view, lines, new, skipped, time.time())


def _find(reg: Registry, key: str, field: str = "id") -> Row:
    row = reg.find(key)
    if row is None:
        raise ToolInputError(f"no experiment {key!r} in the registry (ids and session names are accepted)",
                             field=field)
    return row


def experiment_status(inp: StatusInput) -> StatusOutput:
    if inp.since is not None and inp.id is None:
        raise ToolInputError("a cursor belongs to one experiment: give id too", field="since")
    with open_registry() as reg:
        if inp.id is not None:
            rows = [_find(reg, inp.id)]
            max_lines = logs.MAX_LINES if inp.max_lines is None else inp.max_lines
        else:
            rows = reg.all(inp.limit or 50)
            max_lines = 20 if inp.max_lines is None else inp.max_lines
        views = observe(reg, rows)
        return StatusOutput(experiments=[ExperimentStatus(**_status_for(reg, v, inp.since, max_lines))
                                         for v in views])


# ==================================================================================================
# wait


def _error_counts(scan: logs.ScanState) -> dict[str, int]:
    return {name: count for name, count in scan.error_counts().items()
            if (sig := SIGNATURES_BY_NAME.get(name)) is not None and sig.severity == "error"}


def wait_experiment(inp: WaitInput, progress: Progress | None = None) -> WaitOutput:
    timeout = WAIT_DEFAULT_S if inp.timeout_s is None else min(inp.timeout_s, WAIT_MAX_S)
    until = inp.until or "exit"
    if until == "pattern":
        if not inp.pattern:
            raise ToolInputError("required when until='pattern'", field="pattern")
        pattern = _compile(inp.pattern, "pattern")
    else:
        if inp.pattern is not None:
            raise ToolInputError("only used with until='pattern'", field="pattern")
        pattern = None
    started = time.monotonic()
    with open_registry() as reg:
        row = _find(reg, inp.id)
        view = observe(reg, [row])[0]
        baseline = _error_counts(view.scan)
        offsets: list[int] = []
        if pattern is not None:
            if inp.since is not None:
                offsets = _parse_cursor(inp.since, len(view.procs), "since")
            else:
                offsets = [_size(p.log_path) for p in view.procs]
        reason: str | None = None
        matched: str | None = None
        last_progress = -1.0
        while True:
            if pattern is not None:
                matched, offsets = _search(view, offsets, pattern)
            if view.state in TERMINAL:
                reason = "exited"
            elif matched is not None:
                reason = "pattern"
            elif until == "first_step" and view.scan.first_step_seen:
                reason = "first_step"
            elif any(c > baseline.get(name, 0) for name, c in _error_counts(view.scan).items()):
                reason = "error"
            waited = time.monotonic() - started
            if reason is None and waited >= timeout:
                reason = "timeout"
            if reason is not None:
                break
            if progress is not None and waited - last_progress >= 1.0:
                last_progress = waited
                step = view.scan.global_step
                progress(round(waited, 1), float(timeout),
                         f"{view.row.session}: {view.state}" + (f", step {step}" if step is not None else ""))
            time.sleep(min(0.5, max(0.05, timeout - waited)))
            fresh = reg.get(row.id)
            assert fresh is not None
            view = observe(reg, [fresh])[0]
        if view.state in TERMINAL:
            next_wait = 0
        elif reason == "timeout":
            done = reg.bump_timeouts(row.id)
            next_wait = WAIT_SCHEDULE_S[min(done - 1, len(WAIT_SCHEDULE_S) - 1)]
        elif reason == "error":
            next_wait = WAIT_SCHEDULE_S[0]
        else:
            fresh = reg.get(row.id)
            done = fresh.timeouts if fresh else 0
            next_wait = WAIT_SCHEDULE_S[min(done, len(WAIT_SCHEDULE_S) - 1)]
        status = _status_for(reg, view, None, logs.MAX_LINES)
    if progress is not None:
        progress(float(timeout), float(timeout), f"{view.row.session}: {reason}")
    return WaitOutput(**status, reason=reason, next_wait_s=next_wait,  # type: ignore[arg-type]
                      waited_s=round(time.monotonic() - started, 2), timeout_s=timeout, matched_line=matched)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _search(view: View, offsets: list[int], pattern: re.Pattern[str]) -> tuple[str | None, list[int]]:
    new = list(offsets)
    for i, p in enumerate(view.procs):
        chunk = logs.read_appended(p.log_path, offsets[i], logs.SCAN_BUDGET, final=p.final)
        new[i] = chunk.end
        match = pattern.search(chunk.text)
        if match:
            start = chunk.text.rfind("\n", 0, match.start()) + 1
            end = chunk.text.find("\n", match.end())
            return chunk.text[start: end if end >= 0 else len(chunk.text)][:logs.MAX_LINE_CHARS], new
    return None, new


# ==================================================================================================
# stop


def stop_experiment(inp: StopInput) -> StopOutput:
    grace = 10.0 if inp.grace_s is None else float(inp.grace_s)
    with open_registry() as reg:
        row = reg.find(inp.id)
        if row is None:
            raise ToolFailure(f"no experiment {inp.id!r} in this server's registry: stop_experiment only stops "
                              "sessions it launched", field="id")
        view = observe(reg, [row], enforce=False)[0]
        interrupted, killed, removed = _stop(reg, row, view, "stopped", grace, note="stopped by stop_experiment")
        fresh = reg.get(row.id)
        assert fresh is not None
        final = observe(reg, [fresh], enforce=False)[0]
        status = _status_for(reg, final, None, 50)
    return StopOutput(**status, interrupted=interrupted, killed=killed, session_removed=removed)


def _stop(reg: Registry, row: Row, view: View, final_state: str, grace_s: float,
          note: str) -> tuple[list[str], list[str], bool]:
    if view.state == "running":
        # Record the outcome first: the exit codes Ctrl-C produces must not turn it into "failed".
        reg.finish(row.id, final_state, None, time.time(), note)
    interrupted, killed = _stop_processes(row, view, grace_s)
    codes = [_read_int(Path(row.spec["run_dir"]) / f"{p['role']}.exit") for p in row.spec["processes"]]
    if view.state == "running":
        reg.set_exit_code(row.id, next((c for c in codes if c not in (None, 0)), None))
    removed = tmux.kill_session(_target(row), row.session)
    return interrupted, killed, removed


def _stop_processes(row: Row, view: View, grace_s: float) -> tuple[list[str], list[str]]:
    rdir = Path(row.spec["run_dir"])
    live = [p for p in view.procs if p.alive and p.exit_code is None]
    interrupted = []
    for p in live:
        try:
            (rdir / f"{p.role}.stopped").touch()
        except OSError:
            pass
        if p.pane_id and tmux.interrupt(_target(row), p.pane_id):
            interrupted.append(p.role)
    deadline = time.monotonic() + grace_s
    pending = [p for p in live if not (rdir / f"{p.role}.exit").exists()]
    while pending and time.monotonic() < deadline:
        time.sleep(0.1)
        pending = [p for p in pending if not (rdir / f"{p.role}.exit").exists()]
    killed = []
    for p in pending:
        pid = _read_int(rdir / f"{p.role}.pid")
        if pid is not None and _is_our_wrapper(pid, rdir):
            _kill_tree(pid)
            killed.append(p.role)
    return interrupted, killed


def _is_our_wrapper(pid: int, rdir: Path) -> bool:
    """The pid file may be stale: only signal a process whose command line is our wrapper."""
    proc = Path(f"/proc/{pid}/cmdline")
    try:
        if proc.parent.parent.is_dir() and Path("/proc/self").exists():
            return str(rdir).encode() in proc.read_bytes()
        out = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True, timeout=5)
        return str(rdir) in out.stdout
    except (OSError, subprocess.SubprocessError):
        return False


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def _kill_tree(pid: int) -> None:
    """SIGTERM the wrapper's process group (or its process tree), then SIGKILL what is left."""
    for sig, pause in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 0.0)):
        targets = [pid] + _descendants(pid)
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
        except OSError:
            pass
        for target in targets:
            try:
                os.kill(target, sig)
            except OSError:
                pass
        end = time.monotonic() + pause
        while time.monotonic() < end and _alive(pid):
            time.sleep(0.1)
        if not _alive(pid):
            return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie child of tmux's shell counts as gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
