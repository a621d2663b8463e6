"""Stand-ins for what an AgentJet environment holds, built for the preflight and install tests.

Nothing here is a mock of pip, uv, venv or git: those run for real. What cannot run here (no GPU, no CUDA
wheels, no conda in this machine's registries, GitHub unreachable) is replaced by real artefacts that
behave like the originals where the tools look:

* ``PackageIndex``: a PEP 503 "simple" index in a folder, served as ``file://`` (what a PyPI mirror is),
  holding real wheels: a ``torch`` whose ``__version__``, ``version.cuda`` and ``_C._GLIBCXX_USE_CXX11_ABI``
  say what a CUDA build of torch says (it has no kernels); metadata-only ``vllm`` (pinning torch exactly, as
  vLLM does), ``verl``, ``ray`` and ``transformers``; and a ``flash-attn`` source distribution whose build, like
  the real one, needs ``--no-build-isolation`` (it imports torch), refuses without ``CUDA_HOME`` with torch's
  own message, prints ninja's ``[i/n]`` progress and takes ``$STUB_BUILD_SECONDS`` (or the number in the file
  ``$STUB_BUILD_SECONDS_FILE``) to build.
* ``prebuilt_flash_attn``: the wheel flash-attention publishes per torch/CUDA/ABI/Python tag, in a folder
  (the mirror of its GitHub releases), either working or with a real compiled extension that references a
  torch symbol this torch lacks: importing it fails with the dynamic loader's own ``undefined symbol:
  _ZN3c10...`` message.
* ``agentjet_checkout``: a git repository shaped like AgentJet (``pyproject.toml`` with the ``[verl]`` extra,
  ``ajet/__init__.py`` with ``__version__``), built by an in-tree PEP 517/660 backend, so pip and uv install
  it editable with no download.
* ``conda_shim``: ``conda`` as a script that records its argv and does what ``conda create -y -p PATH
  python=X`` does where the install looks (an env at PATH with ``conda-meta/`` and a working Python with
  pip); a ``base`` env beside it (``condabin/``, ``conda-meta/``) whose files a test can compare.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

TORCH_VERSION = "2.6.0"
TORCH_CUDA = "12.4"
FLASH_ATTN = "2.8.3"
PY_TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"
PY_VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"
#: the symbol flash-attn wheels built for another torch miss (flash-attention issue 1644)
C10_SYMBOL = "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(folder: Path, name: str, version: str, files: dict[str, bytes | str], *, requires: tuple[str, ...] = (),
                extras: dict[str, tuple[str, ...]] | None = None, tag: str = "py3-none-any") -> Path:
    """A real wheel (zip, METADATA, WHEEL, RECORD with hashes) of ``files``."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    for extra, reqs in (extras or {}).items():
        meta.append(f"Provides-Extra: {extra}")
        meta += [f"Requires-Dist: {r}; extra == \"{extra}\"" for r in reqs]
    content = {k: v.encode() if isinstance(v, str) else v for k, v in files.items()}
    content[f"{info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    purelib = "true" if tag.startswith("py3-none") else "false"
    content[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: env_stubs\nRoot-Is-Purelib: {purelib}\n"
                                f"Tag: {tag}\n").encode()
    record = [_record_line(k, v) for k, v in content.items()] + [f"{info}/RECORD,,"]
    content[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for key, data in content.items():
            archive.writestr(key, data)
    return path


TORCH_FILES = {
    "torch/__init__.py": textwrap.dedent(f"""\
        # stand-in torch: what a CUDA {TORCH_CUDA} build reports about itself (no kernels, no GPU)
        from . import version, cuda, _C
        __version__ = "{TORCH_VERSION}+cu{TORCH_CUDA.replace('.', '')}"
        """),
    "torch/version.py": f'__version__ = "{TORCH_VERSION}"\ncuda = "{TORCH_CUDA}"\n',
    "torch/_C.py": "_GLIBCXX_USE_CXX11_ABI = False\n",
    "torch/cuda/__init__.py": "def is_available():\n    return False\n\n\ndef device_count():\n    return 0\n",
}

# The in-tree build backend of the stand-in flash-attn sdist and AgentJet checkout (PEP 517 and 660).
BACKEND = textwrap.dedent('''\
    """In-tree build backend (test stand-in): builds a wheel of the files listed in stub.json."""
    import base64, hashlib, json, os, sys, time, zipfile

    def _conf():
        with open("stub.json") as handle:
            return json.load(handle)

    def _record(name, data):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return "%s,sha256=%s,%d" % (name, digest, len(data))

    def _wheel(folder, files, conf, tag):
        dist = conf["name"].replace("-", "_")
        info = "%s-%s.dist-info" % (dist, conf["version"])
        meta = ["Metadata-Version: 2.1", "Name: " + conf["name"], "Version: " + conf["version"]]
        for extra, reqs in sorted(conf.get("extras", {}).items()):
            meta.append("Provides-Extra: " + extra)
            meta += ['Requires-Dist: %s; extra == "%s"' % (r, extra) for r in reqs]
        files = dict((k, v.encode()) for k, v in files.items())
        files[info + "/METADATA"] = ("\\n".join(meta) + "\\n").encode()
        files[info + "/WHEEL"] = ("Wheel-Version: 1.0\\nGenerator: stub\\nRoot-Is-Purelib: true\\n"
                                  "Tag: %s\\n" % tag).encode()
        record = [_record(k, v) for k, v in files.items()] + [info + "/RECORD,,"]
        files[info + "/RECORD"] = ("\\n".join(record) + "\\n").encode()
        name = "%s-%s-%s.whl" % (dist, conf["version"], tag)
        with zipfile.ZipFile(os.path.join(folder, name), "w") as archive:
            for key, data in files.items():
                archive.writestr(key, data)
        return name

    def get_requires_for_build_wheel(config_settings=None):
        return []

    get_requires_for_build_editable = get_requires_for_build_wheel

    def _compile(conf):
        if conf.get("needs_cuda"):
            import torch  # noqa: F401  (flash-attn's setup imports torch: --no-build-isolation)
            if not os.environ.get("CUDA_HOME"):
                raise OSError("CUDA_HOME environment variable is not set. Please set it to your CUDA install root.")
            steps = int(conf.get("steps", 4))
            seconds = os.environ.get("STUB_BUILD_SECONDS", "0")
            if os.environ.get("STUB_BUILD_SECONDS_FILE") and os.path.isfile(os.environ["STUB_BUILD_SECONDS_FILE"]):
                with open(os.environ["STUB_BUILD_SECONDS_FILE"]) as handle:
                    seconds = handle.read().strip() or "0"
            pause = float(seconds) / steps
            for i in range(1, steps + 1):
                sys.stdout.write("[%d/%d] %s/bin/nvcc -c csrc/flash_attn/src/part%d.cu (MAX_JOBS=%s, ARCHS=%s)\\n" % (
                    i, steps, os.environ["CUDA_HOME"], i, os.environ.get("MAX_JOBS"),
                    os.environ.get("FLASH_ATTN_CUDA_ARCHS")))
                sys.stdout.flush()
                time.sleep(pause)

    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        conf = _conf()
        _compile(conf)
        files = {}
        for path in conf["files"]:
            with open(path) as handle:
                files[path] = handle.read()
        return _wheel(wheel_directory, files, conf, "py3-none-any")

    def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
        conf = _conf()
        pth = {"__editable__.%s.pth" % conf["name"]: os.getcwd() + "\\n"}
        return _wheel(wheel_directory, pth, conf, "py3-none-any")
    ''')


def _source_tree(folder: Path, name: str, version: str, files: dict[str, str], **conf: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = []
        build-backend = "stub_backend"
        backend-path = ["_build"]

        [project]
        name = "{name}"
        version = "{version}"
        """))
    extras = conf.get("extras") or {}
    if extras:  # declared statically, as AgentJet's pyproject does (uv reads them from here)
        with (folder / "pyproject.toml").open("a") as handle:
            handle.write("\n[project.optional-dependencies]\n")
            for extra, reqs in sorted(extras.items()):  # type: ignore[union-attr]
                handle.write(f"{extra} = {json.dumps(list(reqs))}\n")
    (folder / "_build").mkdir(exist_ok=True)
    (folder / "_build" / "stub_backend.py").write_text(BACKEND)
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    (folder / "stub.json").write_text(json.dumps({"name": name, "version": version, "files": sorted(files), **conf}))


class PackageIndex:
    """A PEP 503 index under ``root`` (``url`` is its file:// address) and the files it lists."""

    def __init__(self, root: Path, *, vllm_pins_torch: str = TORCH_VERSION, torch_padding_mb: int = 0) -> None:
        self.root = root
        self.files = root / "files"
        self.wheels: dict[str, list[Path]] = {}
        torch_files = dict(TORCH_FILES)
        if torch_padding_mb:  # a torch as large as a real one is on disk (for the full-disk test)
            torch_files["torch/lib/libtorch_stub.bin"] = os.urandom(torch_padding_mb * 1024 * 1024)
        self.add("torch", build_wheel(self.files, "torch", TORCH_VERSION, torch_files))
        self.add("vllm", build_wheel(self.files, "vllm", "0.8.5", {}, requires=(
            f"torch=={vllm_pins_torch}", "ray>=2.43", "transformers>=4.51")))
        self.add("verl", build_wheel(self.files, "verl", "0.7.1", {}, requires=("ray", "transformers")))
        self.add("ray", build_wheel(self.files, "ray", "2.43.0", {}))
        self.add("transformers", build_wheel(self.files, "transformers", "4.51.3", {}))
        self.add("flash-attn", self._flash_attn_sdist())
        self.write()

    @property
    def url(self) -> str:
        return (self.root / "simple").as_uri() + "/"

    def add(self, project: str, path: Path) -> None:
        self.wheels.setdefault(project, []).append(path)

    def _flash_attn_sdist(self) -> Path:
        tree = self.root / "build" / f"flash_attn-{FLASH_ATTN}"
        _source_tree(tree, "flash-attn", FLASH_ATTN, {
            "flash_attn/__init__.py": f'__version__ = "{FLASH_ATTN}"\nfrom flash_attn_2_cuda import fwd  # noqa\n',
            "flash_attn_2_cuda.py": "def fwd(*args):\n    raise RuntimeError('stand-in kernels: no GPU here')\n"},
            needs_cuda=True, steps=4)
        (tree / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: flash-attn\nVersion: {FLASH_ATTN}\n")
        self.files.mkdir(parents=True, exist_ok=True)
        path = self.files / f"flash_attn-{FLASH_ATTN}.tar.gz"
        with tarfile.open(path, "w:gz") as archive:
            archive.add(tree, arcname=f"flash_attn-{FLASH_ATTN}")
        return path

    def write(self) -> None:
        simple = self.root / "simple"
        simple.mkdir(parents=True, exist_ok=True)
        links = []
        for project, paths in sorted(self.wheels.items()):
            (simple / project).mkdir(exist_ok=True)
            anchors = "".join(f'<a href="../../files/{p.name}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">'
                              f"{p.name}</a><br>\n" for p in paths)
            (simple / project / "index.html").write_text(f"<html><body>\n{anchors}</body></html>\n")
            links.append(f'<a href="{project}/">{project}</a><br>')
        (simple / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
        (simple / "pip").mkdir(exist_ok=True)  # what the install's network stage looks for on a mirror
        (simple / "pip" / "index.html").write_text("<html><body></body></html>\n")


def wheel_file_name(abi: bool = False) -> str:
    torch_mm = ".".join(TORCH_VERSION.split(".")[:2])
    return (f"flash_attn-{FLASH_ATTN}+cu{TORCH_CUDA.split('.')[0]}torch{torch_mm}cxx11abi{'TRUE' if abi else 'FALSE'}-"
            f"{PY_TAG}-{PY_TAG}-linux_x86_64.whl")


def _broken_extension(folder: Path) -> bytes:
    """A real shared object that needs a torch symbol this torch lacks: the loader refuses it."""
    from tests.system_packages import require

    require("gcc", "libc6-dev")
    source = folder / "ext.c"
    source.write_text(f"extern void {C10_SYMBOL}(void);\nvoid stub_entry(void) {{ {C10_SYMBOL}(); }}\n")
    target = folder / "ext.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(target), str(source)], check=True, timeout=60)
    return target.read_bytes()


def prebuilt_flash_attn(folder: Path, *, broken: bool = False) -> Path:
    """The prebuilt wheel for this torch/CUDA/ABI/Python tag in ``folder``: working, or (``broken``) with a
    compiled extension that references a missing torch symbol."""
    files: dict[str, bytes | str] = {"flash_attn/__init__.py": f'__version__ = "{FLASH_ATTN}"\n'}
    if broken:
        work = folder / ".build"
        work.mkdir(parents=True, exist_ok=True)
        files[f"flash_attn_2_cuda.cpython-{PY_TAG[2:]}-x86_64-linux-gnu.so"] = _broken_extension(work)
    else:
        files["flash_attn_2_cuda.py"] = "def fwd(*args):\n    raise RuntimeError('stand-in kernels: no GPU here')\n"
    local = f"cu{TORCH_CUDA.split('.')[0]}torch{'.'.join(TORCH_VERSION.split('.')[:2])}cxx11abiFALSE"
    built = build_wheel(folder, "flash_attn", f"{FLASH_ATTN}+{local}", files, tag=f"{PY_TAG}-{PY_TAG}-linux_x86_64")
    target = folder / wheel_file_name()
    assert built == target, (built, target)
    return target


def agentjet_checkout(folder: Path, *, version: str = "0.1.0") -> str:
    """A git repository shaped like AgentJet; returns its commit."""
    _source_tree(folder, "agentjet", "0.0.4", {"ajet/__init__.py": f'__version__ = "{version}"\n'},
                 extras={"verl": ["verl==0.7.1", "vllm==0.8.5", f"torch=={TORCH_VERSION}"]})
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "stub"]):
        subprocess.run(argv, cwd=folder, env=env, check=True, timeout=60)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True,
                          check=True).stdout.strip()


CONDA_SHIM = textwrap.dedent('''\
    #!{python}
    """Stand-in for conda (not in this machine's registries): records each argv (one JSON list per line in
    $CONDA_SHIM_LOG) and does what the install needs of it: ``--version``, and ``create -y -p PATH python=X``
    makes PATH an environment (a venv of this machine's Python, with pip, and conda's ``conda-meta/history``).
    Like conda, create on a folder that is already a conda env would remove it first: the shim refuses loudly
    instead, so a test sees if anything ever asks for that. Anything else exits 2."""
    import json, os, subprocess, sys
    log = os.environ.get("CONDA_SHIM_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps(sys.argv[1:]) + "\\n")
    args = sys.argv[1:]
    if args == ["--version"]:
        print("conda 24.11.3")
        sys.exit(0)
    if args[:1] == ["create"] and "-p" in args:
        prefix = args[args.index("-p") + 1]
        if os.path.isdir(os.path.join(prefix, "conda-meta")):
            sys.stderr.write("SHIM: conda create on an existing conda env would remove it\\n")
            sys.exit(99)
        if "-y" not in args:
            sys.stderr.write("SHIM: would prompt (no -y)\\n")
            sys.exit(98)
        subprocess.run([{python!r}, "-m", "venv", prefix], check=True)
        os.makedirs(os.path.join(prefix, "conda-meta"), exist_ok=True)
        with open(os.path.join(prefix, "conda-meta", "history"), "a") as handle:
            handle.write("# cmd: conda %s\\n" % " ".join(args))
        print("Preparing transaction: done\\nExecuting transaction: done")
        sys.exit(0)
    sys.stderr.write("SHIM: unsupported: %s\\n" % args)
    sys.exit(2)
    ''')


def conda_shim(root: Path) -> tuple[Path, Path]:
    """(bin folder holding ``conda``, the base env's folder). The base env is a venv marked as conda's base."""
    bin_dir = root / "condabin-shim"
    bin_dir.mkdir(parents=True)
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    (bin_dir / "conda").write_text(CONDA_SHIM.format(python=python))
    (bin_dir / "conda").chmod(0o755)
    base = root / "miniconda3"
    subprocess.run([python, "-m", "venv", "--without-pip", str(base)], check=True, timeout=120)
    (base / "conda-meta").mkdir()
    (base / "conda-meta" / "history").write_text("# base\n")
    (base / "condabin").mkdir()
    return bin_dir, base


def tree_digest(folder: Path) -> str:
    """A digest of every file's path, size and mode under ``folder`` (to show nothing was changed)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        digest.update(f"{path.relative_to(folder)}:{info.st_size}:{stat.S_IFMT(info.st_mode)}\n".encode())
    return digest.hexdigest()


PIP_VARIABLES = ("PIP_", "UV_")


def pip_isolation(cache: Path) -> dict[str, str]:
    """Variables that keep pip and uv off this machine's configuration (its global pip config adds indexes and
    constraints) and their caches off $HOME: what a user's clean shell with only the install's flags uses."""
    return {"PIP_CONFIG_FILE": os.devnull, "UV_NO_CONFIG": "1", "PIP_NO_INPUT": "1",
            "PIP_CACHE_DIR": str(cache / "pip"), "UV_CACHE_DIR": str(cache / "uv")}


def isolated_pip_env(cache: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without pip's and uv's own variables, plus ``pip_isolation``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PIP_VARIABLES)}
    env.update(pip_isolation(cache))
    env.update(extra or {})
    return env


def cuda_toolkit(folder: Path, version: str = TORCH_CUDA) -> Path:
    """A folder shaped like a CUDA toolkit (``bin/nvcc``, ``include/cuda_runtime.h``) whose nvcc reports ``version``
    as NVIDIA's does (``nvcc --version``'s "release X.Y" line); it compiles nothing."""
    (folder / "bin").mkdir(parents=True)
    (folder / "include").mkdir()
    (folder / "include" / "cuda_runtime.h").write_text(f"/* CUDA {version} (stand-in) */\n")
    nvcc = folder / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                    f"echo 'Cuda compilation tools, release {version}, V{version}.131'\n")
    nvcc.chmod(0o755)
    return folder


class StubSet:
    """Everything the environment tests install from, made once under ``root``: the index, the good and the
    broken prebuilt flash-attn wheels (each in a folder of its own, as a mirror of flash-attention's releases)
    and an AgentJet-shaped checkout with its commit."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.index = PackageIndex(root / "index")
        self.good = prebuilt_flash_attn(root / "wheels-good").parent
        self.bad = prebuilt_flash_attn(root / "wheels-bad", broken=True).parent
        self.checkout = root / "AgentJet"
        self.commit = agentjet_checkout(self.checkout)
