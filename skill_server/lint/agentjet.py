"""The linter's one door to AgentJet knowledge (the adapter).

Everything ``check_config`` knows about AgentJet goes through ``AgentJet``: which install or bundled
release is used and how to name it (``version_label``, ``info``), the kwarg -> key table, the config
keys (defaults, schema sections, dict sections), composing a base YAML, the swarm thread rule (via the
episode cap) and what ``AgentJetJob`` refuses (``refusal_causes``). Rules never import
``skill_server.agentjet`` or ``overlay`` themselves, so a new versioned knowledge API replaces this module
only. Today it is built on ``skill_server.agentjet.{locate,knowledge,compose}`` and ``skill_server.cap``.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from skill_server.agentjet.compose import (
    Layer,
    compose,
    flatten,
    merge_layers,
    resolve_base,
)
from skill_server.agentjet.knowledge import (
    LENGTH_KWARGS,
    bundled_overrides,
    overrides_for,
    schema_for,
    snapshot,
)
from skill_server.agentjet.locate import AgentJetInstall, locate_agentjet
from skill_server.errors import ToolInputError
from skill_server.lint.values import MISSING, Unknown, a_type, describe_unknown, lookup
from skill_server.models import MAX_JSON_INT

#: Friendly names of the config keys the rules read (dotted paths of AgentJet's config tree).
KEYS = {
    "max_env_worker": "ajet.rollout.max_env_worker",
    "num_repeat": "ajet.rollout.num_repeat",
    "train_batch_size": "ajet.data.train_batch_size",
    "n_gpus_per_node": "ajet.trainer_common.n_gpus_per_node",
    "nnodes": "ajet.trainer_common.nnodes",
    "interchange_method": "ajet.interchange_server.interchange_method",
    "max_prompt_length": "ajet.data.max_prompt_length",
    "max_response_length": "ajet.data.max_response_length",
    "max_model_len": "ajet.rollout.max_model_len",
    "max_response_length_in_one_turn": "ajet.rollout.max_response_length_in_one_turn",
    "lora_rank": "ajet.lora.lora_rank",
    "lora_load_format": "ajet.lora.load_format",
    "layered_summon": "ajet.lora.layered_summon",
    "lr": "ajet.trainer_common.optim.lr",
    "enable_swarm_mode": "ajet.enable_swarm_mode",
    "enable_interchange_server": "ajet.enable_interchange_server",
    "max_inference_tracker_threads": "ajet.interchange_server.max_inference_tracker_threads",
    "swarm_mode_sample_collection_method": "ajet.swarm_mode_sample_collection_method",
    "backbone": "ajet.backbone",
    "model_path": "ajet.model.path",
    "logger": "ajet.trainer_common.logger",
    "experiment_name": "ajet.experiment_name",
}
SWARM_OVERLAY = "ajet_swarm_default"
TAIL_KEYS = ("hydra", "defaults")


@dataclass(frozen=True)
class RefusalCause:
    """One reason ``AgentJetJob`` (or its config composition) refuses these inputs."""

    code: str  # stable: length-group, token-budget, one-turn-budget, lora-*, unknown-kwarg, nnodes-type, ...
    exception: str  # the exception AgentJet raises
    message: str  # plain words, with the values
    keys: tuple[str, ...] = ()  # dotted keys involved, the one to change first
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SkippedCheck:
    code: str  # the cause code that could not be checked
    reason: str


@dataclass
class ComposedBase:
    """A base YAML composed like AgentJetJob does, with where each value came from."""

    tree: dict[str, Any]
    origin: dict[str, str]  # dotted leaf -> layer name ("schema" for dataclass defaults)
    layer_names: list[str]
    user_layers: dict[str, str]  # layer name -> file, for layers that are the user's files
    composes_swarm: bool  # the swarm overlay is one of the layers
    own: dict[str, Any]  # the base file's own top-level mapping, as written
    warnings: list[str]


@dataclass(frozen=True)
class CapFacts:
    episode_cap: int
    divisible: bool
    thread_rule: str
    worker_loops: int
    queued_loops: int
    idle_threads: int
    suggestions: tuple[str, ...]


class AgentJet:
    """AgentJet as the linter sees it: one install (or the bundled snapshot), loaded once per call."""

    def __init__(self, agentjet_root: str | None) -> None:
        self.install: AgentJetInstall | None = locate_agentjet(agentjet_root)
        self._table, warnings = overrides_for(self.install)
        self._schema = schema_for(self.install)
        self.warnings: list[str] = [*warnings, *self._schema.warnings]
        defaults = compose(resolve_base(None, self.install), field="agentjet_root")
        self.warnings.extend(defaults.warnings)
        self.defaults, origin = merge_layers(defaults.layers, start=self._schema.defaults())
        self.default_origin = origin
        self._default_layer_files = {layer.name: layer.origin for layer in defaults.layers}
        self.defaults_flat = flatten(self.defaults)
        self._sections: set[str] = set()
        stack: list[tuple[dict[str, Any], str]] = [(self.defaults, "")]
        while stack:
            node, prefix = stack.pop()
            for key, value in node.items():
                if isinstance(value, dict):
                    self._sections.add(prefix + str(key))
                    stack.append((value, f"{prefix}{key}."))
        self._free_form = {k for k, v in self.defaults_flat.items() if v == {}}
        self._dataclass_paths = self._schema.dataclass_paths()
        self._field_paths = self._schema.field_paths()
        self._candidates: list[str] | None = None
        self.length_kwargs: tuple[str, ...] = LENGTH_KWARGS

    # --- which AgentJet ---------------------------------------------------------------------------

    def version_label(self) -> str:
        """How every version-dependent message names the AgentJet it describes."""
        if self.install is None:
            return f"AgentJet {_bundled()['version']} (bundled snapshot)"
        return f"AgentJet {self.install.version_hint or '(version unknown)'} at {self.install.root}"

    def info(self) -> dict[str, Any]:
        """The ``agentjet`` output block: {source, version, commit, path}."""
        if self.install is None:
            bundled = _bundled()
            return {"source": "bundled", "version": bundled["version"], "commit": bundled["commit"], "path": None}
        return {"source": "install", "version": self.install.version_hint, "commit": None,
                "path": str(self.install.root)}

    # --- kwargs -----------------------------------------------------------------------------------

    @property
    def control_kwargs(self) -> tuple[str, ...]:
        return self._table.control_kwargs

    def kwarg_rows(self) -> tuple[tuple[str, str], ...]:
        """(kwarg, dotted key) in the order AgentJetJob applies them, only kwargs this version accepts."""
        return tuple((k, key) for k, key in self._table.rows if self._table.accepts(k))

    def key_for(self, kwarg: str) -> str | None:
        return self._table.key_for(kwarg) if self._table.accepts(kwarg) else None

    def kwarg_for(self, key: str) -> str | None:
        kwarg = self._table.kwarg_for(key)
        return kwarg if kwarg is not None and self._table.accepts(kwarg) else None

    def accepts(self, kwarg: str) -> bool:
        if kwarg in self.control_kwargs:
            return True
        return self._table.accepts(kwarg) and self._table.key_for(kwarg) is not None

    def valid_kwargs(self) -> list[str]:
        return sorted({k for k, _ in self.kwarg_rows()} | set(self.control_kwargs))

    def newer_key_for(self, kwarg: str) -> str | None:
        """The key a kwarg sets in the newest known AgentJet, when this version lacks it."""
        return None if self.accepts(kwarg) else bundled_overrides().key_for(kwarg)

    # --- keys -------------------------------------------------------------------------------------

    def known(self, key: str) -> bool:
        if key in self.defaults_flat or key in self._sections or key in self._field_paths:
            return True
        return any(key.startswith(prefix + ".") for prefix in self._free_form)

    def is_free_form(self, key: str) -> bool:
        return key in self._free_form

    def is_section(self, key: str) -> bool:
        return key in self._sections

    def is_dataclass_section(self, key: str) -> bool:
        return key == "" or key in self._dataclass_paths

    def is_dict_section(self, key: str) -> bool:
        return not self.is_dataclass_section(key) and isinstance(lookup(self.defaults, key), dict)

    def default(self, key: str) -> Any:
        return lookup(self.defaults, key)

    def closest(self, key: str) -> str | None:
        """The known key a misspelt one most likely means, or None when nothing is close."""
        if self._candidates is None:
            self._candidates = sorted(set(self.defaults_flat) | self._sections)
        pool = [c for c in self._candidates if c.split(".")[0] == key.split(".")[0]] or self._candidates
        close = difflib.get_close_matches(key, pool, n=1, cutoff=0.75)
        if close:
            return close[0]
        parent, _, leaf = key.rpartition(".")  # same section, similar leaf
        siblings = [c.rpartition(".")[2] for c in pool if c.rpartition(".")[0] == parent]
        near = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
        return f"{parent}.{near[0]}" if near else None

    def closest_kwarg(self, kwarg: str) -> str | None:
        close = difflib.get_close_matches(kwarg, self.valid_kwargs(), n=1)
        return close[0] if close else None

    def default_file(self, key: str) -> str | None:
        """The file a default value is read from (an install's YAML), or None for bundled data and schema."""
        layer = self.default_origin.get(key)
        origin = self._default_layer_files.get(layer or "")
        return origin if origin and not origin.startswith("bundled:") else None

    # --- a base YAML --------------------------------------------------------------------------------

    def compose_base(self, path: Path, *, field: str) -> ComposedBase:
        """Compose a user's base YAML with the layers its defaults list names (errors name ``field``)."""
        composition = compose(resolve_base(str(path), self.install, field=field), field=field)
        tree, origin = merge_layers(composition.layers, start=self._schema.defaults())
        user = self._user_layers(composition.layers)
        own = composition.layers[-1].data if composition.layers else {}
        for layer in composition.layers:
            if layer.origin == str(path.resolve()):
                own = layer.data
        tail = dict(composition.tail)
        return ComposedBase(tree, origin, [layer.name for layer in composition.layers], user,
                            any(layer.name == SWARM_OVERLAY for layer in composition.layers),
                            {**own, **tail}, composition.warnings)

    def _user_layers(self, layers: list[Layer]) -> dict[str, str]:
        package = str(self.install.package) if self.install else None
        return {layer.name: layer.origin for layer in layers
                if not (layer.origin.startswith("bundled:") or (package is not None and
                                                                 layer.origin.startswith(package)))}

    # --- the engine ---------------------------------------------------------------------------------

    def tcp_switch(self, swarm: Any, nnodes: Any) -> bool | Unknown:
        """Does AgentJetJob force the tcp interchange? (nnodes > 1 with swarm mode on.)"""
        if isinstance(nnodes, Unknown):
            if swarm is False:
                return False
            return Unknown(f"AgentJetJob switches it to tcp when nnodes > 1 in swarm mode; nnodes is unknown "
                           f"({nnodes.reason})")
        if not (isinstance(nnodes, int) and not isinstance(nnodes, bool)) or nnodes <= 1:
            return False
        if isinstance(swarm, Unknown):
            return Unknown(f"AgentJetJob switches it to tcp when nnodes > 1 in swarm mode; enable_swarm_mode is "
                           f"unknown ({swarm.reason})")
        return bool(swarm)

    def episode_cap(self, max_env_worker: int, num_repeat: int, train_batch_size: int | None,
                    tracker_threads: int | None) -> CapFacts | str:
        """The engine's concurrent-episode cap for these values, or why it cannot be computed."""
        from skill_server.cap import EpisodeCapInput, compute_episode_cap

        for name, value in (("max_env_worker", max_env_worker), ("num_repeat", num_repeat),
                            ("train_batch_size", train_batch_size), ("max_inference_tracker_threads",
                                                                     tracker_threads)):
            if value is not None and not 1 <= value <= MAX_JSON_INT:
                return f"{name}={value} is outside 1..{MAX_JSON_INT}"
        try:
            r = compute_episode_cap(EpisodeCapInput(
                max_env_worker=max_env_worker, num_repeat=num_repeat, train_batch_size=train_batch_size,
                max_inference_tracker_threads=tracker_threads, thread_rule="auto",
                agentjet_root=str(self.install.root) if self.install else None))
        except (ToolInputError, ValidationError) as exc:
            return f"the episode cap cannot be computed: {str(exc).splitlines()[0]}"
        return CapFacts(r.episode_cap, r.divisible, r.thread_rule, r.worker_loops, r.queued_loops, r.idle_threads,
                        tuple(r.suggestions))

    # --- what AgentJetJob refuses -------------------------------------------------------------------

    def refusal_causes(self, get: Callable[[str], Any], kwargs: dict[str, Any], dynamic: bool,
                       base_own: dict[str, Any] | None) -> tuple[list[RefusalCause], list[SkippedCheck]]:
        """Every reason AgentJetJob (of this version) refuses a construction, and the checks that could not run.

        ``get(key)`` is the value at construction (base + kwargs): a value, ``Unknown`` or MISSING.
        ``kwargs`` maps each given kwarg to its value (``Unknown`` when computed at run time); ``dynamic``:
        a splat may pass more. ``base_own``: the base file's own mapping (None: AgentJet's defaults, or
        unknown). Each check mirrors a refusal of the fact sheet; comparisons are evaluated as Python
        evaluates them, so strings fail the way they fail in AgentJet.
        """
        causes: list[RefusalCause] = []
        skipped: list[SkippedCheck] = []
        label = self.version_label()
        for name in kwargs:
            if not self.accepts(name):
                newer = self.newer_key_for(name)
                causes.append(RefusalCause(
                    "unknown-kwarg", "TypeError",
                    f"{label} has no AgentJetJob kwarg {name!r}" + (" (newer versions have it)" if newer else ""),
                    (newer,) if newer else (), {"kwarg": name, "closest": self.closest_kwarg(name),
                                                "key_in_newer_versions": newer}))
        if base_own is not None:
            causes.extend(self._base_causes(base_own))
        self._length_group(kwargs, dynamic, causes, skipped)
        self._lengths(get, causes, skipped)
        self._lora(get, causes, skipped)
        nnodes = get(KEYS["nnodes"])
        if isinstance(nnodes, Unknown):
            skipped.append(SkippedCheck("nnodes-type", f"nnodes is unknown ({nnodes.reason})"))
        elif nnodes is not MISSING and _compare(nnodes, ">", 1) is TypeError:
            causes.append(RefusalCause(
                "nnodes-type", "TypeError",
                f"nnodes is {nnodes!r} ({a_type(nnodes)}): AgentJetJob compares nnodes > 1 before anything else "
                "about it, and that comparison fails", (KEYS["nnodes"],), {"nnodes": nnodes}))
        backbone = get(KEYS["backbone"])
        if backbone == "trinity":
            causes.append(RefusalCause("backbone-trinity", "NotImplementedError",
                                       "backbone 'trinity' is not supported by AgentJetJob", (KEYS["backbone"],),
                                       {"backbone": backbone}))
        return causes, skipped

    def _base_causes(self, own: dict[str, Any]) -> list[RefusalCause]:
        out: list[RefusalCause] = []
        entries = own.get("defaults", MISSING)
        if entries is MISSING:
            out.append(RefusalCause(
                "base-without-defaults", "KeyError",
                "the base YAML has no defaults list: AgentJetJob copies the base's defaults back after composing "
                "and raises KeyError: 'defaults' (and without ajet_default, keys such as ajet.trainer_common.logger "
                "do not exist)", ("defaults",), {}))
        elif isinstance(entries, list) and any(_entry_name(e) == SWARM_OVERLAY for e in entries):
            out.append(RefusalCause(
                "base-includes-swarm-default", "ConfigCompositionException",
                f"the base's defaults list includes {SWARM_OVERLAY}, which sets hydra.searchpath itself; Hydra "
                "refuses: 'Overriding hydra.searchpath is only supported from the primary config'", ("defaults",),
                {"defaults": entries}))
        return out

    def _length_group(self, kwargs: dict[str, Any], dynamic: bool, causes: list[RefusalCause],
                      skipped: list[SkippedCheck]) -> None:
        unknown = [k for k in self.length_kwargs if isinstance(kwargs.get(k), Unknown)]
        given = [k for k in self.length_kwargs if k in kwargs and kwargs[k] is not None and k not in unknown]
        if unknown:
            skipped.append(SkippedCheck("length-group", "whether " + ", ".join(unknown) + " is None is known only at "
                                        "run time"))
            return
        if not given or len(given) == len(self.length_kwargs):
            return
        if dynamic:
            skipped.append(SkippedCheck("length-group", "the construction also passes **kwargs or positional "
                                        "arguments, which may give the other length kwargs"))
            return
        missing = [k for k in self.length_kwargs if k not in given]
        causes.append(RefusalCause(
            "length-group", "ValueError",
            f"the four length kwargs must all be set or all be unset; given {', '.join(given)}, missing "
            f"{', '.join(missing)} ('must all be None or all be non-None')",
            tuple(self._table.key_for(k) or k for k in missing), {"given": given, "missing": missing}))

    def _lengths(self, get: Callable[[str], Any], causes: list[RefusalCause], skipped: list[SkippedCheck]) -> None:
        names = ("max_prompt_length", "max_response_length", "max_model_len", "max_response_length_in_one_turn")
        v = {n: get(KEYS[n]) for n in names}
        checks = (("token-budget", ("max_prompt_length", "max_response_length", "max_model_len")),
                  ("one-turn-budget", ("max_response_length_in_one_turn", "max_response_length")))
        for code, involved in checks:
            unknown = [(n, v[n]) for n in involved if isinstance(v[n], Unknown)]
            if unknown:
                skipped.append(SkippedCheck(code, describe_unknown(unknown)))
                continue
            if any(v[n] is MISSING or v[n] is None for n in involved):
                continue  # a key the base lacks fails differently (the overrides walk), not this assert
            if code == "token-budget":
                total = _binary(v["max_prompt_length"], "+", v["max_response_length"])
                verdict = TypeError if total is TypeError else _compare(total, "<=", v["max_model_len"])
            else:
                verdict = _compare(v["max_response_length_in_one_turn"], "<=", v["max_response_length"])
            if verdict is True:
                continue
            values = {n: v[n] for n in involved}
            numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in values.values())
            keys = tuple(KEYS[n] for n in involved)
            if not numbers:
                kinds = ", ".join(f"{n}={values[n]!r} ({a_type(values[n])})" for n in involved)
                exc = "TypeError" if verdict is TypeError else "AssertionError (empty message)"
                causes.append(RefusalCause(
                    "length-types", exc, f"AgentJetJob compares the lengths without converting them: {kinds}",
                    keys, values))
            elif code == "token-budget":
                p, r, m = values["max_prompt_length"], values["max_response_length"], values["max_model_len"]
                causes.append(RefusalCause(
                    code, "AssertionError", f"max_prompt_length ({p}) + max_response_length ({r}) = {p + r} exceeds "
                    f"max_model_len ({m}) ('illegal token length')", (KEYS["max_model_len"], *keys[:2]), values))
            else:
                o, r = values["max_response_length_in_one_turn"], values["max_response_length"]
                causes.append(RefusalCause(
                    code, "AssertionError", f"max_response_length_in_one_turn ({o}) exceeds max_response_length ({r}) "
                    "(an assert with an empty message)", keys, values))

    def _lora(self, get: Callable[[str], Any], causes: list[RefusalCause], skipped: list[SkippedCheck]) -> None:
        rank = get(KEYS["lora_rank"])
        if isinstance(rank, Unknown):
            skipped.append(SkippedCheck("lora-rank", f"lora_rank is unknown ({rank.reason})"))
            return
        if rank is MISSING or rank is None or _compare(rank, ">", 0) is not True:
            return
        checks = (
            ("lora-load-format", "lora_load_format", lambda x: x == "safetensors", "'safetensors'",
             "lora_load_format must be 'safetensors'"),
            ("lora-layered-summon", "layered_summon", lambda x: x is True, "True", "layered_summon must be True"),
            ("lora-lr", "lr", lambda x: _compare(x, ">", 1e-5) is True, "above 1e-5",
             "lr should usually be greater than 1e-5 for lora training"),
        )
        for code, name, ok, need, quote in checks:
            value = get(KEYS[name])
            if isinstance(value, Unknown):
                skipped.append(SkippedCheck(code, f"{name} is unknown ({value.reason})"))
                continue
            value = None if value is MISSING else value
            if not ok(value):
                causes.append(RefusalCause(code, "ValueError", f"lora_rank={rank} needs {name} {need}, got {value!r} "
                                           f"('{quote}')", (KEYS[name], KEYS["lora_rank"]),
                                           {"lora_rank": rank, name: value}))


@functools.lru_cache(maxsize=1)
def _bundled() -> dict[str, str]:
    about = snapshot().get("agentjet", {})
    hint = str(about.get("version_hint") or "unknown")
    return {"version": hint.split(" ")[0], "commit": str(about.get("overrides_commit") or "") or "unknown"}


def _entry_name(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry.strip().removeprefix("optional ").strip().removesuffix(".yaml").rsplit("/", 1)[-1]
    return None


def _binary(a: Any, op: str, b: Any) -> Any:
    try:
        return a + b if op == "+" else None
    except TypeError:
        return TypeError


def _compare(a: Any, op: str, b: Any) -> Any:
    """Python's own comparison (True/False), or TypeError when Python raises it."""
    try:
        return bool({"<=": lambda: a <= b, ">": lambda: a > b}[op]())
    except TypeError:
        return TypeError
