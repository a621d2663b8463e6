"""install_agentjet's three actions: plan (changes nothing), run (a tracked job), status (its markers).

``plan`` asks the host once (the probe's host and install facts, and the agent's ping) and makes the plan.
``run`` refuses what the plan blocks, writes the installer, its environment probe and ``plan.json`` into
``<host state dir>/installs/<env key>/`` and launches ``python3 -I installer.py plan.json`` there through
the same launch path as ``launch_experiment`` (so the install is an experiment: its log, wait_experiment,
experiment_status, watch, stop_experiment, stall detection and error signatures, here, on an ssh host or
inside a Slurm job). Its session name comes from the env's path, so a second install into one env from
this server is refused by the launch; from anywhere else the installer's own lock refuses it.
``status`` reads the env's markers (``.agentjet-swarm-skill/``) and the last run's state.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from skill_server.agentjet.environment import EnvironmentFacts, environment_for
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.environments import shipping
from skill_server.environments.facts import HostFacts, parse_probe
from skill_server.environments.models import Check
from skill_server.environments.plan import MARKER_DIR, InstallRequest, Plan, make_plan
from skill_server.hosts import HostUnreachable, call_hosts, client

PROBE_BUDGET_S = 25.0
#: an install's max time: a flash-attn source build on a small machine takes hours
MAX_TIME_S = 8 * 3600
FIRST_LINE = r"^\[install\] "
_SAFE_URL = re.compile(r"^(?:https?|file)://[^\s'\"`$\\;|&<>(){}]+$")


@dataclass
class HostState:
    facts: HostFacts
    state_dir: str
    python: str


def release() -> tuple[EnvironmentFacts, str]:
    from skill_server.agentjet.release import newest_bundled

    bundled = newest_bundled()
    facts, _ = environment_for(bundled.ref.commit)
    return facts, f"AgentJet {bundled.ref.version} ({(bundled.ref.commit or '')[:8]})"


def check_request(req: InstallRequest) -> None:
    """Inputs the host never needs to see to refuse: one line each, naming the field."""
    env = req.env_path
    if not (env.startswith("/") or env.startswith("~/")):
        raise ToolInputError("must be an absolute path (or ~/...) on the host", field="env_path")
    if any(ord(c) < 32 for c in env) or env.rstrip("/") in ("", "~"):
        raise ToolInputError("must name a new folder (no control characters)", field="env_path")
    for name in ("index_url", "repo_url", "flash_attn_wheels"):
        value = getattr(req, name)
        if value is None:
            continue
        if name != "index_url" and (value.startswith("/") or value.startswith("~/")) and not re.search(
                r"[\x00-\x1f]", value):
            continue  # a folder on the host (wheels) or a local repository
        if not _SAFE_URL.match(value):
            raise ToolInputError("must be an http(s):// or file:// URL without spaces, quotes or shell "
                                 "metacharacters", field=name)
    if req.agentjet_ref is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}", req.agentjet_ref):
        raise ToolInputError("must be a commit, tag or branch name", field="agentjet_ref")
    if req.role == "client" and req.flash_attn not in ("auto", "skip"):
        raise ToolInputError("a client environment has no flash-attn", field="flash_attn")


def ask_host(req: InstallRequest) -> HostState:
    """The host's facts for planning, its state directory and its agent's interpreter: one round trip."""
    arguments = {"budget_s": PROBE_BUDGET_S, "sections": ["host", "install"], "python": None,
                 "paths": {"env": req.env_path}, "ports": [], "network": [],
                 "install": {"env_path": req.env_path, "agentjet_root": req.agentjet_root,
                             "python_version": req.python_version}}
    ping_op = client.ping()
    probe_op = client.run(shipping.probe_argv(shipping.host_python(req.host), arguments),
                          timeout_s=PROBE_BUDGET_S + 5, max_output=1024 * 1024)
    reply = call_hosts({req.host: [ping_op, probe_op]}, timeout_s=PROBE_BUDGET_S + 20)[req.host]
    if isinstance(reply, HostUnreachable):
        raise ToolFailure(reply.message, field="host")
    ping = ping_op.expect(reply[0], field="host")
    probe = probe_op.expect(reply[1], field="host")
    facts = parse_probe(probe["stdout"])
    if not facts.complete:
        raise ToolFailure(f"the host's probe did not finish: {probe['error'] or probe['stderr'][-300:]}", field="host")
    return HostState(facts=facts, state_dir=ping["state_dir"], python=ping["python"])


def install_dir(state_dir: str, env: str) -> str:
    """Where this env's installer, plan and runs live on the host: one folder per env path."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", env.rstrip("/").rsplit("/", 1)[-1])[:40] or "env"
    return f"{state_dir}/installs/{name}-{hashlib.sha256(env.encode()).hexdigest()[:10]}"


def session_name(env: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]", "_", env.rstrip("/").rsplit("/", 1)[-1])[:24] or "env"
    return f"install_{name}_{hashlib.sha256(env.encode()).hexdigest()[:6]}"


def plan_only(req: InstallRequest) -> tuple[Plan, str]:
    check_request(req)
    rel, label = release()
    return make_plan(req, ask_host(req).facts, rel), label


def run(req: InstallRequest, slurm: Any | None) -> tuple[Plan, str, dict[str, Any]]:
    """Write the job's files and launch it; (plan, release label, the launch's answer as a dict)."""
    from skill_server.experiments.launching import launch
    from skill_server.experiments.models import LaunchInput

    check_request(req)
    rel, label = release()
    host = ask_host(req)
    plan = make_plan(req, host.facts, rel)
    if plan.blockers:
        raise ToolFailure("refusing to install: " + "; ".join(plan.blockers), field=_blocking_field(plan.blockers))
    folder = install_dir(host.state_dir, plan.env_path)
    files = {**shipping.installer_files(), "plan.json": json.dumps(plan.data, indent=1, sort_keys=True)}
    writes = [client.write(f"{folder}/{name}", text=text, replace=True) for name, text in files.items()]
    reply = call_hosts({req.host: writes}, timeout_s=30)[req.host]
    if isinstance(reply, HostUnreachable):
        raise ToolFailure(reply.message, field="host")
    for op, result in zip(writes, reply):
        op.expect(result, field="env_path")
    command = " ".join(shlex.quote(x) for x in (host.python, "-I", f"{folder}/installer.py", f"{folder}/plan.json"))
    out = launch(LaunchInput(name=session_name(plan.env_path), host=req.host, command=command, workdir=folder,
                             result_dir=f"{folder}/runs", max_time_s=MAX_TIME_S, first_step_pattern=FIRST_LINE,
                             first_step_timeout_s=600, slurm=slurm))
    record = client.write(f"{folder}/last_run.json", text=json.dumps({"id": out.id, "log_path": out.log_path}),
                          replace=True)
    done = call_hosts({req.host: [record]}, timeout_s=30)[req.host]
    if not isinstance(done, HostUnreachable):
        record.answer(done[0])  # a failed note is not worth failing a started install for
    return plan, label, out.model_dump()


def _blocking_field(blockers: list[str]) -> str:
    first = blockers[0]
    for words, field in (("env_path", "env_path"), ("agentjet_root", "agentjet_root"), ("python", "manager"),
                         ("git", "agentjet_root"), ("is not installed", "manager")):
        if words in first:
            return field
    return "host"


@dataclass
class InstallState:
    """What the env's markers and the last run say."""

    exists: bool
    owned: bool
    status: str | None
    stage: str | None
    failed: str | None
    progress: str | None
    done: dict[str, dict[str, Any]]
    run_id: str | None
    run_state: str | None
    log_path: str | None
    verify: dict[str, Any]


def status(req: InstallRequest) -> tuple[InstallState, Plan, str]:
    check_request(req)
    rel, label = release()
    host = ask_host(req)
    plan = make_plan(req, host.facts, rel)
    env = plan.env_path
    folder = install_dir(host.state_dir, env)
    names = ["owner.json", "state.json", "verify.json"] + [f"stages/{s.name}.json" for s in plan.stages]
    reads = [client.read(f"{env}/{MARKER_DIR}/{name}", 256 * 1024, text=True) for name in names]
    reads.append(client.read(f"{folder}/last_run.json", 64 * 1024, text=True))
    reply = call_hosts({req.host: reads}, timeout_s=30)[req.host]
    if isinstance(reply, HostUnreachable):
        raise ToolFailure(reply.message, field="host")
    texts = [_json(op.answer(result)) for op, result in zip(reads, reply)]
    owner, state, verify = texts[0], texts[1] or {}, texts[2] or {}
    stages = {s.name: found for i, s in enumerate(plan.stages) if (found := texts[3 + i]) is not None}
    last = texts[-1] or {}
    run_state = _run_state(last.get("id"))
    fact = host.facts.one("install", "env_path") or {}
    return InstallState(exists=bool(fact.get("exists")), owned=owner is not None, status=state.get("status"),
                        stage=state.get("stage"), failed=state.get("failed"), progress=state.get("progress"),
                        done=stages, run_id=last.get("id"), run_state=run_state, log_path=last.get("log_path"),
                        verify=verify), plan, label


def verify_checks(state: InstallState, req: InstallRequest, python: str) -> list[Check]:
    """The install's verification judged as preflight judges an environment: its facts (``verify.json``, what
    the env's own interpreter said at the end of the last run) against the release, on the host."""
    if not state.verify:
        return []
    from skill_server.environments import roles
    from skill_server.environments.judge import ConfigFacts, Context

    facts = HostFacts(complete=True)
    for name, fact in state.verify.items():
        if isinstance(fact, dict):
            facts.lines[("env", name)] = [fact]
    rel, label = release()
    ctx = Context(release=rel, label=label, python=python, config=ConfigFacts())
    role = "client" if req.role == "client" else "swarm_server"
    checks = roles.build_checks(facts, ctx, (role,), roles.Plan(host=False, env=True, gpus=False))
    return [c for c in checks if c.id != "cuda_toolkit"]  # a host fact, not the env's: preflight says it


def _json(answer: Any) -> dict[str, Any] | None:
    if not answer.get("ok"):
        return None
    try:
        data = json.loads(answer.get("text") or "")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _run_state(run_id: str | None) -> str | None:
    """The install run's state as experiment_status says it (None when this server does not know it)."""
    if not run_id:
        return None
    from skill_server.experiments.observe import observe
    from skill_server.experiments.queries import shown_state
    from skill_server.experiments.store import open_registry

    try:
        with open_registry() as reg:
            row = reg.find(run_id)
            if row is None:
                return None
            return shown_state(observe(reg, [row])[0])
    except (ToolFailure, OSError):
        return None
