"""Which base YAML a construction composes, exactly where AgentJetJob would look for it, or why it is unknown.

AgentJetJob opens ``base_yaml_config`` as given: an absolute path (or one built from ``__file__``) is
that file; a relative path is relative to the directory the client is launched from (``cwd``). Without
``cwd`` a relative path is looked for in candidate folders (the script's folder up to its repository
root) and the result says that it depends on the launch directory. A base that is missing or cannot be
resolved, or that AgentJet refuses to compose, is never replaced by AgentJet's defaults: every value it
would set becomes unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from skill_server.analysis.agentjet import Cause, ComposedBase, RefusedBase
from skill_server.analysis.script import Construction
from skill_server.analysis.session import Session
from skill_server.analysis.values import Unknown, jsonable, lookup
from skill_server.core.trees import flatten

BaseState = Literal["defaults", "file", "missing", "unresolved", "refused"]
ENGINE_COPY = "yaml_backup.yaml"  # what the engine's start writes into <experiment_dir>/
MAX_CANDIDATE_LEVELS = 8


@dataclass
class BaseYaml:
    """The base YAML a run composes, or why it cannot be read."""

    state: BaseState
    anchor: str  # absolute | script_dir | cwd | explicit | defaults | unresolved
    expression: str | None  # base_yaml_config as written in the script
    path: Path | None  # the file compared, or the path that is missing
    tried: list[str] = field(default_factory=list)  # every path looked at, in order
    launch_dir_known: bool = True  # False: a relative path and no cwd given
    reason: str | None = None  # why it cannot be read (in full)
    value_reason: str | None = None  # why the values it would set are unknown (short, per value)
    composed: ComposedBase | None = None
    causes: list[Cause] = field(default_factory=list)  # what AgentJet refuses about this base
    tree: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    explicit: dict[str, Any] = field(default_factory=dict)  # every key the user's YAML writes -> value
    customised: dict[str, Any] = field(default_factory=dict)  # ... of those, the ones unlike AgentJet's defaults
    classic: str | None = None  # why it is a classic-mode config (``ajet --conf``), read alone; None: a swarm base

    @property
    def is_users(self) -> bool:
        return self.state == "file"

    @property
    def engine_copy(self) -> bool:
        """The file is the copy the swarm engine writes at start (``<experiment_dir>/yaml_backup.yaml``, a full
        dump), not a file the user edits: a fix names the job the client builds instead."""
        if self.state != "file" or self.path is None:
            return False
        if self.path.name == ENGINE_COPY:
            return True
        folder = lookup(self.tree, "ajet.experiment_dir")
        if not isinstance(folder, str) or folder in ("", "auto"):
            return False
        parts = Path(folder).parts
        return self.path.parent.parts[-len(parts):] == parts

    @property
    def values_unknown(self) -> bool:
        """Every value this base would set is unknown: it is missing, its path is unknown, or AgentJet refuses
        to compose it."""
        return self.state in ("missing", "unresolved", "refused")

    @property
    def name(self) -> str:
        return self.path.name if self.path is not None else "AgentJet's defaults"

    def file_of(self, key: str) -> str | None:
        """The file that writes ``key``: the user's layer that set it, else the base itself."""
        layer = self.origin.get(key)
        file = self.composed.user_layers.get(layer or "") if self.composed else None
        return file or (str(self.path) if self.path else None)

    def place_of(self, session: Session, key: str) -> tuple[str | None, int | None]:
        """(file, line) where the base writes ``key``; the line is None when it cannot be found."""
        file = self.file_of(key)
        return file, session.key_lines(file).get(key) if file else None


def defaults_base(session: Session) -> BaseYaml:
    aj = session.aj
    return BaseYaml("defaults", "defaults", None, None, tree=aj.defaults, origin=dict(aj.default_origin))


def file_base(session: Session, path: Path, anchor: str, expression: str | None, *, field: str,
              tried: list[str] | None = None, launch_dir_known: bool = True, alone: bool = False) -> BaseYaml:
    """A base file composed as ``build_config`` composes it; one AgentJet refuses to compose is ``refused``:
    its refusal is a finding and every value it would set is unknown (never AgentJet's defaults instead).
    ``alone``: no AgentJetJob construction reads it, so it may be a classic-mode config."""
    tried = tried or [str(path)]
    composed = session.aj.compose_base(path, field=field, alone=alone)
    for note in composed.notes:
        session.note(note)
    if isinstance(composed, RefusedBase):
        cause = composed.cause
        return unknown_base(session, "refused", anchor, expression, path, f"{session.aj.label} refuses to compose "
                            f"{path}: {cause.message}", tried, launch_dir_known,
                            short=f"set by the base YAML {path.name}, which AgentJet refuses to compose "
                            f"({cause.exception})", causes=[cause])
    explicit = {k: v for k, v in flatten(composed.tree).items() if composed.origin.get(k) in composed.user_layers}
    customised = {k: v for k, v in explicit.items() if not _equal_default(session, k, v)}
    return BaseYaml("file", anchor, expression, path, tried=tried, launch_dir_known=launch_dir_known,
                    composed=composed, tree=composed.tree, origin=composed.origin, explicit=explicit,
                    customised=customised, causes=list(composed.causes), classic=composed.classic)


def unknown_base(session: Session, state: BaseState, anchor: str, expression: str | None, path: Path | None,
                 reason: str, tried: list[str], launch_dir_known: bool = True, *, short: str,
                 causes: list[Cause] | None = None) -> BaseYaml:
    """A base whose values are all unknown: ``reason`` in full, ``short`` for each value it would set."""
    if state == "missing" and causes is None and path is not None and path.is_absolute() and not _exists(path):
        causes = [session.aj.absent_base_cause(path)]
    return BaseYaml(state, anchor, expression, path, tried=tried,
                    launch_dir_known=launch_dir_known, reason=reason, value_reason=short,
                    tree=unknown_tree(session.aj.defaults, short), causes=causes or [])


def base_for(session: Session, c: Construction, explicit: Path | None) -> BaseYaml:
    """The base YAML of one construction (``explicit``: the ``yaml`` argument, which replaces it)."""
    expression = c.base_yaml.text if c.base_yaml is not None else None
    ref = c.base_path
    if explicit is not None:
        if ref is not None and ref.anchor != "cwd" and Path(ref.path).resolve() != explicit:
            session.note(f"the script's base_yaml_config ({ref.path}) is not the yaml given ({explicit}); the given "
                         "yaml was compared")
        elif c.base_yaml is None:
            session.note("the script passes no base_yaml_config, so AgentJetJob would use AgentJet's defaults; "
                         f"{explicit.name} was analysed as if it were the base")
        return file_base(session, explicit, "explicit", expression, field="yaml")
    if c.base_yaml is None:
        return defaults_base(session)
    line = c.kwargs["base_yaml_config"].line
    if ref is None:
        why = c.base_yaml.why or "computed at run time"
        return unknown_base(session, "unresolved", "unresolved", expression, None,
                            f"base_yaml_config={expression} (line {line}) is not known statically: {why}; pass yaml= "
                            "to check the YAML it names", [],
                            short=f"set by the base YAML, whose path ({expression}) is known only at run time")
    if ref.anchor == "cwd":
        return _relative(session, c, ref.path, expression, line)
    path = Path(ref.path)
    if not path.is_file():
        return unknown_base(session, "missing", ref.anchor if ref.anchor != "script_file" else "script_dir", expression,
                            path, f"the base YAML {path} {_problem(path)}", [str(path)],
                            short=f"set by the base YAML {path.name}, which {_problem(path)}")
    return file_base(session, path, ref.anchor, expression, field="script")


def _relative(session: Session, c: Construction, rel: str, expression: str | None, line: int) -> BaseYaml:
    if session.cwd is not None:
        path = session.cwd / rel
        if path.is_file():
            return file_base(session, path.resolve(), "cwd", expression, field="script", tried=[str(path)])
        return unknown_base(session, "missing", "cwd", expression, path,
                            f"the base YAML {path} {_problem(path)}", [str(path)],
                            short=f"set by the base YAML {path.name}, which {_problem(path)}")
    tried: list[str] = []
    for folder in candidate_folders(Path(session.script_file).parent if session.script_file else Path.cwd()):
        candidate = folder / rel
        tried.append(str(candidate))
        if candidate.is_file():
            session.note(f"base_yaml_config {rel!r} (line {line}) is relative, so AgentJetJob reads it from the "
                         f"launch directory; found it as {candidate}, so the values below hold when the client is "
                         f"started from {folder} (pass cwd= to say where it is launched; prefer a path built from "
                         "__file__)")
            return file_base(session, candidate.resolve(), "cwd", expression, field="script", tried=tried,
                             launch_dir_known=False)
    return unknown_base(session, "missing", "cwd", expression, Path(rel),
                        f"the base YAML {rel!r} is relative to the launch directory, which is not known (pass cwd=), "
                        f"and is at none of the candidates checked", tried, launch_dir_known=False,
                        short=f"set by the base YAML {rel!r}, not found without the launch directory")


def candidate_folders(start: Path) -> list[Path]:
    """The script's folder and its parents up to the repository root (the first with .git); without one, the
    script's folder and its parent. Candidates only: AgentJet itself uses the launch directory."""
    chain = [start, *list(start.parents)[:MAX_CANDIDATE_LEVELS]]
    for i, folder in enumerate(chain):
        if (folder / ".git").exists():
            return chain[:i + 1]
    return chain[:2]


def _exists(path: Path) -> bool:
    try:
        return path.exists() or path.is_symlink()
    except OSError:
        return False


def _problem(path: Path) -> str:
    try:
        if path.exists():
            return "is not a regular file"
    except OSError:
        pass
    return "does not exist"


def _equal_default(session: Session, key: str, value: object) -> bool:
    default = session.aj.defaults_flat.get(key, _ABSENT)
    return default is not _ABSENT and jsonable(default) == jsonable(value) and type(default) is type(value)


_ABSENT = object()


def unknown_tree(tree: Any, reason: str) -> Any:
    """The same sections with every leaf replaced by ``Unknown(reason)`` (a base that cannot be read)."""
    unknown = Unknown(reason)
    if not isinstance(tree, dict):
        return unknown
    out: dict[str, Any] = {}
    stack: list[tuple[dict[str, Any], dict[str, Any]]] = [(tree, out)]
    while stack:
        src, dst = stack.pop()
        for key, value in src.items():
            if isinstance(value, dict) and value:
                child: dict[str, Any] = {}
                dst[key] = child
                stack.append((value, child))
            else:
                dst[key] = unknown
    return out
