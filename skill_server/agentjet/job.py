"""``AgentJetJob(**kwargs)`` then ``job.config.<key> = value`` writes then ``dump_job_as_yaml()``, on plain data.

The steps and their order follow AgentJet (see the release's fact sheet) and are written down once, in
:class:`ConstructionSteps`: the call itself refuses unknown kwargs; then the base must exist and the four
lengths go together; then Hydra composes the base (:mod:`.compose`); the base's ``defaults`` and then
``hydra`` blocks are copied back; the result is laid over the config dataclasses (``Config()``: fields
first in declaration order, then keys only YAML has); ``ensure_new_experiment`` stamps the name; every row
of the overrides table is read and each non-None kwarg written; then AgentJetJob's checks run, the tcp
switch and the trinity check. Writes come after construction and are not checked. ``build_config`` runs
the steps on plain data (:func:`construct`); the linter's replay (``skill_server.analysis.replay``) runs the
same steps on values that may be unknown. The dump is ``yaml.safe_dump(config.to_dict(), sort_keys=False)``.

A dataclass instance is an :class:`Obj` (a dict whose order is the instance's ``__dict__`` order);
attribute reads and writes behave as Python's ``getattr``/``setattr`` do on the real objects.
"""

from __future__ import annotations

import datetime
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from skill_server.agentjet.compose import Base, Composition, clone, compose
from skill_server.agentjet.keys import KEYS
from skill_server.agentjet.refusals import (
    CHECK_NAMES,
    LENGTH_KWARGS,
    AgentJetRefusal,
    Cause,
    base_block_causes,
    length_group_causes,
    switches_to_tcp,
    unknown_kwarg_causes,
    value_causes,
)
from skill_server.agentjet.release import DATACLASS_MARK, OverridesTable, Release
from skill_server.core.errors import ToolInputError
from skill_server.core.trees import get_path, has_path

NAME_SENTINEL = "read_yaml_name"
INTERCHANGE_KEY = KEYS["interchange_method"]
#: The config key of each value AgentJetJob checks (named as ``refusals.CHECK_NAMES``), for a table that lacks
#: the kwarg of that name.
CHECK_KEYS = {name: KEYS["enable_swarm_mode" if name == "swarm_mode" else name] for name in CHECK_NAMES}


class Obj(dict):  # type: ignore[type-arg]  # holds any YAML value, as OmegaConf's DictConfig does
    """A dataclass instance: its attributes in ``__dict__`` order, ``cls`` its class name."""

    __slots__ = ("cls",)

    def __init__(self, cls: str) -> None:
        super().__init__()
        self.cls = cls


def instantiate(node: dict[str, Any]) -> Obj:
    """``Config()``: every field with its default, nested dataclasses instantiated."""
    obj = Obj(node[DATACLASS_MARK])
    for key, value in node.items():
        if key == DATACLASS_MARK:
            continue
        obj[key] = instantiate(value) if isinstance(value, dict) and DATACLASS_MARK in value else clone(value)
    return obj


class _AttributeProblem(Exception):
    def __init__(self, exception: str, message: str, owner: str) -> None:
        self.exception, self.message, self.owner = exception, message, owner


def _type_name(value: Any) -> str:
    return value.cls if isinstance(value, Obj) else type(value).__name__


def _no_attribute(node: Any, name: str) -> _AttributeProblem:
    owner = _type_name(node)
    return _AttributeProblem("AttributeError", f"'{owner}' object has no attribute '{name}'", owner)


def get_attr(node: Any, name: str) -> Any:
    if isinstance(node, Obj):
        if name in node:
            return node[name]
    elif hasattr(type(node), name):
        raise ToolInputError(f"the config walk reaches a {type(node).__name__} attribute {name!r}, which this tool "
                             "does not emulate")
    raise _no_attribute(node, name)


def set_attr(node: Any, name: str, value: Any) -> None:
    if isinstance(node, Obj):
        node[name] = value
        return
    raise _no_attribute(node, name)


def overlay(schema: dict[str, Any], composed: dict[str, Any]) -> Obj:
    """``Config.update_from_dict_recursive(Config(), composed)``: a mapping under a dataclass attribute is
    applied into it; anything else (new keys, plain-dict fields, non-mappings) is set as is."""
    config = instantiate(schema)
    stack: list[tuple[Obj, dict[str, Any], str]] = [(config, composed, "")]
    while stack:
        obj, data, path = stack.pop()
        for key, value in data.items():
            if not isinstance(key, str):
                raise _AttributeProblem("TypeError", f"attribute name must be string, not '{type(key).__name__}'",
                                        f"{path}{key}")
            current = obj.get(key)
            if isinstance(current, Obj) and isinstance(value, dict):
                stack.append((current, value, f"{path}{key}."))
            else:
                obj[key] = value
    return config


def to_plain(node: Any) -> Any:
    """``config.to_dict()``: dataclass instances become plain mappings in attribute order."""
    if isinstance(node, Obj):
        return {k: to_plain(v) if isinstance(v, Obj) else v for k, v in node.items()}
    return node


def dump(config: Obj) -> str:
    """``yaml.safe_dump(config.to_dict(), sort_keys=False)``, byte for byte.

    libyaml's emitter (when PyYAML has it) is used only for documents whose strings are all printable
    ASCII, where its output equals the pure-Python emitter's (tested); otherwise the Python one runs."""
    document = to_plain(config)
    dumper = getattr(yaml, "CSafeDumper", None)
    if dumper is None or not _printable_ascii(document):
        dumper = yaml.SafeDumper
    return yaml.dump(document, Dumper=dumper, sort_keys=False)


def _printable_ascii(node: Any) -> bool:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                # the two emitters differ on an empty key ("? ''" against "''")
                if isinstance(key, str) and not (key and key.isascii() and key.isprintable()):
                    return False
                stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and not (item.isascii() and item.isprintable()):
            return False
    return True


# --- one construction ---------------------------------------------------------------------------------


@dataclass
class Construction:
    """What ``AgentJetJob(...)`` plus the writes produced, with where each value came from."""

    release: Release
    composition: Composition
    config: Obj  # after kwargs, checks and writes
    before_kwargs: Obj  # the composed base laid over the dataclasses (what kwargs=None would keep)
    sources: dict[str, str] = field(default_factory=dict)  # dotted key -> "kwarg" | "set" | "agentjet"
    notes: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class ConstructionSteps(ABC):
    """``AgentJetJob(**kwargs)`` and the writes after it, as one ordered list of steps: :meth:`run` is the one
    place AgentJet's order is written down. Each executor says what a step does on its kind of values:
    :class:`PlainConstruction` on plain data (the first refusal raises), the linter's replay on values that
    may be unknown (every refusal is recorded, a check that reads an unknown value is skipped)."""

    def run(self) -> None:
        self.check_call()
        self.open_base()
        self.check_lengths()
        self.compose_base()
        self.stamp_name()
        self.write_kwargs()
        self.check_values()
        self.switch_to_tcp()
        self.write_after()

    @abstractmethod
    def check_call(self) -> None:
        """The call itself: Python refuses a kwarg ``AgentJetJob.__init__`` does not take."""

    @abstractmethod
    def open_base(self) -> None:
        """``base_yaml_config`` is opened: a missing file is refused (no base: the release's swarm default)."""

    @abstractmethod
    def check_lengths(self) -> None:
        """The four length kwargs go together: all of them or none."""

    @abstractmethod
    def compose_base(self) -> None:
        """Hydra composes the base; its ``defaults`` and ``hydra`` blocks are copied back (refused when
        missing); the result is laid over ``Config()``."""

    @abstractmethod
    def stamp_name(self) -> None:
        """``ensure_new_experiment``: the experiment name gets the launch time."""

    @abstractmethod
    def write_kwargs(self) -> None:
        """The overrides walk: every row's key is read, each non-None kwarg written there, in table order."""

    @abstractmethod
    def check_values(self) -> None:
        """AgentJetJob's checks on the values now in the config (lengths, LoRA, nnodes, backbone)."""

    @abstractmethod
    def switch_to_tcp(self) -> None:
        """``nnodes > 1`` in swarm mode: the interchange becomes tcp."""

    @abstractmethod
    def write_after(self) -> None:
        """``job.config.<key> = value`` after construction (AgentJet checks none of them)."""


class PlainConstruction(ConstructionSteps):
    """The steps on plain data: what ``build_config`` reproduces, refusing exactly where AgentJet raises."""

    base: Base
    built: Construction

    def __init__(self, release: Release, base: Base | Callable[[], Base], kwargs: dict[str, Any],
                 writes: dict[str, Any], *, base_field: str, cwd: Path | None, now: datetime.datetime | None) -> None:
        self.release = release
        self.label = release.label
        self.table = release.overrides
        self._opener = base
        self.kwargs = dict(kwargs)
        self.writes = writes
        self.base_field = base_field
        self.cwd = cwd
        self.now = now
        self.values: dict[str, Any] = {}  # the checked values, by check name

    def check_call(self) -> None:
        table = self.table
        for cause in unknown_kwarg_causes(self.kwargs, table.constructor_kwargs, table.takes_any_kwarg,
                                          agentjet=self.label, closest=table.closest):
            raise AgentJetRefusal(cause)

    def open_base(self) -> None:
        self.base = self._opener if isinstance(self._opener, Base) else self._opener()

    def check_lengths(self) -> None:
        for cause in length_group_causes(self.kwargs, agentjet=self.label):
            raise AgentJetRefusal(cause)

    def compose_base(self) -> None:
        release, base, base_field = self.release, self.base, self.base_field
        composition = compose(release, base, field=base_field, cwd=self.cwd)
        for cause in base_block_causes(base.raw, base.display, field=base_field, agentjet=self.label):
            raise AgentJetRefusal(cause)
        config = overlay_composed(release, base, composition, base_field=base_field)
        self.built = Construction(release, composition, config, _snapshot(config))
        self.kwargs.pop("base_yaml_config", None)

    def stamp_name(self) -> None:
        kwargs = self.kwargs
        if not kwargs.get("ensure_new_experiment"):
            return
        stamp = (self.now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
        name = kwargs.get("experiment_name")
        if name is None:
            name = _read(self.built.config, KEYS["experiment_name"], "ensure_new_experiment", self.base_field,
                         self.label)
            if name != NAME_SENTINEL:
                kwargs["experiment_name"] = f"{name}_{stamp}"
        else:
            kwargs["experiment_name"] = f"{name}_{stamp}"

    def write_kwargs(self) -> None:
        built = self.built
        for kwarg, key in walk_overrides(built.config, self.table, self.kwargs, base_field=self.base_field,
                                         label=self.label):
            built.sources[key] = "kwarg"
            _type_warning(kwarg, self.kwargs[kwarg], get_path(built.before_kwargs, key, None), built.warnings)

    def check_values(self) -> None:
        where: dict[str, str] = {}
        keys = check_keys(self.table)
        for name, key in keys.items():
            self.values[name] = get_path(self.built.config, key, None)
            given = self.kwargs.get(name) is not None
            where[name] = f"kwargs.{name}" if given or self.base.kind == "default" else self.base_field
        for cause in value_causes(self.values, where, agentjet=self.label, keys=keys):
            raise AgentJetRefusal(cause)

    def switch_to_tcp(self) -> None:
        if not switches_to_tcp(self.values):
            return
        built, label = self.built, self.label
        server = _read(built.config, "ajet.interchange_server", "nnodes", self.base_field, label)
        try:
            set_attr(server, "interchange_method", "tcp")
        except _AttributeProblem as problem:
            raise AgentJetRefusal(Cause("missing-key", "ajet.interchange_server is not a section, so the tcp switch "
                                        "for nnodes > 1 cannot be written", problem.exception, problem.message,
                                        field=self.base_field, key=INTERCHANGE_KEY, agentjet=label)) from None
        built.sources[INTERCHANGE_KEY] = "agentjet"
        built.notes[INTERCHANGE_KEY] = f"set to tcp by AgentJetJob ({label}): nnodes > 1 in swarm mode"

    def write_after(self) -> None:
        for key, value in self.writes.items():
            _write(self.built, key, value)


def construct(release: Release, base: Base | Callable[[], Base], kwargs: dict[str, Any], writes: dict[str, Any], *,
              base_field: str, cwd: Path | None = None, now: datetime.datetime | None = None) -> Construction:
    """Run AgentJetJob on plain data; the first thing AgentJet would refuse raises :class:`AgentJetRefusal`.

    ``base`` is the base, or how to open it: called where AgentJetJob opens ``base_yaml_config``, after
    the call's own check (so an unknown kwarg is refused before a missing base)."""
    steps = PlainConstruction(release, base, kwargs, writes, base_field=base_field, cwd=cwd, now=now)
    steps.run()
    return steps.built


def check_keys(table: OverridesTable) -> dict[str, str]:
    """The config key of each value AgentJetJob checks: the table's row, else the key c68c154f uses."""
    return {name: table.key_for(name) or default for name, default in CHECK_KEYS.items()}


def overlay_composed(release: Release, base: Base, composition: Composition, *, base_field: str,
                     tail: bool = True) -> Obj:
    """AgentJetJob's steps between composition and the overrides: the base's own ``defaults`` and then
    ``hydra`` blocks copied back (``tail``; a linter, which wants config values only, leaves them out), then
    the result laid over ``Config()``. Check :func:`base_block_causes` first: AgentJet raises before this
    when a block is missing. A non-string key under a dataclass section is AgentJet's ``TypeError``."""
    composed = clone(composition.composed)
    for block in ("defaults", "hydra"):
        composed.pop(block, None)
        if tail and block in base.raw:
            composed[block] = clone(base.raw[block])
    try:
        return overlay(release.schema.tree, composed)
    except _AttributeProblem as problem:
        raise AgentJetRefusal(Cause(
            "non-string-key", f"the composed config has the non-string key {problem.owner} under a dataclass section",
            problem.exception, problem.message, field=base_field, key=problem.owner, agentjet=release.label)) from None


def walk_overrides(config: Obj, table: OverridesTable, kwargs: dict[str, Any], *, base_field: str,
                   label: str) -> list[tuple[str, str]]:
    """AgentJetJob's walk of the overrides table, in table order: every row's key is read (whatever its
    kwarg) and each non-None kwarg written there. Returns the (kwarg, key) rows written. A key the config
    lacks stops the walk with AgentJet's ``AttributeError`` (cause ``missing-key``); with no kwargs the walk
    only reads, which is how a linter checks a base."""
    written: list[tuple[str, str]] = []
    for kwarg, key in table.rows:
        parent, leaf = _parent(config, key, kwarg, base_field, label)
        _read_leaf(parent, leaf, key, kwarg, base_field, label)
        value = kwargs.get(kwarg)
        if value is not None:
            parent[leaf] = clone(value)
            written.append((kwarg, key))
    return written


def _snapshot(config: Obj) -> Obj:
    """A copy of the instance tree (kwargs and writes change the live one)."""
    copy = Obj(config.cls)
    for key, value in config.items():
        copy[key] = _snapshot(value) if isinstance(value, Obj) else clone(value)
    return copy


def _attribute_cause(problem: _AttributeProblem, key: str, reached: str, kwarg: str, field_name: str,
                     label: str) -> Cause:
    owner = problem.owner
    if owner in ("list", "str", "int", "float", "bool", "NoneType", "dict"):
        shown = "null" if owner == "NoneType" else f"an {owner}" if owner[0] in "aeiou" else f"a {owner}"
        summary = (f"AgentJetJob reads {key} for kwarg {kwarg} (even when it is None), but {reached} is {shown} in "
                   "the composed config, not a section")
    else:
        summary = (f"AgentJetJob reads {key} for kwarg {kwarg} (even when it is None), and the composed config has "
                   f"no {reached}; the layer that provides it (normally ajet_default) is missing from the base's "
                   "defaults list")
    return Cause("missing-key", summary, problem.exception, problem.message, field=field_name, key=key,
                 agentjet=label)


def _parent(config: Obj, key: str, kwarg: str, field_name: str, label: str) -> tuple[Any, str]:
    parts = key.split(".")
    node: Any = config
    for depth, part in enumerate(parts[:-1]):
        try:
            node = get_attr(node, part)
        except _AttributeProblem as problem:
            # a dataclass without the attribute: the path up to it is missing; a plain value: it is no section
            reached = ".".join(parts[:depth + 1] if isinstance(node, Obj) else parts[:depth])
            raise AgentJetRefusal(_attribute_cause(problem, key, reached or part, kwarg, field_name, label)) from None
    return node, parts[-1]


def _read_leaf(parent: Any, leaf: str, key: str, kwarg: str, field_name: str, label: str) -> Any:
    try:
        return get_attr(parent, leaf)
    except _AttributeProblem as problem:
        reached = key if isinstance(parent, Obj) else key.rsplit(".", 1)[0]
        raise AgentJetRefusal(_attribute_cause(problem, key, reached, kwarg, field_name, label)) from None


def _read(config: Obj, key: str, why: str, field_name: str, label: str) -> Any:
    parent, leaf = _parent(config, key, why, field_name, label)
    return _read_leaf(parent, leaf, key, why, field_name, label)


def _type_warning(kwarg: str, value: Any, base_value: Any, warnings: list[str]) -> None:
    if base_value is None or isinstance(base_value, (dict, list)):
        return
    numbers = (int, float)
    same = (isinstance(value, bool) == isinstance(base_value, bool)) and (
        type(value) is type(base_value) or (isinstance(value, numbers) and isinstance(base_value, numbers)))
    if not same:
        warnings.append(f"kwarg {kwarg}={value!r} is a {type(value).__name__} but the base value {base_value!r} is a "
                        f"{type(base_value).__name__}; AgentJetJob does not convert it and the dump keeps it as given")


def _write(built: Construction, key: str, value: Any) -> None:
    """``job.config.<key> = value`` after construction: attributes on dataclass sections, items in plain
    dicts; a new key goes to the end of its mapping, a mapping written over a section replaces it."""
    parts = key.split(".")
    if not key or any(not p for p in parts):
        raise ToolInputError("write keys are dotted paths such as ajet.rollout.temperature", field=f"set.{key}")
    section = _write_target(built, key, parts)
    _warn_before_write(built, key)
    section[parts[-1]] = clone(value)
    for stale in [k for k in built.sources if k.startswith(key + ".")]:
        del built.sources[stale]
    built.sources[key] = "set"
    _warn_after_write(built, key)


def _write_target(built: Construction, key: str, parts: list[str]) -> dict[str, Any]:
    """The mapping the write lands in, reached as Python would (AttributeError, KeyError: refused)."""
    field_name = f"set.{key}"
    label = built.release.label
    node: Any = built.config
    for depth, part in enumerate(parts[:-1]):
        reached = ".".join(parts[:depth + 1])
        if isinstance(node, Obj) and part not in node:
            raise AgentJetRefusal(Cause(
                "write-below-missing-section", f"{reached} does not exist, so job.config.{key} = ... fails"
                + _closest_hint(reached, built.config), "AttributeError",
                f"'{node.cls}' object has no attribute '{part}'", field=field_name, key=reached, agentjet=label))
        if isinstance(node, dict) and not isinstance(node, Obj) and part not in node:
            raise AgentJetRefusal(Cause(
                "write-below-missing-section", f"{reached} does not exist in the plain-dict section "
                f"{'.'.join(parts[:depth])}, so writing {key} fails" + _closest_hint(reached, built.config),
                "KeyError", repr(part), field=field_name, key=reached, agentjet=label, verified=False))
        if not isinstance(node, dict):
            raise AgentJetRefusal(Cause(
                "write-through-value", f"{'.'.join(parts[:depth])} holds a {type(node).__name__}, not a section, so "
                f"{key} cannot be written", "AttributeError", f"'{type(node).__name__}' object has no attribute "
                f"'{part}'", field=field_name, key=reached, agentjet=label, verified=False))
        node = node[part]
    if not isinstance(node, dict):
        raise AgentJetRefusal(Cause(
            "write-through-value", f"{'.'.join(parts[:-1])} holds a {type(node).__name__}, not a section, so {key} "
            "cannot be written", "AttributeError", f"'{type(node).__name__}' object has no attribute '{parts[-1]}'",
            field=field_name, key=key, agentjet=label, verified=False))
    return node


def _warn_before_write(built: Construction, key: str) -> None:
    """A key nothing reads, or one that has a kwarg (writes skip AgentJetJob's checks)."""
    label = built.release.label
    if not has_path(built.before_kwargs, key):
        built.warnings.append(f"write {key} creates a key that {label}'s defaults and schema do not have; nothing "
                              "may read it" + _closest_hint(key, built.before_kwargs))
    kwarg = built.release.overrides.kwarg_for(key)
    if kwarg:
        built.warnings.append(f"write {key} has a kwarg: pass {kwarg}=... to AgentJetJob instead of writing it "
                              "after construction (writes skip AgentJetJob's checks)")


def _warn_after_write(built: Construction, key: str) -> None:
    """What the write undoes of AgentJetJob's work: the tcp switch, the length check (which ran before it)."""
    if key == INTERCHANGE_KEY or key.startswith(INTERCHANGE_KEY.rsplit(".", 1)[0]):
        nnodes = get_path(built.config, KEYS["nnodes"], None)
        method = get_path(built.config, INTERCHANGE_KEY, None)
        if isinstance(nnodes, int) and not isinstance(nnodes, bool) and nnodes > 1 and method != "tcp":
            built.warnings.append(f"write {key} undoes the tcp switch while nnodes={nnodes}: multi-node runs need tcp")
    if key in {CHECK_KEYS[k] for k in LENGTH_KWARGS}:
        p, r, m = (get_path(built.config, CHECK_KEYS[k], None) for k in LENGTH_KWARGS[:3])
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (p, r, m)) and p + r > m:
            built.warnings.append(f"after the writes max_prompt_length + max_response_length ({p + r}) exceeds "
                                  f"max_model_len ({m}); AgentJetJob's check ran before the writes")


def _closest_hint(key: str, tree: Any) -> str:
    import difflib

    parent, _, leaf = key.rpartition(".")
    container = get_path(tree, parent, None) if parent else tree
    siblings = [str(k) for k in container] if isinstance(container, dict) else []
    close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.7)
    if close:
        return f" (closest known key: {parent + '.' if parent else ''}{close[0]})"
    return " (closest known key: none)"


def refusal_for(release: Release, base: Base, kwargs: dict[str, Any], writes: dict[str, Any] | None = None, *,
                base_field: str = "base_yaml") -> Cause | None:
    """The first cause AgentJet would stop on for these inputs, or None (for linters: findings, not errors)."""
    try:
        construct(release, base, kwargs, writes or {}, base_field=base_field)
    except AgentJetRefusal as refusal:
        return refusal.cause
    return None
