"""This package as one self-contained Python program, and the bootstrap that runs it from stdin.

``program_text()`` embeds every module's source and a small loader that installs them as the package
``ajs_agent`` (so relative imports work) and calls ``ops.main(sys.argv)``. The same text is what SSH
ships to a host on each call (compressed, after the one-line bootstrap reads it from stdin) and what a
launch writes into a run directory as ``agent.py`` for the watchdog. A copy running on a host knows its
sources from the loader, so it can write itself out again without its files.
"""

from __future__ import annotations

import os
import sys
import zlib

#: Load order: a module comes after the modules it imports at load time.
MODULES = ("files", "procs", "tmux", "wrapper", "watchdog", "program", "ops")
PACKAGE = "ajs_agent"
#: What ``python3 -c`` runs on the host: read a length line, then that many bytes of compressed program.
#: No quotes or backslashes, so every remote shell (sh, bash, zsh, fish) passes it through unchanged.
BOOTSTRAP = "import sys,zlib;b=sys.stdin.buffer;exec(zlib.decompress(b.read(int(b.readline()))))"

_LOADER = '''
def _load():
    import types
    pkg = types.ModuleType(%(pkg)r)
    pkg.__path__ = []
    pkg.__package__ = %(pkg)r
    pkg._SOURCES = _SOURCES
    sys.modules[%(pkg)r] = pkg
    exec(compile(_SOURCES["__init__"], %(pkg)r + "/__init__.py", "exec"), pkg.__dict__)
    for name in %(modules)r:
        mod = types.ModuleType(%(pkg)r + "." + name)
        mod.__package__ = %(pkg)r
        sys.modules[mod.__name__] = mod
        exec(compile(_SOURCES[name], %(pkg)r + "/" + name + ".py", "exec"), mod.__dict__)
        setattr(pkg, name, mod)
    return pkg


if __name__ == "__main__":
    sys.exit(_load().ops.main(sys.argv))
'''


def sources() -> dict[str, str]:
    """Module name -> source: from the loader when running as a shipped program, else from the files."""
    package = sys.modules.get(__package__ or "")
    bundled = getattr(package, "_SOURCES", None)
    if isinstance(bundled, dict):
        return dict(bundled)
    here = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for name in ("__init__",) + MODULES:
        with open(os.path.join(here, name + ".py"), encoding="utf-8") as handle:
            out[name] = handle.read()
    return out


def program_text() -> str:
    head = "# agentjet-swarm-skill host agent: generated from skill_server/hosts/agent (stdlib only).\nimport sys\n"
    return head + "_SOURCES = " + repr(sources()) + "\n" + _LOADER % {"pkg": PACKAGE, "modules": MODULES}


def compressed_program() -> bytes:
    """The bytes SSH sends before the request: a length line, then the zlib-compressed program."""
    body = zlib.compress(program_text().encode("utf-8"), 6)
    return str(len(body)).encode("ascii") + b"\n" + body
