"""Path expressions as the script builds them: a ``PathRef`` anchored at the script file, an absolute path, or
the launch directory (a relative path, resolved there at run time)."""

from __future__ import annotations

import os
from typing import Any

from skill_server.analysis.script.model import PathRef
from skill_server.analysis.script.static import NoValue


def literal_path(text: str) -> PathRef:
    """A path written as a string: absolute (``~`` expanded), else relative to the launch directory."""
    expanded = os.path.expanduser(text)
    if os.path.isabs(expanded):
        return PathRef("absolute", os.path.normpath(expanded))
    return PathRef("cwd", os.path.normpath(text) if text else ".")


def as_text(value: Any) -> str:
    """A path part that must be a string."""
    if isinstance(value, str):
        return value
    raise NoValue("a path part that is not a string")


def join(base: PathRef, part: Any) -> PathRef:
    """``base / part`` (an absolute or anchored ``part`` replaces ``base``, as ``os.path.join`` does)."""
    if isinstance(part, PathRef):
        if part.anchor != "cwd":
            return part
        part = part.path
    part = as_text(part)
    if os.path.isabs(part):
        return PathRef("absolute", os.path.normpath(part))
    if base.anchor == "script_file":
        return PathRef("script_dir", os.path.normpath(os.path.join(os.path.dirname(base.path), part)))
    return PathRef(base.anchor, os.path.normpath(os.path.join(base.path, part)))


def parent(ref: PathRef) -> PathRef:
    """The folder of a path (``os.path.dirname``, ``Path.parent``)."""
    if ref.anchor == "script_file":
        return PathRef("script_dir", os.path.dirname(ref.path))
    if ref.anchor == "cwd":
        return PathRef("cwd", os.path.dirname(ref.path) or ".")
    return PathRef(ref.anchor, os.path.dirname(ref.path))
