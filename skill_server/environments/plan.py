"""An install's plan: every stage's exact commands, made from the request and what the host has.

The plan is data the installer (``hostside.installer``) runs as is: each command an argv, never a shell
line, so paths with spaces, quotes or ``$`` and a mirror URL reach pip, uv, conda and git unchanged. The
same plan is what ``install_agentjet plan`` shows, rendered with quoting a shell would need. Two decisions
wait for the run, because they depend on what the env then holds or where the job runs: the flash-attn
wheel's name (torch's version, CUDA and C++ ABI, the env's Python) and the build's ``CUDA_HOME``,
``FLASH_ATTN_CUDA_ARCHS`` and ``MAX_JOBS``; the plan states the rule.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from skill_server.agentjet.environment import EnvironmentFacts
from skill_server.environments.facts import HostFacts

MARKER_DIR = ".agentjet-swarm-skill"
PYPI = "https://pypi.org/simple/"
GITHUB_WHEELS = "https://github.com/Dao-AILab/flash-attention/releases/download"
#: RAM one flash-attn compile job may take (the installer's own bound, stated here for the plan)
GIB_PER_JOB = 8


@dataclass
class InstallRequest:
    host: str
    env_path: str
    manager: str | None
    python_version: str
    role: str
    agentjet_root: str | None
    agentjet_ref: str | None
    repo_url: str | None
    index_url: str | None
    flash_attn: str
    flash_attn_wheels: str | None
    max_jobs: int | None


@dataclass
class StagePlan:
    name: str
    commands: list[str]
    verify: str
    note: str | None = None


@dataclass
class Plan:
    env_path: str  # as the host sees it (~ expanded)
    manager: str
    python: str
    checkout: str
    stages: list[StagePlan] = field(default_factory=list)
    root_steps: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # plan.json for the installer
    owned: bool = False  # the env folder exists and is ours (a run resumes it)


def show(argv: list[str]) -> str:
    return shlex.join(argv)


def on_host(path: str, home: str | None) -> str:
    """``~`` expanded with the host's home (the installer runs argv without a shell)."""
    if path == "~" or path.startswith("~/"):
        if not home:
            return path
        return home.rstrip("/") + path[1:]
    return path


def choose_manager(req: InstallRequest, facts: HostFacts) -> tuple[str, str | None]:
    """(manager, its executable): the asked one, else uv, else conda, else venv."""
    uv = (facts.one("host", "tool:uv") or {}).get("path")
    condas = [c["path"] for c in facts.many("host", "tool:conda") if c.get("path")]
    venv_python = (facts.one("install", "python") or {}).get("path")
    found = {"uv": uv, "conda": condas[0] if condas else None, "venv": venv_python}
    if req.manager:
        return req.manager, found[req.manager]
    for manager in ("uv", "conda", "venv"):
        if found[manager]:
            return manager, found[manager]
    return "venv", None


def env_commands(manager: str, exe: str, env: str, version: str) -> tuple[list[list[str]], str | None]:
    """The argv that makes the env, and a path whose existence means it was made (never made twice)."""
    if manager == "uv":  # --allow-existing keeps the marker folder; --clear is never used
        return [[exe, "venv", "--allow-existing", "--python", version, env]], None
    if manager == "conda":  # never run create on an existing conda env: conda would empty it first
        return [[exe, "create", "-y", "-p", env, f"python={version}"]], f"{env}/conda-meta"
    return [[exe, "-m", "venv", env]], None


def installers(manager: str, exe: str, env: str, index_url: str | None) -> dict[str, list[str]]:
    """pip (or uv pip) aimed at the env's interpreter only: install, freeze, and the flags of a rebuild (no cache,
    replacing a flash-attn of the same version, such as a prebuilt wheel that did not import)."""
    python = f"{env}/bin/python"
    index = ["--index-url", index_url] if index_url else []
    if manager == "uv":
        base = [exe, "pip", "install", "--python", python, *index]
        return {"install": base, "freeze": [exe, "pip", "freeze", "--python", python], "reinstall": ["--reinstall"],
                "rebuild": ["--no-cache", "--reinstall-package", "flash-attn"]}
    base = [python, "-m", "pip", "install", "--progress-bar", "off", *index]
    return {"install": base, "freeze": [python, "-m", "pip", "freeze"], "reinstall": ["--force-reinstall"],
            "rebuild": ["--no-cache-dir", "--force-reinstall"]}


def make_plan(req: InstallRequest, facts: HostFacts, rel: EnvironmentFacts) -> Plan:
    """The stages for ``req`` on this host, what blocks a run, and the root steps to tell the user."""
    home = (facts.one("host", "environment") or {}).get("home")
    env = on_host(req.env_path, home).rstrip("/") or "/"
    manager, exe = choose_manager(req, facts)
    plan = Plan(env_path=env, manager=manager, python=f"{env}/bin/python", checkout="")
    blockers, root = plan.blockers, plan.root_steps
    _check_env_path(facts, env, plan)
    if exe is None:
        blockers.append(_no_manager(manager, req.python_version))
        exe = {"uv": "uv", "conda": "conda", "venv": f"python{req.python_version}"}[manager]
    server = req.role != "client"
    tools = installers(manager, exe, env, req.index_url)
    stages: list[dict[str, Any]] = [_checkout(req, facts, rel, env, home, plan)]
    made, exists = env_commands(manager, exe, env, req.python_version)
    stages.append({"name": "env", "commands": made, "skip_if_exists": exists,
                   "verify": {"kind": "python_version", "version": req.python_version}})
    stages.append({"name": "network", "kind": "network", "verify": {"kind": "always"},
                   "targets": [["index", (req.index_url or PYPI).rstrip("/") + "/pip/"],
                               ["github", "https://github.com"]]})
    target = f"{plan.checkout}[{rel.extra}]" if server else plan.checkout
    stages.append({"name": "agentjet", "commands": [[*tools["install"], "-e", target]],
                   "repair_commands": [[*tools["install"], *tools["reinstall"], "-e", target]],
                   "env": {"PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
                   "verify": {"kind": "import", "modules": ["ajet", "torch"] if server else ["ajet"]}})
    if server and req.flash_attn != "skip":
        stages.append(_flash_attn(req, rel, tools, home))
        if not _has_toolkit(facts):
            root.append("only if the prebuilt flash-attn wheel does not fit and it must be built: install the CUDA "
                        "toolkit of torch's CUDA version (needs root; from NVIDIA's apt repository, e.g. `sudo apt-get "
                        "install -y cuda-toolkit-12-4`) and run install_agentjet again: it resumes")
    stages.append({"name": "lock", "kind": "lock", "freeze": tools["freeze"],
                   "verify": {"kind": "file", "name": "requirements.lock"}})
    imports = ["ajet"] + (["torch"] + (["flash_attn"] if req.flash_attn != "skip" else []) if server else [])
    stages.append({"name": "verify", "kind": "verify", "imports": imports,
                   "verl_accepted": list(rel.verl_accepted) if server else [], "verify": {"kind": "always"}})
    _root_steps(facts, plan, server)
    plan.data = {"env_path": env, "manager": manager, "python_version": req.python_version, "role": req.role,
                 "stages": stages}
    plan.stages = [_display(stage, env) for stage in stages]
    return plan


def _check_env_path(facts: HostFacts, env: str, plan: Plan) -> None:
    fact = facts.one("install", "env_path")
    if fact is None:
        plan.blockers.append("the host did not say whether env_path exists (no answer in time)")
        return
    if fact.get("exists") and not fact.get("owner"):
        plan.blockers.append(f"env_path {env} exists and was not created by install_agentjet (no {MARKER_DIR}/"
                             "owner.json): it is never touched; give a path that does not exist yet")
    elif fact.get("exists"):
        plan.owned = True
    elif not fact.get("parent_exists"):
        plan.blockers.append(f"the folder above env_path ({env.rsplit('/', 1)[0] or '/'}) does not exist")
    elif not fact.get("parent_writable"):
        plan.blockers.append(f"the folder above env_path ({env.rsplit('/', 1)[0] or '/'}) is not writable by the "
                             "ssh user")


def _no_manager(manager: str, version: str) -> str:
    if manager == "venv":
        return (f"no python{version} on the host's PATH for `python -m venv`: use manager uv (it fetches that "
                "Python) or conda, or install it (root: `sudo apt-get install -y python" + version + "-venv`)")
    return f"{manager} is not installed on the host (or not on a non-interactive shell's PATH)"


def _checkout(req: InstallRequest, facts: HostFacts, rel: EnvironmentFacts, env: str, home: str | None,
              plan: Plan) -> dict[str, Any]:
    """Use the given checkout as it is (never changed), or clone at the pinned commit."""
    fact = facts.one("install", "checkout")
    if req.agentjet_root and fact is not None and fact.get("exists"):
        plan.checkout = str(fact.get("resolved"))
        head = fact.get("commit")
        if not fact.get("pyproject"):
            plan.blockers.append(f"agentjet_root {plan.checkout} has no pyproject.toml: not an AgentJet checkout")
        if not head:
            plan.blockers.append(f"agentjet_root {plan.checkout} is not a git checkout ({fact.get('error')})")
        elif req.agentjet_ref and re.fullmatch(r"[0-9a-f]{7,40}", req.agentjet_ref) and not head.startswith(
                req.agentjet_ref):
            plan.blockers.append(f"agentjet_root is at {head[:12]}, not agentjet_ref {req.agentjet_ref}: check it out "
                                 "yourself (this tool never changes your working tree), or leave agentjet_ref out")
        return {"name": "checkout", "commands": [], "note": f"the checkout at {plan.checkout}, used as it is",
                "verify": {"kind": "git_head", "path": plan.checkout, "commit": head}}
    path = on_host(req.agentjet_root, home) if req.agentjet_root else f"{env}/AgentJet"
    plan.checkout = path
    ref = req.agentjet_ref or rel.commit
    if not (facts.one("host", "tool:git") or {}).get("path"):
        plan.blockers.append("git is not installed on the host (root: `sudo apt-get install -y git`), or give "
                             "agentjet_root: a checkout made elsewhere")
    return {"name": "checkout", "skip_if_exists": f"{path}/.git",
            "commands": [["git", "clone", "--no-checkout", req.repo_url or rel.repo_url, path],
                         ["git", "-C", path, "checkout", "--detach", ref]],
            "verify": {"kind": "git_head", "path": path, "ref": ref}}


def _flash_attn(req: InstallRequest, rel: EnvironmentFacts, tools: dict[str, list[str]], home: str | None
                ) -> dict[str, Any]:
    wheels = on_host(req.flash_attn_wheels, home) if req.flash_attn_wheels else None
    return {"name": "flash_attn", "kind": "flash_attn",
            "flash_attn": {"version": rel.flash_attn, "mode": req.flash_attn, "wheels": wheels,
                           "max_jobs": req.max_jobs, "wheel_command": [*tools["install"], "--no-deps"],
                           "source_command": [*tools["install"], "-v", "--no-build-isolation", "--no-deps",
                                              *tools["rebuild"], f"flash-attn=={rel.flash_attn}"]},
            "verify": {"kind": "import", "modules": ["flash_attn", "flash_attn_2_cuda"]}}


def _has_toolkit(facts: HostFacts) -> bool:
    return any(t.get("version") for t in (facts.one("host", "cuda") or {}).get("toolkits") or [])


def _root_steps(facts: HostFacts, plan: Plan, server: bool) -> None:
    """What needs root, said as instructions (never run)."""
    if server and not (facts.one("host", "tool:tmux") or {}).get("path"):
        plan.root_steps.append("launch_experiment needs tmux on this host: `sudo apt-get install -y tmux`")
    nofile = facts.one("host", "nofile") or {}
    if server and isinstance(nofile.get("hard"), int) and 0 <= nofile["hard"] < 65536:
        plan.root_steps.append("raise the open-file limit to 65536 (AgentJet's install guide): `nofile` in "
                               "/etc/security/limits.conf, then log in again")


def _display(stage: dict[str, Any], env: str) -> StagePlan:
    """A stage as the plan shows it: each command as a shell would need it quoted."""
    kind = stage.get("kind", "commands")
    verify = stage.get("verify", {})
    checks = {"git_head": f"git -C {shlex.quote(str(verify.get('path')))} rev-parse HEAD is "
                          f"{verify.get('commit') or verify.get('ref')}",
              "python_version": f"{env}/bin/python is Python {verify.get('version')}, with sys.prefix {env}",
              "import": f"{env}/bin/python -c 'import {', '.join(verify.get('modules', []))}'",
              "file": f"{env}/{MARKER_DIR}/{verify.get('name')} is not empty",
              "always": "run every time"}
    note = stage.get("note")
    commands = [show(argv) for argv in stage.get("commands", [])]
    if stage.get("repair_commands"):
        note = "after an attempt that did not finish or verify, with the packages reinstalled: " + "; ".join(
            show(argv) for argv in stage["repair_commands"])
    if kind == "network":
        commands = [f"HEAD {url}" for _, url in stage["targets"]]
        note = ("GitHub unreachable: no prebuilt flash-attn wheel is downloaded (a mirror or folder in "
                "flash_attn_wheels still works); the index unreachable fails the stage")
    elif kind == "flash_attn":
        spec = stage["flash_attn"]
        where = spec["wheels"] or f"{GITHUB_WHEELS}/v{spec['version']}"
        commands = [show([*spec["wheel_command"], f"{where}/flash_attn-{spec['version']}+cu<CUDA major>torch<torch "
                          "major.minor>cxx11abi<TRUE|FALSE>-cp<py>-cp<py>-linux_x86_64.whl"])]
        if spec["mode"] != "wheel":
            commands.append(f"CUDA_HOME=<toolkit of torch's CUDA> MAX_JOBS=<min(CPUs, available RAM / {GIB_PER_JOB} "
                            "GiB)> FLASH_ATTN_CUDA_ARCHS=<from the GPUs> " + show(spec["source_command"]))
        note = ("the wheel's tag is read from the env after the agentjet stage (torch, its CUDA major and C++ ABI, "
                "the Python); without one that installs and imports, a source build (refused when no toolkit "
                "matches torch's CUDA major)" if spec["mode"] != "wheel" else "the prebuilt wheel only")
        if spec["mode"] == "source":
            commands = commands[1:]
    elif kind == "lock":
        commands = [show(stage["freeze"]) + f" > {shlex.quote(env + '/' + MARKER_DIR + '/requirements.lock')}"]
    elif kind == "verify":
        commands = [f"{env}/bin/python -c <preflight's environment probe>"]
        note = f"imports {', '.join(stage['imports'])}" + (
            f"; verl is one of {', '.join(stage['verl_accepted'])}" if stage["verl_accepted"] else "")
    if stage.get("skip_if_exists"):
        note = (note + "; " if note else "") + f"not run again once {stage['skip_if_exists']} exists"
    return StagePlan(name=stage["name"], commands=commands, verify=checks.get(verify.get("kind", ""), ""), note=note)
