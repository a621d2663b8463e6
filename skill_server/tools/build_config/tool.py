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

from skill_server.agentjet import yamltypes
from skill_server.agentjet.compose import Base, default_base, load_base
from skill_server.agentjet.job import Construction, construct, dump, to_plain
from skill_server.agentjet.release import select_agentjet
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.core.fsutil import describe_kind, resolve_directory, resolve_path, write_text_atomic
from skill_server.core.jsonsafe import json_safe
from skill_server.core.trees import flatten
from skill_server.tools.build_config.models import BaseInfo, BuildConfigInput, BuildConfigResult, ProvenanceEntry

# --- inputs ----------------------------------------------------------------------------------------


def _base_field(inp: BuildConfigInput) -> str:
    """The argument that names the base: kwargs.base_yaml_config when given, else base_yaml."""
    return "kwargs.base_yaml_config" if inp.kwargs.get("base_yaml_config") is not None else "base_yaml"


def _base_path(inp: BuildConfigInput, cwd: Path | None) -> tuple[Path | None, str]:
    from_kwarg = inp.kwargs.get("base_yaml_config")
    if from_kwarg is not None and not isinstance(from_kwarg, str):
        raise ToolInputError(f"must be a path string, got {type(from_kwarg).__name__}", field="kwargs.base_yaml_config")
    field = _base_field(inp)
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

    def open_base() -> Base:  # where AgentJetJob opens base_yaml_config: after refusing unknown kwargs
        path, field = _base_path(inp, cwd)
        return load_base(path, field=field, release=release) if path is not None else default_base(release)

    built = construct(release, open_base, dict(inp.kwargs), dict(inp.set or {}), base_field=_base_field(inp), cwd=cwd)
    base = built.composition.base
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
        entries.append(ProvenanceEntry(key=key, value=json_safe(value), source=source,  # type: ignore[arg-type]
                                       base_value=json_safe(before.get(key)), layer=layer,
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
