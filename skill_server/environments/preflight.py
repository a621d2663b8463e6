"""Preflight: every host asked at once, one round trip each, bounded by the call's time limit.

A host's request is the probe (``hostside.probe``, carried in a ``run`` op: ``shipping``) and nvidia-smi's
queries, so one call says everything about a place. A Slurm allocation is two rounds through its login
node: the login node's own checks (host, environment, network: login nodes often have no GPUs) and the job's
node list, then on every node, through ``srun --jobid --overlap`` (a step that starts at once even when the
job's steps hold every CPU), the checks that belong to where training runs: driver, GPUs, memory, /dev/shm.
Across hosts, Ray must be one version everywhere (``ray_same``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skill_server.agentjet.environment import environment_for
from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolInputError
from skill_server.environments import judge, shipping
from skill_server.environments import roles as roles_mod
from skill_server.environments.facts import DRIVER_FIELDS, HostFacts, parse_driver, parse_probe
from skill_server.environments.judge import ConfigFacts, Context, make
from skill_server.environments.models import ROLES, Check, HostReport
from skill_server.environments.roles import Plan
from skill_server.gpus import nvidia_smi
from skill_server.hosts import LOCAL, HostUnreachable, Reply, call_hosts, client, normalise

#: what the server keeps back from the call's limit for itself (judging, an allocation's second round)
RESERVE_S = 4.0
NETWORK_TARGETS = (("github", "https://github.com"), ("huggingface", "https://huggingface.co"),
                   ("modelscope", "https://www.modelscope.cn"))
PYPI = "https://pypi.org/simple/"


@dataclass
class Request:
    """One preflight call, checked."""

    hosts: list[str]
    roles: tuple[str, ...]
    ctx: Context
    network: bool
    timeout_s: float
    job: tuple[str, str] | None = None  # a scheduler's running job: (its backend, its id)
    paths: dict[str, str] = field(default_factory=dict)


def release_context(python: str | None, agentjet_root: str | None, config: ConfigFacts, index_url: str | None,
                    gpu_probe: bool) -> Context:
    """The newest bundled release's facts (a host's own AgentJet may select another row later)."""
    from skill_server.agentjet.release import newest_bundled

    bundled = newest_bundled()
    facts, own = environment_for(bundled.ref.commit)
    label = f"AgentJet {bundled.ref.version} ({(bundled.ref.commit or '')[:8]})"
    return Context(release=facts, label=label if own else f"{label}, judged by {facts.commit[:8]}'s facts",
                   python=python, config=config, agentjet_root=agentjet_root, index_url=index_url,
                   gpu_probe=gpu_probe)


def config_facts(config: str | None) -> ConfigFacts:
    """What the config (a client script or a YAML, read statically on this machine) says preflight needs."""
    if config is None:
        return ConfigFacts()
    from skill_server.analysis.analyse import analyse_arguments
    from skill_server.analysis.values import Unknown, is_int

    path = str(config)
    script, yaml = (path, None) if path.endswith(".py") else (None, path)
    try:
        _, analysis = analyse_arguments(script, yaml, None, None, None)
    except ToolInputError as exc:
        raise ToolInputError(exc.message, field="config") from None
    run = analysis.runs[0]

    def known(key: str) -> Any:
        value = run.value(key)
        return None if isinstance(value, Unknown) or value is None or not isinstance(
            value, (int, str, list)) else value

    port = known("ajet.interchange_server.interchange_server_port")
    logger = known("ajet.trainer_common.logger")
    n_gpus = known("ajet.trainer_common.n_gpus_per_node")
    model = known("ajet.model.path")
    return ConfigFacts(source=Path(path).name, interchange_port=port if is_int(port) else None,
                       logger=",".join(map(str, logger)) if isinstance(logger, list) else logger,
                       model_path=model if isinstance(model, str) else None,
                       n_gpus=n_gpus if is_int(n_gpus) else None)


def disk_paths(python: str | None, agentjet_root: str | None) -> dict[str, str]:
    """Where each disk check looks (on the host; ``~`` expanded there)."""
    env = str(Path(python).parent.parent) if python and "/" in python else "~"
    experiments = f"{agentjet_root.rstrip('/')}/saved_experiments" if agentjet_root else "~"
    return {"env": env, "cache": "~/.cache", "tmp": "/tmp", "experiments": experiments}


def probe_arguments(req: Request, sections: list[str], budget_s: float) -> dict[str, Any]:
    ctx = req.ctx
    network = []
    if "network" in sections:
        network = [{"id": name, "url": url} for name, url in NETWORK_TARGETS]
        network.insert(1, {"id": "index", "url": (ctx.index_url or PYPI).rstrip("/") + "/pip/"})
    return {"budget_s": round(budget_s, 2), "sections": sections, "python": ctx.python, "paths": req.paths,
            "ports": [p for p, _ in roles_mod.ports_to_check(ctx, req.roles)], "model_path": ctx.config.model_path,
            "network": network, "gpu_probes": list(judge.GPU_PROBES) if ctx.gpu_probe else []}


def gpu_ops(prefix: list[str] | None = None) -> list[client.Op[Any]]:
    """nvidia-smi's GPU and process queries (``gpus.nvidia_smi``), its driver query and its plain table."""
    pre = list(prefix or [])
    return [*nvidia_smi.query_ops(pre),
            client.run([*pre, "nvidia-smi", "--query-gpu=" + ",".join(DRIVER_FIELDS), "--format=csv,noheader,nounits"],
                       timeout_s=nvidia_smi.QUERY_TIMEOUT_S, max_output=64 * 1024),
            client.run([*pre, "nvidia-smi"], timeout_s=nvidia_smi.QUERY_TIMEOUT_S, max_output=64 * 1024)]


def read_reply(name: str, reply: Reply, *, with_gpus: bool, first: int = 0) -> HostFacts:
    """One place's facts from its reply: the probe's run op at ``first``, then (``with_gpus``) the four GPU ops."""
    if isinstance(reply, HostUnreachable):
        return HostFacts(error=reply.reason)
    probe = client.answer(reply[first], client.run)
    if not probe["ok"]:
        facts = HostFacts(error=probe["error"])
    else:
        facts = parse_probe(probe["stdout"])
        if probe["error"] and not facts.lines:
            facts.error = probe["error"]
        elif probe["timed_out"] and not facts.complete:
            facts.error = "the probe was stopped by the time limit (timeout_s)"
        elif probe["returncode"] not in (0, None) and not facts.lines:
            facts.error = f"the probe failed (exit {probe['returncode']}): {(probe['stderr'] or '').strip()[-300:]}"
    if with_gpus:
        gpu, apps, query, plain = (client.answer(r, client.run) for r in reply[first + 1:first + 5])
        facts.gpus = nvidia_smi.host_gpus(name, gpu, apps)
        facts.driver = parse_driver(query.get("stdout") if query["ok"] else None,
                                    plain.get("stdout") if plain["ok"] else None, nvidia_smi.run_failure(query))
    return facts


def report(host: str, facts: HostFacts, req: Request, plan: Plan, started: float,
           extra: list[Check] | None = None) -> HostReport:
    ctx = host_context(req.ctx, facts)
    checks = roles_mod.build_checks(facts, ctx, req.roles, plan) + (extra or [])
    ready, blocked = roles_mod.readiness(checks, req.roles, ctx)
    return HostReport(host=host, summary=roles_mod.summary_line(host, ready, blocked, checks), reachable=True,
                      reason=None, ready_for=ready, blocked_by=blocked, checks=checks,
                      elapsed_s=round(time.monotonic() - started, 3))


def host_context(ctx: Context, facts: HostFacts) -> Context:
    """The host's own AgentJet selects the release facts when it is a known one."""
    commit = (facts.one("env", "import:ajet") or {}).get("commit")
    if not commit:
        return ctx
    rel, own = environment_for(commit)
    if not own or rel is ctx.release:
        return ctx
    return Context(release=rel, label=f"AgentJet {commit[:8]}", python=ctx.python, config=ctx.config,
                   agentjet_root=ctx.agentjet_root, index_url=ctx.index_url, gpu_probe=ctx.gpu_probe)


def unreachable(host: str, reason: str, req: Request, started: float) -> HostReport:
    return HostReport(host=host, summary=roles_mod.summary_line(host, {}, {}, [], reason), reachable=False,
                      reason=reason, ready_for=dict.fromkeys(req.roles), blocked_by={r: ["host"] for r in req.roles},
                      checks=[], elapsed_s=round(time.monotonic() - started, 3))


def run(req: Request) -> list[HostReport]:
    """Every host's report, in the order given."""
    started = time.monotonic()
    deadline = Deadline(req.timeout_s)
    if req.job is not None:
        return [allocation(req, deadline, started)]
    budget = max(2.0, req.timeout_s - RESERVE_S)
    sections = ["host", "env", "gpu"] + (["network"] if req.network else [])
    server = any(r != "client" for r in req.roles)
    requests = {h: [client.run(shipping.probe_argv(shipping.host_python(h), probe_arguments(req, sections, budget)),
                               timeout_s=budget, max_output=4 * 1024 * 1024)] + (gpu_ops() if server else [])
                for h in req.hosts}
    replies = call_hosts(requests, timeout_s=req.timeout_s, deadline=deadline)
    plan = Plan(network=req.network)
    reports = []
    for h in req.hosts:
        reply = replies[h]
        if isinstance(reply, HostUnreachable):
            reports.append(unreachable(h, reply.reason, req, started))
            continue
        reports.append(report(h, read_reply(h, reply, with_gpus=server), req, plan, started))
    same_ray(reports)
    return reports


def same_ray(reports: list[HostReport]) -> None:
    """``ray_same`` on every host when more than one reported a Ray version (every node must run the same)."""
    versions = {r.host: next((c.value for c in r.checks if c.id == "ray" and c.status in ("ok", "warn")), None)
                for r in reports}
    known = {h: v for h, v in versions.items() if v}
    if len(known) < 2:
        return
    value = ", ".join(f"{h}: {v}" for h, v in known.items())
    differ = len(set(known.values())) > 1
    for r in reports:
        if r.host in known:
            r.checks.append(make("ray_same", "fail" if differ else "ok", value,
                                 "the same Ray version on every node of a cluster (Ray refuses to join others)",
                                 "ray --version", value, "install one Ray version everywhere (the one vLLM pins)"))
            if differ:
                r.ready_for = {k: (False if k != "client" else v) for k, v in r.ready_for.items()}
                for role in r.ready_for:
                    if role != "client":
                        r.blocked_by.setdefault(role, []).append("ray_same")


# ---- a scheduler's allocation ------------------------------------------------------------------------


def allocation(req: Request, deadline: Deadline, started: float) -> HostReport:
    """The login node's checks, then each node's through an overlapping step; one report for the whole place.
    The scheduler's own commands are its backend's (``experiments.backends``)."""
    from skill_server.experiments import backends

    assert req.job is not None
    kind, job_id = req.job
    backend = backends.named(kind)
    login = req.hosts[0]
    where = f"{login} ({backend.scheduler} job {job_id})"
    budget = max(2.0, req.timeout_s / 2 - RESERVE_S)
    sections = ["host", "env"] + (["network"] if req.network else [])
    ops = [client.run(shipping.probe_argv(shipping.host_python(login), probe_arguments(req, sections, budget)),
                      timeout_s=budget, max_output=4 * 1024 * 1024),
           backend.job_nodes_op(job_id)]
    first = call_hosts({login: ops}, timeout_s=req.timeout_s, deadline=deadline)[login]
    if isinstance(first, HostUnreachable):
        return unreachable(where, first.reason, req, started)
    login_facts = read_reply(login, first, with_gpus=False)
    listed = backend.job_nodes(first[1], job_id)
    if not listed.nodes:
        extra = [make("allocation", "fail", f"job {job_id}: no running nodes ({listed.why})",
                      "a running job whose nodes to check", listed.command, listed.why, listed.fix)]
        return report(where, login_facts, req, Plan(gpus=False, network=req.network), started, extra)
    extra = node_checks(req, login, listed.nodes[:MAX_NODES], deadline)
    return report(where, login_facts, req, Plan(gpus=False, network=req.network), started, extra)


MAX_NODES = 16


def node_checks(req: Request, login: str, nodes: list[str], deadline: Deadline) -> list[Check]:
    """Driver, GPUs, memory and /dev/shm on every node of the job, from one call to the login node."""
    budget = max(2.0, deadline.remaining() - RESERVE_S) / max(1, len(nodes))
    ops: list[client.Op[Any]] = []
    from skill_server.experiments import backends

    assert req.job is not None
    kind, job_id = req.job
    for node in nodes:
        prefix = backends.named(kind).on_node(job_id, node)
        arguments = {**probe_arguments(req, ["node"], budget), "python": None}
        ops.append(client.run([*prefix, *shipping.probe_argv("python3", arguments)], timeout_s=budget + 10,
                              max_output=1024 * 1024))
        ops += gpu_ops(prefix)
    replies = call_hosts({login: ops}, timeout_s=deadline.remaining(), deadline=deadline)[login]
    out: list[Check] = []
    for i, node in enumerate(nodes):
        facts = read_reply(node, replies, with_gpus=True, first=5 * i)
        ctx = req.ctx
        checks = [judge.ram(facts, ctx), judge.shm(facts, ctx), judge.gpu_driver(
            facts, ctx), judge.gpu_capability(facts, ctx), judge.gpu_count(facts, ctx),
            judge.gpu_free(facts, ctx)]
        out += [c.model_copy(update={"node": node}) for c in checks]
    return out


def parse_request(hosts: list[str] | None, role: str | None, python: str | None, agentjet_root: str | None,
                  config: str | None, network: bool, gpu_probe: bool, timeout_s: float,
                  job: tuple[str, str, str] | None, index_url: str | None) -> Request:
    """``job``: (backend, its id, the input field that gave it) of a scheduler's running job to check."""
    names = list(dict.fromkeys(normalise(h, field=f"hosts.{i}") for i, h in enumerate(hosts or [LOCAL])))
    if job is not None and len(names) != 1:
        raise ToolInputError(f"with {job[2]} give one host: the login node the job was submitted from",
                             field="hosts")
    for value, name in ((python, "python"), (agentjet_root, "agentjet_root")):
        if value is not None and (not value.strip() or "\x00" in value or "\n" in value):
            raise ToolInputError("must be a path on the host (no NUL or newline)", field=name)
    roles = (role,) if role else ROLES
    ctx = release_context(python, agentjet_root, config_facts(config), index_url, gpu_probe)
    return Request(hosts=names, roles=roles, ctx=ctx, network=network, timeout_s=float(timeout_s),
                   job=job[:2] if job is not None else None, paths=disk_paths(python, agentjet_root))
