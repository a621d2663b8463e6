"""Tool ``build_config``: the YAML ``AgentJetJob(...).dump_job_as_yaml()`` writes, byte for byte, with provenance.

The tool picks the AgentJet to describe (a bundled release or an install read statically; see
``agentjet.release``), resolves paths against ``cwd``, refuses what AgentJet refuses (with the cause in
plain words and AgentJet's exception, see ``agentjet.refusals``), runs the construction on plain data
(``agentjet.job``) and reports where every value came from. It only reads, unless ``output_path`` asks
it to create a new file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from skill_server.agentjet import yamltypes
from skill_server.agentjet.compose import Base, default_base, load_base
from skill_server.agentjet.job import Construction, construct, dump, to_plain
from skill_server.agentjet.release import OverridesTable, select_agentjet
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.core.fsutil import describe_kind, resolve_directory, resolve_path, write_text_atomic
from skill_server.core.jsonsafe import json_safe
from skill_server.core.trees import flatten
from skill_server.tools.build_config.models import (
    BaseInfo,
    BuildConfigInput,
    BuildConfigResult,
    ProvenanceEntry,
    UnknownInput,
)

if TYPE_CHECKING:
    from skill_server.analysis.agentjet import AgentJet
    from skill_server.analysis.replay import Run

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


@dataclass
class ScriptJob:
    """The one AgentJetJob of a client script, as the static analysis resolves it (``analysis.inputs``)."""

    line: int
    base: Path | None  # the base YAML it composes (None: AgentJet's default)
    kwargs: dict[str, object] = field(default_factory=dict)
    sets: dict[str, object] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)  # key -> why the script's value is unknown
    warnings: list[str] = field(default_factory=list)


def _script_job(inp: BuildConfigInput) -> ScriptJob:
    """Read the script's construction; refuse (naming ``script``) what static analysis cannot build from."""
    from skill_server.analysis.analyse import analyse_arguments
    from skill_server.analysis.inputs import job_inputs

    assert inp.script is not None
    try:
        aj, analysis = analyse_arguments(inp.script, inp.base_yaml, inp.cwd, inp.agentjet_version, inp.agentjet_root)
    except ToolInputError as exc:
        if exc.field == "yaml":  # the analysis's name for the base given instead of the script's own
            raise ToolInputError(exc.message, field="base_yaml") from None
        raise
    runs = [run for run in analysis.runs if run.construction is not None]
    if not runs:
        raise ToolInputError("has no AgentJetJob(...) construction to build from; give kwargs instead", field="script")
    if len(runs) > 1:
        lines = ", ".join(str(run.construction.line) for run in runs if run.construction)
        raise ToolInputError(f"builds {len(runs)} AgentJetJobs (lines {lines}); give the kwargs of the one the "
                             "engine runs", field="script")
    run = runs[0]
    assert run.construction is not None
    base = run.base
    if base.state in ("missing", "unresolved"):
        raise ToolInputError(f"the base YAML of the AgentJetJob at line {run.construction.line} cannot be read "
                             f"({base.reason or base.state}); give base_yaml", field="script")
    _refuse_what_the_script_raises(aj, run)
    found = job_inputs(aj, run)
    job = ScriptJob(run.construction.line, base.path if base.state in ("file", "refused") else None,
                    dict(found.kwargs), dict(found.sets), dict(found.unknown_keys))
    job.warnings += _what_never_reaches_the_engine(aj, run)
    _pass_on_what_agentjet_judges(aj, run, job)
    job.warnings += [f"left out: {what}" for what in found.left_out if what.startswith("ensure_new_experiment")]
    job.warnings += [f"assumes {what}" for what in found.assumes]
    return job


def _refuse_what_the_script_raises(aj: AgentJet, run: Run) -> None:
    """A write whose access fails at run time (attribute access on a plain-dict section, item assignment on a
    dataclass) stops the script before any config is dumped: refused, as check_config's unknown-key finds it
    (``analysis.access``; a missing section is refused by the build itself, with AgentJet's own message)."""
    from skill_server.analysis.access import access_problem, raised_by

    late = {id(w) for w, _ in run.late_writes}
    for w in run.writes:
        if w.kind in ("mirror", "method") or id(w) in late:
            continue
        problem = access_problem(aj, w)
        if problem is None or problem.kind not in ("attribute-on-dict", "item-on-dataclass"):
            continue
        how = "attribute access on the plain dict" if problem.kind == "attribute-on-dict" else \
            "item assignment on the dataclass"
        fix = aj.write_expression(w.key)
        raise ToolInputError(f"line {w.line} writes {w.key} by {how} {problem.parent or 'config'}, so the script "
                             f"raises {raised_by(aj, problem)} there, before any config is dumped; write {fix} = ... "
                             "instead (check_config: unknown-key)", field="script")


def _what_never_reaches_the_engine(aj: AgentJet, run: Run) -> list[str]:
    """Writes the script makes that the engine never gets (check_config: unknown-key, write-after-dump): said,
    since the YAML built here leaves them out as AgentJet would."""
    out: list[str] = []
    for w, freeze in run.late_writes:
        out.append(f"line {w.line} writes {w.key} after {freeze.call}() at line {freeze.line}: the engine never gets "
                   "it, so this YAML leaves it out (check_config: write-after-dump)")
    late = {id(w) for w, _ in run.late_writes}
    for w in run.writes:
        key = aj.key_for(w.key) if w.kind == "mirror" else None
        if key is not None and id(w) not in late:
            out.append(f"line {w.line}: job.{w.key} = ... changes only the job's copy of the value; the dumped config "
                       f"keeps {key}, so this YAML does too (check_config: unknown-key)")
    return out


def _pass_on_what_agentjet_judges(aj: AgentJet, run: Run, job: ScriptJob) -> None:
    """What the consolidation leaves out (a kwarg this AgentJet lacks, a write to a key its config lacks) goes
    to the build, so it refuses or warns exactly as AgentJetJob does; only ensure_new_experiment stays out (it
    would stamp today's time into the name)."""
    assert run.construction is not None
    for name, kw in run.construction.kwargs.items():
        if name not in ("base_yaml_config", "ensure_new_experiment") and not aj.accepts(name) and kw.value.resolved:
            job.kwargs[name] = kw.value.value
    late = {id(w) for w, _ in run.late_writes}
    for w in run.writes:
        if w.kind not in ("mirror", "method") and id(w) not in late and not aj.known(w.key) and w.value.resolved:
            job.sets[w.key] = w.value.value


def _still_unknown(job: ScriptJob, inp: BuildConfigInput, table: OverridesTable) -> list[UnknownInput]:
    """The script's unknown inputs that no kwarg or write given here replaces."""
    given = set(inp.set or {}) | {table.key_for(n) for n in inp.kwargs if table.accepts(n)} | set(inp.kwargs)
    return [UnknownInput(key=key, reason=why) for key, why in job.unknown.items() if key not in given]


def _summary(result: BuildConfigResult, job: ScriptJob | None, inp: BuildConfigInput, n_kwargs: int,
             n_sets: int) -> str:
    """One line: what was built, from what, for which AgentJet, and what stays unknown."""
    from skill_server.agentjet.identity import agentjet_label

    source = f"{inp.script}'s AgentJetJob (line {job.line})" if job is not None else "the kwargs given"
    line = (f"Built the YAML AgentJetJob dumps for {agentjet_label(result.agentjet)} from {source}: {n_kwargs} "
            f"kwarg{'s' if n_kwargs != 1 else ''} and {n_sets} write{'s' if n_sets != 1 else ''} over "
            f"{result.base.path}.")
    if result.unknown:
        keys = ", ".join(u.key for u in result.unknown[:5]) + (", ..." if len(result.unknown) > 5 else "")
        line += (f" {len(result.unknown)} value{'s' if len(result.unknown) != 1 else ''} known only at run time "
                 f"({keys}): the YAML shows the base value there.")
    if result.warnings:
        line += f" {len(result.warnings)} warning{'s' if len(result.warnings) != 1 else ''} (see warnings)."
    if result.written:
        line += f" Written to {result.written}."
    return line


# --- the tool ----------------------------------------------------------------------------------------------


def build_config(inp: BuildConfigInput) -> BuildConfigResult:
    """Reproduce ``AgentJetJob(**kwargs)`` + writes + ``dump_job_as_yaml()``; optionally create a file with it."""
    cwd = resolve_directory(inp.cwd, field="cwd") if inp.cwd is not None else None
    _check_values(inp)
    job = _script_job(inp) if inp.script is not None else None
    release = select_agentjet(inp.agentjet_version, inp.agentjet_root, cwd=cwd)
    output = _output_path(inp, cwd)
    kwargs = {**(job.kwargs if job else {}), **inp.kwargs}
    sets = {**(job.sets if job else {}), **(inp.set or {})}

    from_script = job is not None and job.base is not None and _base_path(inp, cwd)[0] is None
    base_field = "script" if from_script else _base_field(inp)

    def open_base() -> Base:  # where AgentJetJob opens base_yaml_config: after refusing unknown kwargs
        path, field = (job.base, "script") if from_script and job is not None else _base_path(inp, cwd)
        return load_base(path, field=field, release=release) if path is not None else default_base(release)

    built = construct(release, open_base, kwargs, sets, base_field=base_field, cwd=cwd)
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
    warnings = [*(job.warnings if job else []), *built.warnings]
    unknown = _still_unknown(job, inp, release.overrides) if job else []
    result = BuildConfigResult(
        summary="",
        yaml=text,
        agentjet=release.ref,
        base=BaseInfo(kind="file" if base.kind == "file" else "default", path=base.origin),
        layers=[layer.origin for layer in built.composition.layers],
        provenance=_provenance(built, inp.provenance),
        warnings=warnings,
        written=written,
        unknown=unknown,
    )
    result.summary = _summary(result, job, inp, len(kwargs), len(sets))
    return result


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
        # source is one of the provenance literals (computed above as a plain str); pydantic checks it again
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
