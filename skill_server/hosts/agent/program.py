"""This package as a program for a host: the bootstrap, the SSH payload, and a self-contained copy.

Over SSH a call runs ``python3 -I -S -c BOOTSTRAP`` and writes to its stdin: a length line and a small
compressed *stage one*, then a length line and the compressed sources of this package, then the JSON
request. Stage one installs the sources once per version under ``<state dir>/agent/<digest>/`` on the
host (so Python caches their bytecode there and later calls skip compiling them), imports the package
and answers the request; if that directory cannot be written it loads the sources in memory instead.
The run monitor a launch starts runs this same program through stage one (so it uses, or makes, the
version-cached install; no run keeps a copy). ``program_text()`` is a single self-contained file (sources
plus loader) that runs without anything else on the host.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import zlib

from .protocol import STATE_DIR_ENV, state_dir

#: Load order: a module comes after the modules it imports at load time.
MODULES = ("protocol", "files", "procs", "tmux", "scanner", "findings", "points", "monitor", "wrapper", "program",
           "request", "generic", "runs", "checkpoints", "reclaim", "ops")
PACKAGE = "ajs_agent"
#: What ``python3 -c`` runs on the host: read a length line, then that many bytes of compressed program.
#: No quotes or backslashes, so every remote shell (sh, bash, zsh, fish) passes it through unchanged.
BOOTSTRAP = "import sys,zlib;b=sys.stdin.buffer;exec(zlib.decompress(b.read(int(b.readline()))))"

# Loads sources into memory as the package (relative imports work); shared by both programs.
_LOADER = '''
def _load(sources):
    import types
    pkg = types.ModuleType(%(pkg)r)
    pkg.__path__ = []
    pkg.__package__ = %(pkg)r
    pkg._SOURCES = sources
    sys.modules[%(pkg)r] = pkg
    exec(compile(sources["__init__"], %(pkg)r + "/__init__.py", "exec"), pkg.__dict__)
    for name in %(modules)r:
        mod = types.ModuleType(%(pkg)r + "." + name)
        mod.__package__ = %(pkg)r
        sys.modules[mod.__name__] = mod
        exec(compile(sources[name], %(pkg)r + "/" + name + ".py", "exec"), mod.__dict__)
        setattr(pkg, name, mod)
    return pkg
'''

# Stage one over SSH. It runs before the package exists on the host, so it carries its own copy of
# ``protocol.state_dir``, rendered from that function's source (``_state_dir_source``).
_STAGE_ONE = '''from __future__ import annotations
import os, sys, zlib
''' + _LOADER + '''
%(state_dir)s

def _install(base, sources):
    tmp = "%%s.tmp-%%d" %% (base, os.getpid())
    os.makedirs(os.path.join(tmp, %(pkg)r), mode=0o700)
    for name, text in sources.items():
        with open(os.path.join(tmp, %(pkg)r, name + ".py"), "w", encoding="utf-8") as handle:
            handle.write(text)
    try:
        os.rename(tmp, base)
    except OSError:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.isdir(base):
            raise


def _main():
    b = sys.stdin.buffer
    blob = b.read(int(b.readline()))
    base = os.path.join(state_dir(), "agent", %(digest)r)
    if not os.path.isfile(os.path.join(base, %(pkg)r, "ops.py")):
        import json
        sources = json.loads(zlib.decompress(blob).decode("utf-8"))
        try:
            _install(base, sources)
        except OSError:
            return _load(sources).ops.main(sys.argv)
    sys.path.insert(0, base)
    from ajs_agent import ops
    return ops.main(sys.argv)


sys.exit(_main())
'''


def sources() -> dict[str, str]:
    """Module name -> source: from the loader when loaded in memory, else from the package's files."""
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
    """One self-contained file: every source plus the loader; runs ``ops.main(sys.argv)``."""
    head = "# agentjet-swarm-skill host agent: generated from skill_server/hosts/agent (stdlib only).\nimport sys\n"
    loader = _LOADER % {"pkg": PACKAGE, "modules": MODULES}
    return (head + "_SOURCES = " + repr(sources()) + "\n" + loader
            + '\n\nif __name__ == "__main__":\n    sys.exit(_load(_SOURCES).ops.main(sys.argv))\n')


def _blob(data: bytes) -> bytes:
    body = zlib.compress(data, 6)
    return str(len(body)).encode("ascii") + b"\n" + body


def _state_dir_source(protocol_source: str) -> str:
    """``protocol.state_dir`` for stage one: that function's own source (its ``def`` line up to the next
    line at the left margin), and the constant it reads. Lines, not ``ast``: this runs in the server's
    worker threads, where CPython 3.11's parser is not thread-safe."""
    lines = protocol_source.splitlines()
    start = lines.index("def state_dir() -> str:")
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in ("", " ")), len(lines))
    return "STATE_DIR_ENV = %r\n\n\n%s\n" % (STATE_DIR_ENV, "\n".join(lines[start:end]).rstrip())


def _packed(srcs: dict[str, str]) -> bytes:
    return json.dumps(srcs, sort_keys=True).encode("utf-8")


_DIGEST: list[str] = []


def install_dir() -> str:
    """Where this version of the agent is installed on this host (``<state dir>/agent/<digest of its sources>``,
    the directory stage one installs into), whether or not it exists yet."""
    if not _DIGEST:
        _DIGEST.append(hashlib.sha256(_packed(sources())).hexdigest()[:16])
    return os.path.join(state_dir(), "agent", _DIGEST[0])


def ssh_payload() -> bytes:
    """What SSH writes to stdin before the request: stage one, then the package sources."""
    srcs = sources()
    packed = _packed(srcs)
    digest = hashlib.sha256(packed).hexdigest()[:16]
    stage_one = _STAGE_ONE % {"pkg": PACKAGE, "modules": MODULES, "digest": digest,
                              "state_dir": _state_dir_source(srcs["protocol"])}
    return _blob(stage_one.encode("utf-8")) + _blob(packed)
