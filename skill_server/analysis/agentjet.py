"""The analysis's one door to AgentJet knowledge (the adapter).

Everything the analysis (and the linter on top of it) knows about AgentJet goes through ``AgentJet``:
which release it describes (``ref``, ``label``), the kwarg -> key table, the config keys (defaults, schema
sections, dict sections), composing a base YAML exactly as ``build_config`` does, the swarm thread rule
(through the episode cap) and what ``AgentJetJob`` refuses (as the structured causes of
``agentjet.refusals``). Rules never import ``skill_server.agentjet`` themselves. Built on
``skill_server.agentjet.{release, compose, job, refusals, cap}``: every AgentJet rule is implemented there
once, for every tool.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from skill_server.agentjet.compose import Base, compose, default_base, load_base
from skill_server.agentjet.identity import AgentJetRef
from skill_server.agentjet.job import ConstructionSteps, check_keys, overlay_composed, to_plain, walk_overrides
from skill_server.agentjet.keys import KEYS  # the rules' names for config keys (re-exported)
from skill_server.agentjet.refusals import (
    CAUSE_IDS,
    LENGTH_KWARGS,
    VALUE_CHECK_IDS,
    AgentJetRefusal,
    Cause,
    base_absent_cause,
    base_block_causes,
    each_value_cause,
    length_group_causes,
    switches_to_tcp,
    unknown_kwarg_causes,
)
from skill_server.agentjet.release import Release, bundled_releases, select_agentjet
from skill_server.analysis.values import MISSING, Unknown, describe_unknown, lookup
from skill_server.core.errors import ToolInputError
from skill_server.core.models import MAX_JSON_INT
from skill_server.core.trees import flatten, sections

SWARM_DEFAULT_LAYER = "ajet_swarm_default"
CONFIG_DIR = "ajet/default_config"  # an install's own layers live here, and only here
#: The refusal causes check_config can report: all of AgentJet's but those of build_config's dotted ``set``
#: writes (a script's own writes are checked by the unknown-key rule, which knows attribute from item access).
LINT_CAUSES = CAUSE_IDS - {"write-below-missing-section", "write-through-value"}

__all__ = ["KEYS", "LINT_CAUSES", "AgentJet", "CapFacts", "Cause", "ComposedBase", "ConstructionSteps", "RefusedBase",
           "SkippedCheck"]


@dataclass(frozen=True)
class SkippedCheck:
    cause: str  # the refusal cause id that could not be checked
    reason: str


@dataclass
class ComposedBase:
    """A user's base YAML composed like AgentJetJob does (and ``build_config``), with where each value came from."""

    tree: dict[str, Any]  # laid over Config(): schema fields included, without the defaults/hydra blocks
    origin: dict[str, str]  # dotted leaf -> layer name (absent: a dataclass default)
    layer_names: list[str]
    user_layers: dict[str, str]  # layer name -> file, for layers that are the user's files
    composes_swarm: bool  # AgentJet's swarm default is one of the layers (only as the base itself)
    causes: list[Cause]  # what AgentJet refuses about it after composing it (no defaults block, a missing key)
    notes: list[str]
    classic: str | None = None  # why it is a classic-mode config (``ajet --conf``), not an AgentJetJob base


@dataclass
class RefusedBase:
    """A user's base YAML that AgentJet refuses to compose at all: no value of it is known."""

    cause: Cause
    notes: list[str]


@dataclass(frozen=True)
class CapFacts:
    episode_cap: int
    thread_rule: str
    worker_loops: int
    queued_loops: int
    idle_threads: int


@dataclass
class _Defaults:
    """The release's default base composed and laid over ``Config()``: what a job without a base YAML holds."""

    tree: dict[str, Any]
    origin: dict[str, str]
    layer_files: dict[str, str]  # layer name -> where it was read (a path, or bundled:<rel>)
    flat: dict[str, Any] = field(init=False)
    sections: set[str] = field(init=False)
    free_form: set[str] = field(init=False)

    def __post_init__(self) -> None:
        self.flat = flatten(self.tree)
        self.sections = sections(self.tree)
        self.free_form = {k for k, v in self.flat.items() if v == {}}


TRINITY_LAYER = "trinity_default"
TRINITY_SEARCH = "file://ajet/default_config/trinity"


def classic_reason(raw: dict[str, Any]) -> str | None:
    """Why a YAML read on its own is a classic-mode config (``python -m ajet.launcher --conf x.yaml``: the trainer
    runs the workflow itself) rather than an AgentJetJob base or a swarm server's config; None when it is not.

    The rule: the YAML itself turns swarm mode off (``ajet.enable_swarm_mode: false``), or it names a
    workflow for the trainer to run (``ajet.rollout.user_workflow``) without turning swarm mode on. A swarm
    engine never runs a workflow (its clients do), and AgentJet's swarm default leaves it null."""
    ajet = raw.get("ajet")
    if not isinstance(ajet, dict):
        return None
    swarm = ajet.get("enable_swarm_mode")
    if swarm is False:
        return "it sets ajet.enable_swarm_mode: false"
    rollout = ajet.get("rollout")
    workflow = rollout.get("user_workflow") if isinstance(rollout, dict) else None
    if swarm is not True and isinstance(workflow, str) and workflow.strip():
        return (f"it names a workflow for the trainer to run (ajet.rollout.user_workflow: {workflow!r}) and does not "
                "turn swarm mode on")
    return None


def launcher_view(raw: dict[str, Any]) -> dict[str, Any]:
    """The YAML as the classic launcher composes it with its default backbone verl: the ``trinity_default``
    entry and trinity's search-path folder are left out (AgentJet's launcher drops them for verl)."""
    out = dict(raw)
    defaults = raw.get("defaults")
    if isinstance(defaults, list):
        out["defaults"] = [e for e in defaults if not (isinstance(e, str) and e.strip() == TRINITY_LAYER)]
    hydra = raw.get("hydra")
    if isinstance(hydra, dict) and isinstance(hydra.get("searchpath"), list):
        out["hydra"] = {**hydra, "searchpath": [e for e in hydra["searchpath"] if e != TRINITY_SEARCH]}
    return out


_DEFAULTS: dict[int, tuple[Release, _Defaults]] = {}  # bundled releases only: they never change
_DEFAULTS_LOCK = threading.Lock()


class AgentJet:
    """AgentJet as the linter sees it: one release (bundled, or an install read statically), for one call."""

    def __init__(self, release: Release, cwd: Path | None) -> None:
        self.release = release
        self.cwd = cwd
        self.ref: AgentJetRef = release.ref
        self.label = release.label  # e.g. "AgentJet 0.1.0 (c68c154f)": every version-dependent message names it
        self._table = release.overrides
        schema = release.schema
        self._dataclass_paths = schema.dataclass_paths()
        self._field_paths = schema.field_paths()
        self._d = self._defaults()
        self.defaults = self._d.tree
        self.default_origin = self._d.origin
        self.defaults_flat = self._d.flat
        self._candidates: list[str] | None = None

    @classmethod
    def select(cls, agentjet_version: str | None, agentjet_root: str | None, cwd: Path | None) -> AgentJet:
        """The AgentJet the tools' ``agentjet_version`` / ``agentjet_root`` arguments name (relative to ``cwd``)."""
        return cls(select_agentjet(agentjet_version, agentjet_root, cwd=cwd), cwd)

    def _defaults(self) -> _Defaults:
        if self.release.kind == "bundled":
            with _DEFAULTS_LOCK:
                hit = _DEFAULTS.get(id(self.release))
            if hit is not None and hit[0] is self.release:
                return hit[1]
        base = default_base(self.release)
        composition = compose(self.release, base, field="agentjet_root", cwd=self.cwd)
        config = overlay_composed(self.release, base, composition, base_field="agentjet_root", tail=False)
        found = _Defaults(to_plain(config), dict(composition.origin),
                          {layer.name: layer.origin for layer in composition.layers})
        if self.release.kind == "bundled":
            with _DEFAULTS_LOCK:
                _DEFAULTS[id(self.release)] = (self.release, found)
        return found

    # --- kwargs -----------------------------------------------------------------------------------

    @property
    def control_kwargs(self) -> tuple[str, ...]:
        return self._table.control_kwargs

    def kwarg_rows(self) -> tuple[tuple[str, str], ...]:
        """(kwarg, dotted key) in the order AgentJetJob walks them, only kwargs this version accepts."""
        return tuple((k, key) for k, key in self._table.rows if self._table.accepts(k))

    def key_for(self, kwarg: str) -> str | None:
        return self._table.key_for(kwarg) if self._table.accepts(kwarg) else None

    def kwarg_for(self, key: str) -> str | None:
        kwarg = self._table.kwarg_for(key)
        return kwarg if kwarg is not None and self._table.accepts(kwarg) else None

    def accepts(self, kwarg: str) -> bool:
        return self._table.accepts(kwarg)

    def valid_kwargs(self) -> list[str]:
        return sorted(self._table.constructor_kwargs)

    def kwarg_elsewhere(self, kwarg: str) -> tuple[str, str] | None:
        """(dotted key, label) of the newest bundled AgentJet that has ``kwarg``, when this one lacks it."""
        if self.accepts(kwarg):
            return None
        for other in bundled_releases():
            if other is self.release:
                continue
            table = other.overrides
            key = table.key_for(kwarg) if table.accepts(kwarg) else None
            if key is not None:
                return key, other.label
        return None

    # --- keys -------------------------------------------------------------------------------------

    def known(self, key: str) -> bool:
        d = self._d
        if key in d.flat or key in d.sections or key in self._field_paths:
            return True
        return any(key.startswith(prefix + ".") for prefix in d.free_form)

    def is_free_form(self, key: str) -> bool:
        return key in self._d.free_form

    def is_section(self, key: str) -> bool:
        return key in self._d.sections

    def is_dataclass_section(self, key: str) -> bool:
        return key == "" or key in self._dataclass_paths

    def is_dict_section(self, key: str) -> bool:
        return not self.is_dataclass_section(key) and isinstance(lookup(self.defaults, key), dict)

    def default(self, key: str) -> Any:
        return lookup(self.defaults, key)

    def write_expression(self, key: str) -> str:
        """How a script writes ``key`` after construction: attributes on dataclass sections, items in plain dicts."""
        parts = key.split(".")
        out = "job.config"
        for i, part in enumerate(parts):
            out += f".{part}" if self.is_dataclass_section(".".join(parts[:i])) else f"[{part!r}]"
        return out

    def same_leaf_keys(self, name: str) -> list[str]:
        """Known config keys whose last part is ``name`` (for a kwarg this version lacks)."""
        return sorted(k for k in self._d.flat if k.rsplit(".", 1)[-1] == name)

    def closest(self, key: str) -> str | None:
        """The known key a misspelt one most likely means, or None when nothing is close."""
        if self._candidates is None:
            self._candidates = sorted(set(self._d.flat) | self._d.sections)
        pool = [c for c in self._candidates if c.split(".")[0] == key.split(".")[0]] or self._candidates
        close = difflib.get_close_matches(key, pool, n=1, cutoff=0.75)
        if close:
            return close[0]
        parent, _, leaf = key.rpartition(".")  # same section, similar leaf
        siblings = [c.rpartition(".")[2] for c in pool if c.rpartition(".")[0] == parent]
        near = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
        return f"{parent}.{near[0]}" if near else None

    def default_file(self, key: str) -> str | None:
        """The file a default value is read from (an install's YAML), or None for bundled data and the schema."""
        layer = self._d.origin.get(key)
        origin = self._d.layer_files.get(layer or "")
        return origin if origin and not origin.startswith("bundled:") else None

    # --- a base YAML --------------------------------------------------------------------------------

    def compose_base(self, path: Path, *, field: str, alone: bool = False) -> ComposedBase | RefusedBase:
        """Compose a user's base YAML exactly as ``build_config`` does (relative search paths against ``cwd``).

        A ``RefusedBase`` when AgentJet refuses to compose it at all (a defaults list naming
        ajet_swarm_default, an entry not on the search path, ...); what it refuses after composing (no
        ``defaults`` block, a key the overrides walk reads but the config lacks) is in ``causes``. Files that
        cannot be read are input errors naming ``field``.

        ``alone``: the YAML is read without an AgentJetJob construction. If it is a classic-mode config
        (:func:`classic_reason`) it is composed as the classic launcher composes it (backbone verl: trinity's
        layer and search path left out), and AgentJetJob's own refusals of a base are not among its causes."""
        release = self.release
        base = load_base(path, field=field, release=release)
        classic = classic_reason(base.raw) if alone else None
        if classic is not None:
            base = replace(base, raw=launcher_view(base.raw))
        notes = self._searchpath_notes(base)
        try:
            composition = compose(release, base, field=field, cwd=self.cwd)
            config = overlay_composed(release, base, composition, base_field=field, tail=False)
        except AgentJetRefusal as refusal:
            return RefusedBase(refusal.cause, notes)
        causes = [] if classic is not None else base_block_causes(base.raw, base.display, field=field,
                                                                   agentjet=self.label)
        if not causes and classic is None:  # AgentJet stops at the first; the walk follows the copied-back blocks
            try:
                walk_overrides(config, self._table, {}, base_field=field, label=self.label)
            except AgentJetRefusal as refusal:
                causes.append(refusal.cause)
        user = {layer.name: layer.origin for layer in composition.layers if not self.is_agentjet_layer(layer.origin)}
        names = [layer.name for layer in composition.layers]
        return ComposedBase(to_plain(config), dict(composition.origin), names, user, SWARM_DEFAULT_LAYER in names,
                            causes, notes, classic)

    def is_agentjet_layer(self, origin: str) -> bool:
        """Whether a composed layer read from ``origin`` is one of AgentJet's own: bundled data, or a file of the
        install's ``ajet/default_config/``. Any other file is the user's, even inside the checkout (AgentJet's
        tutorials keep their bases in ``tutorial/<x>/``)."""
        if origin.startswith("bundled:"):
            return True
        own = self.release.root
        if own is None:
            return False
        try:
            return Path(origin).resolve().is_relative_to((own / CONFIG_DIR).resolve())
        except OSError:
            return False

    def absent_base_cause(self, path: Path) -> Cause:
        """What AgentJetJob raises for a base_yaml_config that does not exist."""
        return base_absent_cause(str(path), field="script", agentjet=self.label)

    def _searchpath_notes(self, base: Base) -> list[str]:
        """Without ``cwd``, a relative search-path folder AgentJet does not have depends on the launch directory."""
        if self.cwd is not None:
            return []
        hydra = base.raw.get("hydra")
        entries = hydra.get("searchpath") if isinstance(hydra, dict) else None
        out = []
        for entry in entries if isinstance(entries, list) else []:
            rest = entry[len("file://"):] if isinstance(entry, str) and entry.startswith("file://") else ""
            if rest and not Path(rest).expanduser().is_absolute() and not self.release.has_folder(rest):
                out.append(f"{base.display}: hydra.searchpath entry {entry!r} is relative to the directory the client "
                           f"is launched from; it was looked up from {Path.cwd()} (pass cwd= to say where it is "
                           "launched)")
        return out

    # --- the engine ---------------------------------------------------------------------------------

    def tcp_switch(self, swarm: Any, nnodes: Any) -> bool | Unknown:
        """Does AgentJetJob force the tcp interchange? (``nnodes > 1 and swarm_mode``, on known values.)"""
        if isinstance(nnodes, Unknown):
            if swarm is False:
                return False
            return Unknown(f"AgentJetJob switches it to tcp when nnodes > 1 in swarm mode; nnodes is unknown "
                           f"({nnodes.reason})")
        if nnodes is MISSING or swarm is MISSING:
            return False
        try:
            several = bool(nnodes > 1)
        except (TypeError, ValueError):
            return False  # AgentJet raises instead (cause nnodes-not-a-number)
        if not several:
            return False
        if isinstance(swarm, Unknown):
            return Unknown(f"AgentJetJob switches it to tcp when nnodes > 1 in swarm mode; enable_swarm_mode is "
                           f"unknown ({swarm.reason})")
        return switches_to_tcp({"nnodes": nnodes, "swarm_mode": swarm})

    def episode_cap(self, max_env_worker: int, num_repeat: int, train_batch_size: int | None,
                    tracker_threads: int | None) -> CapFacts | str:
        """The engine's concurrent-episode cap for these values under this release, or why it cannot be computed."""
        from skill_server.agentjet.cap import EpisodeCapInput, episode_cap_for

        for name, value in (("max_env_worker", max_env_worker), ("num_repeat", num_repeat),
                            ("train_batch_size", train_batch_size), ("max_inference_tracker_threads",
                                                                     tracker_threads)):
            if value is not None and not 1 <= value <= MAX_JSON_INT:
                return f"{name}={value} is outside 1..{MAX_JSON_INT}"
        try:
            r = episode_cap_for(EpisodeCapInput(
                max_env_worker=max_env_worker, num_repeat=num_repeat, train_batch_size=train_batch_size,
                max_inference_tracker_threads=tracker_threads, thread_rule="auto"), self.release)
        except (ToolInputError, ValidationError) as exc:
            return f"the episode cap cannot be computed: {str(exc).splitlines()[0]}"
        return CapFacts(r.episode_cap, r.thread_rule, r.worker_loops, r.queued_loops, r.idle_threads)

    def balanced_settings(self, max_env_worker: int, num_repeat: int,
                          train_batch_size: int | None) -> list[tuple[int, int | None]]:
        """(max_env_worker, train_batch_size or None to keep it) settings nearest these under which every pool
        thread runs a loop and none waits: what every cap fix suggests, so that the fixes agree."""
        from skill_server.agentjet.cap import balanced_settings

        return [(b.max_env_worker, b.train_batch_size)
                for b in balanced_settings(max_env_worker, num_repeat, train_batch_size)]

    # --- what AgentJetJob refuses (one method per construction step that refuses) -------------------------
    #
    # ``kwargs`` maps each given kwarg to its value (``Unknown`` when computed at run time); ``dynamic``
    # names the splats or positional arguments that may pass more (None: none). Unlike AgentJet, which stops
    # at the first cause, every cause is reported; a check that reads an unknown value is skipped, never
    # guessed. Causes about the base itself come from :meth:`compose_base` and :meth:`absent_base_cause`.

    def call_refusals(self, kwargs: dict[str, Any], dynamic: str | None) -> tuple[list[Cause], list[SkippedCheck]]:
        """The call itself: kwargs ``AgentJetJob`` of this release does not take."""
        table = self._table
        causes = unknown_kwarg_causes(kwargs, table.constructor_kwargs, table.takes_any_kwarg, agentjet=self.label,
                                      closest=table.closest)
        skipped: list[SkippedCheck] = []
        if dynamic and not table.takes_any_kwarg:
            skipped.append(SkippedCheck("unknown-kwarg", f"{dynamic} may pass kwargs whose names are known only at "
                                        "run time"))
        return causes, skipped

    def length_refusals(self, kwargs: dict[str, Any], dynamic: str | None) -> tuple[list[Cause], list[SkippedCheck]]:
        """The four length kwargs, all given or none."""
        unknown = [(k, kwargs[k]) for k in LENGTH_KWARGS if isinstance(kwargs.get(k), Unknown)]
        given = [k for k in LENGTH_KWARGS if kwargs.get(k) is not None and not isinstance(kwargs.get(k), Unknown)]
        if unknown:
            return [], [SkippedCheck("length-group-incomplete", "the four length kwargs go together, and "
                                     + describe_unknown(unknown))]
        if dynamic and len(given) < len(LENGTH_KWARGS):
            return [], [SkippedCheck("length-group-incomplete", f"{dynamic} may pass the other length kwargs")]
        return length_group_causes({k: kwargs.get(k) for k in LENGTH_KWARGS}, agentjet=self.label), []

    def value_refusals(self, get: Callable[[str], Any], *, not_read: str | None = None,
                       ) -> tuple[list[Cause], list[SkippedCheck]]:
        """AgentJetJob's checks on the config's values; ``get(key)``: a value, ``Unknown`` or MISSING.
        ``not_read``: why no AgentJetJob reads this config; every check is then skipped with that reason."""
        if not_read is not None:
            return [], [SkippedCheck(cid, not_read) for cid in VALUE_CHECK_IDS]
        keys = check_keys(self._table)
        values: dict[str, Any] = {}
        unknown_values: dict[str, Unknown] = {}
        for name, key in keys.items():
            value = get(key)
            if isinstance(value, Unknown):
                unknown_values[name] = value
            elif value is not MISSING:
                values[name] = value
        causes, skips = each_value_cause(values, unknown_values, agentjet=self.label, keys=keys)
        return causes, [SkippedCheck(cid, describe_unknown([(n, unknown_values[n]) for n in names]))
                        for cid, names in skips]
