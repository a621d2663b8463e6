"""Which base YAML a construction composes, exactly where AgentJetJob would look for it, or why it is unknown.

AgentJetJob opens ``base_yaml_config`` as given: an absolute path (or one built from ``__file__``) is
that file; a relative path is relative to the directory the client is launched from (``cwd``). Without
``cwd`` a relative path is looked for in candidate folders (the script's folder up to its repository
root) and the result says that it depends on the launch directory. A base that is missing or cannot be
resolved, or that AgentJet refuses to compose, is never replaced by AgentJet's defaults: every value it
would set becomes unknown.
"""

from __future__ import annotations

from pathlib import Path

from skill_server.core.trees import flatten
from skill_server.tools.check_config.agentjet import Cause, RefusedBase
from skill_server.tools.check_config.context import BaseYaml, LintContext
from skill_server.tools.check_config.replay import unknown_tree
from skill_server.tools.check_config.script import Construction
from skill_server.tools.check_config.values import jsonable

MAX_CANDIDATE_LEVELS = 8


def defaults_base(ctx: LintContext) -> BaseYaml:
    return BaseYaml("defaults", "defaults", None, None, tree=ctx.aj.defaults, origin=dict(ctx.aj.default_origin))


def file_base(ctx: LintContext, path: Path, anchor: str, expression: str | None, *, field: str,
              tried: list[str] | None = None, launch_dir_known: bool = True) -> BaseYaml:
    """A base file composed as ``build_config`` composes it; one AgentJet refuses to compose is ``refused``:
    its refusal is a finding and every value it would set is unknown (never AgentJet's defaults instead)."""
    tried = tried or [str(path)]
    composed = ctx.aj.compose_base(path, field=field)
    for note in composed.notes:
        ctx.note(note)
    if isinstance(composed, RefusedBase):
        cause = composed.cause
        return unknown_base(ctx, "refused", anchor, expression, path, f"{ctx.aj.label} refuses to compose "
                            f"{path}: {cause.message}", tried, launch_dir_known,
                            short=f"set by the base YAML {path.name}, which AgentJet refuses to compose "
                            f"({cause.exception})", causes=[cause])
    explicit = {k: v for k, v in flatten(composed.tree).items() if composed.origin.get(k) in composed.user_layers}
    customised = {k: v for k, v in explicit.items() if not _equal_default(ctx, k, v)}
    return BaseYaml("file", anchor, expression, path, tried=tried, launch_dir_known=launch_dir_known,
                    composed=composed, tree=composed.tree, origin=composed.origin, explicit=explicit,
                    customised=customised, causes=list(composed.causes))


def unknown_base(ctx: LintContext, state: str, anchor: str, expression: str | None, path: Path | None,
                 reason: str, tried: list[str], launch_dir_known: bool = True, *, short: str,
                 causes: list[Cause] | None = None) -> BaseYaml:
    """A base whose values are all unknown: ``reason`` in full, ``short`` for each value it would set."""
    if state == "missing" and causes is None and path is not None and path.is_absolute() and not _exists(path):
        causes = [ctx.aj.absent_base_cause(path)]
    return BaseYaml(state, anchor, expression, path, tried=tried,  # type: ignore[arg-type]
                    launch_dir_known=launch_dir_known, reason=reason, value_reason=short,
                    tree=unknown_tree(ctx.aj.defaults, short), causes=causes or [])


def base_for(ctx: LintContext, c: Construction, explicit: Path | None) -> BaseYaml:
    """The base YAML of one construction (``explicit``: the ``yaml`` argument, which replaces it)."""
    expression = c.base_yaml.text if c.base_yaml is not None else None
    ref = c.base_path
    if explicit is not None:
        if ref is not None and ref.anchor != "cwd" and Path(ref.path).resolve() != explicit:
            ctx.note(f"the script's base_yaml_config ({ref.path}) is not the yaml given ({explicit}); the given yaml "
                     "was compared")
        elif c.base_yaml is None:
            ctx.note("the script passes no base_yaml_config, so AgentJetJob would use AgentJet's defaults; "
                     f"{explicit.name} was analysed as if it were the base")
        return file_base(ctx, explicit, "explicit", expression, field="yaml")
    if c.base_yaml is None:
        return defaults_base(ctx)
    line = c.kwargs["base_yaml_config"].line
    if ref is None:
        why = c.base_yaml.why or "computed at run time"
        return unknown_base(ctx, "unresolved", "unresolved", expression, None,
                            f"base_yaml_config={expression} (line {line}) is not known statically: {why}; pass yaml= "
                            "to check the YAML it names", [],
                            short=f"set by the base YAML, whose path ({expression}) is known only at run time")
    if ref.anchor == "cwd":
        return _relative(ctx, c, ref.path, expression, line)
    path = Path(ref.path)
    if not path.is_file():
        return unknown_base(ctx, "missing", ref.anchor if ref.anchor != "script_file" else "script_dir", expression,
                            path, f"the base YAML {path} {_problem(path)}", [str(path)],
                            short=f"set by the base YAML {path.name}, which {_problem(path)}")
    return file_base(ctx, path, ref.anchor, expression, field="script")


def _relative(ctx: LintContext, c: Construction, rel: str, expression: str | None, line: int) -> BaseYaml:
    if ctx.cwd is not None:
        path = ctx.cwd / rel
        if path.is_file():
            return file_base(ctx, path.resolve(), "cwd", expression, field="script", tried=[str(path)])
        return unknown_base(ctx, "missing", "cwd", expression, path,
                            f"the base YAML {path} {_problem(path)}", [str(path)],
                            short=f"set by the base YAML {path.name}, which {_problem(path)}")
    tried: list[str] = []
    for folder in candidate_folders(Path(ctx.script_file).parent if ctx.script_file else Path.cwd()):
        candidate = folder / rel
        tried.append(str(candidate))
        if candidate.is_file():
            ctx.note(f"base_yaml_config {rel!r} (line {line}) is relative, so AgentJetJob reads it from the launch "
                     f"directory; found it as {candidate}, so the values below hold when the client is started from "
                     f"{folder} (pass cwd= to say where it is launched; prefer a path built from __file__)")
            return file_base(ctx, candidate.resolve(), "cwd", expression, field="script", tried=tried,
                             launch_dir_known=False)
    return unknown_base(ctx, "missing", "cwd", expression, Path(rel),
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


def _equal_default(ctx: LintContext, key: str, value: object) -> bool:
    default = ctx.aj.defaults_flat.get(key, _ABSENT)
    return default is not _ABSENT and jsonable(default) == jsonable(value) and type(default) is type(value)


_ABSENT = object()
