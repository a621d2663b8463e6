"""The install job: AgentJet into an environment this program creates and owns, stage by stage.

``python3 -I installer.py plan.json``, started by ``install_agentjet run`` as an experiment (its log, status,
wait, watch, stop and stall detection are the experiment machinery's). ``plan.json`` is the plan the server
made (``environments.plan``): every command as an argv, run without a shell.

Ownership: the environment's folder is created here (``mkdir``: it must not exist) and marked at once with
``.agentjet-swarm-skill/owner.json``; a folder without that marker is refused, whatever it holds. The marker
folder also holds the lock (``flock``: a second install into the same folder is refused while one runs, and
a killed one leaves no lock behind), each stage's done-marker, the state ``install_agentjet status`` reads,
the lock file of ``pip freeze`` and the verification's facts.

Stages (``plan["stages"]``, in order) each have a done-marker holding a digest of their inputs and a
verification: a stage marked done with the same inputs is verified and skipped, so a run that was
interrupted resumes where it stopped, and a stage whose verification fails (a broken env, a flash-attn that
no longer imports) is done again; a stage whose last attempt did not finish is done with its repair
commands (the packages reinstalled: a full disk can leave a half-written torch). No environment or file of
the user's is ever deleted, and nothing outside the environment, the checkout it clones and the marker
folder is written: never the base conda env, the system Python,
``~/.bashrc`` or pip's configuration. Exit codes: 0 installed, 1 a stage failed, 3 refused (not ours),
75 another install holds the lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: never evaluated on the host's Python 3.8
    Stage = dict[str, Any]

MARKER_DIR = ".agentjet-swarm-skill"
PREFIX = "[install] "
GITHUB_WHEELS = "https://github.com/Dao-AILab/flash-attention/releases/download"
#: RAM one flash-attn compile job may take (a 64-job build wants about 500 GB: flash-attention issue 1038)
GIB_PER_JOB = 8
PROGRESS = re.compile(r"\[(\d+)/(\d+)\]")


class Refused(Exception):
    """The environment's folder is not this program's to use (exit 3), or is in use (exit 75)."""

    def __init__(self, message: str, code: int) -> None:
        Exception.__init__(self, message)
        self.code = code


def log(message: str) -> None:
    sys.stdout.write(PREFIX + message + "\n")
    sys.stdout.flush()


def expand(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def write_json(path: str, data: Any) -> None:
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


# ---- ownership and the lock -----------------------------------------------------------------------

def claim(plan: dict[str, Any]) -> tuple[str, str]:
    """Create the environment's folder and mark it ours, or accept it if it is marked ours already."""
    env = expand(plan["env_path"])
    marker = os.path.join(env, MARKER_DIR)
    owner = os.path.join(marker, "owner.json")
    try:
        os.mkdir(env, 0o755)
    except FileExistsError:
        if read_json(owner) is None:
            raise Refused("%s exists and was not created by install_agentjet (no %s/owner.json): refusing to "
                          "touch it; give a new path" % (env, MARKER_DIR), 3) from None
        return env, marker
    except FileNotFoundError:
        raise Refused("the folder above %s does not exist: create it first" % env, 3) from None
    os.mkdir(marker, 0o755)
    write_json(owner, {"created_by": "agentjet-swarm-skill install_agentjet", "env_path": env,
                       "created_at": time.time(), "manager": plan["manager"], "host": os.uname()[1]})
    log("created %s (marked ours: %s/owner.json)" % (env, MARKER_DIR))
    return env, marker


def lock(marker: str) -> IO[str]:
    """Hold the install lock for this process's life, or refuse."""
    import fcntl

    handle = open(os.path.join(marker, "lock"), "a+")  # noqa: SIM115 - held until the process ends
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        raise Refused("another install into this environment is running (%s): refused" % holder, 75) from None
    handle.seek(0)
    handle.truncate()
    handle.write("pid %d on %s since %s" % (os.getpid(), os.uname()[1], time.strftime("%Y-%m-%d %H:%M:%S")))
    handle.flush()
    return handle


# ---- running commands -----------------------------------------------------------------------------

def show(argv: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in argv)


def run(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None,
        progress: str | None = None) -> int:
    """Run ``argv`` with its output going to the log as it comes; its exit code."""
    log("$ " + show(argv))
    full = dict(os.environ)
    full.update(env or {})
    full.setdefault("PYTHONUNBUFFERED", "1")
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=full, cwd=cwd)
    except OSError as exc:
        log("cannot run %s: %s" % (argv[0], exc.strerror or exc))
        return 127
    shown_at = 0.0
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        sys.stdout.write(line + "\n")
        found = PROGRESS.search(line) if progress else None
        if found and time.monotonic() - shown_at > 15:
            shown_at = time.monotonic()
            log("%s: %s of %s compiled" % (progress, found.group(1), found.group(2)))
            state(progress=found.group(0))
        sys.stdout.flush()
    return proc.wait()


def output(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """(exit code, stdout) of a short command (verifications)."""
    full = dict(os.environ)
    full.update(env or {})
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=full, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout.decode("utf-8", "replace")


# ---- state for status -----------------------------------------------------------------------------

STATE: dict[str, Any] = {}


def state(**fields: Any) -> None:
    STATE.update(fields)
    STATE["updated_at"] = time.time()
    if STATE.get("path"):
        try:
            write_json(STATE["path"], dict((k, v) for k, v in STATE.items() if k != "path"))
        except OSError:
            pass  # a full disk must not hide the stage's own error


def digest(stage: Stage) -> str:
    return hashlib.sha256(json.dumps(stage, sort_keys=True).encode("utf-8")).hexdigest()[:16]


# ---- verifications --------------------------------------------------------------------------------

def python_of(env: str) -> str:
    return os.path.join(env, "bin", "python")


def verify(stage: Stage, env: str, marker: str | None) -> tuple[bool, str]:
    """(ok, what was seen) for a stage's verification (``stage["verify"]``)."""
    check = stage.get("verify") or {}
    kind = check.get("kind")
    if kind == "git_head":
        code, out = output(["git", "-C", expand(check["path"]), "rev-parse", "HEAD"])
        head = out.strip()
        want = check.get("commit")
        if check.get("ref"):  # a tag, branch or commit given by the user: what it names now
            found, named = output(["git", "-C", expand(check["path"]), "rev-parse", check["ref"] + "^{commit}"])
            want = named.strip() if found == 0 else "(%s not found)" % check["ref"]
        ok = code == 0 and (not want or head.startswith(want))
        return ok, "HEAD %s, wanted %s" % (head[:12], (want or "any")[:12]) if code == 0 else out.strip()[-300:]
    if kind == "python_version":
        code, out = output([python_of(env), "-c",
                            "import sys; print('%d.%d' % sys.version_info[:2]); print(sys.prefix)"])
        parts = out.strip().split("\n")
        ok = code == 0 and len(parts) == 2 and parts[0] == check["version"] and expand(parts[1]) == env
        return ok, ("Python %s at %s" % tuple(parts)) if len(parts) == 2 else out.strip()[-300:]
    if kind == "import":
        code, out = output([python_of(env), "-c", "; ".join("import " + m for m in check["modules"])])
        return code == 0, (out.strip().splitlines() or ["imported"])[-1][:400]
    if kind == "file":
        path = os.path.join(marker or "", check["name"])
        ok = os.path.isfile(path) and os.path.getsize(path) > 0
        return ok, path if ok else "missing or empty: " + path
    if kind == "always":
        return False, "run every time"
    return False, "unknown verification %r" % kind


# ---- the dynamic stages ---------------------------------------------------------------------------

def torch_facts(env: str) -> tuple[dict[str, Any] | None, str | None]:
    code, out = output([python_of(env), "-c", "import json, sys, torch; print(json.dumps([torch.__version__, "
                        "torch.version.cuda, bool(torch._C._GLIBCXX_USE_CXX11_ABI), list(sys.version_info[:2])]))"])
    if code != 0:
        return None, out.strip()[-400:]
    try:
        version, cuda, abi, py = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, out.strip()[-400:]
    return {"torch": version, "cuda": cuda, "abi": abi, "python": py}, None


def wheel_name(version: str, facts: dict[str, Any]) -> str:
    found = re.match(r"(\d+)\.(\d+)", facts["torch"])
    torch_mm = ".".join(found.groups()) if found else facts["torch"]
    cuda_major = facts["cuda"].split(".")[0]
    py = "cp%d%d" % tuple(facts["python"])
    return "flash_attn-%s+cu%storch%scxx11abi%s-%s-%s-linux_x86_64.whl" % (
        version, cuda_major, torch_mm, "TRUE" if facts["abi"] else "FALSE", py, py)


def wheel_location(base: str | None, version: str, name: str) -> str:
    if not base or base.rstrip("/") == GITHUB_WHEELS:
        return "%s/v%s/%s" % (GITHUB_WHEELS, version, name)
    if "://" not in base:
        return os.path.join(expand(base), name)
    return base.rstrip("/") + "/" + name


def toolkit_for(cuda: str, toolkits: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The CUDA toolkit to build with: one of torch's CUDA major.minor, else of its major; else None."""
    want = cuda.split(".")
    exact = [t for t in toolkits if (t.get("version") or "").split(".")[:2] == want[:2]]
    major = [t for t in toolkits if (t.get("version") or "").split(".")[:1] == want[:1]]
    chosen = exact or major
    return chosen[0] if chosen else None


def find_toolkits() -> list[dict[str, Any]]:
    found = []
    homes = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    try:
        homes += [os.path.join("/usr/local", e) for e in sorted(os.listdir("/usr/local")) if e.startswith("cuda-")]
    except OSError:
        pass
    seen = set()
    for home in homes:
        nvcc = os.path.join(home or "", "bin", "nvcc")
        if not home or not os.path.isfile(nvcc) or os.path.realpath(nvcc) in seen:
            continue
        seen.add(os.path.realpath(nvcc))
        code, out = output([nvcc, "--version"])
        match = re.search(r"release (\d+\.\d+)", out)
        found.append({"home": home, "version": match.group(1) if match else None})
    return found


def gpu_archs() -> str | None:
    """``FLASH_ATTN_CUDA_ARCHS`` for the GPUs here (80 for Ampere and Ada, 90 Hopper, 100 and 120 Blackwell)."""
    code, out = output(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    archs = set()
    for line in out.splitlines() if code == 0 else ():
        match = re.match(r"\s*(\d+)\.(\d+)", line)
        if match:
            major = int(match.group(1))
            archs.add({8: "80", 9: "90", 10: "100", 12: "120"}.get(major, "%d0" % major))
    return ";".join(sorted(archs, key=int)) or None


def max_jobs(override: int | None) -> int:
    if override:
        return int(override)
    available = 0
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        pass
    cpus = os.cpu_count() or 1
    return max(1, min(cpus, available // (GIB_PER_JOB * 1024 ** 3)))


def flash_attn(stage: Stage, env: str) -> int:
    """The prebuilt wheel whose tag matches the env, else a source build with CUDA_HOME aligned to torch's CUDA."""
    spec = stage["flash_attn"]
    facts, error = torch_facts(env)
    if facts is None:
        log("flash_attn: torch does not import in the env: %s" % error)
        return 1
    if not facts.get("cuda"):
        log("flash_attn: torch %s is a CPU build: flash-attn needs torch built for CUDA" % facts["torch"])
        return 1
    name = wheel_name(spec["version"], facts)
    if spec["mode"] in ("auto", "wheel"):
        where = wheel_location(spec.get("wheels"), spec["version"], name)
        log("flash_attn: torch %s, CUDA %s, C++11 ABI %s, Python %d.%d: the prebuilt wheel is %s" % (
            facts["torch"], facts["cuda"], facts["abi"], facts["python"][0], facts["python"][1], name))
        if spec.get("github_reachable") is False and not spec.get("wheels"):
            log("flash_attn: GitHub was not reachable (network stage): no prebuilt wheel to download")
        elif run(spec["wheel_command"] + [where]) != 0:
            log("flash_attn: the prebuilt wheel did not install (the lines above say why)")
        else:
            ok, seen = verify(stage, env, None)
            if ok:
                return 0
            log("flash_attn: the prebuilt wheel installed but does not import: " + seen)
        if spec["mode"] == "wheel":
            return 1
    return source_build(spec, facts)


def source_build(spec: dict[str, Any], facts: dict[str, Any]) -> int:
    toolkit = toolkit_for(facts["cuda"], find_toolkits())
    if toolkit is None:
        log("flash_attn: refusing to build: no CUDA toolkit of torch's CUDA %s here (CUDA_HOME=%s). Install it "
            "(needs root; not done here), e.g. `sudo apt-get install -y cuda-toolkit-%s`, then run again" % (
                facts["cuda"], os.environ.get("CUDA_HOME") or "unset", facts["cuda"].replace(".", "-")))
        return 1
    build_env = {"CUDA_HOME": toolkit["home"], "MAX_JOBS": str(max_jobs(spec.get("max_jobs")))}
    build_env["PATH"] = os.path.join(toolkit["home"], "bin") + os.pathsep + os.environ.get("PATH", "")
    archs = gpu_archs()
    if archs:
        build_env["FLASH_ATTN_CUDA_ARCHS"] = archs
    log("flash_attn: building from source with CUDA_HOME=%s (CUDA %s), MAX_JOBS=%s, FLASH_ATTN_CUDA_ARCHS=%s: this "
        "takes 30 minutes to hours" % (toolkit["home"], toolkit["version"], build_env["MAX_JOBS"],
                                       archs or "flash-attn's default (no GPU visible here)"))
    return run(spec["source_command"], env=build_env, progress="flash_attn build")


def network(stage: Stage) -> tuple[int, dict[str, bool]]:
    """Reachability of the index and GitHub; what it finds decides later stages (a wheel from GitHub or not)."""
    import urllib.request

    results = {}
    for name, url in stage["targets"]:
        if url.startswith("file://"):  # a local mirror: a folder
            from urllib.parse import unquote

            found = os.path.isdir(unquote(url[7:]))
            results[name] = 200 if found else None
            log("network: %s %s (%s)" % (name, "reachable" if found else "NOT reachable: no such folder", url))
            continue
        try:
            request = urllib.request.Request(url, method="HEAD" if url.startswith("http") else "GET")
            with urllib.request.urlopen(request, timeout=10) as reply:
                results[name] = getattr(reply, "status", 200) or 200
            log("network: %s reachable (%s)" % (name, url))
        except Exception as exc:  # every failure is the fact being checked
            status = getattr(exc, "code", None)
            results[name] = status
            log("network: %s %s (%s): %s" % (name, "answered %s" % status if status else "NOT reachable", url,
                                             getattr(exc, "reason", None) or exc))
    reached = dict((k, v is not None and v < 500) for k, v in results.items())
    return (0 if reached.get("index", True) else 1), reached


# ---- the stages -----------------------------------------------------------------------------------

def run_stage(stage: Stage, env: str, marker: str, number: int, total: int) -> tuple[bool, Any]:
    name = stage["name"]
    done_path = os.path.join(marker, "stages", name + ".json")
    started_path = os.path.join(marker, "stages", name + ".started")
    inputs = digest(dict((k, v) for k, v in stage.items() if k not in ("note",)))
    done = read_json(done_path)
    state(stage=name, number=number, total=total, status="running", progress=None)
    repair = os.path.exists(started_path) and not done  # an attempt that was cut or failed: mend what it left
    if (stage.get("verify") or {}).get("kind") == "always":
        pass  # checks the world as it is now (the network, the env as a whole): run every time
    elif done and done.get("inputs") == inputs:
        ok, seen = verify(stage, env, marker)
        if ok:
            log("stage %d/%d %s: done earlier, verified (%s)" % (number, total, name, seen))
            return True, done.get("result")
        log("stage %d/%d %s: done earlier but its verification fails (%s): doing it again" % (number, total, name,
                                                                                               seen))
        repair = True
    log("stage %d/%d %s: start%s" % (number, total, name, " (after an attempt that did not finish: repairing)"
                                      if repair and stage.get("repair_commands") else ""))
    with open(started_path, "w") as handle:
        handle.write("%s\n" % time.time())
    if os.path.exists(done_path):
        os.remove(done_path)  # our own marker: done again below, or not done
    started = time.time()
    code, result = execute(dict(stage, commands=stage["repair_commands"]) if repair and stage.get("repair_commands")
                           else stage, env, marker)
    if code == 0:
        ok, seen = verify(stage, env, marker)
        if not ok and stage.get("verify", {}).get("kind") != "always":
            log("stage %d/%d %s: FAILED its verification: %s" % (number, total, name, seen))
            return False, None
        write_json(done_path, {"stage": name, "inputs": inputs, "done_at": time.time(),
                               "seconds": round(time.time() - started, 1), "result": result})
        log("stage %d/%d %s: done in %.0f s" % (number, total, name, time.time() - started))
        return True, result
    log("stage %d/%d %s: FAILED (exit %s); the lines above say why" % (number, total, name, code))
    return False, None


def execute(stage: Stage, env: str, marker: str) -> tuple[int, Any]:
    """Run one stage's work: its commands, or its own logic; (exit code, result kept in its marker)."""
    kind = stage.get("kind", "commands")
    if kind == "network":
        return network(stage)
    if kind == "flash_attn":
        stage["flash_attn"]["github_reachable"] = (STATE.get("reached") or {}).get("github")
        return flash_attn(stage, env), None
    if kind == "lock":
        code, out = output(stage["freeze"])
        if code != 0:
            sys.stdout.write(out)
            return code, None
        with open(os.path.join(marker, "requirements.lock"), "w", encoding="utf-8") as handle:
            handle.write(out)
        log("lock: %d packages written to %s/requirements.lock" % (len(out.splitlines()), marker))
        return 0, None
    if kind == "verify":
        return verify_env(stage, env, marker), None
    if stage.get("skip_if_exists") and os.path.exists(expand(stage["skip_if_exists"])):
        log("%s exists: not run again (the verification decides)" % stage["skip_if_exists"])
        return 0, None
    for argv in stage["commands"]:
        code = run(argv, env=stage.get("env"), cwd=stage.get("cwd"))
        if code != 0:
            return code, None
    return 0, None


def verify_env(stage: Stage, env: str, marker: str) -> int:
    """preflight's environment facts, from the env's own interpreter: kept for status, judged here minimally."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "envprobe.py"), encoding="utf-8") as handle:
        source = handle.read()
    code, out = output([python_of(env), "-c", source], env=None)
    facts = {}
    for line in out.splitlines():
        try:
            fact = json.loads(line)
        except ValueError:
            continue
        if isinstance(fact, dict) and "name" in fact:
            facts[fact["name"]] = fact
    write_json(os.path.join(marker, "verify.json"), facts)
    problems = []
    for module in stage["imports"]:
        fact = facts.get("import:" + module) or {}
        if not fact.get("ok"):
            problems.append("%s does not import: %s" % (module, fact.get("error") or "no answer"))
    verl = (facts.get("dist:verl") or {}).get("version")
    accepted = stage.get("verl_accepted") or []
    if accepted and not (verl and any(token in verl for token in accepted)):
        problems.append("verl %s is not one AgentJet accepts (%s)" % (verl, ", ".join(accepted)))
    for problem in problems:
        log("verify: " + problem)
    if not problems:
        log("verify: the environment's checks pass (facts in %s/verify.json)" % marker)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    os.environ.pop("UV_VENV_CLEAR", None)  # uv would empty an existing folder: nothing is ever removed here
    plan = read_json(argv[1])
    if not plan:
        log("cannot read the plan %s" % argv[1])
        return 1
    try:
        env, marker = claim(plan)
        held = lock(marker)
    except Refused as exc:
        log("REFUSED: %s" % exc)
        return exc.code
    if not os.path.isdir(os.path.join(marker, "stages")):
        os.mkdir(os.path.join(marker, "stages"))
    STATE.update({"path": os.path.join(marker, "state.json"), "started_at": time.time(), "pid": os.getpid(),
                  "status": "running", "failed": None})
    stages = plan["stages"]
    for number, stage in enumerate(stages, 1):
        ok, result = run_stage(stage, env, marker, number, len(stages))
        if stage.get("kind") == "network" and result is not None:
            STATE["reached"] = result
        if not ok:
            state(status="failed", failed=stage["name"])
            held.close()
            return 1
    state(status="installed", stage=None, failed=None)
    log("installed: %s (python %s); lock file %s/requirements.lock" % (env, python_of(env), marker))
    held.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
