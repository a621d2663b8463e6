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
from skill_server.lint.values import Unknown, lookup
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
            return f"the bundled AgentJet {_bundled()['version']}"
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
        unknown). Implemented in ``agentjet_refusals`` for the knowledge API used today.
        """
        from skill_server.lint.agentjet_refusals import refusal_causes

        return refusal_causes(self, get, kwargs, dynamic, base_own)


@functools.lru_cache(maxsize=1)
def _bundled() -> dict[str, str]:
    about = snapshot().get("agentjet", {})
    hint = str(about.get("version_hint") or "unknown")
    return {"version": hint.split(" ")[0], "commit": str(about.get("overrides_commit") or "") or "unknown"}
