"""How a script's write to ``job.config`` reaches its key, judged against AgentJet's real object types: one
judgement that check_config's unknown-key rule reports and build_config refuses or warns on, so both say
the same thing about the same line.

AgentJet's config is a dataclass tree whose sections without a dataclass (``multi_turn``, ``val_kwargs``,
``debug``, the verl sections) are plain dicts: attribute access on a dict raises ``AttributeError``, item
assignment on a dataclass raises ``TypeError``, a missing section on the way raises ``AttributeError``, and
a new last key is created silently (nothing reads it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from skill_server.analysis.agentjet import AgentJet
from skill_server.analysis.script import Write

AccessKind = Literal["attribute-on-dict", "item-on-dataclass", "missing-section", "new-key"]


@dataclass(frozen=True)
class AccessProblem:
    kind: AccessKind
    key: str  # the key the finding is about: the write's key, or the missing section on the way
    parent: str  # the section the access is made on
    part: str  # the attribute or item that fails (or is created)
    closest: str | None = None  # for missing-section / new-key: the closest known key
    exception: str | None = None  # what the line raises at run time (None: new-key raises nothing)

    @property
    def raises(self) -> bool:
        return self.exception is not None


def access_problem(aj: AgentJet, write: Write) -> AccessProblem | None:
    """The first step of ``write``'s access chain that fails or reaches nothing AgentJet reads, or None."""
    parts = [p for p, _ in write.access]
    for i, (part, how) in enumerate(write.access):
        parent = ".".join(parts[:i])
        path = ".".join(parts[: i + 1])
        if how == "attr" and aj.is_dict_section(parent):
            return AccessProblem("attribute-on-dict", write.key, parent, part, exception="AttributeError")
        if how == "item" and aj.is_dataclass_section(parent) and (parent == "" or aj.is_section(parent)):
            return AccessProblem("item-on-dataclass", write.key, parent, part, exception="TypeError")
        if not aj.known(path):
            if i == len(parts) - 1:
                return AccessProblem("new-key", write.key, parent, part, closest=aj.closest(write.key))
            return AccessProblem("missing-section", path, parent, part, closest=aj.closest(path),
                                 exception="AttributeError")
    return None


def dataclass_name(aj: AgentJet, path: str) -> str:
    """The class name of the config dataclass at ``path`` ('' = the root), for Python's own messages."""
    from skill_server.agentjet.release import DATACLASS_MARK
    from skill_server.core.trees import get_path

    node = get_path(aj.release.schema.tree, path, None) if path else aj.release.schema.tree
    name = node.get(DATACLASS_MARK) if isinstance(node, dict) else None
    return str(name) if name else "dataclass"


def raised_by(aj: AgentJet, problem: AccessProblem) -> str:
    """``Type: message`` as Python raises it for this access (None-safe for new keys, which raise nothing)."""
    if problem.kind == "attribute-on-dict":
        return f"AttributeError: 'dict' object has no attribute '{problem.part}'"
    if problem.kind == "item-on-dataclass":
        return f"TypeError: '{dataclass_name(aj, problem.parent)}' object does not support item assignment"
    if problem.kind == "missing-section":
        return f"AttributeError: '{dataclass_name(aj, problem.parent)}' object has no attribute '{problem.part}'"
    return ""
