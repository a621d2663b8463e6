"""Reading what the ``ray`` CLI prints (pure functions): ``ray status -v``, ``ray --version``, ``ray stop``.

``ray status`` has no machine-readable form. Its ``Node status`` block lists live nodes under
``Active:`` (and ``Idle:`` in autoscaler-v2 builds) as ``<count> <node type or node_<id>>`` lines, pending
nodes under ``Pending:`` and recent failures under ``Recent failures:``; its ``Resources`` block has
``used/total name`` lines, cluster-wide under ``Usage:`` / ``Total Usage:`` and, with ``-v``, per node
under ``Node: <id>``. Humanised memory figures (``46.14GiB``) are turned into bytes as rounded there.
Anything else is left alone; text without a ``Node status`` block is "unrecognised", never guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NODE_LINE = re.compile(r"^\s*(\d+)\s+(\S+)\s*$")
_RESOURCE_LINE = re.compile(r"^\s*([0-9.]+)([A-Za-z]*)/([0-9.]+)([A-Za-z]*)\s+(\S+)\s*$")
_NODE_HEADER = re.compile(r"^Node:\s+([0-9a-f]{8,})\b")
_VERSION = re.compile(r"version\s+([0-9][0-9A-Za-z.+\-]*)")
_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+\s+[A-Z]+\s+\S+\s+--\s+")
_UNITS = {"": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
MAX_LISTED = 50


@dataclass
class Resource:
    used: float | None
    total: float | None
    unit: str  # "count" or "bytes"


@dataclass
class ClusterStatus:
    alive: int
    node_types: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    resources: dict[str, Resource] = field(default_factory=dict)
    nodes: dict[str, dict[str, Resource]] = field(default_factory=dict)


def _amount(number: str, unit: str) -> tuple[float | None, bool]:
    """(value, is_bytes); None when the unit is unknown."""
    try:
        value = float(number)
    except ValueError:
        return None, False
    if unit not in _UNITS:
        return None, False
    if unit == "":
        return value, False
    return float(round(value * _UNITS[unit])), True


def _resource(line: str) -> tuple[str, Resource] | None:
    match = _RESOURCE_LINE.match(line)
    if not match:
        return None
    used, used_bytes = _amount(match.group(1), match.group(2))
    total, total_bytes = _amount(match.group(3), match.group(4))
    unit = "bytes" if used_bytes or total_bytes else "count"
    return match.group(5), Resource(used, total, unit)


def parse_status(text: str) -> ClusterStatus | None:
    """The live nodes and resources in ``ray status [-v]`` output; None if there is no Node status block."""
    lines = text.splitlines()
    if not any(line.strip() == "Node status" for line in lines):
        return None
    status = ClusterStatus(alive=0)
    section = ""
    node: str | None = None
    for raw in lines:
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or set(stripped) <= {"-", "="}:
            continue
        header = _NODE_HEADER.match(stripped)
        if header:
            section, node = "node", header.group(1)
            status.nodes.setdefault(node, {})
            continue
        heading = _heading(line, section, node)
        if heading is not None:
            section, node = heading
        elif not (stripped.startswith("(") and stripped.endswith(")")):  # "(no pending nodes)", "(none)"...
            _add(status, section, node, stripped)
    return status


def _heading(line: str, section: str, node: str | None) -> tuple[str, str | None] | None:
    """The (section, node) that ``line`` starts when it is a heading; None when it is an entry."""
    stripped = line.strip()
    if not line[:1].isspace() and not stripped.endswith(":"):
        return stripped.lower(), None  # a heading ("Resources") ends what came before
    if not stripped.endswith(":"):
        return None
    if section == "node" and stripped == "Usage:":  # a node's own Usage block stays the node's
        return section, node
    return stripped[:-1].lower(), node


def _add(status: ClusterStatus, section: str, node: str | None, entry: str) -> None:
    """One entry line of ``section`` (of ``node``, for a node's resources) into ``status``."""
    if section in ("active", "idle"):
        match = _NODE_LINE.match(entry)
        if match:
            status.alive += int(match.group(1))
            if len(status.node_types) < MAX_LISTED:
                status.node_types.append(match.group(2))
    elif section == "pending" and len(status.pending) < MAX_LISTED:
        status.pending.append(entry[:200])
    elif section == "recent failures" and len(status.failures) < MAX_LISTED:
        status.failures.append(entry[:200])
    elif section in ("usage", "total usage"):
        found = _resource(entry)
        if found:
            status.resources[found[0]] = found[1]
    elif section == "node" and node is not None:
        found = _resource(entry)
        if found:
            status.nodes[node][found[0]] = found[1]


def parse_version(text: str) -> str | None:
    """``ray, version 2.60.0`` -> ``2.60.0``."""
    match = _VERSION.search(text)
    return match.group(1) if match else None


def last_message(text: str) -> str | None:
    """The last meaningful line of a ray command's output, without its log prefix, bounded."""
    for line in reversed(text.splitlines()):
        line = _LOG_PREFIX.sub("", line.strip())
        if line and not line.startswith("Traceback"):
            return line[:300]
    return None
