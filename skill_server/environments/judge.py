"""Facts to checks: what each fact means for AgentJet, against what the selected release accepts.

Every function here is pure: the facts one place reported (``facts.HostFacts``) and the call's context in,
``Check`` objects out. A fact the check needs and did not get is ``unknown`` (the probe was cut by the time
limit, a file was unreadable); a check that does not apply or was not asked for is ``skip`` with the
reason. Thresholds are this skill's, each with its reason in ``expected``; versions are the release's
(``agentjet.environment``), and every ``expected`` that depends on them names the release.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from skill_server.agentjet.environment import EnvironmentFacts
from skill_server.environments.facts import HostFacts, version_tuple
from skill_server.environments.models import Check, Evidence, Status

GIB = 1024**3
#: free space this skill asks for, by what lives there (GiB): warn below the first, fail below the second
DISK_NEEDS = {
    "env": (30, 10, "torch, vLLM, verl and flash-attn take 15 to 20 GB installed"),
    "cache": (20, 3, "pip's and uv's caches hold the wheels while installing (torch and vLLM are GBs each)"),
    "tmp": (10, 1, "Ray writes its session logs and spills objects under /tmp (RAY_TMPDIR)"),
    "experiments": (50, 5, "checkpoints of a 7B model take 15 to 45 GB each (saved_experiments/)"),
}
NOFILE_WANTED = 65536  # what AgentJet's install guide for the latest vLLM and verl sets
RAY_OBJECT_STORE_SHARE = 0.3  # Ray's object store defaults to 30% of memory, at most 200 GB
RAY_OBJECT_STORE_MAX = 200 * 10**9
SHM_FLOOR = 1 * GIB  # Docker's default 64 MB breaks vLLM's and NCCL's shared memory
FLASH_ATTN_MIN_CC = (8, 0)  # FlashAttention 2 runs on Ampere (sm80) and newer
FREE_FRACTION = 0.95  # AgentJet's launcher wants this share of every GPU's memory free


@dataclass
class ConfigFacts:
    """What a config says that preflight checks against (None: not given, or not known statically)."""

    source: str | None = None
    #: the config's own interchange port (classic mode serves on it; ajet-swarm start uses --swarm-port, 10086)
    interchange_port: int | None = None
    logger: str | None = None
    model_path: str | None = None
    n_gpus: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Context:
    release: EnvironmentFacts
    label: str  # "AgentJet 0.1.0 (c68c154f)", or with "(judged by ...)" when the release has no row of its own
    python: str | None
    config: ConfigFacts
    agentjet_root: str | None = None
    index_url: str | None = None
    gpu_probe: bool = False

    def cmd(self, code: str) -> str:
        """``<python> -c '<code>'`` for evidence."""
        return f"{shlex.quote(self.python or 'python')} -c {shlex.quote(code)}"


def make(check_id: str, status: Status, value: str | None, expected: str | None, command: str | None = None,
         excerpt: str = "", fix: str | None = None) -> Check:
    evidence = Evidence(command=command, excerpt=_short(excerpt)) if command else None
    return Check(id=check_id, status=status, value=value, expected=expected, evidence=evidence,
                 fix=fix if status not in ("ok", "skip") else None)


def _short(text: str, limit: int = 300) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def gib(n: float | int | None) -> str:
    return "unknown" if n is None else f"{n / GIB:.1f} GiB"


def missing(facts: HostFacts, check_id: str, expected: str, what: str) -> Check:
    """A fact that should have come and did not: unknown, with the reason the probe gives."""
    why = facts.error or ("the probe was stopped by the time limit before it got there" if not facts.complete
                          else f"the probe reported no {what}")
    return make(check_id, "unknown", None, expected, fix=f"not checked: {why}; run preflight again with a larger "
                "timeout_s")


# ---- the host ---------------------------------------------------------------------------------------

def host_python(facts: HostFacts, ctx: Context) -> Check:
    expected = "Python 3.8 or newer as python3 (the host agent and these probes need it)"
    fact = facts.one("host", "python3")
    if fact is None:
        return missing(facts, "python3", expected, "interpreter")
    version = ".".join(str(x) for x in fact.get("version", []))
    status: Status = "ok" if tuple(fact.get("version", [0, 0]))[:2] >= (3, 8) else "fail"
    return make("python3", status, f"{version} ({fact.get('executable')})", expected, "python3 --version", version,
                fix="install Python 3.8 or newer (root: `sudo apt-get install -y python3`)")


def tool_check(facts: HostFacts, name: str, expected: str, fix: str, absent: Status = "warn") -> Check:
    fact = facts.one("host", f"tool:{name}")
    if fact is None:
        return missing(facts, name, expected, name)
    if not fact.get("path"):
        return make(name, absent, "not found on PATH", expected, f"command -v {name}", "nothing", fix)
    value = fact.get("version") or fact.get("error") or "found"
    status: Status = "ok" if fact.get("returncode") == 0 else "warn"
    return make(name, status, f"{value} ({fact['path']})", expected, f"{name} --version", str(value), fix)


def env_manager(facts: HostFacts, ctx: Context) -> Check:
    expected = "conda or uv to make the Python environment (AgentJet's install guides use one of them; python -m " \
        "venv also works, with a Python of the right version on the host)"
    uv, condas = facts.one("host", "tool:uv"), facts.many("host", "tool:conda")
    if uv is None and not condas:
        return missing(facts, "env_manager", expected, "uv or conda")
    found = [f"{f.get('version') or 'conda'} ({f['path']})" for f in condas if f.get("path")]
    if uv and uv.get("path"):
        found.insert(0, f"{uv.get('version') or 'uv'} ({uv['path']})")
    if not found:
        return make("env_manager", "warn", "neither uv nor conda found", expected, "command -v uv conda", "nothing",
                    "install uv for your user (no root: `pip install --user uv`), or use manager venv")
    return make("env_manager", "ok", "; ".join(found), expected, "uv --version; conda --version", "; ".join(found))


def disk(facts: HostFacts, ctx: Context, label: str) -> Check:
    check_id = f"disk_{label}"
    warn_gib, fail_gib, why = DISK_NEEDS[label]
    expected = f"at least {warn_gib} GiB free ({why})"
    fact = facts.one("host", f"disk:{label}")
    if fact is None:
        return missing(facts, check_id, expected, f"{label} disk")
    if fact.get("error"):
        return make(check_id, "unknown", None, expected, f"df -h {shlex.quote(fact.get('checked', ''))}",
                    fact["error"], "the folder could not be measured: check it exists and is readable")
    free = fact.get("free") or 0
    value = f"{gib(free)} free of {gib(fact.get('total'))} at {fact.get('checked')} ({fact.get('fstype') or '?'})"
    status: Status = "ok" if free >= warn_gib * GIB else "warn" if free >= fail_gib * GIB else "fail"
    fix = f"free space under {fact.get('checked')} or put it on a larger disk"
    if label == "env" and fact.get("network"):
        status = "warn" if status == "ok" else status
        value += "; a network file system"
        fix = "make the environment on a local disk (AgentJet's install guide: imports from a network file " \
            "system are slow and locks misbehave)"
    if label == "cache":
        fix += " (PIP_CACHE_DIR, UV_CACHE_DIR)"
    if label == "tmp":
        fix += " (RAY_TMPDIR)"
    return make(check_id, status, value, expected, f"df -h {shlex.quote(str(fact.get('checked')))}", value, fix)


def ram(facts: HostFacts, ctx: Context) -> Check:
    expected = "at least 16 GiB available (vLLM, FSDP's CPU side, Ray and the env workers share host memory)"
    fact = facts.one("host", "memory")
    if fact is None or fact.get("available") is None:
        return missing(facts, "ram", expected, "memory figures")
    available, total = fact["available"], fact.get("total")
    status: Status = "ok" if available >= 16 * GIB else "warn" if available >= 4 * GIB else "fail"
    value = f"{gib(available)} available of {gib(total)}"
    return make("ram", status, value, expected, "free -g", value,
                "stop what holds memory, or run on a larger machine (lower max_env_worker and num_fastapi_process)")


def nofile(facts: HostFacts, ctx: Context) -> Check:
    expected = f"an open-file limit of at least {NOFILE_WANTED} (AgentJet's install guide for the latest vLLM and " \
        "verl sets it; env workers, Ray and vLLM hold many sockets)"
    fact = facts.one("host", "nofile")
    if fact is None or fact.get("soft") is None:
        return missing(facts, "nofile", expected, "open-file limit")
    soft, hard = fact["soft"], fact.get("hard")
    value = f"soft {soft}, hard {hard}"
    if soft >= NOFILE_WANTED or soft < 0:
        return make("nofile", "ok", value, expected, "ulimit -n; ulimit -Hn", value)
    fix = (f"start the run with `ulimit -n {min(NOFILE_WANTED, hard)} && ...` (the hard limit allows it)"
           if isinstance(hard, int) and (hard >= NOFILE_WANTED or hard < 0) else
           f"raise the hard limit in /etc/security/limits.conf (root), then `ulimit -n {NOFILE_WANTED}`")
    return make("nofile", "warn", value, expected, "ulimit -n; ulimit -Hn", value, fix)


def shm(facts: HostFacts, ctx: Context) -> Check:
    fact, memory = facts.one("host", "shm"), facts.one("host", "memory")
    expected = ("/dev/shm of at least 1 GiB (vLLM and NCCL share memory through it) and, for Ray's object store "
                "(30% of memory, at most 200 GB), that much free, or Ray falls back to /tmp")
    if fact is None:
        return missing(facts, "shm", expected, "/dev/shm")
    if fact.get("error"):
        return make("shm", "fail", "no /dev/shm", expected, "df -h /dev/shm", fact["error"],
                    "mount a tmpfs at /dev/shm (in Docker: --shm-size=32g or --ipc=host)")
    total, free = fact.get("total") or 0, fact.get("free") or 0
    needed = min(RAY_OBJECT_STORE_SHARE * (memory or {}).get("available", 0), RAY_OBJECT_STORE_MAX)
    value = f"{gib(free)} free of {gib(total)}" + (f"; Ray's object store would want {gib(needed)}" if needed else "")
    if total < SHM_FLOOR:
        return make("shm", "fail", value, expected, "df -h /dev/shm", value,
                    "give the container a larger /dev/shm (Docker: --shm-size=32g, as AgentJet's image runs, or "
                    "--ipc=host; Slurm: ask the admins)")
    if needed and free < needed:
        return make("shm", "warn", value, expected, "df -h /dev/shm", value,
                    "Ray will put its object store in /tmp (slower): enlarge /dev/shm or free it (stale files of "
                    "crashed runs), or set object_store_memory")
    return make("shm", "ok", value, expected, "df -h /dev/shm", value)


def port(facts: HostFacts, ctx: Context, number: int, what: str) -> Check:
    check_id = f"port_{number}"
    expected = f"port {number} free ({what})"
    fact = facts.one("host", f"port:{number}")
    if fact is None:
        return missing(facts, check_id, expected, f"port {number}")
    command = f"ss -ltnp 'sport = :{number}'"
    if fact.get("error"):
        return make(check_id, "unknown", None, expected, command, fact["error"], "check with ss or lsof")
    if not fact.get("listening"):
        return make(check_id, "ok", "free", expected, command, "no listener")
    holders = fact.get("holders") or []
    who = "; ".join(f"pid {h['pid']} ({h['command']})" for h in holders) or "a process this user cannot see"
    return make(check_id, "fail", f"held by {who}", expected, command, who,
                "stop what holds it if it is yours and stale (a Ray cluster: `ray stop`), or choose another port "
                "(ajet-swarm start --swarm-port, ray start --port / --dashboard-port, the config's interchange port)")


def stale_processes(facts: HostFacts, ctx: Context) -> Check:
    expected = "no Ray cluster or swarm server left running from an earlier run (they hold ports, GPUs and /dev/shm)"
    fact = facts.one("host", "processes")
    if fact is None:
        return missing(facts, "stale_processes", expected, "process list")
    found = fact.get("found") or []
    command = "ps -eo pid,user,args | grep -E 'raylet|gcs_server|ajet'"
    if not found:
        return make("stale_processes", "ok", "none", expected, command, "none")
    mine = [p for p in found if p.get("uid") == fact.get("uid")]
    value = "; ".join(f"pid {p['pid']}: {p['command'][:80]}" for p in found[:5]) + (
        f" and {len(found) - 5 + (fact.get('more') or 0)} more" if len(found) > 5 else "")
    return make("stale_processes", "warn", value, expected, command, value,
                ("if they are leftovers of yours: `ray stop --force` and stop_experiment the run that started them"
                 if mine else "they belong to another user: ask before touching them"))


def cuda_toolkit(facts: HostFacts, ctx: Context, torch_cuda: str | None) -> Check:
    expected = ("a CUDA toolkit (nvcc) of torch's CUDA version, with CUDA_HOME pointing at it, where flash-attn or "
                "a JIT kernel is compiled (not needed with prebuilt wheels)")
    fact = facts.one("host", "cuda")
    if fact is None:
        return missing(facts, "cuda_toolkit", expected, "CUDA toolkits")
    toolkits = [t for t in fact.get("toolkits") or [] if t.get("version")]
    listed = "; ".join(f"{t['version']} at {t['home']}" for t in toolkits) or "no nvcc found"
    home = fact.get("cuda_home")
    value = f"CUDA_HOME={home or '(unset)'}; toolkits: {listed}"
    command = "nvcc --version; echo $CUDA_HOME"
    want = version_tuple(torch_cuda)
    if not toolkits:
        return make("cuda_toolkit", "warn", value, expected, command, listed,
                    "only needed to build flash-attn or JIT kernels: install the CUDA toolkit matching torch (root; "
                    "printed as an instruction), or use prebuilt wheels")
    if want is None:
        return make("cuda_toolkit", "ok", value, expected, command, listed)
    at_home = next((t for t in toolkits if home and t["home"].rstrip("/") == home.rstrip("/")), None)
    if at_home and version_tuple(at_home["version"], 1) != want[:1]:
        return make("cuda_toolkit", "fail", value, f"{expected}: torch's CUDA is {torch_cuda}", command, listed,
                    f"CUDA_HOME is CUDA {at_home['version']}, torch's is {torch_cuda}: torch refuses to build "
                    f"extensions with it; point CUDA_HOME at a CUDA {want[0]}.x toolkit")
    match = [t for t in toolkits if version_tuple(t["version"]) == want]
    if match:
        note = "" if at_home in match else f"; set CUDA_HOME={match[0]['home']} when building"
        return make("cuda_toolkit", "ok" if not note else "warn", value + note,
                    f"{expected}: torch's CUDA is {torch_cuda}", command, listed,
                    f"export CUDA_HOME={match[0]['home']} before building flash-attn")
    return make("cuda_toolkit", "warn", value, f"{expected}: torch's CUDA is {torch_cuda}", command, listed,
                f"no toolkit of CUDA {torch_cuda} (another minor works with a warning; another major does not): "
                "install the matching one, or use prebuilt wheels")


def model_path(facts: HostFacts, ctx: Context) -> Check:
    path = ctx.config.model_path
    expected = f"the config's model path ({ctx.config.source}) is a folder with config.json on this host"
    if not ctx.config.source:
        return make("model_path", "skip", "no config given", None)
    if not path:
        return make("model_path", "skip", "the config's model path is not known statically", expected)
    if not path.startswith(("/", "~", ".")):
        return make("model_path", "skip", f"{path} (a hub id: downloaded when training starts)", expected)
    fact = facts.one("host", "model")
    if fact is None:
        return missing(facts, "model_path", expected, "model folder")
    command = f"ls {shlex.quote(str(fact.get('resolved')))}/config.json"
    if fact.get("config_json"):
        return make("model_path", "ok", str(fact.get("resolved")), expected, command, "config.json present")
    why = "has no config.json" if fact.get("exists") else "does not exist"
    return make("model_path", "fail", f"{fact.get('resolved')} {why}", expected, command, why,
                "download the model there (huggingface-cli or modelscope download), or fix ajet.model.path")


def swanlab_key(facts: HostFacts, ctx: Context) -> Check:
    logger = ctx.config.logger
    expected = f"SWANLAB_API_KEY set where training starts ({ctx.label}'s launcher refuses a swanlab logger without it)"
    if not ctx.config.source:
        return make("swanlab_key", "skip", "no config given: the logger is unknown", None)
    if logger is None:
        return make("swanlab_key", "skip", "the config's logger is not known statically", expected)
    if "swanlab" not in logger:
        return make("swanlab_key", "skip", f"logger {logger}: no key needed", None)
    fact = facts.one("host", "environment")
    if fact is None:
        return missing(facts, "swanlab_key", expected, "environment")
    if (fact.get("present") or {}).get("SWANLAB_API_KEY"):
        return make("swanlab_key", "ok", "set", expected, "printenv SWANLAB_API_KEY >/dev/null && echo set", "set")
    return make("swanlab_key", "warn", "not set in this host's environment", expected,
                "printenv SWANLAB_API_KEY >/dev/null && echo set", "not set",
                "pass SWANLAB_API_KEY in launch_experiment's env, or set ajet.trainer_common.logger to tensorboard")


# ---- the environment (inside the interpreter) -----------------------------------------------------

def env_missing(facts: HostFacts, ctx: Context, check_id: str, expected: str) -> Check:
    if not ctx.python:
        return make(check_id, "skip", "no python given", expected)
    started = facts.one("env", "start")
    if started is not None:
        return make(check_id, "fail", None, expected, ctx.cmd("import sys"), started.get("error", ""),
                    "pass python: the path of the environment's interpreter on that host (e.g. /path/env/bin/python)")
    return missing(facts, check_id, expected, "answer from the interpreter")


def env_python(facts: HostFacts, ctx: Context) -> Check:
    rel = ctx.release
    expected = f"Python {rel.python_recommended} (what {ctx.label}'s install guides make; it accepts " \
        f"{', '.join(rel.python_accepted)})"
    fact = facts.one("env", "python")
    if fact is None:
        return env_missing(facts, ctx, "python", expected)
    version = ".".join(str(x) for x in fact.get("version", []))
    short = ".".join(version.split(".")[:2])
    status: Status = "ok" if short in rel.python_accepted else "fail"
    return make("python", status, f"{version} at {fact.get('prefix')}", expected,
                ctx.cmd("import sys; print(sys.version, sys.prefix)"), version,
                f"make a Python {rel.python_recommended} environment (install_agentjet plan)")


def not_base_conda(facts: HostFacts, ctx: Context) -> Check:
    expected = "an environment of its own: not conda's base env, not the system Python"
    fact = facts.one("env", "python")
    if fact is None:
        return env_missing(facts, ctx, "not_base_conda", expected)
    command = ctx.cmd("import sys; print(sys.prefix, sys.base_prefix)")
    prefix = str(fact.get("prefix"))
    if fact.get("conda_base"):
        return make("not_base_conda", "fail", f"conda's base env ({prefix})", expected, command, prefix,
                    "make an environment of its own (install_agentjet, or conda create -p /path/env python=3.10)")
    if fact.get("venv"):
        return make("not_base_conda", "ok", f"venv at {prefix}", expected, command, prefix)
    if fact.get("conda"):
        return make("not_base_conda", "ok", f"conda env at {prefix}", expected, command, prefix)
    return make("not_base_conda", "warn", f"not a venv or conda env ({prefix}): the system Python?", expected, command,
                prefix, "use an environment of its own, so installs never touch the system Python")


def torch(facts: HostFacts, ctx: Context) -> Check:
    expected = f"torch importable (it comes with {ctx.label}'s [{ctx.release.extra}] extra, through verl and vLLM)"
    fact = facts.one("env", "import:torch")
    command = ctx.cmd("import torch; print(torch.__version__, torch.version.cuda, torch._C._GLIBCXX_USE_CXX11_ABI)")
    if fact is None:
        return env_missing(facts, ctx, "torch", expected)
    if not fact.get("ok"):
        dist = facts.one("env", "dist:torch") or {}
        value = "not installed" if not dist.get("version") else f"{dist['version']} installed, import fails"
        return make("torch", "fail", value, expected, command, str(fact.get("error")),
                    f"pip install -e .[{ctx.release.extra}] in the AgentJet checkout, in this environment")
    cuda = fact.get("cuda")
    value = f"{fact.get('version')}, CUDA {cuda or 'none (a CPU build)'}, C++11 ABI {fact.get('cxx11_abi')}"
    if not cuda:
        return make("torch", "fail", value, expected + ", built for CUDA", command, value,
                    "install a CUDA build of torch (the one vLLM pins), not the CPU wheel")
    return make("torch", "ok", value, expected, command, value)


def dist_version(facts: HostFacts, ctx: Context, key: str, check_id: str, expected: str,
                 judge: Callable[[str], tuple[Status, str | None]] | None = None) -> Check:
    fact = facts.one("env", f"dist:{key}")
    command = f"{shlex.quote(ctx.python or 'python')} -m pip show {fact.get('dist') if fact else key}"
    if fact is None:
        return env_missing(facts, ctx, check_id, expected)
    version = fact.get("version")
    if not version:
        return make(check_id, "fail", "not installed", expected, command, fact.get("error") or "not found",
                    f"pip install -e .[{ctx.release.extra}] in the AgentJet checkout, in this environment")
    status, fix = judge(version) if judge else ("ok", None)
    return make(check_id, status, str(version), expected, command, str(version), fix)


def verl(facts: HostFacts, ctx: Context) -> Check:
    rel = ctx.release
    expected = f"a verl whose version contains one of {rel.verl_text} ({ctx.label}'s launcher refuses others)"

    def judge(version: str) -> tuple[Status, str | None]:
        if rel.verl_ok(version):
            return "ok", None
        return "fail", (f"install the verl that AgentJet's [{rel.extra}] extra pins: `pip install -e .[{rel.extra}]` "
                        "in the checkout (a newer verl needs a newer AgentJet)")

    return dist_version(facts, ctx, "verl", "verl", expected, judge)


def ray(facts: HostFacts, ctx: Context) -> Check:
    expected = "Ray, the same version on every node, not one with a known regression for vLLM"

    def judge(version: str) -> tuple[Status, str | None]:
        bad = next((why for prefix, why in ctx.release.ray_avoid if version.startswith(prefix)), None)
        return ("warn", f"{bad}: install the Ray your vLLM pins") if bad else ("ok", None)

    return dist_version(facts, ctx, "ray", "ray", expected, judge)


def pins(facts: HostFacts, ctx: Context) -> Check:
    """vLLM's exact pins on torch, Ray and transformers against what is installed (the mismatches users hit)."""
    expected = "the torch, Ray and transformers versions vLLM pins exactly (a mismatch breaks it at import or run)"
    vllm = facts.one("env", "dist:vllm")
    if vllm is None:
        return env_missing(facts, ctx, "pins", expected)
    if not vllm.get("version"):
        return make("pins", "skip", "vLLM is not installed", expected)
    wrong, checked = [], []
    for name, spec in sorted((vllm.get("pins") or {}).items()):
        if not spec.startswith("==") or name == "vllm":
            continue
        want = spec[2:].split(",")[0].strip()
        have = (facts.one("env", f"dist:{name}") or {}).get("version")
        checked.append(f"{name}=={want}")
        if have and have.split("+")[0] != want.split("+")[0]:
            wrong.append(f"{name} {have} (vLLM {vllm['version']} pins {want})")
    command = f"{shlex.quote(ctx.python or 'python')} -m pip check"
    if wrong:
        return make("pins", "fail", "; ".join(wrong), expected, command, "; ".join(wrong),
                    "reinstall into a fresh environment with AgentJet's extra alone (install_agentjet), then add "
                    "other packages with --no-deps")
    value = ("matches " + ", ".join(checked)) if checked else f"vLLM {vllm['version']} pins none of them exactly"
    return make("pins", "ok", value, expected, command, value)


def flash_attn(facts: HostFacts, ctx: Context) -> Check:
    rel = ctx.release
    expected = (f"flash_attn and its compiled kernels importable (verl's models use flash_attention_2; {ctx.label} "
                f"installs flash-attn {rel.flash_attn} last, matching torch)")
    fact = facts.one("env", "import:flash_attn")
    command = ctx.cmd("import flash_attn, flash_attn_2_cuda; print(flash_attn.__version__)")
    if fact is None:
        return env_missing(facts, ctx, "flash_attn", expected)
    if fact.get("ok"):
        return make("flash_attn", "ok", str(fact.get("version")), expected, command, str(fact.get("version")))
    error = str(fact.get("error") or "")
    torch_fact = facts.one("env", "import:torch") or {}
    tag = wheel_tag(facts)
    if "undefined symbol" in error:
        value = f"{fact.get('version') or 'installed'}: built for another torch or C++ ABI (undefined symbol)"
        fix = (f"reinstall flash-attn for this torch ({torch_fact.get('version')}): the prebuilt wheel "
               f"{tag or 'whose tag matches torch, CUDA major, C++ ABI and Python'}, or "
               "`pip install flash-attn --no-build-isolation --no-deps --no-cache-dir` (install_agentjet does both)")
    elif "No module named" in error:
        value = "not installed"
        fix = f"install flash-attn {rel.flash_attn} last, the prebuilt wheel " + (
            f"{tag.replace('<version>', rel.flash_attn)} first" if tag else "matching torch first") + \
            " (install_agentjet does)"
    else:
        value = "import fails"
        fix = "reinstall flash-attn matching this torch (install_agentjet)"
    return make("flash_attn", "fail", value, expected, command, error, fix)


def wheel_tag(facts: HostFacts, version: str | None = None) -> str | None:
    """The flash-attn prebuilt wheel's file name for this interpreter and torch, as flash-attn's setup guesses it."""
    torch_fact, python = facts.one("env", "import:torch"), facts.one("env", "python")
    if not torch_fact or not torch_fact.get("ok") or not python:
        return None
    cuda = version_tuple(torch_fact.get("cuda"), 1)
    torch_version = version_tuple(str(torch_fact.get("version")))
    if cuda is None or torch_version is None:
        return None
    py = "cp" + "".join(str(x) for x in python.get("version", [])[:2])
    abi = "TRUE" if torch_fact.get("cxx11_abi") else "FALSE"
    return (f"flash_attn-{version or '<version>'}+cu{cuda[0]}torch{torch_version[0]}.{torch_version[1]}cxx11abi{abi}-"
            f"{py}-{py}-linux_x86_64.whl")


def ajet(facts: HostFacts, ctx: Context) -> Check:
    expected = f"ajet importable (pip install -e . of the AgentJet checkout); the checks describe {ctx.label}"
    fact = facts.one("env", "import:ajet")
    command = ctx.cmd("import ajet; print(ajet.__version__, ajet.__file__)")
    if fact is None:
        return env_missing(facts, ctx, "ajet", expected)
    if not fact.get("ok"):
        return make("ajet", "fail", "not importable", expected, command, str(fact.get("error")),
                    "pip install -e . (client) or -e .[verl] (server) in the AgentJet checkout, in this environment")
    commit = fact.get("commit")
    value = f"{fact.get('version')} at {fact.get('checkout')}" + (f", commit {commit[:8]}" if commit else "") + (
        " (uncommitted changes)" if fact.get("dirty") else "")
    root = ctx.agentjet_root
    if root and not str(fact.get("checkout", "")).rstrip("/").endswith(root.rstrip("/").split("/")[-1]):
        return make("ajet", "warn", value, f"{expected}, from {root}", command, value,
                    f"this environment imports another checkout: pip install -e {root}")
    return make("ajet", "ok", value, expected, command, value)


# ---- driver and GPUs --------------------------------------------------------------------------------

def no_gpu(facts: HostFacts, check_id: str, expected: str) -> Check | None:
    """The check when this place has no GPU to look at (skip), or None when it has."""
    if facts.gpus is None:
        return missing(facts, check_id, expected, "nvidia-smi answer")
    if facts.gpus.gpus is None:
        return make(check_id, "skip", f"no GPU here ({facts.gpus.reason})", expected)
    if not facts.gpus.gpus:
        return make(check_id, "skip", "nvidia-smi lists no GPU", expected)
    return None


def gpu_driver(facts: HostFacts, ctx: Context) -> Check:
    torch_cuda = (facts.one("env", "import:torch") or {}).get("cuda")
    expected = "an NVIDIA driver whose CUDA is at least torch's" + (f" ({torch_cuda})" if torch_cuda else "")
    skipped = no_gpu(facts, "gpu_driver", expected)
    if skipped:  # the one GPU check that says so: a server role needs GPUs here
        if skipped.status == "skip":
            return make("gpu_driver", "fail", skipped.value, expected, "nvidia-smi", str(skipped.value),
                        "run the server where GPUs are (or, on a Slurm login node, give slurm_job to check the "
                        "allocation's nodes)")
        return skipped
    driver = facts.driver
    if driver is None or driver.cuda is None:
        return make("gpu_driver", "unknown", driver.version if driver else None, expected, "nvidia-smi",
                    (driver.error if driver else None) or "no CUDA Version in nvidia-smi's table",
                    "run nvidia-smi on the host and compare its CUDA Version with torch.version.cuda")
    value = f"driver {driver.version}, CUDA {driver.cuda}"
    have, want = version_tuple(driver.cuda), version_tuple(torch_cuda)
    if want is None or have is None:
        return make("gpu_driver", "ok", value, expected, "nvidia-smi", value)
    if have[0] < want[0]:
        return make("gpu_driver", "fail", value, expected, "nvidia-smi", value,
                    f"the driver runs CUDA {driver.cuda}, torch needs {torch_cuda}: update the driver (root; an "
                    "instruction), or install torch built for the driver's CUDA")
    if have < want:
        return make("gpu_driver", "warn", value, expected, "nvidia-smi", value,
                    f"an older minor than torch's CUDA {torch_cuda}: minor-version compatibility usually runs it, JIT "
                    "compilation of new PTX does not; update the driver if kernels fail to load")
    return make("gpu_driver", "ok", value, expected, "nvidia-smi", value)


def gpu_capability(facts: HostFacts, ctx: Context) -> Check:
    expected = "compute capability 8.0 or higher on every GPU (FlashAttention 2 runs on Ampere and newer)"
    skipped = no_gpu(facts, "gpu_compute_capability", expected)
    if skipped:
        return skipped
    caps = (facts.driver.capabilities if facts.driver else {}) or {}
    command = "nvidia-smi --query-gpu=index,name,compute_cap --format=csv"
    if not caps:
        return make("gpu_compute_capability", "unknown", None, expected, command,
                    (facts.driver.error if facts.driver else None) or "this driver does not report compute_cap",
                    "look up the GPU model's compute capability")
    assert facts.gpus is not None and facts.gpus.gpus is not None
    names = {g.index: g.name for g in facts.gpus.gpus}
    value = ", ".join(f"GPU {i} {names.get(i, '?')}: {cap}" for i, cap in sorted(caps.items()))
    low = [i for i, cap in caps.items() if (version_tuple(cap) or (0, 0)) < FLASH_ATTN_MIN_CC]
    if low:
        return make("gpu_compute_capability", "fail", value, expected, command, value,
                    "FlashAttention 2 does not run on these GPUs: use Ampere or newer GPUs, or a model config "
                    "without flash_attention_2 (attn_implementation sdpa)")
    return make("gpu_compute_capability", "ok", value, expected, command, value)


def gpu_count(facts: HostFacts, ctx: Context) -> Check:
    wanted = ctx.config.n_gpus
    expected = (f"at least {wanted} GPUs (n_gpus_per_node in {ctx.config.source})" if wanted else
                "as many GPUs as the config's n_gpus_per_node")
    skipped = no_gpu(facts, "gpu_count", expected)
    if skipped:
        return skipped
    assert facts.gpus is not None and facts.gpus.gpus is not None
    count = len(facts.gpus.gpus)
    command = "nvidia-smi -L"
    if wanted is None:
        return make("gpu_count", "skip", f"{count} GPUs (no config to compare with)", expected, command,
                    f"{count} GPUs")
    if count < wanted:
        return make("gpu_count", "fail", f"{count} GPUs", expected, command, f"{count} GPUs",
                    f"run on a node with {wanted} GPUs, or lower n_gpus_per_node (train_batch_size x num_repeat must "
                    "stay divisible by the GPUs)")
    return make("gpu_count", "ok", f"{count} GPUs", expected, command, f"{count} GPUs")


def gpu_free(facts: HostFacts, ctx: Context) -> Check:
    expected = f"every GPU at least {FREE_FRACTION:.0%} free (AgentJet's launcher refuses less)"
    skipped = no_gpu(facts, "gpu_free_memory", expected)
    if skipped:
        return skipped
    assert facts.gpus is not None and facts.gpus.gpus is not None
    busy = []
    for gpu in facts.gpus.gpus:
        if gpu.free_fraction is None or gpu.free_fraction < FREE_FRACTION:
            holders = ", ".join(f"pid {p.pid} {p.name}" for p in gpu.processes or []) or "holders not listed"
            free = "unknown" if gpu.free_fraction is None else f"{gpu.free_fraction:.0%}"
            busy.append(f"GPU {gpu.index} {free} free ({holders})")
    command = "nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory,process_name --format=csv"
    if busy:
        return make("gpu_free_memory", "fail", "; ".join(busy), expected, command, "; ".join(busy),
                    "free them if the holders are yours and stale (gpu_status names them; ask before ending others'), "
                    "or wait")
    value = f"all {len(facts.gpus.gpus)} GPUs free"
    return make("gpu_free_memory", "ok", value, expected, command, value)


GPU_PROBES = {"matmul": ("gpu_matmul", "a bf16 matrix product on GPU 0 matches a float32 one"),
              "flash_attn": ("gpu_flash_attn", "a flash_attn_func forward matches torch's attention"),
              "nccl": ("gpu_nccl", "an NCCL all-reduce over two GPUs (one rank on one GPU) gives the right sum")}


def gpu_probe(facts: HostFacts, ctx: Context, probe: str) -> Check:
    check_id, expected = GPU_PROBES[probe]
    if not ctx.python:
        return make(check_id, "skip", "no python given", expected)
    if facts.gpus is not None and not facts.gpus.gpus:
        return make(check_id, "skip", "needs a GPU (none here)", expected)
    fact = facts.one("gpu", f"gpu:{probe}")
    command = f"{shlex.quote(ctx.python)} -c <preflight's {probe} probe>"
    if fact is None:
        started = facts.one("gpu", "start")
        if started is not None:
            return make(check_id, "fail", None, expected, command, started.get("error", ""), "check python")
        return missing(facts, check_id, expected, f"{probe} probe result")
    if fact.get("ok") is None:
        return make(check_id, "skip", str(fact.get("skip")), expected)
    if fact.get("ok"):
        return make(check_id, "ok", str(fact.get("value")), expected, command, str(fact.get("value")))
    error = str(fact.get("error") or "")
    return make(check_id, "fail", str(fact.get("value") or "failed"), expected, command, error,
                "read the error: " + _short(error, 200))


# ---- network --------------------------------------------------------------------------------------

def reach(facts: HostFacts, ctx: Context, target: str, what: str) -> Check:
    check_id = f"net_{target}"
    expected = f"{what} reachable from this host"
    fact = facts.one("network", target)
    if fact is None:
        return missing(facts, check_id, expected, f"{target} answer")
    command = f"curl -sSI --connect-timeout 10 {shlex.quote(str(fact.get('url')))}"
    if fact.get("ok"):
        value = f"HTTP {fact.get('status')} in {fact.get('elapsed')} s"
        return make(check_id, "ok", value, expected, command, value)
    fixes = {"github": "clone through a proxy (HTTPS_PROXY) or give install_agentjet a checkout (agentjet_root); "
                       "flash-attn wheels: flash_attn_wheels from a mirror or folder",
             "index": "use a reachable mirror: install_agentjet's index_url (e.g. https://mirrors.aliyun.com/pypi/simple/)",
             "huggingface": "set HF_ENDPOINT to a mirror, or download models on a host that can reach it",
             "modelscope": "use Hugging Face or a local copy of the model"}
    return make(check_id, "warn" if target != "index" else "fail", str(fact.get("error")), expected, command,
                str(fact.get("error")), fixes.get(target))


def proxies(facts: HostFacts, ctx: Context) -> Check:
    fact = facts.one("network", "proxy")
    expected = "the proxies downloads go through (HTTP(S)_PROXY, NO_PROXY), passwords hidden"
    if fact is None:
        return missing(facts, "net_proxy", expected, "proxy settings")
    found = fact.get("proxies") or {}
    value = ", ".join(f"{k}={v}" for k, v in sorted(found.items())) or "none set"
    return make("net_proxy", "ok", value, expected, "env | grep -i _proxy", value)
