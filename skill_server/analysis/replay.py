"""Replaying AgentJetJob on a base: the construction steps ``build_config`` runs (``agentjet.job``), in the
same order, on values that may be ``Unknown``; then the writes made before any dump, recording who set each
key.

A ``Run`` is one construction (or the YAML alone) replayed: the config as AgentJetJob sees it at
construction (base YAML, then kwargs, then the tcp switch) and as the engine gets it (then the writes made
before any dump), who set each key (``Setter``: YAML line, kwarg, write, tcp switch), and AgentJet's
refusal causes (``skill_server.agentjet.refusals.Cause``, through the adapter).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

from skill_server.analysis.agentjet import KEYS, Cause, ConstructionSteps, SkippedCheck
from skill_server.analysis.bases import BaseYaml
from skill_server.analysis.script import Assumption, Construction, Freeze, Kwarg, ScriptScan, Write
from skill_server.analysis.session import Session
from skill_server.analysis.values import Unknown, lookup

SetterKind = Literal["yaml", "kwarg", "write", "tcp-switch"]


@dataclass
class Setter:
    """One place that sets a key: a YAML line, a kwarg, a write after construction, or the tcp switch."""

    kind: SetterKind
    file: str | None
    line: int | None
    value: Any
    assumes: tuple[Assumption, ...] = ()
    name: str = ""  # the kwarg name (for a kwarg)
    text: str = ""  # the expression as written in the script (for a kwarg or a write)


@dataclass
class Run:
    """One construction (or the YAML alone) replayed the way AgentJetJob does it."""

    construction: Construction | None
    base: BaseYaml
    script_file: str | None
    at_construction: dict[str, Any]  # base + kwargs + tcp switch: what AgentJetJob checks
    tree: dict[str, Any]  # + writes made before any dump: what the engine gets
    setters: dict[str, list[Setter]]
    writes: list[Write] = field(default_factory=list)
    freezes: list[Freeze] = field(default_factory=list)
    applied_writes: list[Write] = field(default_factory=list)
    late_writes: list[tuple[Write, Freeze]] = field(default_factory=list)
    kwarg_values: dict[str, Any] = field(default_factory=dict)  # given kwarg -> value (Unknown if not static)
    causes: list[Cause] = field(default_factory=list)
    cause_skips: list[SkippedCheck] = field(default_factory=list)

    def value(self, name_or_key: str) -> Any:
        """The effective value: a plain value, an ``Unknown`` or MISSING."""
        return lookup(self.tree, KEYS.get(name_or_key, name_or_key))

    def at_build(self, name_or_key: str) -> Any:
        return lookup(self.at_construction, KEYS.get(name_or_key, name_or_key))

    def causes_for(self, *ids: str) -> list[Cause]:
        return [c for c in self.causes if c.id in ids]

    def effective_setter(self, key: str) -> Setter | None:
        """Who sets the value the engine gets for ``key``: its last setter, else a whole-section write above it."""
        setters = self.setters.get(key)
        if setters:
            return setters[-1]
        for write in reversed(self.applied_writes):
            if key.startswith(write.key + ".") and self.script_file:
                return Setter("write", self.script_file, write.line, None, write.value.assumes, text=write.value.text)
        return None


def replay(session: Session, construction: Construction | None, base: BaseYaml) -> Run:
    """AgentJetJob's construction steps (``agentjet.job.ConstructionSteps``) on this base, then the writes
    made before any dump; the causes are listed the base's first, then in the order of the steps."""
    steps = _Replay(session, construction, base)
    steps.run()
    run = steps.result
    run.causes = [*base.causes, *steps.causes]
    return run


class _Replay(ConstructionSteps):
    """The construction steps on values that may be unknown: a refusal is recorded as a cause (never raised),
    a check that reads an unknown value as a skipped check; a value computed at run time enters as Unknown."""

    def __init__(self, session: Session, construction: Construction | None, base: BaseYaml) -> None:
        self.session = session
        self.aj = session.aj
        self.c = construction
        self.base = base
        self.result = Run(construction, base, session.script_file, {}, {}, {})
        self.causes: list[Cause] = []
        self.dynamic: str | None = None  # the splats or positional arguments that may pass more kwargs
        if construction is not None and construction.dynamic:
            self.dynamic = f"{', '.join(construction.dynamic)} at line {construction.line}"

    def _found(self, found: tuple[list[Cause], list[SkippedCheck]]) -> None:
        self.causes += found[0]
        self.result.cause_skips += found[1]

    def check_call(self) -> None:
        run = self.result
        for name, kw in (self.c.kwargs.items() if self.c is not None else ()):
            run.kwarg_values[name] = kw.value.value if kw.value.resolved else Unknown(
                f"kwarg {name}={kw.value.describe_unresolved()}")
        self._found(self.aj.call_refusals(dict(run.kwarg_values), self.dynamic))

    def open_base(self) -> None:
        """Nothing to open: ``bases`` found the base where AgentJetJob opens it, and a missing one carries
        AgentJet's refusal among its causes."""

    def check_lengths(self) -> None:
        self._found(self.aj.length_refusals(dict(self.result.kwarg_values), self.dynamic))

    def compose_base(self) -> None:
        """``bases`` composed the base as AgentJetJob does; the replay starts from its tree, and every key the
        user's YAML writes is set there."""
        run, session = self.result, self.session
        run.tree = run.at_construction = copy.deepcopy(self.base.tree)
        for key, value in self.base.explicit.items():
            file, line = self.base.place_of(session, key)
            run.setters.setdefault(key, []).append(Setter("yaml", file, line, value))

    def stamp_name(self) -> None:
        """The stamp is the launch time, which no static reading knows: experiment_name is shown as given."""

    def write_kwargs(self) -> None:
        if self.c is not None:
            _apply_kwargs(self.session, self.result, self.c)

    def check_values(self) -> None:
        classic = self.base.classic is not None
        self._found(self.aj.value_refusals(self.result.value, not_read=(
            "a classic-mode config (ajet --conf): AgentJetJob, whose check this is, does not read it" if classic
            else None)))

    def switch_to_tcp(self) -> None:
        _tcp_switch(self.session, self.result)

    def write_after(self) -> None:
        run = self.result
        run.at_construction = copy.deepcopy(run.tree)
        if self.c is not None and self.session.scan is not None:
            _apply_writes(self.session, run, self.c, self.session.scan)


def _apply_kwargs(session: Session, run: Run, c: Construction) -> None:
    """The overrides walk, in table order: each kwarg the call passes (or a splat may pass) sets its key."""
    for kwarg, key in session.aj.kwarg_rows():
        given: Kwarg | None = c.kwargs.get(kwarg)
        if given is None:
            if c.dynamic:
                _set(run.tree, key, Unknown(f"{', '.join(c.dynamic)} at line {c.line} may pass {kwarg}"))
            continue
        if given.value.resolved and given.value.value is None:
            if given.value.assumes:
                session.note(f"kwarg {kwarg}={given.value.text} (line {given.line}) is None while "
                             + " and ".join(a.describe() for a in given.value.assumes)
                             + f", so {key} keeps its YAML value; otherwise the kwarg replaces it")
            continue  # None keeps the YAML value, as in AgentJetJob
        value = given.value.value if given.value.resolved else run.kwarg_values[kwarg]
        _set(run.tree, key, value)
        run.setters.setdefault(key, []).append(
            Setter("kwarg", session.script_file, given.line, value, given.value.assumes, kwarg, given.value.text))


def _tcp_switch(session: Session, run: Run) -> None:
    key = KEYS["interchange_method"]
    switch = session.aj.tcp_switch(run.value("enable_swarm_mode"), run.value("nnodes"))
    current = run.value(key)
    if switch is True and current != "tcp":
        _set(run.tree, key, "tcp")
        where = run.effective_setter(KEYS["nnodes"])
        run.setters.setdefault(key, []).append(Setter("tcp-switch", where.file if where else session.script_file,
                                                      where.line if where else None, "tcp"))
    elif isinstance(switch, Unknown) and current != "tcp":
        _set(run.tree, key, Unknown(switch.reason))


def _apply_writes(session: Session, run: Run, c: Construction, scan: ScriptScan) -> None:
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
                run.setters[stale].append(Setter("write", session.script_file, write.line, None, write.value.assumes,
                                                 text=write.value.text))
            run.setters.setdefault(write.key, []).append(
                Setter("write", session.script_file, write.line, value, write.value.assumes, text=write.value.text))


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
