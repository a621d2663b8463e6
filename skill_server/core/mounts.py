"""Which filesystem holds a path, from ``/proc/self/mountinfo``, and whether it is shared between machines.

SQLite's locking (and its WAL index, which lives in shared memory) is only correct when every process
using a database runs on one machine: on NFS, Lustre, GPFS, BeeGFS, SMB, Ceph or any FUSE filesystem
(sshfs and friends) two machines may corrupt it or lose writes. The registry asks here where it is.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

MOUNTINFO = "/proc/self/mountinfo"

#: Filesystem types whose files other machines may write at the same time (``fuse.*`` too: see ``shared``).
NETWORK_TYPES = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "afs",
    "pvfs2", "orangefs", "panfs", "wekafs", "quobyte", "davfs", "fuse", "gfs2", "ocfs2",
})

_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo: where it is mounted and its filesystem type (``fuse.sshfs``, ``nfs4``, ...)."""

    point: str
    fstype: str


def _unescape(text: str) -> str:
    """mountinfo writes a space, tab, newline and backslash in a path as octal escapes (``\\040``)."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo text, in its order (later lines are mounted over earlier ones); lines that
    do not have the documented shape are skipped."""
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            dash = fields.index("-", 6)
        except ValueError:
            continue
        if dash + 1 >= len(fields) or len(fields) < 5:
            continue
        out.append(Mount(_unescape(fields[4]), fields[dash + 1]))
    return out


def _contains(point: str, path: str) -> bool:
    return point == "/" or path == point or path.startswith(point.rstrip("/") + "/")


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path`` (absolute, resolved): the longest mount point that contains it, the one
    mounted last when several share that point."""
    best: Mount | None = None
    for m in mounts:
        if _contains(m.point, path) and (best is None or len(m.point) >= len(best.point)):
            best = m
    return best


def _existing(path: str) -> str:
    """``path`` resolved, or its nearest existing ancestor resolved (a directory not made yet lies on the
    filesystem of the folder it will be made in)."""
    current = os.path.abspath(path)
    while not os.path.exists(current) and os.path.dirname(current) != current:
        current = os.path.dirname(current)
    return os.path.realpath(current)


def filesystem_of(path: str) -> str | None:
    """The filesystem type under ``path`` (``ext4``, ``nfs4``, ``fuse.sshfs``...); None when mountinfo cannot
    be read (not Linux)."""
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as handle:
            mounts = parse_mountinfo(handle.read())
    except OSError:
        return None
    found = mount_of(_existing(path), mounts)
    return found.fstype if found else None


def shared(fstype: str | None) -> bool:
    """Whether files of this filesystem type may be used from several machines at once (network and cluster
    filesystems, and FUSE ones, which may be either: sshfs, s3fs, gcsfuse...). ``fuseblk`` (NTFS, exFAT on
    a local disk) is local."""
    if not fstype:
        return False
    return fstype in NETWORK_TYPES or fstype.startswith(("fuse.", "nfs", "smb"))
