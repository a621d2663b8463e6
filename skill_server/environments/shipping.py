"""Carrying the host-side programs (``hostside``) to a host: as one ``run`` op of the host agent.

The probe travels inside its argv: ``python3 -I -S -c BOOTSTRAP <packed> <arguments JSON>``, where ``packed``
is the zlib-compressed, base64-encoded JSON of every host-side module's source. The bootstrap unpacks them,
loads ``probe`` under a name of its own and calls its ``main`` with the arguments, so the probe can hand
``envprobe`` and ``gpuprobe`` to the interpreter under test as text. Nothing is written on the host; the
same argv runs through ``srun --overlap`` on a Slurm node. The installer is a file instead (an install
outlives the call): :func:`installer_files` gives its two files' text.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any

from skill_server.hosts.ssh import REMOTE_PYTHON_ENV

HOSTSIDE = Path(__file__).with_name("hostside")
#: The modules the probe carries (``installer`` travels as a file of its own).
PROBE_MODULES = ("probe", "envprobe", "gpuprobe")
#: No quotes of a shell are involved (argv goes to exec unchanged), but none are needed either.
BOOTSTRAP = ("import sys,zlib,base64,json;S=json.loads(zlib.decompress(base64.b64decode(sys.argv[1])));"
             "g={'__name__':'ajs_probe'};exec(compile(S['probe'],'probe.py','exec'),g);g['SOURCES'].update(S);"
             "sys.exit(g['main']([sys.argv[0]]+sys.argv[2:]))")


def source(name: str) -> str:
    return (HOSTSIDE / f"{name}.py").read_text(encoding="utf-8")


@functools.cache
def packed() -> str:
    """Every probe module's source, compressed (built once per process)."""
    sources = {name: source(name) for name in PROBE_MODULES}
    return base64.b64encode(zlib.compress(json.dumps(sources).encode("utf-8"), 9)).decode("ascii")


def host_python(host: str) -> str:
    """The interpreter that runs the probe: this server's own here (``-I -S``: only its standard library is
    used), the host agent's on an ssh host (``$SKILL_SERVER_REMOTE_PYTHON``, else ``python3``)."""
    if host == "local":
        return sys.executable
    return os.environ.get(REMOTE_PYTHON_ENV) or "python3"


def probe_argv(python: str, arguments: dict[str, Any], prefix: list[str] | None = None) -> list[str]:
    """The argv that runs the probe with ``arguments`` (``prefix``: through another command, e.g. srun)."""
    return [*(prefix or []), python, "-I", "-S", "-c", BOOTSTRAP, packed(),
            json.dumps(arguments, separators=(",", ":"))]


def installer_files() -> dict[str, str]:
    """File name -> text of the install job: the installer and the environment probe it verifies with."""
    return {"installer.py": source("installer"), "envprobe.py": source("envprobe")}
