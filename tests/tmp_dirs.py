"""Folders tests must make directly in /tmp, and the end-of-session check that each is gone again.

Some folders cannot live under pytest's base: Unix socket paths (tmux, ssh control sockets) must stay under
about 100 bytes, and a process dropped to ``nobody`` cannot reach pytest's 0700 base. Each such folder is
made here and remembered, so the session can fail when one is left behind, without mistaking another
session's folders (several pytest runs may share /tmp) for ours.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Where the product puts ssh control sockets when the state directory's path is too long for a socket. A
# test that ends up there has touched the machine's shared state (its state directory was too long).
SSH_FALLBACK = f"/tmp/ajs-ssh-{os.getuid()}"

_made: list[str] = []


def short_tmp_dir(prefix: str = "ajs") -> str:
    """A new private folder directly in /tmp; the caller removes it, the session checks that it did."""
    path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    _made.append(path)
    return path


def process_tmp_dir(prefix: str) -> str:
    """A new private folder in the temp directory that lives as long as this process (data unpacked once for
    every test); removed at exit, so the session check does not count it."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def left_behind(ssh_fallback_existed: bool) -> list[str]:
    """What this session made in /tmp and did not remove."""
    left = [path for path in _made if os.path.lexists(path)]
    if not ssh_fallback_existed and os.path.lexists(SSH_FALLBACK):
        left.append(SSH_FALLBACK)
    return left
