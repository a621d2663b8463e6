"""Tool ``build_config``: the YAML ``AgentJetJob(...).dump_job_as_yaml()`` writes, byte for byte, with provenance.

The tool picks the AgentJet to describe (a bundled release or an install read statically; see
``agentjet.release``), resolves paths against ``cwd``, refuses what AgentJet refuses (with the cause in
plain words and AgentJet's exception, see ``agentjet.refusals``), runs the construction on plain data
(``agentjet.job``) and reports where every value came from. It only reads, unless ``output_path`` asks
it to create a new file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StrictStr

from skill_server.agentjet import yamltypes
from skill_server.agentjet.compose import default_base, flatten, load_base
from skill_server.agentjet.identity import AgentJetRef, AgentJetRootArg, AgentJetVersionArg
from skill_server.agentjet.job import Construction, construct, dump, to_plain
from skill_server.agentjet.refusals import AgentJetRefusal, unknown_kwarg_causes
from skill_server.agentjet.release import select_agentjet
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.core.fsutil import describe_kind, resolve_directory, resolve_path, write_text_atomic
from skill_server.core.models import JsonValue, ToolInput, ToolOutput

Path4096 = Annotated[StrictStr, Field(max_length=4096)]


class BuildConfigInput(ToolInput):
    kwargs: dict[StrictStr, JsonValue] = Field(
        default_factory=dict, max_length=200,
        description="AgentJetJob constructor kwargs, e.g. {\"num_repeat\": 6, \"max_env_worker\": 126}. null keeps "
        "the YAML value, as in AgentJetJob. Values pass through untouched (AgentJet does not convert types).",
    )
    base_yaml: Path4096 | None = Field(
        default=None, description="Base YAML (AgentJetJob's base_yaml_config). Default: the selected AgentJet's "
        "ajet/default_config/ajet_swarm_default.yaml. Relative paths resolve against cwd.",
    )
    set: dict[StrictStr, JsonValue] | None = Field(
        default=None, max_length=500,
        description="Post-construction writes, dotted key -> value, applied in order, e.g. "
        "{\"ajet.rollout.temperature\": 0.7} for job.config.ajet.rollout.temperature = 0.7. Not checked by AgentJet.",
    )
    agentjet_version: AgentJetVersionArg = None
    agentjet_root: AgentJetRootArg = None
    cwd: Path4096 | None = Field(
        default=None, description="Directory that relative base_yaml, output_path and agentjet_root resolve against "
        "(default: the server's working directory).",
    )
    output_path: Path4096 | None = Field(
        default=None, description="Also write the YAML to this NEW file (created atomically; an existing path is "
        "never replaced). Without it the tool only reads.",
    )
    provenance: Literal["ajet", "changed", "all"] = Field(
        default="ajet", description="Which values provenance lists: every ajet.* value (default), only values set "
        "by kwargs, writes or AgentJet itself, or every value including the verl sections.",
    )


class BaseInfo(ToolOutput):
    kind: Literal["file", "default"] = Field(description="file: base_yaml; default: the AgentJet's swarm default.")
    path: str = Field(description="The base composed: an absolute path, or bundled:<file> for a bundled default.")


class ProvenanceEntry(ToolOutput):
    key: str
    value: JsonValue
    source: Literal["base", "kwarg", "set", "agentjet"] = Field(
        description="base: composed YAML or dataclass default; kwarg; set: a post-construction write; agentjet: set by "
        "AgentJetJob itself (the tcp switch).")
    base_value: JsonValue = Field(description="The value before kwargs and writes (null when the key is new).")
    layer: str | None = Field(description="Which config set the base value ('schema' = a dataclass default).")
    note: str | None = None


class BuildConfigResult(ToolOutput):
    yaml: str = Field(description="Exactly what AgentJetJob(...).dump_job_as_yaml() writes for these inputs.")
    agentjet: AgentJetRef
    base: BaseInfo
    layers: list[str] = Field(description="Composed configs in merge order (later wins), where each was read.")
    provenance: list[ProvenanceEntry]
    warnings: list[str]
    written: str | None = Field(description="The file created from output_path, else null.")


# --- inputs ----------------------------------------------------------------------------------------


def _base_path(inp: BuildConfigInput, cwd: Path | None) -> tuple[Path | None, str]:
    from_kwarg = inp.kwargs.get("base_yaml_config")
    if from_kwarg is not None and not isinstance(from_kwarg, str):
        raise ToolInputError(f"must be a path string, got {type(from_kwarg).__name__}", field="kwargs.base_yaml_config")
    field = "kwargs.base_yaml_config" if from_kwarg is not None else "base_yaml"
    chosen = from_kwarg if from_kwarg is not None else inp.base_yaml
    if chosen is None:
        return None, field
    path = resolve_path(chosen, field=field, base=cwd)
    if from_kwarg is not None and inp.base_yaml is not None and resolve_path(inp.base_yaml, field="base_yaml",
                                                                             base=cwd) != path:
        raise ToolInputError(f"kwargs.base_yaml_config ({path}) and base_yaml ({inp.base_yaml}) disagree; give one",
                             field="kwargs.base_yaml_config")
    return path, field


def _output_path(inp: BuildConfigInput, cwd: Path | None) -> Path | None:
    if inp.output_path is None:
        return None
    if "<" in inp.output_path or ">" in inp.output_path:
        raise ToolInputError(f"{inp.output_path!r} looks like a placeholder (it contains < or >); give a real path",
                             field="output_path")
    path = resolve_path(inp.output_path, field="output_path", base=cwd)
    if os.path.lexists(path):
        kind = "a file" if path.is_file() and not path.is_symlink() else describe_kind(os.lstat(path).st_mode)
        raise ToolFailure(f"{path} exists ({kind}); build_config only creates new files, so choose another "
                          "output_path", field="output_path")
    return path


# --- the tool ----------------------------------------------------------------------------------------------


def build_config(inp: BuildConfigInput) -> BuildConfigResult:
    """Reproduce ``AgentJetJob(**kwargs)`` + writes + ``dump_job_as_yaml()``; optionally create a file with it."""
    cwd = resolve_directory(inp.cwd, field="cwd") if inp.cwd is not None else None
    _check_values(inp)
    release = select_agentjet(inp.agentjet_version, inp.agentjet_root, cwd=cwd)
    output = _output_path(inp, cwd)
    table = release.overrides
    for cause in unknown_kwarg_causes(inp.kwargs, table.constructor_kwargs, table.takes_any_kwarg,
                                      agentjet=release.label, closest=table.closest):
        raise AgentJetRefusal(cause)  # Python refuses the call before AgentJetJob runs
    path, base_field = _base_path(inp, cwd)
    base = load_base(path, field=base_field, release=release) if path is not None else default_base(release)
    built = construct(release, base, dict(inp.kwargs), dict(inp.set or {}), base_field=base_field, cwd=cwd)
    text = dump(built.config)
    written = None
    if output is not None:
        try:
            written = str(write_text_atomic(output, text, overwrite=False, field="output_path"))
        except ToolFailure as exc:
            if os.path.lexists(output):
                raise ToolFailure(f"{output} appeared while writing; build_config only creates new files",
                                  field="output_path") from None
            raise exc
    warnings = built.warnings
    return BuildConfigResult(
        yaml=text,
        agentjet=release.ref,
        base=BaseInfo(kind="file" if base.kind == "file" else "default", path=base.origin),
        layers=[layer.origin for layer in built.composition.layers],
        provenance=_provenance(built, inp.provenance),
        warnings=warnings,
        written=written,
    )


def _check_values(inp: BuildConfigInput) -> None:
    """JSON values of any depth can arrive over MCP; refuse absurd nesting before anything recurses."""
    for group, values in (("kwargs", inp.kwargs), ("set", inp.set or {})):
        for name, value in values.items():
            try:
                yamltypes.check_plain(value)
            except ValueError as exc:
                raise ToolInputError(str(exc), field=f"{group}.{name}") from None


def _provenance(built: Construction, mode: str) -> list[ProvenanceEntry]:
    final = flatten(to_plain(built.config))
    before = flatten(to_plain(built.before_kwargs))
    origin = built.composition.origin
    entries: list[ProvenanceEntry] = []
    for key, value in final.items():
        source = _source_of(built.sources, key)
        if mode == "changed" and source == "base":
            continue
        if mode == "ajet" and source == "base" and not key.startswith("ajet."):
            continue
        layer = origin.get(key)
        if layer is None and key.split(".")[0] in ("defaults", "hydra"):
            layer = f"{built.composition.base.name} (copied back as written)"
        elif layer is None and key in before:
            layer = "schema"
        entries.append(ProvenanceEntry(key=key, value=_jsonable(value), source=source,  # type: ignore[arg-type]
                                       base_value=_jsonable(before.get(key)), layer=layer,
                                       note=built.notes.get(key)))
    return entries


def _source_of(sources: dict[str, str], key: str) -> str:
    probe = key
    while True:
        if probe in sources:
            return sources[probe]
        if "." not in probe:
            return "base"
        probe = probe.rsplit(".", 1)[0]


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
