"""Tool ``build_config``: the YAML that ``AgentJetJob`` hands to the engine, with provenance.

Order of events mirrors AgentJetJob: check kwargs (names, the four-length group) -> compose the base
YAML -> overlay the config dataclass defaults -> write each non-None kwarg into its key through the
overrides table -> validate (token budget, LoRA, tcp switch, trinity) -> apply post-construction writes
(``set``) -> dump with ``yaml.safe_dump(sort_keys=False)`` plus the base's own hydra/defaults blocks.
"""

from __future__ import annotations

import copy
import difflib
from datetime import datetime
from typing import Any, Literal

import yaml
from pydantic import Field

from skill_server.agentjet.compose import (
    BaseSpec,
    compose,
    flatten,
    get_path,
    merge_layers,
    resolve_base,
    set_path,
)
from skill_server.agentjet.knowledge import LENGTH_KWARGS, OverridesTable, bundled_overrides, overrides_for, schema_for
from skill_server.agentjet.locate import AgentJetInstall, locate_agentjet
from skill_server.errors import ToolInputError
from skill_server.fsutil import write_text_atomic
from skill_server.models import ToolInput, ToolOutput

NAME_SENTINEL = "read_yaml_name"
INTERCHANGE_KEY = "ajet.interchange_server.interchange_method"


class BuildConfigInput(ToolInput):
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="AgentJetJob constructor kwargs, e.g. {\"num_repeat\": 6, \"max_env_worker\": 126}. "
        "None/null keeps the YAML value, as in AgentJetJob.",
    )
    base_yaml: str | None = Field(
        default=None, description="Base YAML (AgentJetJob's base_yaml_config). Default: the install's swarm "
        "defaults, else the bundled snapshot.",
    )
    set: dict[str, Any] | None = Field(
        default=None,
        description="Post-construction writes, dotted key -> value, e.g. {\"ajet.rollout.temperature\": 0.7} "
        "(job.config.ajet.rollout.temperature = 0.7). Applied after kwargs and validation.",
    )
    agentjet_root: str | None = Field(default=None, description="AgentJet checkout or installed package folder.")
    output_path: str | None = Field(default=None, description="Write the YAML here (atomically).")
    overwrite: bool = Field(default=False, description="Replace output_path if it exists.")
    provenance: Literal["ajet", "changed", "all"] = Field(
        default="ajet",
        description="Which values to list in provenance: every ajet.* value (default), only values set by "
        "kwargs/writes, or every value including the verl sections.",
    )


class BaseInfo(ToolOutput):
    kind: Literal["file", "agentjet", "bundled"]
    path: str | None
    version_hint: str | None


class SourcesInfo(ToolOutput):
    agentjet_root: str | None = Field(description="The AgentJet install used, if any.")
    found_by: str | None = Field(description="agentjet_root, AJET_ROOT or find_spec.")
    overrides_table: str = Field(description="'bundled' or the job.py the table was read from.")
    schema_source: str = Field(description="'bundled' or the schema module the dataclass tree was read from.")
    layers: list[str] = Field(description="Composed files in merge order (later wins).")


class ProvenanceEntry(ToolOutput):
    key: str
    value: Any
    source: Literal["base", "kwarg", "set"]
    base_value: Any = Field(description="The value before kwargs and writes (null when the key is new).")
    layer: str | None = Field(description="Which base layer the base value came from ('schema' = dataclass default).")
    note: str | None = None


class BuildConfigResult(ToolOutput):
    yaml: str
    base: BaseInfo
    sources: SourcesInfo
    provenance: list[ProvenanceEntry]
    warnings: list[str]
    written: str | None


# --- the overlay, reusable by other tools (check_config) ---------------------------------------


class Overlay:
    """Everything the build computes, kept for callers that need more than the YAML text."""

    def __init__(self) -> None:
        self.install: AgentJetInstall | None = None
        self.table: OverridesTable = bundled_overrides()
        self.base: BaseSpec | None = None
        self.base_tree: dict[str, Any] = {}
        self.origin: dict[str, str] = {}
        self.tree: dict[str, Any] = {}
        self.tail: dict[str, Any] = {}
        self.layer_names: list[str] = []
        self.sources: dict[str, str] = {}  # dotted key -> "kwarg" | "set"
        self.notes: dict[str, str] = {}
        self.warnings: list[str] = []
        self.schema_source = "bundled"


def check_kwarg_names(kwargs: dict[str, Any], table: OverridesTable, install: AgentJetInstall | None) -> None:
    """Unknown kwargs are errors that list the valid ones; kwargs a detected version lacks say so."""
    bundled = bundled_overrides()
    valid = sorted(set(table.kwargs) | set(table.control_kwargs))
    for name in kwargs:
        if table.accepts(name) and (table.key_for(name) or name in table.control_kwargs):
            continue
        if install is not None and (bundled.key_for(name) or name in bundled.control_kwargs):
            raise ToolInputError(
                f"AgentJetJob of the AgentJet at {install.root} (version {install.version_hint or 'unknown'}) has no "
                f"kwarg {name!r} (newer versions do); it would raise TypeError. Set the key "
                f"{bundled.key_for(name) or name} through 'set' or the YAML instead",
                field=f"kwargs.{name}",
            )
        close = difflib.get_close_matches(name, valid, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ToolInputError(
            f"AgentJetJob has no kwarg {name!r}.{hint} Valid kwargs: {', '.join(valid)}", field=f"kwargs.{name}"
        )


def check_length_group(kwargs: dict[str, Any]) -> None:
    given = [k for k in LENGTH_KWARGS if kwargs.get(k) is not None]
    if given and len(given) != len(LENGTH_KWARGS):
        missing = [k for k in LENGTH_KWARGS if k not in given]
        raise ToolInputError(
            f"the four length kwargs ({', '.join(LENGTH_KWARGS)}) must all be given or all be left unset "
            f"(AgentJetJob: 'must all be None or all be non-None'); given {', '.join(given)}, missing "
            f"{', '.join(missing)}",
            field=f"kwargs.{missing[0]}",
        )


def build_overlay(inp: BuildConfigInput) -> Overlay:
    ov = Overlay()
    kwargs = dict(inp.kwargs)
    ov.install = locate_agentjet(inp.agentjet_root)
    ov.table, table_warnings = overrides_for(ov.install)
    ov.warnings.extend(table_warnings)
    check_kwarg_names(kwargs, ov.table, ov.install)
    check_length_group(kwargs)

    base_yaml = inp.base_yaml
    from_kwarg = kwargs.pop("base_yaml_config", None)
    if from_kwarg is not None:
        if base_yaml and str(from_kwarg) != base_yaml:
            raise ToolInputError(
                f"kwargs.base_yaml_config ({from_kwarg!r}) and base_yaml ({base_yaml!r}) disagree; give one",
                field="kwargs.base_yaml_config",
            )
        base_yaml = str(from_kwarg)
    ensure_new = kwargs.pop("ensure_new_experiment", None)
    base_field = "kwargs.base_yaml_config" if from_kwarg is not None else "base_yaml"
    ov.base = resolve_base(base_yaml, ov.install, field=base_field)

    composition = compose(ov.base, field=base_field)
    ov.warnings.extend(composition.warnings)
    ov.tail = composition.tail
    ov.layer_names = [layer.origin for layer in composition.layers]
    schema = schema_for(ov.install)
    ov.schema_source = schema.source
    ov.warnings.extend(schema.warnings)
    ov.base_tree, ov.origin = merge_layers(composition.layers, start=schema.defaults())
    ov.tree = copy.deepcopy(ov.base_tree)

    if ensure_new:
        name = kwargs.get("experiment_name")
        if name is None:
            name = get_path(ov.tree, "ajet.experiment_name", None)
        if name is not None and name != NAME_SENTINEL:
            kwargs["experiment_name"] = f"{name}_{datetime.now().strftime('%Y%m%d-%H%M%S')}"

    for kwarg, key in ov.table.rows:
        value = kwargs.get(kwarg)
        if value is None:
            continue
        if get_path(ov.tree, key, _ABSENT) is _ABSENT:
            ov.warnings.append(
                f"{key} is not in the base config; AgentJetJob reads it for every job, so a base without it "
                f"fails with AttributeError in versions whose YAML lacks it (kwarg {kwarg} creates it here)"
            )
        _type_warning(kwarg, value, get_path(ov.base_tree, key, None), ov.warnings)
        set_path(ov.tree, key, value)
        ov.sources[key] = "kwarg"

    _validate_like_agentjet(ov, kwargs)

    if ov.tree.get("ajet", {}).get("enable_swarm_mode") and _as_int(
            get_path(ov.tree, "ajet.trainer_common.nnodes", 1)) > 1:
        if get_path(ov.tree, INTERCHANGE_KEY, None) != "tcp":
            set_path(ov.tree, INTERCHANGE_KEY, "tcp")
            ov.sources[INTERCHANGE_KEY] = "kwarg"
            ov.notes[INTERCHANGE_KEY] = "forced to tcp by AgentJetJob: nnodes > 1 in swarm mode"
            ov.warnings.append("nnodes > 1 in swarm mode: interchange_method switched to tcp (as AgentJetJob does)")

    schema_fields = schema.field_paths() if inp.set else set()
    for key, value in (inp.set or {}).items():
        _apply_write(ov, schema_fields, key, value)
    _post_write_checks(ov)
    return ov


_ABSENT = object()


def _as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _type_warning(kwarg: str, value: Any, base_value: Any, warnings: list[str]) -> None:
    if base_value is None or value is None:
        return
    numeric = (int, float)
    same = (
        (isinstance(value, bool) and isinstance(base_value, bool))
        or (not isinstance(value, bool) and not isinstance(base_value, bool)
            and isinstance(value, numeric) and isinstance(base_value, numeric))
        or type(value) is type(base_value)
    )
    if not same:
        warnings.append(
            f"kwarg {kwarg}={value!r} is a {type(value).__name__} but the base value {base_value!r} is a "
            f"{type(base_value).__name__}; AgentJetJob does not convert it"
        )


def _validate_like_agentjet(ov: Overlay, kwargs: dict[str, Any]) -> None:
    """The checks AgentJetJob runs after the overlay, with clearer messages naming the same fields."""

    def where(kwarg: str) -> str:
        return f"kwargs.{kwarg}" if kwargs.get(kwarg) is not None else "base_yaml"

    def value(kwarg: str) -> Any:
        key = ov.table.key_for(kwarg)
        return get_path(ov.tree, key, None) if key else None

    prompt, response, model_len, one_turn = (value(k) for k in LENGTH_KWARGS)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (prompt, response, model_len)):
        if prompt + response > model_len:
            raise ToolInputError(
                f"max_prompt_length ({prompt}) + max_response_length ({response}) = {prompt + response} exceeds "
                f"max_model_len ({model_len}) (AgentJetJob asserts 'illegal token length')",
                field=where("max_model_len"),
            )
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (one_turn, response)):
        if one_turn > response:
            raise ToolInputError(
                f"max_response_length_in_one_turn ({one_turn}) exceeds max_response_length ({response}) "
                "(AgentJetJob asserts this with an empty message)",
                field=where("max_response_length_in_one_turn"),
            )
    rank = value("lora_rank")
    if isinstance(rank, (int, float)) and not isinstance(rank, bool) and rank > 0:
        if value("lora_load_format") != "safetensors":
            raise ToolInputError(
                f"lora_rank={rank} needs lora_load_format='safetensors' (got {value('lora_load_format')!r})",
                field=where("lora_load_format"),
            )
        if value("layered_summon") is not True:
            raise ToolInputError(
                f"lora_rank={rank} needs layered_summon=True (got {value('layered_summon')!r})",
                field=where("layered_summon"),
            )
        lr = value("lr")
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or lr <= 1e-5:
            raise ToolInputError(
                f"lora_rank={rank} needs lr > 1e-5 (got {lr!r}; AgentJetJob: 'lr should usually be greater than "
                "1e-5 for lora training')",
                field=where("lr"),
            )
    if value("backbone") == "trinity":
        raise ToolInputError("backbone 'trinity' is not supported by AgentJetJob (NotImplementedError)",
                             field=where("backbone"))


def _apply_write(ov: Overlay, schema_fields: set[str], key: str, value: Any) -> None:
    field = f"set.{key}"
    parts = key.split(".")
    if not key or any(not p.strip() for p in parts):
        raise ToolInputError("write keys are dotted paths such as ajet.rollout.temperature", field=field)
    node: Any = ov.tree
    for depth, part in enumerate(parts[:-1]):
        if not isinstance(node, dict) or part not in node:
            prefix = ".".join(parts[: depth + 1])
            raise ToolInputError(
                f"{prefix} does not exist in the config, so job.config.{key} = ... raises AttributeError"
                + _closest(prefix, ov.tree),
                field=field,
            )
        node = node[part]
    if not isinstance(node, dict):
        raise ToolInputError(f"{'.'.join(parts[:-1])} is not a section (it holds {node!r})", field=field)
    known = key in schema_fields or get_path(ov.base_tree, key, _ABSENT) is not _ABSENT
    if not known:
        ov.warnings.append(
            f"write {key} creates a new attribute that AgentJet's defaults do not have; nothing may read it"
            + _closest(key, ov.base_tree)
        )
    kwarg = ov.table.kwarg_for(key)
    if kwarg:
        ov.warnings.append(f"write {key} has a kwarg: pass {kwarg}=... to AgentJetJob instead of writing it later")
    set_path(ov.tree, key, value)
    for stale in [k for k in ov.sources if k.startswith(key + ".")]:
        del ov.sources[stale]  # a whole-section write replaces what kwargs put below it
    ov.sources[key] = "set"


def _closest(key: str, tree: dict[str, Any]) -> str:
    candidates = list(flatten(tree)) + _section_paths(tree)
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def _section_paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for key, value in tree.items():
        if isinstance(value, dict):
            path = f"{prefix}{key}"
            out.append(path)
            out.extend(_section_paths(value, path + "."))
    return out


def _post_write_checks(ov: Overlay) -> None:
    """Writes skip AgentJetJob's validation; say when they broke a rule it enforces."""
    written = {k for k, s in ov.sources.items() if s == "set"}
    if not written:
        return
    nnodes = _as_int(get_path(ov.tree, "ajet.trainer_common.nnodes", 1))
    if INTERCHANGE_KEY in written and nnodes > 1 and get_path(ov.tree, INTERCHANGE_KEY, None) != "tcp":
        ov.warnings.append(f"write {INTERCHANGE_KEY} undoes the tcp switch while nnodes={nnodes}: multi-node needs tcp")
    length_keys = {ov.table.key_for(k) for k in LENGTH_KWARGS}
    if written & length_keys:
        p, r, m = (get_path(ov.tree, ov.table.key_for(k) or "", None) for k in LENGTH_KWARGS[:3])
        if all(isinstance(v, int) for v in (p, r, m)) and p + r > m:
            ov.warnings.append(f"after the writes max_prompt_length + max_response_length ({p + r}) exceeds "
                               f"max_model_len ({m}); AgentJetJob's check ran before the writes")


def dump_yaml(ov: Overlay) -> str:
    document = dict(ov.tree)
    for key, value in ov.tail.items():
        document[key] = value
    return yaml.safe_dump(document, sort_keys=False)


def _provenance(ov: Overlay, mode: str) -> list[ProvenanceEntry]:
    final = flatten(ov.tree)
    base = flatten(ov.base_tree)
    entries: list[ProvenanceEntry] = []
    for key, value in final.items():
        source = _source_of(ov, key)
        if mode == "changed" and source == "base":
            continue
        if mode == "ajet" and source == "base" and not key.startswith("ajet."):
            continue
        entries.append(ProvenanceEntry(
            key=key,
            value=value,
            source=source,  # type: ignore[arg-type]
            base_value=base.get(key),
            layer=ov.origin.get(key),
            note=ov.notes.get(key),
        ))
    return entries


def _source_of(ov: Overlay, key: str) -> str:
    probe = key
    while True:
        if probe in ov.sources:
            return ov.sources[probe]
        if "." not in probe:
            return "base"
        probe = probe.rsplit(".", 1)[0]


def build_config(inp: BuildConfigInput) -> BuildConfigResult:
    """Reproduce AgentJetJob's dump for these kwargs, base and writes; optionally write it atomically."""
    ov = build_overlay(inp)
    text = dump_yaml(ov)
    written = None
    if inp.output_path:
        written = str(write_text_atomic(inp.output_path, text, overwrite=inp.overwrite, field="output_path"))
    assert ov.base is not None
    install = ov.install
    return BuildConfigResult(
        yaml=text,
        base=BaseInfo(
            kind=ov.base.kind,  # type: ignore[arg-type]
            path=str(ov.base.path) if ov.base.path else None,
            version_hint=install.version_hint if install else (
                "bundled snapshot (AgentJet e48a5397 defaults)" if ov.base.kind == "bundled" else None),
        ),
        sources=SourcesInfo(
            agentjet_root=str(install.root) if install else None,
            found_by=install.found_by if install else None,
            overrides_table=ov.table.source,
            schema_source=ov.schema_source,
            layers=ov.layer_names,
        ),
        provenance=_provenance(ov, inp.provenance),
        warnings=ov.warnings,
        written=written,
    )
