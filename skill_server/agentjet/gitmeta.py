"""The commit and commit date of a git checkout, read from ``.git`` as files (no ``git`` binary needed).

Handles a ``.git`` folder or a ``.git`` file (worktrees, submodules), a symbolic or detached ``HEAD``,
loose and packed refs, and commit objects stored loose or whole in a pack (a commit stored as a delta
leaves the date unknown). Anything unexpected gives ``None``: the caller says "unknown".
"""

from __future__ import annotations

import datetime
import re
import zlib
from pathlib import Path

_SHA = re.compile(r"^[0-9a-f]{40}$")
_MAX_OBJECT = 1 << 20
_COMMITTER = re.compile(rb"^committer .* (\d+) ([+-])(\d\d)(\d\d)$", re.MULTILINE)


def git_dir(root: Path) -> Path | None:
    dot_git = root / ".git"
    try:
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():
            text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
            if text.startswith("gitdir:"):
                target = Path(text[len("gitdir:"):].strip())
                target = target if target.is_absolute() else (root / target)
                return target.resolve() if target.is_dir() else None
    except OSError:
        return None
    return None


def _common_dir(gdir: Path) -> Path:
    """A worktree's own git dir keeps HEAD; objects and most refs live in its common dir."""
    try:
        text = (gdir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return gdir
    common = Path(text)
    return (common if common.is_absolute() else gdir / common).resolve()


def head_commit(root: Path) -> str | None:
    gdir = git_dir(root)
    if gdir is None:
        return None
    try:
        head = (gdir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if _SHA.match(head):
        return head
    if not head.startswith("ref:"):
        return None
    ref = head[len("ref:"):].strip()
    for base in (gdir, _common_dir(gdir)):
        try:
            value = (base / ref).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if _SHA.match(value):
            return value
    try:
        packed = (_common_dir(gdir) / "packed-refs").read_text(encoding="utf-8")
    except OSError:
        return None
    for line in packed.splitlines():
        sha, _, name = line.partition(" ")
        if name.strip() == ref and _SHA.match(sha):
            return sha
    return None


def commit_date(root: Path, sha: str) -> str | None:
    """The committer date of ``sha`` as ISO 8601 with its original UTC offset."""
    gdir = git_dir(root)
    if gdir is None or not _SHA.match(sha):
        return None
    objects = _common_dir(gdir) / "objects"
    body = _loose_object(objects, sha) or _packed_commit(objects, sha)
    if body is None:
        return None
    match = _COMMITTER.search(body)
    if match is None:
        return None
    seconds, sign, hours, minutes = int(match.group(1)), match.group(2), int(match.group(3)), int(match.group(4))
    offset = datetime.timedelta(hours=hours, minutes=minutes) * (-1 if sign == "-" else 1)
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone(offset))
    return moment.isoformat()


def _loose_object(objects: Path, sha: str) -> bytes | None:
    try:
        raw = (objects / sha[:2] / sha[2:]).read_bytes()
        data = zlib.decompressobj().decompress(raw, _MAX_OBJECT)
    except (OSError, zlib.error):
        return None
    header, _, body = data.partition(b"\0")
    return body if header.startswith(b"commit ") else None


def _packed_commit(objects: Path, sha: str) -> bytes | None:
    wanted = bytes.fromhex(sha)
    try:
        indexes = sorted((objects / "pack").glob("pack-*.idx"))
    except OSError:
        return None
    for idx_path in indexes:
        offset = _pack_offset(idx_path, wanted)
        if offset is None:
            continue
        try:
            with idx_path.with_suffix(".pack").open("rb") as pack:
                pack.seek(offset)
                head = pack.read(32)
                kind = (head[0] >> 4) & 7
                pos = 1
                while head[pos - 1] & 0x80:  # the size continues while the high bit is set
                    pos += 1
                if kind != 1:  # 1 = a whole commit; deltas are not resolved here
                    return None
                pack.seek(offset + pos)
                return zlib.decompressobj().decompress(pack.read(_MAX_OBJECT), _MAX_OBJECT)
        except (OSError, zlib.error, IndexError):
            return None
    return None


def _pack_offset(idx_path: Path, wanted: bytes) -> int | None:
    """Look ``wanted`` up in a version-2 pack index."""
    try:
        data = idx_path.read_bytes()
    except OSError:
        return None
    if data[:8] != b"\xfftOc\x00\x00\x00\x02":
        return None
    fanout = [int.from_bytes(data[8 + 4 * i: 12 + 4 * i], "big") for i in range(256)]
    count = fanout[255]
    first = wanted[0]
    lo, hi = (fanout[first - 1] if first else 0), fanout[first]
    names = 8 + 1024
    while lo < hi:
        mid = (lo + hi) // 2
        name = data[names + 20 * mid: names + 20 * mid + 20]
        if name == wanted:
            offsets = names + 20 * count + 4 * count
            value = int.from_bytes(data[offsets + 4 * mid: offsets + 4 * mid + 4], "big")
            if value & 0x80000000:
                large = offsets + 4 * count + 8 * (value & 0x7FFFFFFF)
                value = int.from_bytes(data[large: large + 8], "big")
            return value
        if name < wanted:
            lo = mid + 1
        else:
            hi = mid
    return None


def origin_repo(root: Path) -> str | None:
    """``owner/name`` of the ``origin`` remote when it is a GitHub URL."""
    gdir = git_dir(root)
    if gdir is None:
        return None
    try:
        config = (_common_dir(gdir) / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    section = re.search(r'\[remote "origin"\](.*?)(?:\n\[|\Z)', config, re.DOTALL)
    url = re.search(r"^\s*url\s*=\s*(\S+)", section.group(1), re.MULTILINE) if section else None
    if url is None:
        return None
    match = re.search(r"github\.com[:/]([^/\s]+)/([^/\s]+?)(?:\.git)?/?$", url.group(1))
    return f"{match.group(1)}/{match.group(2)}" if match else None
