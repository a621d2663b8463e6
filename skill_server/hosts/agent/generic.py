"""Operations any tool may use on any host: ping, run (argv, bounded time and output), read (size plus
one byte range, regular files only), write (atomic; create, or replace a regular file only), stat (what
each of a few paths is: a blueprint's paths, checked where the run will use them)."""

from __future__ import annotations

import os
import sys

from . import files, procs
from .files import AgentError
from .protocol import TYPE_CHECKING, state_dir
from .request import need, need_or, number, str_list, str_map

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import IO

    from .protocol import PingReply, ReadReply, RunReply, StatReply, WriteReply

MAX_READ_BYTES = 80 * 1024 * 1024
MAX_RUN_OUTPUT = 8 * 1024 * 1024
MAX_RUN_TIMEOUT_S = 3600
MAX_STAT_PATHS = 64


def op_ping(req: Mapping[str, object]) -> PingReply:
    """Who answers: the interpreter, the user, the state directory, and whether tmux and bash exist."""
    import shutil

    return {"python": sys.executable, "version": list(sys.version_info[:3]), "platform": sys.platform,
            "uid": os.getuid(), "pid": os.getpid(), "state_dir": state_dir(), "proc": procs.USE_PROC,
            "tmux": shutil.which("tmux"), "bash": shutil.which("bash")}


def _read_capped(handle: IO[bytes], limit: int) -> tuple[str, bool]:
    handle.seek(0)
    data = handle.read(limit + 1)
    return data[:limit].decode("utf-8", "replace"), len(data) > limit


def _not_started(error: str) -> RunReply:
    return {"returncode": None, "stdout": "", "stderr": "", "timed_out": False, "truncated": False, "error": error}


def op_run(req: Mapping[str, object]) -> RunReply:
    """Run argv (no shell) with a time bound; the whole process group is killed at the bound."""
    import subprocess
    import tempfile

    argv = str_list(req, "argv")
    timeout = max(0.1, min(number(req, "timeout_s", 30), MAX_RUN_TIMEOUT_S))
    limit = max(1024, min(need_or(req, "max_output", int, 1024 * 1024), MAX_RUN_OUTPUT))
    stdin = need_or(req, "stdin", str, None)
    cwd = need_or(req, "cwd", str, None)
    env = dict(os.environ)
    env.update(str_map(req, "env"))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            child = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                     stdout=out, stderr=err, cwd=files.expand(cwd) if cwd else None, env=env,
                                     start_new_session=True)
        except FileNotFoundError:
            return _not_started("not found on this host: " + argv[0])
        except OSError as exc:
            return _not_started("cannot run %s: %s" % (argv[0], exc.strerror or exc))
        timed_out = False
        try:
            child.communicate(stdin.encode("utf-8") if stdin is not None else None, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(child.pid, 9)
            except OSError:
                pass
            child.wait()
        stdout, cut_out = _read_capped(out, limit)
        stderr, cut_err = _read_capped(err, limit)
    return {"returncode": None if timed_out else child.returncode, "stdout": stdout, "stderr": stderr,
            "timed_out": timed_out, "truncated": cut_out or cut_err, "error": None}


def op_read(req: Mapping[str, object]) -> ReadReply:
    """The size of a regular file and one byte range of it, as text or base64."""
    import base64

    path = files.expand(need(req, "path", str))
    offset = need_or(req, "offset", int, 0)
    length = max(0, min(need(req, "length", int), MAX_READ_BYTES))
    try:
        size, data = files.read_range(path, offset, length)
    except FileNotFoundError:
        raise AgentError("file not found: " + path, kind="not_found") from None
    except OSError as exc:
        raise AgentError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    out: ReadReply = {"path": path, "size": size}
    if need_or(req, "text", bool, False):
        out["text"] = data.decode("utf-8", "replace")
    else:
        out["data"] = base64.b64encode(data).decode("ascii")
    return out


def op_write(req: Mapping[str, object]) -> WriteReply:
    """Write a file atomically: create it, or (``replace``) replace a regular file only."""
    import base64

    path = need(req, "path", str)
    if "text" in req:
        data = need(req, "text", str).encode("utf-8")
    else:
        data = base64.b64decode(need(req, "data", str))
    mode = need_or(req, "mode", int, 0o644) & 0o777
    return {"path": files.write_atomic(path, data, replace=need(req, "replace", bool), mode=mode)}



def op_stat(req: Mapping[str, object]) -> StatReply:
    """What each path is on this host (``files.describe``), in the order given."""
    paths = str_list(req, "paths")
    if len(paths) > MAX_STAT_PATHS:
        raise AgentError("at most %d paths" % MAX_STAT_PATHS, "paths")
    return {"paths": [files.describe(path) for path in paths]}
