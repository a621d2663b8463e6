"""What an interpreter has for AgentJet, printed as JSON lines: run *inside* the interpreter under test.

``python -c <this source> <arguments JSON>`` from ``/`` (so nothing in a working directory shadows a package).
Versions come from the installed distributions' metadata (fast, and exactly what pip installed); torch,
flash-attn (with its compiled extension) and AgentJet are also imported, because importing is what catches
a broken install: an extension built for another torch fails here with the loader's own ``undefined
symbol`` message, GPU or not. vLLM, verl and Ray are not imported (seconds each, and their metadata is what
AgentJet's launcher and pip compare). Each line says how long it took.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

DISTRIBUTIONS = (("torch", "torch"), ("vllm", "vllm"), ("verl", "verl"), ("ray", "ray"),
                 ("transformers", "transformers"), ("flash_attn", "flash-attn"), ("ajet", "agentjet"))


def emit(name: str, **fields: Any) -> None:
    fields["name"] = name
    sys.stdout.write(json.dumps(fields, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def describe(exc: BaseException) -> str:
    """An exception as the user would see its last line (the loader's message keeps its symbol)."""
    text = "%s: %s" % (type(exc).__name__, exc)
    return text if len(text) <= 800 else text[:400] + " ... " + text[-400:]


def interpreter() -> None:
    prefix = sys.prefix
    conda_meta = os.path.isdir(os.path.join(prefix, "conda-meta"))
    emit("python", version=list(sys.version_info[:3]), executable=sys.executable, prefix=prefix,
         base_prefix=getattr(sys, "base_prefix", prefix), venv=prefix != getattr(sys, "base_prefix", prefix),
         conda=conda_meta, conda_base=conda_meta and os.path.isdir(os.path.join(prefix, "condabin")),
         implementation=sys.implementation.name)


def distributions() -> None:
    try:
        from importlib import metadata
    except ImportError:  # Python 3.7 and older: no metadata; say so for each
        metadata = None  # type: ignore[assignment]
    for key, dist in DISTRIBUTIONS:
        started = time.monotonic()
        if metadata is None:
            emit("dist:" + key, version=None, error="importlib.metadata needs Python 3.8")
            continue
        try:
            found = metadata.distribution(dist)
            emit("dist:" + key, version=found.version, dist=dist, location=str(found.locate_file("")),
                 pins=pins(found.requires or ()), elapsed=round(time.monotonic() - started, 3))
        except metadata.PackageNotFoundError:
            emit("dist:" + key, version=None, dist=dist, elapsed=round(time.monotonic() - started, 3))
        except Exception as exc:  # a broken dist-info folder is a fact too
            emit("dist:" + key, version=None, dist=dist, error=describe(exc))


#: the packages whose exact pins between each other break training when they disagree
PINNED = ("torch", "ray", "transformers", "vllm")


def pins(requires: Iterable[str]) -> dict[str, str]:
    """{package: requirement} of this distribution's unconditional pins on ``PINNED`` packages."""
    out: dict[str, str] = {}
    for line in requires:
        head = line.split(";", 1)[0].strip()
        if ";" in line and "extra" in line.split(";", 1)[1]:
            continue
        for name in PINNED:
            if head.lower().startswith(name) and head[len(name):len(name) + 1] in ("=", "<", ">", "!", "~", " ", "["):
                out[name] = head[len(name):].strip()
    return out


def import_torch() -> Any:
    started = time.monotonic()
    try:
        import torch  # type: ignore[import-not-found]
    except BaseException as exc:  # ImportError, OSError of a missing library, SystemExit of a broken build
        emit("import:torch", ok=False, error=describe(exc), elapsed=round(time.monotonic() - started, 3))
        return None
    facts: dict[str, Any] = {"ok": True, "version": getattr(torch, "__version__", None),
             "cuda": getattr(getattr(torch, "version", None), "cuda", None),
             "cxx11_abi": bool(getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", False)),
             "file": getattr(torch, "__file__", None)}
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = int(torch.cuda.device_count()) if facts["cuda_available"] else 0
    except Exception as exc:
        facts["cuda_error"] = describe(exc)
    facts["elapsed"] = round(time.monotonic() - started, 3)
    emit("import:torch", **facts)
    return torch


def import_flash_attn() -> None:
    started = time.monotonic()
    try:
        import flash_attn  # type: ignore[import-not-found]
    except BaseException as exc:
        emit("import:flash_attn", ok=False, error=describe(exc), elapsed=round(time.monotonic() - started, 3))
        return
    try:  # the compiled kernels: where a wheel built for another torch, CUDA or C++ ABI fails
        import flash_attn_2_cuda  # type: ignore[import-not-found]  # noqa: F401
    except BaseException as exc:
        emit("import:flash_attn", ok=False, version=getattr(flash_attn, "__version__", None),
             error=describe(exc), elapsed=round(time.monotonic() - started, 3))
        return
    emit("import:flash_attn", ok=True, version=getattr(flash_attn, "__version__", None),
         elapsed=round(time.monotonic() - started, 3))


def import_ajet() -> None:
    started = time.monotonic()
    try:
        import ajet  # type: ignore[import-not-found]
    except BaseException as exc:
        emit("import:ajet", ok=False, error=describe(exc), elapsed=round(time.monotonic() - started, 3))
        return
    where = os.path.dirname(os.path.abspath(getattr(ajet, "__file__", "") or "."))
    checkout = os.path.dirname(where)
    commit = dirty = None
    if os.path.isdir(os.path.join(checkout, ".git")) or os.path.isfile(os.path.join(checkout, ".git")):
        import subprocess

        try:
            done = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, timeout=10, check=False)
            commit = done.stdout.decode().strip() or None
            status = subprocess.run(["git", "-C", checkout, "status", "--porcelain", "--untracked-files=no"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10, check=False)
            dirty = bool(status.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    emit("import:ajet", ok=True, version=getattr(ajet, "__version__", None), file=where, checkout=checkout,
         commit=commit, dirty=dirty, elapsed=round(time.monotonic() - started, 3))


def main() -> None:
    interpreter()
    distributions()
    import_torch()
    import_flash_attn()
    import_ajet()  # last: an AgentJet that imports much at start-up delays nothing else
    emit("done")


if __name__ == "__main__":
    main()
