"""Files named by users: path resolution, atomic writes that only ever create or replace a regular
file, and bounded reads that only ever read a regular file.

Writes go to a temp file in the target's directory (fsync, then rename, or a hard link when an
existing file must never be clobbered). Whatever ``overwrite`` says, a directory, FIFO, socket or
device at the path (or a symlink to one) is refused: the rename would replace it, as it once turned a
machine's ``/dev/null`` into a regular file; a symlink to a regular file is written through, so the
link survives. Temp files carry their writer's pid and start time, so
the leftovers of a writer killed mid-write are removed by the next write to that directory, and
only once that writer is gone.

Reads stat first, then open non-blocking and check again (a FIFO is never waited on, a device never
read), and never read past the size bound.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import stat
from pathlib import Path

from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.core.text import shorten

DEFAULT_MODE = 0o644
NAME_MAX = 255
PATH_MAX = 4096
#: Kernel views, not storage: nothing a tool writes belongs there.
VIRTUAL_ROOTS = ("/proc", "/sys")
TEMP_PREFIX = ".ajs-tmp-"
_TEMP_NAME = re.compile(r"^\.ajs-tmp-(\d+)-(\d+)-[0-9a-f]{16}\.tmp$")
_READ_CHUNK = 1024 * 1024


def resolve_path(value: str, *, field: str, base: str | Path | None = None) -> Path:
    """The absolute path a user-given path names: ``~`` expanded, a relative path joined to ``base``
    (a tool's ``cwd`` argument) or, without one, to the server's working directory. Every tool resolves
    paths through here, so that messages can always name the absolute path that was tried."""
    if "\x00" in value:
        raise ToolInputError("contains a NUL character", field=field)
    if not value.strip():
        raise ToolInputError("is an empty path", field=field)
    path = Path(value).expanduser()
    if not path.is_absolute():
        anchor = Path(base).expanduser() if base is not None else Path(os.getcwd())
        path = anchor / path
    resolved = Path(os.path.normpath(str(path)))
    check_path_length(resolved, field=field)
    return resolved


def resolve_directory(value: str, *, field: str) -> Path:
    """An existing directory a user named (a tool's ``cwd``), resolved as :func:`resolve_path` does; missing, not a
    directory or not searchable is a ``ToolInputError`` naming ``field`` and the absolute path."""
    path = resolve_path(value, field=field)
    try:
        if not path.exists():
            raise ToolInputError(f"directory not found: {path}", field=field)
        if not path.is_dir():
            raise ToolInputError(f"not a directory: {path}", field=field)
        if not os.access(path, os.X_OK):
            raise ToolInputError(f"directory not accessible: {path}", field=field)
    except OSError as exc:
        raise ToolInputError(f"cannot use {path}: {exc.strerror or exc}", field=field) from None
    return path


def check_path_length(path: Path, *, field: str | None) -> None:
    """File systems refuse names over 255 bytes and paths over 4096; say so instead of failing later."""
    encoded = os.fsencode(str(path))
    if len(encoded) > PATH_MAX:
        raise ToolInputError(f"path is {len(encoded)} bytes, over the {PATH_MAX}-byte limit", field=field)
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > NAME_MAX:
        raise ToolInputError(f"a name in {shorten(str(path), 120)} is {longest} bytes, over the {NAME_MAX}-byte "
                             "limit of file systems", field=field)


def describe_kind(mode: int) -> str:
    """What a non-regular file is, in words a user recognises."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def _absolute(path: str | Path, field: str | None) -> Path:
    text = os.fspath(path)
    if "\x00" in text:
        raise ToolInputError("contains a NUL character", field=field)
    return Path(os.path.abspath(os.path.expanduser(text)))


def _check_writable_location(target: Path, field: str | None) -> None:
    name_bytes = len(os.fsencode(target.name))
    if name_bytes > NAME_MAX:  # named as the file name: the path the user gave ends in it
        raise ToolInputError(f"file name is {name_bytes} bytes, over the {NAME_MAX}-byte limit of file systems",
                             field=field)
    check_path_length(target, field=field)
    text = str(target)
    for root in VIRTUAL_ROOTS:
        if text == root or text.startswith(root + "/"):
            raise ToolInputError(f"{target} is under {root}, a kernel view rather than storage; choose a path "
                                 "on a disk", field=field)


def _make_parents(target: Path, field: str | None) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in reversed(target.parents) if p.exists() and not p.is_dir()), target.parent)
        raise ToolFailure(f"cannot write {target}: {blocker} is not a directory", field=field) from None
    except OSError as exc:
        raise ToolFailure(f"cannot create directory {target.parent}: {exc.strerror or exc}", field=field) from None


def _existing_target(target: Path, overwrite: bool, field: str | None) -> tuple[Path, int | None]:
    """Where the bytes go (a symlink to a regular file is followed) and the mode to keep, or refuse."""
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return target, None
    except NotADirectoryError:
        raise ToolFailure(f"cannot write {target}: a parent of it is not a directory", field=field) from None
    except OSError as exc:
        raise ToolFailure(f"cannot inspect {target}: {exc.strerror or exc}", field=field) from None
    real = target
    if stat.S_ISLNK(info.st_mode):
        real = Path(os.path.realpath(target))
        try:
            info = os.stat(real)
        except OSError:
            raise ToolFailure(f"{target} is a symbolic link to {real}, which does not exist; refusing to write "
                              "through it", field=field) from None
        if not stat.S_ISREG(info.st_mode):
            raise ToolFailure(f"{target} is a symbolic link to {describe_kind(info.st_mode)} ({real}); only a "
                              "regular file can be replaced", field=field)
    elif not stat.S_ISREG(info.st_mode):
        raise ToolFailure(f"{target} is {describe_kind(info.st_mode)}; only a regular file can be replaced",
                          field=field)
    if not overwrite:
        raise ToolFailure(f"{target} exists, and this write only creates new files", field=field)
    return real, stat.S_IMODE(info.st_mode)


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), to tell a live writer from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _writer_alive(pid: int, started: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    now = _start_time(pid)
    return now is None or now == started or started == 0


def clean_stale_temp_files(directory: Path) -> list[Path]:
    """Remove temp files of writers that died mid-write; returns what was removed. Never raises."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if not match:
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            if _writer_alive(int(match.group(1)), int(match.group(2))):
                continue
            os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def _create_temp(directory: Path, target: Path, field: str | None) -> tuple[int, Path]:
    pid = os.getpid()
    started = _start_time(pid) or 0
    for _ in range(16):
        tmp = directory / f"{TEMP_PREFIX}{pid}-{started}-{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            return fd, tmp
        except FileExistsError:
            continue
        except OSError as exc:
            raise ToolFailure(f"cannot write {target}: cannot create a file in {directory}: "
                              f"{exc.strerror or exc}", field=field) from None
    raise ToolFailure(f"cannot write {target}: no free temp file name in {directory}", field=field)


def write_text_atomic(path: str | Path, text: str, overwrite: bool = False, *, field: str | None = None) -> Path:
    """Write ``text`` to ``path`` so readers see either nothing/the old file or the whole new file.

    Only ever creates a regular file or replaces one (``overwrite=True``); anything else at the path is
    refused. With ``overwrite=False`` an existing file is never replaced, even by a concurrent writer
    (the final step is a hard link, which fails if the name exists). Parent directories are created.
    Every failure is a ``ToolFailure`` or ``ToolInputError`` naming ``field`` and the path.
    """
    target = _absolute(path, field)
    _check_writable_location(target, field)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolInputError(f"text for {target} is not valid Unicode at position {exc.start}", field=field) from None
    return write_bytes_atomic(target, data, overwrite, field=field)


def write_bytes_atomic(path: str | Path, data: bytes, overwrite: bool = False, *, field: str | None = None) -> Path:
    """``write_text_atomic`` for bytes (a PNG): the same guarantees and the same messages."""
    target = _absolute(path, field)
    _check_writable_location(target, field)
    _make_parents(target, field)
    real, kept_mode = _existing_target(target, overwrite, field)
    directory = real.parent
    clean_stale_temp_files(directory)
    fd, tmp = _create_temp(directory, target, field)
    try:
        try:
            os.fchmod(fd, kept_mode if kept_mode is not None else DEFAULT_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            _existing_target(target, overwrite, field)  # the path may have changed since: check again
            os.replace(tmp, real)
        else:
            _link_no_clobber(tmp, target, field)
        _fsync_directory(directory)
    except OSError as exc:
        raise ToolFailure(f"cannot write {target}: {exc.strerror or exc}", field=field) from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return target


def _link_no_clobber(tmp: Path, target: Path, field: str | None) -> None:
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise ToolFailure(f"{target} exists, and this write only creates new files", field=field) from None
    except OSError:  # file systems without hard links: best-effort no-clobber
        if os.path.lexists(target):
            raise ToolFailure(f"{target} exists, and this write only creates new files", field=field) from None
        os.replace(tmp, target)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: scp's ``host:/path`` or ``host:~/path``: what a user writes for a file on an ssh host.
#: (After a caller made it absolute, it follows the working directory: ``/cwd/gpu1:/x.yaml``.)
_ON_A_HOST = re.compile(r"(?:^|/)(([A-Za-z0-9_][A-Za-z0-9_.@-]*):[/~].*)$")


def _remote_hint(given: str) -> str:
    """For a missing file named the way scp names a file on a host: that this tool reads this machine's files."""
    found = _ON_A_HOST.search(given)
    if found is None:
        return ""
    remote, host = found.group(1), found.group(2)
    return (f" ({remote!r} names a file on the ssh host {host!r}: this tool reads files on this machine only; "
            f"copy it here, e.g. scp {shlex.quote(remote)} ., and pass the copy)")  # quoted: users paste it


def read_text_bounded(path: str | Path, *, field: str, max_bytes: int, what: str = "",
                      encoding: str = "utf-8") -> tuple[Path, str]:
    """Read a user-named text file; returns its absolute path and the text.

    Missing, not a regular file (a FIFO or device is never opened for a blocking read), over
    ``max_bytes``, unreadable or not UTF-8: a ``ToolInputError`` naming ``field`` and the absolute path.
    """
    p = _absolute(path, field)
    limit = f"{max_bytes // (1024 * 1024)} MiB limit" if max_bytes >= 1024 * 1024 else f"{max_bytes}-byte limit"
    limit += f" for {what}" if what else ""
    try:
        info = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(p):
            raise ToolInputError(f"{p} is a symbolic link to a file that does not exist", field=field) from None
        raise ToolInputError(f"file not found: {p}" + _remote_hint(str(path)), field=field) from None
    except OSError as exc:
        raise ToolInputError(f"cannot read {p}: {exc.strerror or exc}", field=field) from None
    if not stat.S_ISREG(info.st_mode):
        raise ToolInputError(f"{p} is {describe_kind(info.st_mode)}, not a regular file", field=field)
    if info.st_size > max_bytes:
        raise ToolInputError(f"{p} is {info.st_size} bytes, over the {limit}", field=field)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise ToolInputError(f"cannot read {p}: {exc.strerror or exc}", field=field) from None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):  # replaced between stat and open
            raise ToolInputError(f"{p} is {describe_kind(opened.st_mode)}, not a regular file", field=field)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, min(_READ_CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise ToolInputError(f"{p} grew past the {limit} while being read", field=field)
        raw = b"".join(chunks)
    except OSError as exc:
        raise ToolInputError(f"cannot read {p}: {exc.strerror or exc}", field=field) from None
    finally:
        os.close(fd)
    try:
        return p, raw.decode(encoding)
    except UnicodeDecodeError:
        raise ToolInputError(f"{p} is not UTF-8 text", field=field) from None
