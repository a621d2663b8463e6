"""Which checks each role needs, the checks one place gets, and what they add up to (``ready_for``).

A role is ready when every check it needs passed (ok or warn); not ready when one failed; unknown (null)
when one it needs could not be looked at (no answer in time, no python given, a login node whose GPUs
were not asked). A ``skip`` that only says the check does not apply (a tensorboard logger needs no key, a
model given by hub id, no GPU to probe once ``gpu_driver`` has said so) blocks nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from skill_server.environments import judge
from skill_server.environments.facts import HostFacts
from skill_server.environments.judge import Context
from skill_server.environments.models import ROLES, Check

CLIENT = ("python3", "python", "not_base_conda", "ajet")
SERVER = ("python3", "tmux", "disk_env", "disk_tmp", "disk_experiments", "ram", "nofile", "shm", "stale_processes",
          "python", "not_base_conda", "torch", "vllm", "verl", "ray", "transformers", "flash_attn", "pins", "ajet",
          "swanlab_key", "model_path", "gpu_driver", "gpu_compute_capability", "gpu_count", "gpu_free_memory",
          "ray_same", "allocation")
#: skips that only say "does not apply here"
BENIGN_SKIPS = frozenset({"swanlab_key", "model_path", "gpu_count", "pins", "gpu_compute_capability",
                          "gpu_free_memory", "gpu_matmul", "gpu_flash_attn", "gpu_nccl", "ray_same"})
NO_PYTHON = "no python given"


def required(role: str, ctx: Context) -> tuple[str, ...]:
    """The check ids ``role`` needs on one place."""
    if role == "client":
        return CLIENT
    rel = ctx.release
    ports = [f"port_{rel.ray_gcs_port}", f"port_{rel.ray_dashboard_port}"]
    if role == "swarm_server":
        ports.insert(0, f"port_{rel.swarm_port}")
    if ctx.config.interchange_port and role == "classic":
        ports.append(f"port_{ctx.config.interchange_port}")
    probes = tuple(judge.GPU_PROBES[p][0] for p in judge.GPU_PROBES) if ctx.gpu_probe else ()
    return SERVER + tuple(ports) + probes


@dataclass(frozen=True)
class Plan:
    """What one place is asked: host facts (and which), the environment, GPUs, the network."""

    host: bool = True
    env: bool = True
    gpus: bool = True
    network: bool = False


def ports_to_check(ctx: Context, roles: tuple[str, ...]) -> list[tuple[int, str]]:
    rel = ctx.release
    out: list[tuple[int, str]] = []
    if "swarm_server" in roles:
        out.append((rel.swarm_port, "the swarm server's port (ajet-swarm start --swarm-port's default)"))
    if "classic" in roles and ctx.config.interchange_port:
        out.append((ctx.config.interchange_port, "the config's interchange server port"))
    if any(r != "client" for r in roles):
        out += [(rel.ray_gcs_port, "Ray's GCS (ray start --head)"), (rel.ray_dashboard_port, "Ray's dashboard")]
    return list(dict.fromkeys(out))


def build_checks(facts: HostFacts, ctx: Context, roles: tuple[str, ...], plan: Plan) -> list[Check]:
    """Every check this place gets, in a fixed order: host, environment, GPUs, network."""
    server = any(r != "client" for r in roles)
    out: list[Check] = []
    if plan.host:
        out += [judge.host_python(facts, ctx)]
        if server:
            out += _host_server(facts, ctx, roles)
        else:
            out += [judge.tool_check(facts, "git", "git (to clone and pin AgentJet)", "install git (root: `sudo "
                                     "apt-get install -y git`)"), judge.env_manager(facts, ctx)]
    if plan.env:
        out += [judge.env_python(facts, ctx), judge.not_base_conda(facts, ctx)]
        if server:
            out += _env_server(facts, ctx)
        out.append(judge.ajet(facts, ctx))
    if plan.gpus and server:
        out += [judge.gpu_driver(facts, ctx), judge.gpu_capability(facts, ctx), judge.gpu_count(facts, ctx),
                judge.gpu_free(facts, ctx)]
        if ctx.gpu_probe:
            out += [judge.gpu_probe(facts, ctx, probe) for probe in judge.GPU_PROBES]
    if plan.network:
        out += [judge.reach(facts, ctx, "github", "GitHub (AgentJet's repository, flash-attn's prebuilt wheels)"),
                judge.reach(facts, ctx, "index", f"the package index ({ctx.index_url or 'PyPI'})"),
                judge.reach(facts, ctx, "huggingface", "Hugging Face (models and datasets)"),
                judge.reach(facts, ctx, "modelscope", "ModelScope (models, for users in China)"),
                judge.proxies(facts, ctx)]
    return out


def _host_server(facts: HostFacts, ctx: Context, roles: tuple[str, ...]) -> list[Check]:
    out = [judge.tool_check(facts, "tmux", "tmux (launch_experiment runs each process in it)",
                            "install tmux (root: `sudo apt-get install -y tmux`)"),
           judge.tool_check(facts, "git", "git (to clone and pin AgentJet)",
                            "install git (root: `sudo apt-get install -y git`)"),
           judge.env_manager(facts, ctx)]
    out += [judge.disk(facts, ctx, label) for label in judge.DISK_NEEDS]
    out += [judge.ram(facts, ctx), judge.nofile(facts, ctx), judge.shm(facts, ctx)]
    out += [judge.port(facts, ctx, number, what) for number, what in ports_to_check(ctx, roles)]
    out += [judge.stale_processes(facts, ctx), judge.model_path(facts, ctx), judge.swanlab_key(facts, ctx)]
    return out


def _env_server(facts: HostFacts, ctx: Context) -> list[Check]:
    torch = judge.torch(facts, ctx)
    torch_cuda = (facts.one("env", "import:torch") or {}).get("cuda")
    extra = f"[{ctx.release.extra}]"
    return [
        torch,
        judge.dist_version(facts, ctx, "vllm", "vllm", f"vLLM installed (AgentJet's {extra} extra brings it)"),
        judge.verl(facts, ctx),
        judge.ray(facts, ctx),
        judge.dist_version(facts, ctx, "transformers", "transformers",
                           f"transformers installed (AgentJet's {extra} extra brings it)"),
        judge.pins(facts, ctx),
        judge.flash_attn(facts, ctx),
        judge.cuda_toolkit(facts, ctx, torch_cuda),
    ]


def readiness(checks: list[Check], roles: tuple[str, ...], ctx: Context
              ) -> tuple[dict[str, bool | None], dict[str, list[str]]]:
    """``ready_for`` and ``blocked_by`` per role asked."""
    by_id: dict[str, list[Check]] = {}
    for check in checks:
        by_id.setdefault(check.id, []).append(check)
    ready: dict[str, bool | None] = {}
    blocked: dict[str, list[str]] = {}
    for role in roles:
        failed, unknown = [], []
        for check_id in required(role, ctx):
            for check in by_id.get(check_id, ()):
                if check.status == "fail":
                    failed.append(check_id)
                elif check.status == "unknown" or (check.status == "skip" and (
                        check.id not in BENIGN_SKIPS or check.value == NO_PYTHON)):
                    unknown.append(check_id)
        ready[role] = False if failed else None if unknown else True
        if failed or unknown:
            blocked[role] = list(dict.fromkeys(failed + unknown))
    return ready, blocked


def summary_line(host: str, ready: dict[str, bool | None], blocked: dict[str, list[str]], checks: list[Check],
                 reason: str | None = None) -> str:
    """``gpu1: swarm_server NOT ready (flash_attn, port_10086); client ready [30 ok, 2 warn, 2 fail]``."""
    if reason is not None:
        return f"{host}: unreachable ({reason})"
    parts = []
    for role in ROLES:
        if role not in ready:
            continue
        state = ready[role]
        if state:
            parts.append(f"{role} ready")
        else:
            word = "NOT ready" if state is False else "unknown"
            ids = blocked.get(role, [])
            more = f", +{len(ids) - 6}" if len(ids) > 6 else ""
            parts.append(f"{role} {word} ({', '.join(ids[:6])}{more})")
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("ok", "warn", "fail", "unknown", "skip")}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return f"{host}: {'; '.join(parts)} [{tally}]"
