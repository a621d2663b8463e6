"""Atomic file writes: a temp file in the target's directory, fsync, then rename (or link, to never clobber)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from skill_server.errors import ToolFailure, ToolInputError

DEFAULT_MODE = 0o644


def resolve_path(value: str, *, field: str, base: str | Path | None = None) -> Path:
    """The absolute path a user-given path names: ``~`` expanded, a relative path joined to ``base``
    (a tool's ``cwd`` argument) or, without one, to the server's working directory. Every tool resolves
    paths through here, so that messages can always name the absolute path that was tried."""
    if "\x00" in value:
        raise ToolInputError("contains a NUL character", field=field)
    path = Path(value).expanduser()
    if not path.is_absolute():
        anchor = Path(base).expanduser() if base is not None else Path(os.getcwd())
        path = anchor / path
    return Path(os.path.normpath(str(path)))


def write_text_atomic(path: str | Path, text: str, overwrite: bool = False, *, field: str | None = None) -> Path:
    """Write ``text`` to ``path`` so readers see either nothing/the old file or the whole new file.

    With ``overwrite=False`` an existing file is never replaced, even by a concurrent writer (the
    final step is a hard link, which fails if the name exists). Parent directories are created.
    """
    target = Path(path).expanduser().absolute()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolFailure(f"cannot create directory {target.parent}: {exc.strerror or exc}", field=field) from None
    if not overwrite and target.exists():
        raise ToolFailure(f"{target} exists; pass overwrite=true to replace it", field=field)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        # mkstemp creates 0600; give the file the mode it would have had (or keep the replaced file's)
        os.chmod(tmp, target.stat().st_mode & 0o7777 if target.exists() else DEFAULT_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise ToolFailure(f"{target} exists; pass overwrite=true to replace it", field=field) from None
            except OSError:  # filesystems without hard links: best effort no-clobber
                if target.exists():
                    raise ToolFailure(f"{target} exists; pass overwrite=true to replace it", field=field) from None
                os.replace(tmp, target)
    except OSError as exc:
        raise ToolFailure(f"cannot write {target}: {exc.strerror or exc}", field=field) from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


def read_text_bounded(path: str | Path, *, field: str, max_bytes: int, what: str = "",
                      encoding: str = "utf-8") -> tuple[Path, str]:
    """Read a user-named text file; missing, non-regular, oversized, unreadable or non-UTF-8 is a clear
    ``ToolInputError`` naming ``field``. Returns the expanded path and the text."""
    p = Path(path).expanduser()
    try:
        if not p.exists():
            raise ToolInputError(f"file not found: {p}", field=field)
        if not p.is_file():
            raise ToolInputError(f"not a regular file: {p}", field=field)
        size = p.stat().st_size
        if size > max_bytes:
            limit = f"{max_bytes // (1024 * 1024)} MiB limit" + (f" for {what}" if what else "")
            raise ToolInputError(f"{p} is {size} bytes, over the {limit}", field=field)
        raw = p.read_bytes()
    except OSError as exc:
        raise ToolInputError(f"cannot read {p}: {exc.strerror or exc}", field=field) from None
    try:
        return p, raw.decode(encoding)
    except UnicodeDecodeError:
        raise ToolInputError(f"{p} is not UTF-8 text", field=field) from None
