"""Replaying AgentJetJob on a base: kwargs through the overrides table, the tcp switch, then the writes made
before any dump, recording who set each key. Values computed at run time enter as ``Unknown``."""

from __future__ import annotations

import copy
from typing import Any

from skill_server.tools.check_config.agentjet import KEYS
from skill_server.tools.check_config.context import BaseYaml, LintContext, Run, Setter
from skill_server.tools.check_config.script import Construction, Freeze, Kwarg, ScriptScan, Write
from skill_server.tools.check_config.values import Unknown


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


def replay(ctx: LintContext, construction: Construction | None, base: BaseYaml) -> Run:
    """AgentJetJob's order of events on this base: kwargs, the tcp switch, then the writes before any dump."""
    aj = ctx.aj
    tree = copy.deepcopy(base.tree)
    setters: dict[str, list[Setter]] = {}
    for key, value in base.explicit.items():
        loc = ctx.yaml_location(base, key)
        setters.setdefault(key, []).append(Setter("yaml", loc.file, loc.line, value))
    run = Run(construction, base, tree, tree, setters)
    if construction is not None:
        _apply_kwargs(ctx, run, construction)
    _tcp_switch(ctx, run)
    run.at_construction = copy.deepcopy(tree)
    if construction is not None and ctx.scan is not None:
        _apply_writes(ctx, run, construction, ctx.scan)
    kwargs = dict(run.kwarg_values)
    dynamic = None
    if construction is not None and construction.dynamic:
        dynamic = f"{', '.join(construction.dynamic)} at line {construction.line}"
    causes, run.cause_skips = aj.refusal_causes(run.at_build, kwargs, dynamic)
    run.causes = [*base.causes, *causes]
    return run


def _apply_kwargs(ctx: LintContext, run: Run, c: Construction) -> None:
    aj = ctx.aj
    for name, kw in c.kwargs.items():
        run.kwarg_values[name] = kw.value.value if kw.value.resolved else Unknown(
            f"kwarg {name}={kw.value.describe_unresolved()}")
    for kwarg, key in aj.kwarg_rows():
        given: Kwarg | None = c.kwargs.get(kwarg)
        if given is None:
            if c.dynamic:
                _set(run.tree, key, Unknown(f"{', '.join(c.dynamic)} at line {c.line} may pass {kwarg}"))
            continue
        if given.value.resolved and given.value.value is None:
            if given.value.assumes:
                ctx.note(f"kwarg {kwarg}={given.value.text} (line {given.line}) is None while "
                         + " and ".join(a.describe() for a in given.value.assumes)
                         + f", so {key} keeps its YAML value; otherwise the kwarg replaces it")
            continue  # None keeps the YAML value, as in AgentJetJob
        value = given.value.value if given.value.resolved else run.kwarg_values[kwarg]
        _set(run.tree, key, value)
        run.setters.setdefault(key, []).append(
            Setter("kwarg", ctx.script_file, given.line, value, given.value.assumes, kwarg, given.value.text))


def _tcp_switch(ctx: LintContext, run: Run) -> None:
    key = KEYS["interchange_method"]
    switch = ctx.aj.tcp_switch(run.value("enable_swarm_mode"), run.value("nnodes"))
    current = run.value(key)
    if switch is True and current != "tcp":
        _set(run.tree, key, "tcp")
        where = ctx.effective_setter(run, KEYS["nnodes"])
        run.setters.setdefault(key, []).append(Setter("tcp-switch", where.file if where else ctx.script_file,
                                                      where.line if where else None, "tcp"))
    elif isinstance(switch, Unknown) and current != "tcp":
        _set(run.tree, key, Unknown(switch.reason))


def _apply_writes(ctx: LintContext, run: Run, c: Construction, scan: ScriptScan) -> None:
    single = len(scan.constructions) == 1
    run.writes = [w for w in scan.writes if w.construction == c.index or (w.construction is None and single)]
    run.freezes = [f for f in scan.freezes if f.construction == c.index or (f.construction is None and single)]
    for write in run.writes:
        if write.kind == "mirror":
            continue
        late = next((f for f in run.freezes if happens_after(write, f)), None)
        if late is not None:
            run.late_writes.append((write, late))
            continue
        if write.kind == "method":
            continue
        run.applied_writes.append(write)
        value = write.value.value if write.value.resolved else Unknown(
            f"the write at line {write.line} ({write.value.describe_unresolved()})")
        if _settable(run.tree, write.key):
            _set(run.tree, write.key, value)
            for stale in [k for k in run.setters if k.startswith(write.key + ".")]:
                run.setters[stale].append(Setter("write", ctx.script_file, write.line, None, write.value.assumes,
                                                 text=write.value.text))
            run.setters.setdefault(write.key, []).append(
                Setter("write", ctx.script_file, write.line, value, write.value.assumes, text=write.value.text))


def happens_after(write: Write, freeze: Freeze) -> bool:
    """Does the write run after the freeze call? Compared in a shared scope via the helpers' call sites."""
    if write.scope is freeze.scope:
        return write.line > freeze.line
    for ws, wl in _lift(write.scope, write.line):
        for fs, fl in _lift(freeze.scope, freeze.line):
            if ws is fs and wl != fl:
                return wl > fl
    return False


MAX_LIFT = 64  # call-site positions followed per statement


def _lift(scope: Any, line: int) -> list[tuple[Any, int]]:
    """The statement's position, then the positions of the calls that run it, outwards (breadth first, bounded)."""
    out = [(scope, line)]
    seen = {(id(scope), line)}
    i = 0
    while i < len(out) and len(out) < MAX_LIFT:
        current, _ = out[i]
        i += 1
        for caller, call_line in current.call_sites:
            if (id(caller), call_line) not in seen and len(out) < MAX_LIFT:
                seen.add((id(caller), call_line))
                out.append((caller, call_line))
    return out


def _settable(tree: dict[str, Any], key: str) -> bool:
    node: Any = tree
    for part in key.split(".")[:-1]:
        if isinstance(node, Unknown):
            return True
        if not isinstance(node, dict) or part not in node:
            return isinstance(node, dict)
        node = node[part]
    return isinstance(node, (dict, Unknown))


def _set(tree: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = copy.deepcopy(value)
