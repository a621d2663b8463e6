"""This package as a program for a host: the bootstrap, the SSH payload, and a self-contained copy.

Over SSH a call runs ``python3 -I -S -c BOOTSTRAP AJS-READY <nonce>``: the bootstrap first prints
``AJS-READY <nonce>``, then skips blank lines on stdin and reads one frame, ``AJS <nonce> <length>`` and
that many bytes of a compressed *stage one*. The client discards whatever a login shell printed before
that line and writes nothing but bare newlines until it has seen it (a start-up file that reads a line
gets an empty one), so a noisy or reading shell cannot garble the channel. Stage one reads a length line
and the compressed sources of this package, installs them once per version under
``<state dir>/agent/<digest>/`` on the host (so Python caches their bytecode there and later calls skip
compiling them; an install that failed, or the leftover of one whose writer is gone, is removed), imports
the package and serves framed requests (``ops.serve``); if that directory cannot be written it loads the
sources in memory instead. Requests and replies are framed alike: ``AJS <nonce> <length>\n<JSON>``.
``program_text()`` is a single self-contained file that runs without anything else on the host. The run
monitor a launch starts, and its supervisor, run this same program (``daemon``): from the version-cached install,
or where it is missing through stage one, with ``monitor <run dir>`` (or ``supervisor <run dir>``) after the
bootstrap's arguments (so it makes the install; no run keeps a copy).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import zlib

from .protocol import STATE_DIR_ENV, state_dir

#: Load order: a module comes after the modules it imports at load time.
#: The backends (``backend_<kind>``) come after everything they import; ``backend.kinds`` lists them from here.
MODULES = ("protocol", "documents", "deadline", "files", "procs", "rundir", "outcome", "phases", "tmux", "request",
           "scanner", "findings", "points", "backend", "wrapper", "heartbeat", "runstate", "daemon", "watchers",
           "stall", "notifier", "results", "actions", "checkpoints", "resume", "policy", "waker", "scheduler",
           "supervisor", "program", "monitor", "observer", "slurm", "backend_tmux", "backend_slurm", "generic",
           "runs", "reclaim", "ops")
PACKAGE = "ajs_agent"
#: What ``python3 -c`` runs on the host, with ``READY`` and the nonce as its arguments: say ready, skip blank
#: lines, check the frame's nonce, run that many bytes of compressed program. No quotes or backslashes, so
#: every remote shell (sh, bash, zsh, fish) passes it through unchanged.
BOOTSTRAP = ("import sys,zlib;a=sys.argv;o=sys.stdout.buffer;o.write((a[1]+chr(32)+a[2]+chr(10)).encode());o.flush();"
             "b=sys.stdin.buffer;h=next(x for x in iter(b.readline,bytes()) if x.strip()).split();"
             "h[:2]==[a[3].encode(),a[2].encode()] or sys.exit(3);exec(zlib.decompress(b.read(int(h[2]))))")
#: The bootstrap's first line starts with this word; frames start with ``FRAME``.
READY = "AJS-READY"
FRAME = "AJS"

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

def _clean_stale(parent, tag):
    """Remove install folders of this host whose writer is gone (a full disk or a kill left them)."""
    import shutil
    try:
        entries = os.listdir(parent)
    except OSError:
        return
    for entry in entries:
        head, sep, pid = entry.rpartition(tag)
        if not sep or not head or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
        except OSError:
            pass


def _install(base, sources):
    import shutil
    import socket
    tag = ".tmp-%%s-" %% socket.gethostname()  # hosts sharing a home judge only their own writers
    _clean_stale(os.path.dirname(base), tag)
    tmp = "%%s%%s%%d" %% (base, tag, os.getpid())
    try:
        os.makedirs(os.path.join(tmp, %(pkg)r), mode=0o700)
        for name, text in sources.items():
            with open(os.path.join(tmp, %(pkg)r, name + ".py"), "w", encoding="utf-8") as handle:
                handle.write(text)
        os.rename(tmp, base)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.isdir(os.path.join(base, %(pkg)r)):
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


def frame(nonce: str, body: bytes) -> bytes:
    """``body`` as one frame of the channel whose nonce is ``nonce``."""
    return ("%s %s %d\n" % (FRAME, nonce, len(body))).encode("ascii") + body


def bootstrap_argv(nonce: str) -> list[str]:
    """The bootstrap's arguments after ``-c BOOTSTRAP``."""
    return [READY, nonce, FRAME]


def _packed(srcs: dict[str, str]) -> bytes:
    return json.dumps(srcs, sort_keys=True).encode("utf-8")


_DIGEST: list[str] = []


def install_dir() -> str:
    """Where this version of the agent is installed on this host (``<state dir>/agent/<digest of its sources>``,
    the directory stage one installs into), whether or not it exists yet."""
    if not _DIGEST:
        _DIGEST.append(hashlib.sha256(_packed(sources())).hexdigest()[:16])
    return os.path.join(state_dir(), "agent", _DIGEST[0])


def ssh_parts() -> tuple[bytes, bytes]:
    """(compressed stage one, the package sources as a length line and compressed bytes): what a channel
    sends once the bootstrap is ready (``ssh_payload`` frames them)."""
    srcs = sources()
    packed = _packed(srcs)
    digest = hashlib.sha256(packed).hexdigest()[:16]
    stage_one = _STAGE_ONE % {"pkg": PACKAGE, "modules": MODULES, "digest": digest,
                              "state_dir": _state_dir_source(srcs["protocol"])}
    return zlib.compress(stage_one.encode("utf-8"), 6), _blob(packed)


def ssh_payload(nonce: str) -> bytes:
    """What a channel writes after the bootstrap said ready: stage one (a frame), then the sources."""
    stage_one, packed = ssh_parts()
    return frame(nonce, stage_one) + packed
