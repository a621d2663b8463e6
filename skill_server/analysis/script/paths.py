"""Path expressions as the script builds them (``__file__``-relative, absolute, or launch-directory relative)."""

from __future__ import annotations

import os
from typing import Any

from skill_server.analysis.script.model import PathRef


class NotAPath(Exception):
    """A part of a path expression is not a string or a path."""


def literal_path(text: str) -> PathRef:
    expanded = os.path.expanduser(text)
    if os.path.isabs(expanded):
        return PathRef("absolute", os.path.normpath(expanded))
    return PathRef("cwd", os.path.normpath(text) if text else ".")


def join(base: PathRef, part: Any) -> PathRef:
    if isinstance(part, PathRef):
        if part.anchor != "cwd":
            return part
        part = part.path
    if not isinstance(part, str):
        raise NotAPath
    if os.path.isabs(part):
        return PathRef("absolute", os.path.normpath(part))
    if base.anchor == "script_file":
        return PathRef("script_dir", os.path.normpath(os.path.join(os.path.dirname(base.path), part)))
    return PathRef(base.anchor, os.path.normpath(os.path.join(base.path, part)))


def parent(ref: PathRef) -> PathRef:
    if ref.anchor == "script_file":
        return PathRef("script_dir", os.path.dirname(ref.path))
    if ref.anchor == "cwd":
        return PathRef("cwd", os.path.dirname(ref.path) or ".")
    return PathRef(ref.anchor, os.path.dirname(ref.path))
