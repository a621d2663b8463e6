"""A host's facts for preflight and install plans, printed as JSON lines while they are found.

Run as ``python3 -I -S -c <bootstrap> <packed sources> <arguments JSON>`` (``environments.shipping``), on the
host or, for a Slurm allocation, on a node through ``srun --overlap``. Every line is one fact:
``{"section": ..., "name": ..., ...}``; a run cut at its time limit keeps every line it printed, and the
server judges what it did not get as unknown. Nothing here changes the host: ports and processes are read
from ``/proc``, disks with ``statvfs``, tools with their ``--version``; the interpreter under test runs
``envprobe`` (and, when asked, ``gpuprobe``) with the remaining time.

Arguments: ``budget_s`` (seconds for everything), ``sections`` (any of host, env, network, gpu, install),
``python`` (the interpreter under test), ``paths`` (label -> path whose file system to measure), ``ports``,
``model_path``, ``network`` (``[{id, url}]``), ``gpu_probes``, ``install`` (``{env_path, agentjet_root,
python_version}``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the types below are never evaluated on the host's Python 3.8
    Fact = dict[str, Any]
    #: (exit code or None, stdout, stderr, why it did not run)
    Ran = tuple[int | None, str, str, str | None]

#: module name -> source text, set by the bootstrap (``shipping``); read from the files when run in place
SOURCES: dict[str, str] = {}
MAX_TEXT = 600
STARTED = time.monotonic()
BUDGET = [30.0]
#: processes that a stale Ray cluster or swarm server leaves (matched against the command line)
STALE = re.compile(r"\b(?:raylet|gcs_server)\b|ray/dashboard|\bray::|ajet-swarm|ajet\.launcher|interchange_server"
                   r"|vllm\.entrypoints")
NETWORK_FS = ("nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "beegfs", "ceph", "glusterfs", "9p")
_LOCK = threading.Lock()


def left() -> float:
    return BUDGET[0] - (time.monotonic() - STARTED)


def emit(section: str, name: str, **fields: Any) -> None:
    fields.update({"section": section, "name": name})
    with _LOCK:
        sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
        sys.stdout.flush()


def clip(text: str | None, limit: int = MAX_TEXT) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit // 2] + " ... " + text[-limit // 2:]


def run(argv: list[str], timeout: float = 10.0, env: dict[str, str] | None = None,
        cwd: str | None = None) -> Ran:
    """(returncode or None, stdout, stderr, error) of ``argv``, bounded by ``timeout`` and the budget."""
    timeout = max(0.5, min(timeout, left() - 1.0))
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, env=env, cwd=cwd,
                              check=False)
    except FileNotFoundError:
        return None, "", "", "not found"
    except subprocess.TimeoutExpired:
        return None, "", "", "no answer within %.0f s" % timeout
    except OSError as exc:
        return None, "", "", str(exc)
    return (done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"),
            None)


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:MAX_TEXT]
    return ""


# ---- host -----------------------------------------------------------------------------------------

def conda_candidates() -> list[str]:
    """conda as a non-interactive shell finds it (PATH, $CONDA_EXE), and where installers put it."""
    home = os.path.expanduser("~")
    found = [shutil.which("conda"), os.environ.get("CONDA_EXE"), shutil.which("mamba"), shutil.which("micromamba")]
    for root in ("miniconda3", "anaconda3", "miniforge3", "mambaforge"):
        found.append(os.path.join(home, root, "bin", "conda"))
    found.append("/opt/conda/bin/conda")
    out = []
    for path in found:
        if path and os.path.isfile(path) and os.access(path, os.X_OK) and path not in out:
            out.append(path)
    return out


def tools() -> None:
    emit("host", "python3", version=list(sys.version_info[:3]), executable=sys.executable)
    for name, argv in (("tmux", ["-V"]), ("git", ["--version"]), ("uv", ["--version"])):
        path = shutil.which(name)
        if path is None:
            emit("host", "tool:" + name, path=None)
            continue
        code, out, err, error = run([path] + argv)
        emit("host", "tool:" + name, path=path, version=first_line(out or err), error=error, returncode=code)
    condas = conda_candidates()
    if not condas:
        emit("host", "tool:conda", path=None)
    for path in condas[:3]:
        code, out, err, error = run([path, "--version"])
        emit("host", "tool:conda", path=path, version=first_line(out or err), error=error, returncode=code)


def mounts() -> list[tuple[str, str]]:
    """(mount point, fstype) pairs, longest first."""
    out = []
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) >= 3:
                    out.append((parts[1].replace("\\040", " "), parts[2]))
    except OSError:
        pass
    return sorted(out, key=lambda m: -len(m[0]))


def fstype(path: str, table: list[tuple[str, str]]) -> str | None:
    for point, kind in table:
        if path == point or path.startswith(point.rstrip("/") + "/"):
            return kind
    return None


def existing(path: str) -> str:
    """The nearest existing folder at or above ``path``."""
    path = os.path.abspath(os.path.expanduser(path))
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def disks(paths: dict[str, str] | None) -> None:
    table = mounts()
    for label, path in sorted((paths or {}).items()):
        if not path:
            continue
        where = existing(path)
        try:
            info = os.statvfs(where)
        except OSError as exc:
            emit("host", "disk:" + label, path=path, checked=where, error=str(exc))
            continue
        kind = fstype(os.path.realpath(where), table)
        emit("host", "disk:" + label, path=path, checked=where, free=info.f_bavail * info.f_frsize,
             total=info.f_blocks * info.f_frsize, fstype=kind, network=kind is not None and (
                 kind in NETWORK_FS or kind.startswith("fuse.")))


def memory() -> None:
    values = {}
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    values[key] = int(parts[0]) * 1024
    except OSError as exc:
        emit("host", "memory", error=str(exc))
        return
    emit("host", "memory", total=values.get("MemTotal"), available=values.get("MemAvailable"))
    cpus: int | None
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    emit("host", "cpus", count=cpus)


def limits() -> None:
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        emit("host", "nofile", soft=soft, hard=hard)
    except (ImportError, OSError, ValueError) as exc:
        emit("host", "nofile", error=str(exc))
    try:
        info = os.statvfs("/dev/shm")
        emit("host", "shm", total=info.f_blocks * info.f_frsize, free=info.f_bavail * info.f_frsize)
    except OSError as exc:
        emit("host", "shm", error=str(exc))


def listeners() -> dict[int, list[str]] | None:
    """{port: [socket inode]} of the TCP sockets in LISTEN state (IPv4 and IPv6), or None if unreadable."""
    out: dict[int, list[str]] = {}
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as handle:
                lines = handle.readlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":
                continue
            port = int(parts[1].rsplit(":", 1)[1], 16)
            out.setdefault(port, []).append(parts[9])
    return out if readable else None


def socket_owners(inodes: list[str]) -> dict[str, tuple[int, str]]:
    """{inode: (pid, command)} for the sockets this user may see (every process's, as root)."""
    wanted = set("socket:[%s]" % i for i in inodes)
    found = {}
    deadline = time.monotonic() + min(5.0, max(0.5, left() / 4))
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not wanted or time.monotonic() > deadline:
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % entry)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink("/proc/%s/fd/%s" % (entry, fd))
            except OSError:
                continue
            if target in wanted:
                found[target[8:-1]] = (int(entry), command_of(entry))
                wanted.discard(target)
    return found


def command_of(pid: str) -> str:
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as handle:
            return clip(handle.read().replace(b"\0", b" ").decode("utf-8", "replace"), 200)
    except OSError:
        return ""


def ports(wanted: list[int]) -> None:
    if not wanted:
        return
    table = listeners()
    if table is None:
        for port in wanted:
            emit("host", "port:%d" % port, port=port, error="/proc/net/tcp is not readable here")
        return
    held = dict((p, table[p]) for p in wanted if p in table)
    owners = socket_owners([i for inodes in held.values() for i in inodes]) if held else {}
    for port in wanted:
        inodes = held.get(port, [])
        holders = [{"pid": owners[i][0], "command": owners[i][1]} for i in inodes if i in owners]
        emit("host", "port:%d" % port, port=port, listening=bool(inodes), holders=holders)


def processes() -> None:
    found = []
    ours = (os.getpid(), os.getppid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in ours:
            continue
        command = command_of(entry)
        if command and STALE.search(command):
            try:
                uid = os.stat("/proc/" + entry).st_uid
            except OSError:
                uid = None
            found.append({"pid": int(entry), "uid": uid, "command": command})
    emit("host", "processes", found=found[:20], more=max(0, len(found) - 20), uid=os.getuid())


def nvcc_version(path: str) -> tuple[str | None, str | None]:
    code, out, err, error = run([path, "--version"])
    match = re.search(r"release (\d+\.\d+)", out or "")
    return (match.group(1) if match else None), (error or (None if match else first_line(err or out)))


def cuda() -> None:
    """``CUDA_HOME`` and every CUDA toolkit found (its nvcc's release)."""
    candidates = []
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        candidates.append(os.path.join(home, "bin", "nvcc"))
    which = shutil.which("nvcc")
    if which:
        candidates.append(which)
    candidates.append("/usr/local/cuda/bin/nvcc")
    try:
        for entry in sorted(os.listdir("/usr/local")):
            if entry.startswith("cuda-"):
                candidates.append(os.path.join("/usr/local", entry, "bin", "nvcc"))
    except OSError:
        pass
    seen = set()
    toolkits = []
    for path in candidates:
        real = os.path.realpath(path)
        root = os.path.dirname(os.path.dirname(real))
        if real in seen or not os.path.isfile(real) or not (
                os.path.isfile(os.path.join(root, "include", "cuda_runtime.h"))
                or os.path.isdir(os.path.join(root, "targets"))):
            continue  # seen already, or not a toolkit's own nvcc (a wrapper script on PATH, say)
        seen.add(real)
        version, error = nvcc_version(path)
        toolkits.append({"nvcc": path, "home": os.path.dirname(os.path.dirname(path)), "version": version,
                         "error": error})
    emit("host", "cuda", cuda_home=home, on_path=which, toolkits=toolkits[:8])


def environment() -> None:
    """What the processes started here inherit: the variables the checks read (a key's value never leaves)."""
    names = ("SWANLAB_API_KEY", "HF_ENDPOINT", "HF_HOME", "PIP_INDEX_URL", "UV_INDEX_URL", "PIP_CACHE_DIR",
             "UV_CACHE_DIR", "TMPDIR", "RAY_TMPDIR", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "VIRTUAL_ENV")
    present = dict((n, bool(os.environ.get(n))) for n in names)
    shown = dict((n, os.environ.get(n)) for n in names if n != "SWANLAB_API_KEY" and os.environ.get(n))
    emit("host", "environment", present=present, values=shown, home=os.path.expanduser("~"))


def model(path: str | None) -> None:
    if not path:
        return
    full = os.path.abspath(os.path.expanduser(path))
    emit("host", "model", path=path, resolved=full, exists=os.path.isdir(full),
         config_json=os.path.isfile(os.path.join(full, "config.json")))


# ---- install facts --------------------------------------------------------------------------------

MARKER_DIR = ".agentjet-swarm-skill"


def install_facts(spec: Fact) -> None:
    env_path = spec.get("env_path")
    if env_path:
        full = os.path.abspath(os.path.expanduser(env_path))
        marker = os.path.join(full, MARKER_DIR, "owner.json")
        owner = None
        try:
            with open(marker, encoding="utf-8") as handle:
                owner = json.load(handle)
        except (OSError, ValueError):
            pass
        try:
            entries = sorted(os.listdir(full))[:5] if os.path.isdir(full) else None
        except OSError:
            entries = None
        parent = os.path.dirname(full)
        emit("install", "env_path", path=env_path, resolved=full, exists=os.path.lexists(full),
             is_dir=os.path.isdir(full), entries=entries, owner=owner, parent_exists=os.path.isdir(parent),
             parent_writable=os.access(parent, os.W_OK) if os.path.isdir(parent) else False)
    root = spec.get("agentjet_root")
    if root:
        full = os.path.abspath(os.path.expanduser(root))
        code, out, err, error = run(["git", "-C", full, "rev-parse", "HEAD"]) if os.path.isdir(full) else (
            None, "", "", "no such directory")
        emit("install", "checkout", path=root, resolved=full, exists=os.path.isdir(full),
             pyproject=os.path.isfile(os.path.join(full, "pyproject.toml")),
             commit=out.strip() if code == 0 else None, error=error or (None if code == 0 else first_line(err)))
    version = spec.get("python_version")
    if version:
        path = shutil.which("python" + version)
        emit("install", "python", version=version, path=path)


# ---- network --------------------------------------------------------------------------------------

def network(targets: list[Fact] | None) -> None:
    if not targets:
        return
    try:
        import urllib.request
    except ImportError as exc:  # a Python built without ssl
        emit("network", "error", error=str(exc))
        return
    proxies = dict((k, mask(v)) for k, v in os.environ.items()
                   if k.lower() in ("http_proxy", "https_proxy", "all_proxy", "no_proxy") and v)
    emit("network", "proxy", proxies=proxies)
    threads = [threading.Thread(target=reach, args=(urllib.request, t), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.1, left() - 1.0))


def mask(value: str) -> str:
    """A proxy URL without its password."""
    return re.sub(r"//([^:/@]+):[^@/]*@", r"//\1:***@", value)


def reach(urllib_request: Any, target: Fact) -> None:
    started = time.monotonic()
    if target["url"].startswith("file://"):  # a mirror in a folder of the host
        from urllib.parse import unquote

        path = unquote(target["url"][7:])
        found = os.path.exists(path)
        emit("network", target["id"], url=target["url"], ok=found, status=None,
             error=None if found else "no such folder: " + path, elapsed=round(time.monotonic() - started, 3))
        return
    timeout = max(1.0, min(10.0, left() - 2.0))
    try:
        request = urllib_request.Request(target["url"], method="HEAD", headers={"User-Agent": "agentjet-preflight"})
        with urllib_request.urlopen(request, timeout=timeout) as reply:
            status = reply.status
        emit("network", target["id"], url=target["url"], ok=True, status=status,
             elapsed=round(time.monotonic() - started, 3))
    except Exception as exc:  # every failure is a fact to report: HTTP errors, timeouts, DNS, TLS, proxies
        status = getattr(exc, "code", None)
        emit("network", target["id"], url=target["url"], ok=status is not None and status < 500, status=status,
             error=clip("%s: %s" % (type(exc).__name__, getattr(exc, "reason", None) or exc), 300),
             elapsed=round(time.monotonic() - started, 3))


# ---- the interpreter under test -------------------------------------------------------------------

def source(name: str) -> str:
    if name in SOURCES:
        return SOURCES[name]
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py"), encoding="utf-8") as handle:
        return handle.read()


def relay(section: str, argv: list[str], reserve: float = 1.0) -> None:
    """Run ``argv`` (the interpreter under test), re-emitting its JSON lines under ``section`` as they come."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd="/", start_new_session=True)
    except OSError as exc:
        emit(section, "start", ok=False, error="cannot run %s: %s" % (argv[0], exc.strerror or exc))
        return
    errors: list[bytes] = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read() if proc.stderr else b""), daemon=True)
    reader.start()
    lines = threading.Thread(target=forward, args=(section, proc.stdout), daemon=True)
    lines.start()
    try:
        proc.wait(timeout=max(0.5, left() - reserve))
    except subprocess.TimeoutExpired:
        kill(proc)
        emit(section, "timeout", ok=False, error="stopped after %.0f s (the call's time limit)" % (
            time.monotonic() - STARTED))
    lines.join(2)
    reader.join(2)
    tail = (errors[0] if errors else b"").decode("utf-8", "replace")
    emit(section, "exit", returncode=proc.returncode, stderr=clip(tail[-4000:]))


def forward(section: str, stream: IO[bytes]) -> None:
    for raw in stream:
        try:
            fact = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:
            continue
        if isinstance(fact, dict) and isinstance(fact.get("name"), str):
            name = fact.pop("name")
            fact.pop("section", None)
            emit(section, name, **fact)


def kill(proc: subprocess.Popen[bytes]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def main(argv: list[str]) -> int:
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    BUDGET[0] = float(args.get("budget_s") or 30.0)
    sections = set(args.get("sections") or ("host",))
    if "host" in sections:
        tools()
        memory()
        limits()
        disks(args.get("paths"))
        ports([int(p) for p in args.get("ports") or ()])
        processes()
        cuda()
        environment()
        model(args.get("model_path"))
    elif "node" in sections:  # a node of a Slurm allocation: what training there depends on
        memory()
        limits()
    if "install" in sections:
        install_facts(args.get("install") or {})
    if "network" in sections:
        network(args.get("network"))
    python = args.get("python")
    if python and "env" in sections:
        relay("env", [os.path.expanduser(python), "-c", source("envprobe"), json.dumps(args)],
              reserve=8.0 if "gpu" in sections else 1.0)
    if python and "gpu" in sections and args.get("gpu_probes"):
        relay("gpu", [os.path.expanduser(python), "-c", source("gpuprobe"), json.dumps(args)])
    emit("probe", "done", elapsed=round(time.monotonic() - STARTED, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
