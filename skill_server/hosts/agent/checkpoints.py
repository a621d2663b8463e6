"""Finding training checkpoints on this host: ``global_step_N`` folders under a directory.

A bounded walk: symlinks are never followed, at most ``max_depth`` levels are searched for the folders
and at most ``max_entries`` directory entries are looked at in all (the folders' own files included,
to add up their sizes); when the budget runs out the answer says ``truncated``. verl also writes
``latest_checkpointed_iteration.txt`` next to the folders; its number is returned as ``latest``.
"""

from __future__ import annotations

import os
import re
import stat

from . import files
from .files import AgentError
from .protocol import TYPE_CHECKING
from .request import need, need_or

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    from .protocol import Checkpoint, CheckpointsReply

    class _Size(TypedDict):
        size: int
        files: int
        mtime: float
        partial: bool

STEP_DIR = re.compile(r"^global_step_(\d{1,15})$")
LATEST_FILE = "latest_checkpointed_iteration.txt"


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


class _Budget:
    def __init__(self, entries: int) -> None:
        self.left = entries
        self.exhausted = False

    def take(self) -> bool:
        if self.left <= 0:
            self.exhausted = True
            return False
        self.left -= 1
        return True


def _measure(path: str, budget: _Budget) -> _Size:
    """Size (regular files), file count and newest modification time of one checkpoint folder."""
    size = count = 0
    newest = 0.0
    partial = False
    stack = [path]
    try:
        newest = os.lstat(path).st_mtime
    except OSError:
        pass
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as it:
                for entry in it:
                    if not budget.take():
                        partial = True
                        break
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    newest = max(newest, info.st_mtime)
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
                    elif stat.S_ISREG(info.st_mode):
                        size += info.st_size
                        count += 1
        except OSError:
            continue
        if partial:
            break
    return {"size": size, "files": count, "mtime": newest, "partial": partial}


def op_checkpoints(req: Mapping[str, object]) -> CheckpointsReply:
    """``global_step_N`` folders under ``path`` (depth-limited, entry-limited), oldest step first."""
    root = files.expand(need(req, "path", str))
    max_depth = _clamp(need_or(req, "max_depth", int, 3), 0, 6)
    budget = _Budget(_clamp(need_or(req, "max_entries", int, 20000), 1, 200000))
    limit = _clamp(need_or(req, "limit", int, 200), 1, 2000)
    try:
        info = os.stat(root)
    except FileNotFoundError:
        raise AgentError("directory not found: " + root, kind="not_found") from None
    except OSError as exc:
        raise AgentError("cannot read %s: %s" % (root, exc.strerror or exc)) from None
    if not stat.S_ISDIR(info.st_mode):
        raise AgentError("not a directory: " + root, kind="not_regular")
    found: list[Checkpoint] = []
    stack = [(root, 0)]
    while stack and not budget.exhausted:
        current, depth = stack.pop()
        try:
            with os.scandir(current) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if not budget.take():
                break
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
            except OSError:
                continue
            match = STEP_DIR.match(entry.name)
            if match:
                size = _measure(entry.path, budget)
                found.append({"size": size["size"], "files": size["files"], "mtime": size["mtime"],
                              "partial": size["partial"], "path": entry.path, "step": int(match.group(1))})
            elif depth < max_depth:
                stack.append((entry.path, depth + 1))
    found.sort(key=lambda c: (c["step"], c["path"]))
    return {"path": root, "checkpoints": found[-limit:], "more": max(0, len(found) - limit),
            "truncated": budget.exhausted, "latest": files.read_int(os.path.join(root, LATEST_FILE))}
