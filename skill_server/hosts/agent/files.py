"""Files on the host: run directories, small state files, bounded reads, atomic writes.

Reads open with ``O_NONBLOCK`` and refuse anything that is not a regular file, so a FIFO or a device
given as a path can never block or stream forever. Writes go to a temporary file in the target's
directory and are renamed into place; they only ever create a file or replace a regular file.
"""

from __future__ import annotations

import os
import stat
import time

from .protocol import TYPE_CHECKING, host_identity, state_dir

if TYPE_CHECKING:
    from .protocol import Appended, PathInfo

TEMP_SUFFIX = ".ajs-tmp"
#: A temporary file older than this was left by an interrupted write and is removed on the next write.
STALE_TEMP_S = 600.0


class AgentError(Exception):
    """An operation failed for a reason the caller can act on; ``field`` names the argument involved."""

    def __init__(self, message: str, field: str | None = None, kind: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.kind = kind


def run_dir(exp_id: str) -> str:
    """Where one experiment's wrapper scripts, pid, exit-code and marker files live on this host:
    ``<state>/runs/<exp_id>/<host identity>/``, so hosts that share a home never write into one folder
    (``<state>/runs/<exp_id>/`` is the run's folder that such hosts share)."""
    return os.path.join(state_dir(), "runs", exp_id, host_identity())


class Locked:
    """An exclusive ``flock`` on ``path`` (created if missing), waited for at most ``timeout_s``; the
    lock that orders a launch's start and a discard of the same run on one host."""

    def __init__(self, path: str, timeout_s: float) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self.fd = -1

    def __enter__(self) -> Locked:
        import fcntl

        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            raise AgentError("cannot open the lock %s: %s" % (self.path, _describe(exc))) from None
        end = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError:
                if time.monotonic() >= end:
                    os.close(self.fd)
                    raise AgentError("another operation on this run holds %s" % self.path) from None
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing releases the lock


def expand(path: str) -> str:
    """``~`` expanded on this host (not on the caller's), normalised."""
    if "\x00" in path:
        raise AgentError("contains a NUL character")
    return os.path.normpath(os.path.expanduser(path))


def _describe(exc: OSError) -> str:
    return exc.strerror or str(exc)


def open_regular(path: str) -> tuple[int, int]:
    """An fd open for reading on a regular file and its size; refuses FIFOs, devices and directories."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AgentError("not a regular file: " + path, kind="not_regular")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def _read_span(fd: int, start: int, length: int) -> bytes:
    """Up to ``length`` bytes from ``start`` (fewer if the file ends first), read in bounded chunks."""
    os.lseek(fd, start, os.SEEK_SET)
    chunks = []
    while length > 0:
        data = os.read(fd, min(length, 1024 * 1024))
        if not data:
            break
        chunks.append(data)
        length -= len(data)
    return b"".join(chunks)


def read_range(path: str, offset: int, length: int) -> tuple[int, bytes]:
    """(size, bytes) of one range of a regular file; a negative offset counts from the end."""
    fd, size = open_regular(path)
    try:
        start = max(0, size + offset) if offset < 0 else offset
        if length <= 0 or start >= size:
            return size, b""
        return size, _read_span(fd, start, min(length, size - start))
    finally:
        os.close(fd)


def file_size(path: str) -> int | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def read_small(path: str, limit: int = 4096) -> str | None:
    """The text of a small state file; None when it is missing, unreadable or not a regular file."""
    try:
        _, data = read_range(path, 0, limit)
    except (OSError, AgentError):
        return None
    return data.decode("utf-8", "replace")


def read_int(path: str) -> int | None:
    text = read_small(path, 64)
    if text is None:
        return None
    text = text.strip()
    digits = text[1:] if text.startswith("-") else text
    if not digits or not (digits.isascii() and digits.isdigit()) or len(text) > 20:
        return None
    return int(text)


def exists(path: str) -> bool:
    return os.path.lexists(path)


def describe(path: str) -> PathInfo:
    """What ``path`` is on this host, symlinks followed and ``~`` expanded here: ``dir``, ``file`` (a regular
    file; ``executable`` says whether this user may run it), ``other`` (a FIFO, a device, a socket),
    ``missing``, or ``unreadable`` (it cannot be looked at: a parent without search permission, say)."""
    full = expand(path)
    try:
        info = os.stat(full)
    except (FileNotFoundError, NotADirectoryError):
        return {"path": full, "kind": "missing", "executable": False}
    except OSError:
        return {"path": full, "kind": "unreadable", "executable": False}
    if stat.S_ISDIR(info.st_mode):
        return {"path": full, "kind": "dir", "executable": False}
    if stat.S_ISREG(info.st_mode):
        return {"path": full, "kind": "file", "executable": os.access(full, os.X_OK)}
    return {"path": full, "kind": "other", "executable": False}


def touch(path: str) -> None:
    """Create an empty marker file (never truncates or follows into anything else)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return
    os.close(fd)


def read_appended(path: str, offset: int, budget: int, final: bool) -> Appended:
    """Bytes appended after ``offset``: at most ``budget`` of the newest ones, cut at a line end.

    Returns ``text`` (UTF-8, undecodable bytes replaced), ``end`` (where the next read starts, in
    bytes), ``skipped`` (bytes passed over because the backlog was over budget) and ``reset`` (the
    file shrank, so reading restarted at 0). ``final`` (the writer has exited) also hands out an
    unterminated last line; otherwise an unfinished line waits for its end.
    """
    try:
        fd, size = open_regular(path)
    except (OSError, AgentError):
        return {"text": "", "end": offset, "skipped": 0, "reset": False}
    try:
        reset = False
        if offset > size:
            offset, reset = 0, True
        start = max(offset, size - budget)
        data = _read_span(fd, start, size - start) if size > start else b""
    finally:
        os.close(fd)
    skipped = start - offset
    if start > offset and data:
        cut = data.find(b"\n")  # we jumped into the middle of the log: drop the partial first line
        if cut >= 0:
            skipped += cut + 1
            data = data[cut + 1:]
            start += cut + 1
    end = start + len(data)
    if not final:
        last_nl = data.rfind(b"\n")
        if last_nl >= 0:
            data = data[: last_nl + 1]
            end = start + len(data)
        elif len(data) < budget:
            data, end = b"", start
    return {"text": data.decode("utf-8", "replace"), "end": end, "skipped": skipped, "reset": reset}


def _clean_stale_temps(directory: str, name: str) -> None:
    prefix = "." + name + "."
    now = time.time()
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for entry in entries:
        if entry.startswith(prefix) and entry.endswith(TEMP_SUFFIX):
            full = os.path.join(directory, entry)
            try:
                info = os.lstat(full)
                if stat.S_ISREG(info.st_mode) and now - info.st_mtime > STALE_TEMP_S:
                    os.unlink(full)
            except OSError:
                pass


def write_atomic(path: str, data: bytes, replace: bool, mode: int = 0o644, field: str | None = None) -> str:
    """Write ``data`` to ``path`` atomically: create it, or (``replace``) replace a regular file only."""
    target = expand(path)
    parent = os.path.dirname(target) or "."
    try:
        os.makedirs(parent, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # as fsutil says it locally: name what is in the way
        blocker = parent
        while os.path.dirname(blocker) != blocker and not (os.path.lexists(blocker) and not os.path.isdir(blocker)):
            blocker = os.path.dirname(blocker)
        raise AgentError("cannot write %s: %s is not a directory" % (target, blocker), field) from None
    except OSError as exc:
        raise AgentError("cannot create directory " + parent + ": " + _describe(exc), field) from None
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise AgentError("cannot check " + target + ": " + _describe(exc), field) from None
    if info is not None:
        if not stat.S_ISREG(info.st_mode):
            raise AgentError(target + " exists and is not a regular file; refusing to replace it", field,
                             kind="not_regular")
        if not replace:
            raise AgentError(target + " exists; this tool never replaces it", field, kind="exists")
    import tempfile  # imported here: most agent calls never write

    _clean_stale_temps(parent, os.path.basename(target))
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix="." + os.path.basename(target) + ".", suffix=TEMP_SUFFIX)
    except OSError as exc:
        raise AgentError("cannot write in " + parent + ": " + _describe(exc), field) from None
    try:
        try:
            os.fchmod(fd, (info.st_mode & 0o7777) if info is not None else mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise AgentError(target + " exists; this tool never replaces it", field, kind="exists") from None
            except OSError:  # no hard links on this filesystem: best-effort no-clobber
                if os.path.lexists(target):
                    raise AgentError(target + " exists; this tool never replaces it", field, kind="exists") from None
                os.replace(tmp, target)
    except OSError as exc:
        raise AgentError("cannot write " + target + ": " + _describe(exc), field) from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return target

