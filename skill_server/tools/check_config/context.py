"""The lint context: the scan, the base YAML and the replayed config (``replay``), computed once and handed to
every rule.

For each ``AgentJetJob`` construction (or the YAML alone) a ``Run`` holds the config as AgentJetJob sees
it at construction (base YAML, then kwargs, then the tcp switch) and as the engine gets it (then the
writes made before any dump), who set each key (``Setter``: YAML line, kwarg, write, tcp switch), and
AgentJet's refusal causes (``skill_server.agentjet.refusals.Cause``, through the adapter). A value that
depends on anything unresolved is an ``Unknown`` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from skill_server.core.safe_yaml import MAX_YAML_BYTES, PyYAMLLoader
from skill_server.tools.check_config.agentjet import KEYS, AgentJet, CapFacts, Cause, ComposedBase, SkippedCheck
from skill_server.tools.check_config.models import Location
from skill_server.tools.check_config.script import Assumption, Construction, Freeze, ScriptScan, Write
from skill_server.tools.check_config.values import MISSING, Unknown, a_type, describe_unknown, is_int, lookup, show

SetterKind = Literal["yaml", "kwarg", "write", "tcp-switch"]
CAP_INPUTS = ("max_env_worker", "num_repeat", "train_batch_size")


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
class BaseYaml:
    """The base YAML a run composes, or why it cannot be read."""

    state: Literal["defaults", "file", "missing", "unresolved", "refused"]
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

    @property
    def is_users(self) -> bool:
        return self.state == "file"

    @property
    def values_unknown(self) -> bool:
        """Every value this base would set is unknown: it is missing, its path is unknown, or AgentJet refuses
        to compose it."""
        return self.state in ("missing", "unresolved", "refused")

    @property
    def name(self) -> str:
        return self.path.name if self.path is not None else "AgentJet's defaults"


@dataclass
class Run:
    """One construction (or the YAML alone) replayed the way AgentJetJob does it."""

    construction: Construction | None
    base: BaseYaml
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


class LintContext:
    """What every rule reads: AgentJet (the adapter), the scan, the runs; where skips are recorded."""

    def __init__(self, aj: AgentJet, scan: ScriptScan | None, cwd: Path | None) -> None:
        self.aj = aj
        self.scan = scan
        self.cwd = cwd
        self.script_file = str(scan.path) if scan is not None else None
        self.runs: list[Run] = []
        self.notes: list[str] = []
        self.skipped: list[tuple[str, str]] = []
        self._yaml_lines: dict[str, dict[str, int]] = {}

    # -- bookkeeping

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def skip(self, rule: str, reason: str) -> None:
        if (rule, reason) not in self.skipped:
            self.skipped.append((rule, reason))

    # -- values

    def needs(self, rule: str, run: Run, *names: str) -> dict[str, Any] | None:
        """The named effective values (positive ints), or None after recording why ``rule`` cannot run."""
        got: dict[str, Any] = {}
        problems: list[str] = []
        unknown: dict[str, list[str]] = {}  # reason -> names
        for name in names:
            value = run.value(name)
            if isinstance(value, Unknown):
                unknown.setdefault(value.reason, []).append(name)
            elif value is MISSING or value is None:
                problems.append(f"{name} is not set")
            elif not (is_int(value) and value > 0):
                problems.append(f"{name} is {show(value)} ({a_type(value)}), not a positive int"
                                + self._assumption_hint(run, name))
            else:
                got[name] = value
        if unknown:
            problems.insert(0, describe_unknown([(n, Unknown(r)) for r, group in unknown.items() for n in group]))
        if problems:
            self.skip(rule, "; ".join(problems))
            return None
        return got

    def _assumption_hint(self, run: Run, name: str) -> str:
        setter = self.effective_setter(run, KEYS.get(name, name))
        if setter is not None and any(a.kind == "env" for a in setter.assumes):
            return " (an environment default is a str at run time unless the script converts it)"
        return ""

    def episode_cap(self, run: Run, rule: str | None = None, *, with_batch: bool = True) -> CapFacts | None:
        """The engine's episode cap for the effective values; when it cannot be computed, None (and, for
        ``rule``, the reason is recorded as a skip)."""
        names = CAP_INPUTS if with_batch else CAP_INPUTS[:2]
        if rule is not None:
            v = self.needs(rule, run, *names)
        else:
            v = {n: run.value(n) for n in names}
            if not all(is_int(x) and x > 0 for x in v.values()):
                return None
        if v is None:
            return None
        tracker = run.value("max_inference_tracker_threads")
        facts = self.aj.episode_cap(v["max_env_worker"], v["num_repeat"], v.get("train_batch_size"),
                                    tracker if is_int(tracker) and tracker > 0 else None)
        if isinstance(facts, str):
            if rule is not None:
                self.skip(rule, facts)
            return None
        return facts

    # -- who sets what, and where

    def effective_setter(self, run: Run, key: str) -> Setter | None:
        setters = run.setters.get(key)
        if setters:
            return setters[-1]
        for write in reversed(run.applied_writes):  # a whole-section write above the key
            if key.startswith(write.key + ".") and self.script_file:
                return Setter("write", self.script_file, write.line, None, write.value.assumes, text=write.value.text)
        return None

    def locate(self, run: Run, *names: str) -> list[Location]:
        """Where each named value is set, effective setters first (in the order given), then overridden ones.
        A value nobody sets is located at AgentJet's default (its file when an install is used)."""
        first: list[Location] = []
        later: list[Location] = []
        for name in names:
            key = KEYS.get(name, name)
            setter = self.effective_setter(run, key)
            if setter is None:
                if run.base.values_unknown:
                    first.append(Location(file=str(run.base.path) if run.base.path else None, line=None, key=key,
                                          source="yaml"))
                else:
                    file = self.aj.default_file(key)
                    line = self.yaml_lines(file).get(key) if file else None
                    first.append(Location(file=file, line=line, key=key, source="default"))
                continue
            first.append(Location(file=setter.file, line=setter.line, key=key, source=setter.kind))
            for older in reversed(run.setters.get(key, [])[:-1]):
                if older.kind != "tcp-switch":
                    later.append(Location(file=older.file, line=older.line, key=key, source=older.kind))
        return _unique(first + later)

    def construction_location(self, run: Run) -> list[Location]:
        if run.construction is not None:
            return [Location(file=self.script_file, line=run.construction.line)]
        return [Location(file=str(run.base.path) if run.base.path else None, line=None)]

    def yaml_location(self, base: BaseYaml, key: str) -> Location:
        layer = base.origin.get(key)
        file = (base.composed.user_layers.get(layer or "") if base.composed else None) or (
            str(base.path) if base.path else None)
        return Location(file=file, line=self.yaml_lines(file).get(key) if file else None, key=key, source="yaml")

    def yaml_lines(self, file: str | None) -> dict[str, int]:
        if not file:
            return {}
        if file not in self._yaml_lines:
            self._yaml_lines[file] = _key_lines(Path(file))
        return self._yaml_lines[file]

    def where_to_set(self, run: Run, key: str, value: Any) -> str:
        """How to change ``key`` to ``value`` in the place that holds it now, else in the job's one place."""
        kwarg = self.aj.kwarg_for(key)
        setter = self.effective_setter(run, key)
        text = show(value)
        if setter is not None and setter.kind == "kwarg":
            if setter.text == show(setter.value):
                return f"change the kwarg {setter.name}={setter.text} at line {setter.line} to {setter.name}={text}"
            return (f"make the kwarg {setter.name}={setter.text} at line {setter.line} (now {show(setter.value)}) "
                    f"give {text}")
        if setter is not None and setter.kind == "write":
            return f"change the write at line {setter.line} to set {key} = {text}"
        if setter is not None and setter.kind == "yaml":
            where = f"{Path(setter.file).name}:{setter.line}" if setter.file and setter.line else run.base.name
            return f"set {key.rsplit('.', 1)[-1]}: {yaml_scalar(value)} at {where}"
        if run.base.is_users and self.yaml_first(run):
            return f"add {key}: {yaml_scalar(value)} to {run.base.name}"
        if kwarg is not None and run.construction is not None:
            return f"pass {kwarg}={text} to AgentJetJob (a kwarg of {self.aj.label})"
        if run.construction is not None:
            return f"write job.config.{key} = {text} right after AgentJetJob(...)"
        return f"set {key}: {yaml_scalar(value)} in {run.base.name}"

    def yaml_first(self, run: Run) -> bool:
        """The user's YAML holds more of this job than the script's kwargs and writes do."""
        c = run.construction
        if c is None:
            return True
        script_keys = {k for k in c.kwargs if k not in self.aj.control_kwargs} | {
            w.key for w in run.applied_writes if w.kind not in ("method", "mirror")}
        return len(run.base.explicit) > len(script_keys)


def cause_values(cause: Cause) -> dict[str, Any]:
    """The values every finding made from an AgentJet refusal cause carries, first in its ``values``."""
    return {"cause": cause.id, "exception": cause.exception, "exception_message": cause.exception_message,
            "verified": cause.verified}


def _unique(locs: list[Location]) -> list[Location]:
    seen: set[tuple[Any, ...]] = set()
    out: list[Location] = []
    for loc in locs:
        ident = (loc.file, loc.line, loc.key)
        if ident not in seen:
            seen.add(ident)
            out.append(loc)
    return out


def yaml_scalar(value: Any) -> str:
    try:
        return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    except yaml.YAMLError:
        return show(value)


def _key_lines(path: Path) -> dict[str, int]:
    """Dotted key -> 1-based line of its key in a YAML file (the file was already loaded safely once)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_YAML_BYTES:
            return {}
        loader = PyYAMLLoader(path.read_text(encoding="utf-8"))  # bounded like every other read of a YAML
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return {}
    out: dict[str, int] = {}
    budget = 200_000
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(node, "")]
    while stack and budget > 0:
        n, prefix = stack.pop()
        if not isinstance(n, yaml.MappingNode) or id(n) in seen:
            continue
        seen.add(id(n))
        for k, v in n.value:
            budget -= 1
            if isinstance(k, yaml.ScalarNode):
                dotted = f"{prefix}{k.value}"
                out.setdefault(dotted, k.start_mark.line + 1)
                stack.append((v, dotted + "."))
    return out
