"""Launching a run: check the arguments here, let every host check its paths, then start everywhere.

A launch is two rounds, each one call per host in parallel: a dry run (each host resolves and checks
its workdirs, interpreter, result and log paths, and its backend what it needs: tmux and bash, a free
session name; with ``require_free_gpus`` the experiment's host also answers nvidia-smi's GPU and process
queries in that round, and a GPU below the fraction refuses the launch) and the real start (run
directory, wrapper scripts, the processes in the run's backend, ``experiments.backends``: one tmux session
per host with one window per process and the run's monitor, or a scheduler's job). tmux is the arbiter of
names: of two concurrent launches of one name on a host, one gets the session and the other is refused.

A launch is atomic from the registry's point of view: between the rounds it writes an *intent row*
(phase ``launching``, with this machine's identity and the launching process's pid and start time),
and marks it ``running`` once every host has started. If any host refuses, fails or cannot be asked,
every host is rolled back by the run's identity and the row is deleted once all confirm. A launch
interrupted anywhere (the process killed, a host partitioned, tmux hung) leaves its intent row, which
the next call of a tool that heals finishes rolling back (``upkeep.finish_interrupted_launches``, as a
launch does first): the run is registered and visible, or gone from every host. A shutdown request
(``core.deadline``) before the start round refuses the launch with nothing started. The whole launch ends by
its deadline.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import re
import secrets
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skill_server.core.deadline import Deadline, shutdown_requested
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.experiments import backends, sentences, upkeep
from skill_server.experiments import blueprint as bp
from skill_server.experiments.backends import Backend, LaunchContext
from skill_server.experiments.checks import (
    check_env,
    compile_pattern,
    host_path,
    relative_path,
    session_name,
    socket_name,
)
from skill_server.experiments.models import LaunchInput, LaunchOutput, ProcessInfo, ProcessSpec, RunPolicy
from skill_server.experiments.observe import observe
from skill_server.experiments.progress import iso
from skill_server.experiments.signatures import monitor_config, policy_errors, transient_names
from skill_server.experiments.spec import Handle, HostRecord, ProcessRecord, RunSpec
from skill_server.experiments.store import (
    DISCARDING,
    LAUNCHING,
    RUNNING,
    Registry,
    controller_identity,
    launcher_identity,
    open_registry,
)
from skill_server.experiments.upkeep import discard_everywhere
from skill_server.gpus import nvidia_smi
from skill_server.gpus.query import free_problems, from_reply
from skill_server.hosts import HostUnreachable, Reply, call_hosts, client, expect, normalise

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import LaunchPlan, LaunchProc, LaunchStarted, MonitorPolicy, StartedProc

log = logging.getLogger(__name__)

DEFAULT_ENV = {"PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "LOGURU_COLORIZE": "NO"}
#: Grace between Ctrl-C and SIGTERM when the run's monitor ends it at its max time.
DEADLINE_GRACE_S = 5
LAUNCH_TIMEOUT_S = 60.0
#: Of a launch's deadline: what the dry run leaves for the start and a rollback, the start for a rollback,
#: and the look at earlier runs of the name (and at a blueprint on its host) for the rest.
START_RESERVE_S = 25.0
ROLLBACK_RESERVE_S = 12.0
DRY_RUN_RESERVE_S = 35.0


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

    def request(self) -> LaunchProc:
        return {"role": self.role, "command": self.command, "workdir": self.workdir,
                "workdir_field": self.workdir_field, "env": self.env, "log_path": self.log_path,
                "log_field": self.log_field, "wait_for_url": self.wait_for_url,
                "wait_for_url_timeout_s": self.wait_for_url_timeout_s}


def _blueprint_defaults(source: bp.Source, main_host: str, deadline: Deadline) -> dict[str, Any]:
    """The blueprint's fields as launch defaults: read where it lives, its paths checked on the run's host."""
    text, where = bp.read(source, "blueprint", deadline)
    shown = str(bp.Source(source.host, str(where)))
    checked = bp.validate_on(text, where.parent, main_host, deadline)
    errors = [f"[{p.field}] {p.message}" for p in checked.problems if p.severity == "error"]
    if errors:
        raise ToolInputError(f"blueprint has problems ({shown}): " + "; ".join(errors), field="blueprint")
    return {
        "source": shown,
        "purpose": checked.values.get("exp_purpose"),
        "command": checked.values.get("exp_launch_command"),
        "workdir": checked.resolved.get("exp_codebase_dir"),
        "python": checked.resolved.get("exp_venv_exe"),
        "result_dir": checked.resolved.get("exp_result_dir"),
        "yaml_path": checked.resolved.get("exp_yaml_path"),
        "max_time_s": checked.max_time_s,
        "first_step_timeout_s": checked.first_step_timeout_s,
        "policy": checked.policy,
    }


def _seconds(value: float | None, default: int) -> int:
    return default if value is None else max(1, int(round(value)))


def _command(inp: LaunchInput, defaults: dict[str, Any]) -> str | None:
    """The one process's command (None when processes are listed): one or the other, never both."""
    if inp.processes and inp.command:
        raise ToolInputError("give either command or processes, not both", field="processes")
    command = inp.command or (None if inp.processes else defaults.get("command"))
    if not inp.processes and not command:
        raise ToolInputError("command is required (or processes, or a blueprint)", field="command")
    if command is not None and "\x00" in command:
        raise ToolInputError("contains a NUL character", field="command")
    return command


def _plan(inp: LaunchInput, main_host: str, defaults: dict[str, Any], session: str, exp_id: str
          ) -> tuple[list[_Proc], str, str | None, str]:
    """Processes, workdir, python and result_dir (host paths, resolved later on the host), checked for form.
    A log without an explicit path goes into the run's own folder, ``<result_dir>/<exp_id>/``, so no two runs
    share one (session names repeat across runs; ids never do)."""
    command = _command(inp, defaults)
    workdir_value = inp.workdir or defaults.get("workdir")
    if not workdir_value:
        raise ToolInputError("workdir is required (absolute directory the command runs in)", field="workdir")
    workdir = host_path(workdir_value, "workdir")
    python = inp.python or defaults.get("python")
    if python is not None:
        python = host_path(python, "python")
    result_dir = relative_path(inp.result_dir or defaults.get("result_dir") or bp.DEFAULT_RESULT_DIR, "result_dir")
    env = {**DEFAULT_ENV, **check_env(inp.env, "env")}
    if inp.processes:
        return _listed(inp, main_host, workdir, env, session, exp_id), workdir, python, result_dir
    assert command is not None
    return [_Proc(role="main", command=command, host=main_host, host_field="host", workdir=workdir,
                  workdir_field="workdir", env=env,
                  log_path=relative_path(inp.log_path, "log_path") if inp.log_path else f"{exp_id}/{session}.log",
                  log_field="log_path", wait_for_url=None, wait_for_url_timeout_s=0)], workdir, python, result_dir


def _listed(inp: LaunchInput, main_host: str, workdir: str, env: dict[str, str], session: str,
            exp_id: str) -> list[_Proc]:
    """The listed processes: unique roles, a log per process, each checked and given its defaults."""
    processes = inp.processes or []
    roles = [p.role for p in processes]
    dupes = sorted({r for r in roles if roles.count(r) > 1})
    if dupes:
        raise ToolInputError(f"roles must be unique (repeated: {', '.join(dupes)})", field="processes")
    if inp.log_path is not None:
        raise ToolInputError("with processes, give log_path per process", field="log_path")
    return [_listed_proc(f"processes.{i}", p, main_host, workdir, env, session, exp_id)
            for i, p in enumerate(processes)]


def _listed_proc(at: str, p: ProcessSpec, main_host: str, workdir: str, env: dict[str, str], session: str,
                 exp_id: str) -> _Proc:
    if "\x00" in p.command:
        raise ToolInputError("contains a NUL character", field=f"{at}.command")
    if p.wait_for_url is not None and not re.match(r"^https?://[^\s/]+\S*$", p.wait_for_url):
        raise ToolInputError("must be an http:// or https:// URL", field=f"{at}.wait_for_url")
    return _Proc(
        role=p.role, command=p.command, host=normalise(p.host, field=f"{at}.host") if p.host else main_host,
        host_field=f"{at}.host" if p.host else "host",
        workdir=host_path(p.workdir, f"{at}.workdir") if p.workdir else workdir,
        workdir_field=f"{at}.workdir" if p.workdir else "workdir",
        env={**env, **check_env(p.env, f"{at}.env")},
        log_path=(relative_path(p.log_path, f"{at}.log_path") if p.log_path
                  else f"{exp_id}/{session}.{p.role}.log"),
        log_field=f"{at}.log_path", wait_for_url=p.wait_for_url,
        wait_for_url_timeout_s=int(p.wait_for_url_timeout_s or 600))


@dataclass(frozen=True)
class _Launch:
    """What a launch decided before asking any host."""

    inp: LaunchInput
    socket: str
    main_host: str
    session: str
    exp_id: str
    created: float
    procs: list[_Proc]
    workdir: str
    python: str | None
    result_dir: str
    yaml_path: str | None
    max_time_s: int
    first_step_s: int
    #: The run's policies for its monitors (``run_policy``); empty without one.
    policy: MonitorPolicy
    #: The policy in force as the answers show it (every field, its default filled in); None without one.
    shown_policy: dict[str, Any] | None
    backend: Backend
    #: Where the blueprint was read (``gpu1:/path`` for one on a host), or None.
    blueprint: str | None

    @property
    def hosts(self) -> list[str]:
        """The main host first, then every other host of a process, in process order."""
        return [self.main_host] + [h for h in dict.fromkeys(p.host for p in self.procs) if h != self.main_host]

    @property
    def starting(self) -> list[str]:
        """The hosts that start processes (the main host may only hold the results)."""
        return [h for h in self.hosts if any(p.host == h for p in self.procs)]

    def ops(self, host: str, replace: list[int]) -> client.Launch:
        """This host's part of the launch, for both rounds."""
        return backends.launch(self.backend, self.exp_id, self.session, replace_pids=replace, python=self.python,
                               workdir=self.workdir, result_dir=self.result_dir, max_time_s=self.max_time_s,
                               deadline_grace_s=DEADLINE_GRACE_S,
                               procs=[p.request() for p in self.procs if p.host == host],
                               monitor=monitor_config(self.inp.first_step_pattern, self.first_step_s,
                                                      {**self.policy, "collect": True} if self.policy and host ==
                                                      self.main_host else self.policy))


def run_policy(policy: RunPolicy | None) -> MonitorPolicy:
    """The launch's ``policy`` as the monitors carry it out: the error ids and severities resolved to signature
    names (an unknown one refused, naming ``policy.errors``)."""
    if policy is None:
        return {}
    out: MonitorPolicy = {"stall_k": policy.stall_k, "stall_floor_s": policy.stall_floor_s}
    if policy.on_error is not None:
        out["on_error"] = policy.on_error
        out["errors"] = policy_errors(policy.errors)
    elif "errors" in policy.model_fields_set:
        raise ToolInputError("only used with on_error", field="policy.errors")
    if "resume" in (policy.on_error, policy.on_stall):
        out.update({"transient": transient_names(), "max_resumes": policy.max_resumes, "backoff_s": policy.backoff_s,
                    "attempt": 1})  # its lineage is the launch's id (``_decide``)
    if policy.on_stall is not None:
        out["on_stall"] = policy.on_stall
    if policy.on_end is not None:
        out["on_end"] = policy.on_end
    if policy.on_first_step_overdue is not None:
        out["on_first_step_overdue"] = policy.on_first_step_overdue
    if policy.notify_command.strip():
        out["notify_command"] = policy.notify_command
    if policy.notify_file.strip():
        out["notify_file"] = policy.notify_file.strip()
    return out


def _notify_file(path: str, workdir: str) -> str:
    """The notify file as the host opens it: absolute or ``~/...``, a relative one in the run's workdir."""
    if "\x00" in path:
        raise ToolInputError("contains a NUL character", field="policy.notify_file")
    return path if path.startswith(("/", "~")) else posixpath.normpath(posixpath.join(workdir, path))


def _decide(inp: LaunchInput, deadline: Deadline) -> _Launch:
    """Everything but the launch's own rounds: names, the blueprint's defaults (read and checked where it
    lives), the processes, bounds, the id."""
    socket = socket_name()
    main_host = normalise(inp.host, field="host")
    defaults: dict[str, Any] = {}
    if inp.blueprint is not None:
        source, main_host = bp.locate(inp.blueprint, inp.host, "blueprint")
        defaults = _blueprint_defaults(source, main_host, deadline.share(DRY_RUN_RESERVE_S))
    session = session_name(inp.name, defaults.get("purpose"))
    created = time.time()
    exp_id = f"{session}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(created))}-{secrets.token_hex(2)}"
    procs, workdir, python, result_dir = _plan(inp, main_host, defaults, session, exp_id)
    max_time_s = _seconds(inp.max_time_s or defaults.get("max_time_s"), bp.DEFAULT_MAX_TIME_S)
    first_step_s = _seconds(inp.first_step_timeout_s or defaults.get("first_step_timeout_s"), bp.DEFAULT_FIRST_STEP_S)
    if inp.first_step_pattern is not None:  # None: the first step:N line proves the first step
        compile_pattern(inp.first_step_pattern, "first_step_pattern")
    given: RunPolicy | None = inp.policy or defaults.get("policy")
    policy = run_policy(given)
    if "notify_file" in policy:
        policy["notify_file"] = _notify_file(policy["notify_file"], workdir)
    shown = None if given is None else dict(given.model_dump(mode="json"), notify_file=policy.get("notify_file", ""),
                                            source="blueprint [exp_policy]" if inp.policy is None else "argument")
    if "max_resumes" in policy:
        if len({p.host for p in procs}) > 1:
            raise ToolInputError("resume relaunches a run on one host: give every process the experiment's host, "
                                 "or use stop", field="policy")
        policy["lineage"] = exp_id
    elsewhere = next((p for p in procs if p.host != main_host), None)
    backend = backends.for_launch(inp, LaunchContext(elsewhere.host_field if elsewhere else None,
                                                     inp.require_free_gpus is not None, policy))
    return _Launch(inp, socket, main_host, session, exp_id, created, procs, workdir, python, result_dir,
                   defaults.get("yaml_path"), max_time_s, first_step_s, policy, shown, backend, defaults.get("source"))


def _check_previous(reg: Registry, socket: str, session: str, hosts: list[str], deadline: Deadline
                    ) -> dict[str, list[int]]:
    """Refuse a name that is running on any of these hosts. For a finished run of ours whose session may
    linger, the pane pids it had on each host: only a session made of exactly those panes is replaced."""
    replace: dict[str, list[int]] = {h: [] for h in hosts}
    previous = [row for row in reg.session_runs(socket, session) if set(row.hosts) & set(hosts)]
    if not previous:
        return replace
    for view in observe(reg, previous, deadline=deadline.share(DRY_RUN_RESERVE_S), upkeep=upkeep.HEAL):
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


def launch(inp: LaunchInput, deadline: Deadline | None = None) -> LaunchOutput:
    """Decide, let every host check (dry run), record the intent, start everywhere (rolled back on every
    host if any fails or the launch is interrupted), then mark the run registered (``running``)."""
    bound = deadline or Deadline.call()
    d = _decide(inp, bound)
    with open_registry() as reg:
        upkeep.finish_interrupted_launches(reg)
        replace = _check_previous(reg, d.socket, d.session, d.hosts, bound)
        ops = {h: d.ops(h, replace[h]) for h in d.hosts}
        plans = _dry_run(d, ops, bound)
        places = {h: HostRecord(run_dir=plans[h]["run_dir"], attach=d.backend.attach(h, plans[h]),
                                python=plans[h]["python"], identity=plans[h].get("host_identity"),
                                handle=Handle.from_json(plans[h]["handle"]))
                  for h in d.hosts}
        if shutdown_requested():
            raise ToolFailure("the server is shutting down: nothing was started")
        reg.insert(id=d.exp_id, session=d.session, socket=d.socket, created=d.created, started_at=iso(d.created),
                   spec=_spec(d, plans, places, {}), phase=LAUNCHING, controller=controller_identity(),
                   launcher=launcher_identity())
        try:
            launched = _start(d, ops, bound)
            spec = _spec(d, plans, places, launched)
            reg.set_phase(d.exp_id, RUNNING, spec)
        except BaseException:
            _roll_back(reg, d, places)
            raise
    log.info("launched %s (session %s) on %s", d.exp_id, d.session, ", ".join(d.starting))
    out = LaunchOutput(
        summary="",
        id=d.exp_id, session=d.session, socket=d.socket, host=d.main_host, log_path=spec.processes[0].log_path,
        result_dir=spec.result_dir, attach=spec.attach, started_at=iso(d.created),
        processes=[ProcessInfo(role=p.role, host=p.host, state="running", exit_code=None, log_path=p.log_path,
                               pid=p.pid, attach=spec.attach_on(p.host)) for p in spec.processes],
        max_time_s=d.max_time_s, first_step_timeout_s=d.first_step_s, policy=d.shown_policy,
    )
    out.summary = sentences.launched(out)
    return out


def _dry_run(d: _Launch, ops: dict[str, client.Launch], deadline: Deadline) -> dict[str, LaunchPlan]:
    """Round one: every host resolves and checks its part, and with ``require_free_gpus`` the main host also
    answers the GPU queries; any refusal refuses the launch before anything has started."""
    gpu_ops = nvidia_smi.query_ops() if d.inp.require_free_gpus is not None else []
    checked = call_hosts({h: [ops[h].check] + (gpu_ops if h == d.main_host else []) for h in d.hosts},
                         timeout_s=LAUNCH_TIMEOUT_S, deadline=deadline.share(START_RESERVE_S))
    plans = {}
    for h in d.hosts:
        reply = checked[h]
        if isinstance(reply, HostUnreachable):
            raise _host_error(reply, d.procs, d.main_host)
        plans[h] = ops[h].check.expect(reply[0])
    if d.inp.require_free_gpus is not None:
        _check_free_gpus(d.main_host, checked[d.main_host], d.inp.require_free_gpus)
    return plans


def _start(d: _Launch, ops: dict[str, client.Launch], deadline: Deadline) -> dict[str, LaunchStarted]:
    """Round two: every host with processes starts them; the first failure is raised (the caller rolls
    back every host, those that answered and those that could not be asked)."""
    if shutdown_requested():
        raise ToolFailure("the server is shutting down: nothing was started")
    started = call_hosts({h: [ops[h].start] for h in d.starting}, timeout_s=LAUNCH_TIMEOUT_S,
                         deadline=deadline.share(ROLLBACK_RESERVE_S))
    failure: Exception | None = None
    launched: dict[str, LaunchStarted] = {}
    for h in d.starting:
        reply = started[h]
        if isinstance(reply, HostUnreachable):
            failure = failure or _host_error(reply, d.procs, d.main_host)
            continue
        answer = ops[h].start.answer(reply[0])
        if answer["ok"]:
            launched[h] = answer
            continue
        try:
            expect(answer)
        except (ToolFailure, ToolInputError) as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
    return launched


def _spec(d: _Launch, plans: dict[str, LaunchPlan], places: dict[str, HostRecord],
          launched: dict[str, LaunchStarted]) -> RunSpec:
    """What the registry keeps: the decisions, where each host put the run, and each wrapper's identity."""
    resolved = {(h, p["role"]): p for h in d.hosts for p in plans[h]["procs"]}
    ids: dict[tuple[str, str], StartedProc | dict[str, Any]] = {
        (h, x["role"]): x for h, answer in launched.items() for x in answer["procs"]}
    for p in d.procs:  # the intent row: nothing has started yet
        ids.setdefault((p.host, p.role), {})
    places = {h: dataclasses.replace(where, handle=Handle.from_json(launched[h]["handle"])) if h in launched
              else where for h, where in places.items()}
    return RunSpec(
        host=d.main_host, result_dir=plans[d.main_host]["result_dir"], workdir=d.workdir, python=d.python,
        blueprint=d.blueprint, yaml_path=d.yaml_path, max_time_s=d.max_time_s, first_step_timeout_s=d.first_step_s,
        first_step_pattern=d.inp.first_step_pattern, hosts=places,
        processes=tuple(ProcessRecord(
            role=p.role, command=p.command, host=p.host, workdir=resolved[(p.host, p.role)]["workdir"],
            log_path=resolved[(p.host, p.role)]["log_path"], wait_for_url=p.wait_for_url,
            window_id=ids[(p.host, p.role)].get("window_id"), pane_id=ids[(p.host, p.role)].get("pane_id"),
            pid=ids[(p.host, p.role)].get("pid"), start=ids[(p.host, p.role)].get("start")) for p in d.procs),
        attach=places[d.procs[0].host].attach, policy=d.shown_policy)


def _check_free_gpus(host: str, reply: Reply, required: float) -> None:
    """Refuse the launch (nothing has started yet) unless every GPU of ``host`` is free enough; the
    nvidia-smi queries rode along with the host's check op."""
    problems = free_problems(from_reply(host, reply, first=1), required)
    if problems:
        raise ToolFailure("refusing to start: " + "; ".join(problems), field="require_free_gpus")


def _roll_back(reg: Registry, d: _Launch, places: dict[str, HostRecord]) -> None:
    """Undo the launch on every host that starts processes (also those that did not answer: a start may
    have gone through there), by identity; forget the run once every host confirms, else leave its row
    ``discarding`` for the next call of a tool that heals (``upkeep.finish_interrupted_launches``) to finish."""
    try:
        reg.set_phase(d.exp_id, DISCARDING)
    except (ToolFailure, sqlite3.Error):
        log.warning("cannot mark %s discarding", d.exp_id)
    try:
        discard_everywhere(reg, d.exp_id, places, d.starting, Deadline(ROLLBACK_RESERVE_S))
    except (ToolFailure, sqlite3.Error) as exc:
        log.warning("rolling back %s: %s", d.exp_id, exc)
