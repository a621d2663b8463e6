"""Tool ``check_config``: a static linter for AgentJet swarm client scripts and their YAML.

AgentJet's rule for swarm clients is one place per setting: ``AgentJetJob`` kwargs (plus writes to
``job.config.ajet...`` after construction for fields without a kwarg), or the YAML, never both. This
tool reads the script with ``ast`` (see ``script_scan``), composes the YAML and AgentJet's defaults the
way ``build_config`` does, replays kwargs and writes through the overrides table, and reports findings
with stable rule ids. Nothing is imported or executed.
"""

from __future__ import annotations

import copy
import difflib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from skill_server.agentjet.compose import Layer, compose, default_base, flatten, get_path, load_base, merge_layers, \
    set_path
from skill_server.agentjet.locate import AgentJetInstall
from skill_server.agentjet.release import LENGTH_KWARGS, InstallRelease, OverridesTable, Release, Schema, \
    newest_bundled, select_agentjet
from skill_server.cap import EpisodeCapInput, compute_episode_cap
from skill_server.errors import ToolInputError
from skill_server.models import ToolInput, ToolOutput
from skill_server.safe_yaml import MAX_YAML_BYTES, load_yaml_file
from skill_server.script_scan import Construction, Freeze, PathRef, Scope, ScriptScan, Write, scan_script

log = logging.getLogger(__name__)

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
RULES: dict[str, Severity] = {
    "split-configuration": "warning",
    "kwarg-overrides-yaml": "warning",
    "redundant-kwarg": "info",
    "escape-hatch-has-kwarg": "warning",
    "unknown-key": "error",
    "unsupported-kwarg": "error",
    "write-after-dump": "error",
    "kwarg-group-incomplete": "error",
    "length-budget": "error",
    "lora-rules": "error",
    "batch-not-divisible-by-gpus": "error",
    "interchange-not-tcp": "error",
    "base-not-swarm": "warning",
    "cap-not-divisible": "warning",
    "cap-limited-by-batch": "warning",
    "tracker-threads-below-cap": "warning",
}
CONTROL_KWARGS = ("base_yaml_config", "ensure_new_experiment")
INTERCHANGE_KEY = "ajet.interchange_server.interchange_method"
TRACKER_KEY = "ajet.interchange_server.max_inference_tracker_threads"
K = {
    "max_env_worker": "ajet.rollout.max_env_worker",
    "num_repeat": "ajet.rollout.num_repeat",
    "train_batch_size": "ajet.data.train_batch_size",
    "n_gpus_per_node": "ajet.trainer_common.n_gpus_per_node",
    "nnodes": "ajet.trainer_common.nnodes",
    "max_prompt_length": "ajet.data.max_prompt_length",
    "max_response_length": "ajet.data.max_response_length",
    "max_model_len": "ajet.rollout.max_model_len",
    "max_response_length_in_one_turn": "ajet.rollout.max_response_length_in_one_turn",
    "lora_rank": "ajet.lora.lora_rank",
    "lora_load_format": "ajet.lora.load_format",
    "layered_summon": "ajet.lora.layered_summon",
    "lr": "ajet.trainer_common.optim.lr",
    "swarm": "ajet.enable_swarm_mode",
    "interchange_server": "ajet.enable_interchange_server",
    "method": "ajet.swarm_mode_sample_collection_method",
}


# --- models -----------------------------------------------------------------------------------------


class CheckConfigInput(ToolInput):
    script: str | None = Field(default=None, description="Path of a Python swarm client script (read, never run).")
    yaml: str | None = Field(
        default=None, description="Path of a YAML to check: the base the script passes as base_yaml_config (it "
        "replaces the script's own base_yaml_config for the comparison), or a YAML on its own.")
    agentjet_root: str | None = Field(default=None, description="AgentJet checkout or installed package folder: "
                                      "its overrides table, schema and defaults are used instead of the snapshot.")
    cwd: str | None = Field(default=None, description="Directory the client is launched from, for a relative "
                            "base_yaml_config. Default: the script's folder, then its parents.")

    @model_validator(mode="after")
    def _something_to_check(self) -> CheckConfigInput:
        if not self.script and not self.yaml:
            raise ValueError("give script (a swarm client .py), yaml, or both")
        return self


class Location(ToolOutput):
    file: str
    line: int | None = None


class Finding(ToolOutput):
    rule: str
    severity: Severity
    key: str | None = Field(description="Dotted config key, e.g. ajet.rollout.max_env_worker.")
    message: str
    locations: list[Location]
    values: dict[str, Any]
    fix: str


class Summary(ToolOutput):
    errors: int
    warnings: int
    infos: int


class LoraValues(ToolOutput):
    lora_rank: Any = None
    load_format: Any = None
    layered_summon: Any = None
    lr: Any = None


class Effective(ToolOutput):
    """The values the engine would get (kwargs, then the tcp switch, then writes made before any dump)."""

    max_env_worker: Any = None
    num_repeat: Any = None
    train_batch_size: Any = None
    n_gpus_per_node: Any = None
    nnodes: Any = None
    interchange_method: Any = None
    max_prompt_length: Any = None
    max_response_length: Any = None
    max_response_length_in_one_turn: Any = None
    max_model_len: Any = None
    lora: LoraValues
    enable_swarm_mode: Any = None
    enable_interchange_server: Any = None
    max_inference_tracker_threads: Any = None
    swarm_mode_sample_collection_method: Any = None
    model_path: Any = None
    logger: Any = None
    experiment_name: Any = None
    episode_cap: int | None = Field(default=None, description="From episode_cap on these values, when computable.")
    source: dict[str, str] = Field(description="Per value above: default, yaml, kwarg, write or tcp-switch.")
    unresolved: dict[str, str] = Field(description="Key -> source text of a value the script computes at run time.")


class KwargInfo(ToolOutput):
    name: str
    value: Any
    resolved: bool
    expression: str
    how: str
    line: int


class WriteInfo(ToolOutput):
    key: str
    value: Any
    resolved: bool
    expression: str
    kind: str
    line: int
    after_freeze: bool


class FreezeInfo(ToolOutput):
    call: str
    line: int


class BaseYamlInfo(ToolOutput):
    expression: str | None = Field(description="base_yaml_config as written in the script (null: not passed).")
    path: str | None = Field(description="The YAML compared (null: AgentJet's defaults).")
    anchor: Literal["absolute", "script_dir", "cwd", "explicit", "defaults", "unresolved"]
    exists: bool


class ConstructionInfo(ToolOutput):
    line: int
    variable: str | None
    callee: str
    kwargs: list[KwargInfo]
    dynamic_kwargs: list[str] = Field(description="Splats or positional arguments that could not be resolved.")
    base_yaml: BaseYamlInfo
    writes: list[WriteInfo]
    freezes: list[FreezeInfo]
    effective: Effective


class AgentJetInfo(ToolOutput):
    root: str | None
    version_hint: str | None
    overrides_table: str
    schema_source: str


class CheckConfigResult(ToolOutput):
    findings: list[Finding]
    summary: Summary
    effective: Effective | None = Field(description="Resolved values of the first construction (or the YAML alone).")
    constructions: list[ConstructionInfo]
    yaml_customised: list[str] = Field(description="Keys the checked YAML sets to something other than AgentJet's "
                                       "defaults.")
    agentjet: AgentJetInfo
    notes: list[str]


# --- the defaults, loaded like build_config ---------------------------------------------------------


class _Unknown:
    """A value the script computes at run time."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"<runtime: {self.text}>"

    def __deepcopy__(self, memo: dict[int, Any]) -> _Unknown:
        return self


@dataclass
class _Knowledge:
    release: Release
    install: AgentJetInstall | None
    table: OverridesTable
    schema: Schema
    defaults: dict[str, Any]
    defaults_flat: dict[str, Any]
    sections: set[str]
    free_form: set[str]  # keys whose default is an empty mapping: anything may go below them
    dataclass_paths: set[str]
    field_paths: set[str]
    agentjet_layers: set[str]
    warnings: list[str]
    candidates: list[str] = field(default_factory=list)

    def known(self, key: str) -> bool:
        if key in self.defaults_flat or key in self.sections or key in self.field_paths:
            return True
        return any(key.startswith(prefix + ".") for prefix in self.free_form)

    def closest(self, key: str) -> str | None:
        if not self.candidates:
            self.candidates = sorted(set(self.defaults_flat) | self.sections)
        pool = [c for c in self.candidates if c.split(".")[0] == key.split(".")[0]] or self.candidates
        close = difflib.get_close_matches(key, pool, n=1, cutoff=0.75)
        if close:
            return close[0]
        parent, _, leaf = key.rpartition(".")  # same section, similar leaf
        siblings = [c.rpartition(".")[2] for c in pool if c.rpartition(".")[0] == parent]
        near = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
        return f"{parent}.{near[0]}" if near else None


def _load_knowledge(agentjet_root: str | None) -> _Knowledge:
    release = select_agentjet(None, agentjet_root)
    install = release.install if isinstance(release, InstallRelease) else None
    table, schema, warnings = release.overrides, release.schema, []
    composition = compose(release, default_base(release), field="agentjet_root")
    warnings.extend(composition.warnings)
    defaults, _ = merge_layers(composition.layers, start=schema.defaults())
    flat = flatten(defaults)
    sections: set[str] = set()

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                sections.add(prefix + str(key))
                walk(value, f"{prefix}{key}.")

    walk(defaults, "")
    free_form = {k for k, v in flat.items() if v == {}}
    return _Knowledge(release, install, table, schema, defaults, flat, sections, free_form, schema.dataclass_paths(),
                      schema.field_paths(), {layer.name for layer in composition.layers} | {"schema"}, warnings)


# --- per construction: base, overlay, provenance ------------------------------------------------------


@dataclass
class _Setter:
    kind: str  # yaml | kwarg | write | tcp-switch
    file: str
    line: int | None
    value: Any


@dataclass
class _Base:
    path: Path | None
    anchor: str
    expression: str | None
    exists: bool
    tree: dict[str, Any]
    origin: dict[str, str]
    user_layers: set[str]
    layer_files: dict[str, str]  # user layer name -> file
    composes_swarm: bool
    layer_names: list[str]
    customised: dict[str, Any]
    explicit_keys: set[str]  # keys the user's own files set (equal to the default or not)


@dataclass
class _Run:
    """What one construction (or the YAML alone) ends up as."""

    construction: Construction | None
    base: _Base
    tree: dict[str, Any]
    setters: dict[str, list[_Setter]]
    applied_writes: list[Write]
    late_writes: list[tuple[Write, Freeze]]
    writes: list[Write]
    freezes: list[Freeze]


class _Linter:
    def __init__(self, inp: CheckConfigInput) -> None:
        self.inp = inp
        self.findings: list[Finding] = []
        self.notes: list[str] = []
        self.know = _load_knowledge(inp.agentjet_root)
        self.notes.extend(self.know.warnings)
        self.scan: ScriptScan | None = None
        self.script_file = ""
        self._yaml_lines: dict[str, dict[str, int]] = {}
        self._base_cache: dict[str | None, _Base] = {}

    # -- entry

    def run(self) -> CheckConfigResult:
        explicit: Path | None = None
        if self.inp.yaml:
            explicit = Path(self.inp.yaml).expanduser()
            load_yaml_file(explicit, field="yaml")  # clear errors first: missing, not a mapping, too large
            explicit = explicit.resolve()
        runs: list[_Run] = []
        infos: list[ConstructionInfo] = []
        if self.inp.script:
            self.scan = scan_script(self.inp.script, field="script")
            self.script_file = str(self.scan.path)
            self.notes.extend(self.scan.notes)
            for construction in self.scan.constructions:
                run = self._overlay(construction, self._base_for(construction, explicit))
                runs.append(run)
                self._lint_construction(run)
                infos.append(self._construction_info(run))
            orphans = [w for w in self.scan.writes if w.construction is None]
            if orphans and len(self.scan.constructions) != 1:
                self.notes.append(f"{len(orphans)} write(s) to a job's config could not be tied to one construction "
                                  f"(lines {', '.join(str(w.line) for w in orphans[:8])}); they are not checked")
        if not runs:
            base = self._base_file(explicit, "explicit", None) if explicit else self._base_file(None, "defaults", None)
            run = self._overlay(None, base)
            runs.append(run)
            if explicit is None:
                self.notes.append("nothing to compare: no construction and no yaml; AgentJet's defaults were checked")
        self._lint_yaml(runs[0].base)
        for run in runs:
            self._lint_effective(run)
        findings = _dedupe(self.findings)
        findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.locations[0].line or 0 if f.locations else 0,
                                     f.rule, f.key or ""))
        summary = Summary(errors=sum(f.severity == "error" for f in findings),
                          warnings=sum(f.severity == "warning" for f in findings),
                          infos=sum(f.severity == "info" for f in findings))
        install = self.know.install
        return CheckConfigResult(
            findings=findings,
            summary=summary,
            effective=self._effective(runs[0]),
            constructions=infos,
            yaml_customised=sorted(runs[0].base.customised),
            agentjet=AgentJetInfo(root=str(install.root) if install else None,
                                  version_hint=self.know.release.ref.version,
                                  overrides_table=self.know.table.source, schema_source=self.know.schema.source),
            notes=list(dict.fromkeys(self.notes)),
        )

    # -- the YAML compared

    def _base_for(self, c: Construction, explicit: Path | None) -> _Base:
        expression = c.base_yaml.text if c.base_yaml is not None else None
        ref = c.base_path
        if explicit is not None:
            if ref is not None and ref.anchor != "cwd" and Path(ref.path).resolve() != explicit:
                self.notes.append(f"the script's base_yaml_config ({ref.path}) is not the yaml given ({explicit}); "
                                  "the given yaml was compared")
            elif c.base_yaml is None:
                self.notes.append("the script passes no base_yaml_config, so AgentJetJob would use AgentJet's "
                                  f"defaults; {explicit.name} was analysed as if it were the base")
            return self._base_file(explicit, "explicit", expression)
        if c.base_yaml is None:
            return self._base_file(None, "defaults", None)
        if ref is None:
            self.notes.append(f"base_yaml_config={expression} (line {c.kwargs['base_yaml_config'].line}) cannot be "
                              "resolved statically; AgentJet's defaults were compared instead (pass yaml= to check it)")
            return self._base_file(None, "unresolved", expression)
        if ref.anchor == "cwd":
            found = self._find_relative(ref.path)
            if found is None:
                self.notes.append(f"base_yaml_config {ref.path!r} is relative to the working directory of the client "
                                  "and was not found next to the script or above it; AgentJetJob raises "
                                  "'Configuration yaml is absent!' when it is missing. Pass cwd= or yaml= to check it")
                return self._base_file(None, "cwd", expression, exists=False, shown=ref.path)
            self.notes.append(f"base_yaml_config {ref.path!r} is relative to the working directory: found as {found} "
                              "(the client must be started from that directory; prefer a path built from __file__)")
            return self._base_file(found, "cwd", expression)
        path = Path(ref.path)
        if not path.is_file():
            self.notes.append(f"base_yaml_config resolves to {path}, which does not exist (AgentJetJob raises "
                              "'Configuration yaml is absent!'); AgentJet's defaults were compared instead")
            return self._base_file(None, ref.anchor, expression, exists=False, shown=str(path))
        return self._base_file(path, ref.anchor, expression)

    def _find_relative(self, rel: str) -> Path | None:
        roots: list[Path] = []
        if self.inp.cwd:
            roots.append(Path(self.inp.cwd).expanduser())
        elif self.scan is not None:
            roots.extend([self.scan.path.parent, *list(self.scan.path.parent.parents)[:6]])
        for root in roots:
            candidate = root / rel
            if candidate.is_file():
                return candidate.resolve()
        return None

    def _base_file(self, path: Path | None, anchor: str, expression: str | None, *, exists: bool = True,
                   shown: str | None = None) -> _Base:
        cache_key = str(path) if path else None
        cached = self._base_cache.get(cache_key)
        if cached is None:
            field_name = "yaml" if anchor == "explicit" else "script"
            release = self.know.release
            spec = load_base(path, field=field_name, release=release) if path else default_base(release)
            composition = compose(release, spec, field=field_name)
            self.notes.extend(composition.warnings)
            tree, origin = merge_layers(composition.layers, start=self.know.schema.defaults())
            user = self._user_layers(composition.layers) if path else {}
            customised = {k: v for k, v in flatten(tree).items()
                          if origin.get(k) in user and self.know.defaults_flat.get(k, _MISSING) != v}
            explicit_keys = {k for k, layer in origin.items() if layer in user}
            cached = _Base(path, anchor, expression, exists, tree, origin, set(user), user,
                           any(layer.name == "ajet_swarm_default" for layer in composition.layers) or path is None,
                           [layer.name for layer in composition.layers], customised, explicit_keys)
            self._base_cache[cache_key] = cached
        base = copy.copy(cached)
        base.anchor, base.expression, base.exists = anchor, expression, exists
        if shown is not None:
            base.path = Path(shown)
        return base

    def _user_layers(self, layers: list[Layer]) -> dict[str, str]:
        package = str(self.know.install.package) if self.know.install else None
        out: dict[str, str] = {}
        for layer in layers:
            own = layer.origin.startswith("bundled:") or (package is not None and layer.origin.startswith(package))
            if not own:
                out[layer.name] = layer.origin
        return out

    def _yaml_line(self, base: _Base, key: str) -> Location:
        layer = base.origin.get(key)
        file = base.layer_files.get(layer or "", str(base.path) if base.path else "")
        if file not in self._yaml_lines:
            self._yaml_lines[file] = _key_lines(Path(file)) if file else {}
        return Location(file=file, line=self._yaml_lines[file].get(key))

    # -- replaying AgentJetJob

    def _overlay(self, c: Construction | None, base: _Base) -> _Run:
        tree = copy.deepcopy(base.tree)
        setters: dict[str, list[_Setter]] = {}
        for key in base.customised:
            loc = self._yaml_line(base, key)
            setters.setdefault(key, []).append(_Setter("yaml", loc.file, loc.line, base.customised[key]))
        run = _Run(c, base, tree, setters, [], [], [], [])
        if c is None:
            self._tcp_switch(run)
            return run
        table = self.know.table
        for kwarg, key in table.rows:
            given = c.kwargs.get(kwarg)
            if given is None or not table.accepts(kwarg):
                continue
            value = given.value.value if given.value.resolved else _Unknown(given.value.text)
            if value is None:
                continue  # None keeps the YAML value, as in AgentJetJob
            set_path(tree, key, value)
            setters.setdefault(key, []).append(_Setter("kwarg", self.script_file, given.line, value))
        self._tcp_switch(run)
        assert self.scan is not None
        single = len(self.scan.constructions) == 1
        run.writes = [w for w in self.scan.writes if w.construction == c.index or (w.construction is None and single)]
        run.freezes = [f for f in self.scan.freezes if f.construction == c.index or (f.construction is None and single)]
        for write in run.writes:
            if write.kind in ("mirror",):
                continue
            late = next((f for f in run.freezes if _happens_after(write.scope, write.line, f.scope, f.line)), None)
            if late is not None:
                run.late_writes.append((write, late))
                continue
            if write.kind == "method":
                continue
            run.applied_writes.append(write)
            value = write.value.value if write.value.resolved else _Unknown(write.value.text)
            if _settable(tree, write.key):
                set_path(tree, write.key, value)
                for stale in [k for k in setters if k.startswith(write.key + ".")]:
                    setters[stale].append(_Setter("write", self.script_file, write.line, None))
                setters.setdefault(write.key, []).append(_Setter("write", self.script_file, write.line, value))
        return run

    def _tcp_switch(self, run: _Run) -> None:
        nnodes = get_path(run.tree, K["nnodes"], None)
        if get_path(run.tree, K["swarm"], None) is True and _is_int(nnodes) and nnodes > 1:
            if get_path(run.tree, INTERCHANGE_KEY, None) != "tcp":
                set_path(run.tree, INTERCHANGE_KEY, "tcp")
                where = self._where(run, K["nnodes"])
                run.setters.setdefault(INTERCHANGE_KEY, []).append(
                    _Setter("tcp-switch", where[0].file if where else self.script_file,
                            where[0].line if where else None, "tcp"))

    # -- provenance helpers

    def _where(self, run: _Run, *keys: str) -> list[Location]:
        out: list[Location] = []
        for key in keys:
            for setter in run.setters.get(key, []):
                if setter.kind != "tcp-switch":
                    out.append(Location(file=setter.file, line=setter.line))
        return _unique_locations(out)

    def _source(self, run: _Run, key: str) -> str:
        setters = run.setters.get(key)
        if setters:
            return setters[-1].kind
        if any(key.startswith(w.key + ".") for w in run.applied_writes):
            return "write"
        return "default"

    def _value(self, run: _Run, key: str) -> Any:
        value = get_path(run.tree, key, None)
        return None if isinstance(value, _Unknown) else value

    def _construction_location(self, run: _Run) -> list[Location]:
        if run.construction is not None:
            return [Location(file=self.script_file, line=run.construction.line)]
        return [Location(file=str(run.base.path) if run.base.path else "AgentJet defaults", line=None)]

    def _add(self, rule: str, key: str | None, message: str, locations: list[Location], values: dict[str, Any],
             fix: str) -> None:
        self.findings.append(Finding(rule=rule, severity=RULES[rule], key=key, message=message,
                                     locations=locations, values=_jsonable(values), fix=fix))

    # -- rules on the script

    def _lint_construction(self, run: _Run) -> None:
        c = run.construction
        assert c is not None
        table, bundled = self.know.table, newest_bundled().overrides
        for name, kw in c.kwargs.items():
            if name in CONTROL_KWARGS and (table.accepts(name) or name in table.control_kwargs):
                continue
            if table.accepts(name) and table.key_for(name):
                continue
            loc = [Location(file=self.script_file, line=kw.line)]
            if bundled.key_for(name):
                where = self.know.release.label
                self._add("unsupported-kwarg", bundled.key_for(name),
                          f"{where} has no AgentJetJob kwarg {name!r} (newer versions do): the constructor raises "
                          "TypeError", loc, {"kwarg": name, "value": kw.value.value if kw.value.resolved else None},
                          f"set {bundled.key_for(name)} in the YAML or by a write after construction, or upgrade "
                          "AgentJet")
            else:
                valid = sorted(set(table.kwargs) | set(table.control_kwargs))
                close = difflib.get_close_matches(name, valid, n=1)
                self._add("unsupported-kwarg", None,
                          f"AgentJetJob has no kwarg {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                          + ": the constructor raises TypeError", loc,
                          {"kwarg": name, "closest": close[0] if close else None},
                          f"rename it to {close[0]}" if close else "remove it; valid kwargs: " + ", ".join(valid))
        self._length_group(run)
        self._yaml_vs_kwargs(run)
        self._writes(run)
        self._split(run)

    def _length_group(self, run: _Run) -> None:
        c = run.construction
        assert c is not None
        given = [k for k in LENGTH_KWARGS if k in c.kwargs and not (c.kwargs[k].value.resolved
                                                                     and c.kwargs[k].value.value is None)]
        if not given or len(given) == len(LENGTH_KWARGS):
            return
        if c.dynamic:
            self.notes.append("the length kwargs look incomplete but the construction also has dynamic kwargs "
                              f"({', '.join(c.dynamic)}); kwarg-group-incomplete was not checked")
            return
        missing = [k for k in LENGTH_KWARGS if k not in given]
        suggestions = {k: self._value(run, self.know.table.key_for(k) or K[k]) for k in missing}
        self._add("kwarg-group-incomplete", self.know.table.key_for(missing[0]) or K[missing[0]],
                  f"AgentJetJob needs the four length kwargs all set or all unset; given {', '.join(given)}, missing "
                  f"{', '.join(missing)}: the constructor raises ValueError ('must all be None or all be non-None')",
                  [Location(file=self.script_file, line=c.kwargs[k].line) for k in given],
                  {"given": given, "missing": missing},
                  "also pass " + ", ".join(f"{k}={suggestions[k]!r}" for k in missing)
                  + " (the current values), or drop the length kwargs and set them in one place")

    def _yaml_vs_kwargs(self, run: _Run) -> None:
        c = run.construction
        assert c is not None
        for kwarg, key in self.know.table.rows:
            kw = c.kwargs.get(kwarg)
            if kw is None or key not in run.base.customised or not self.know.table.accepts(kwarg):
                continue
            if kw.value.resolved and kw.value.value is None:
                continue
            yaml_value = run.base.customised[key]
            locs = [Location(file=self.script_file, line=kw.line), self._yaml_line(run.base, key)]
            if not kw.value.resolved:
                continue  # split-configuration names it; whether it differs is known only at run time
            if _same(kw.value.value, yaml_value):
                self._add("redundant-kwarg", key,
                          f"kwarg {kwarg}={kw.value.value!r} repeats the YAML value of {key}", locs,
                          {"kwarg": kwarg, "kwarg_value": kw.value.value, "yaml_value": yaml_value},
                          f"drop {kwarg}=... or remove {key} from the YAML, so the value lives in one place")
            else:
                self._add("kwarg-overrides-yaml", key,
                          f"kwarg {kwarg}={kw.value.value!r} silently replaces {key}: {yaml_value!r} set in "
                          f"{Path(locs[1].file).name}", locs,
                          {"kwarg": kwarg, "kwarg_value": kw.value.value, "yaml_value": yaml_value},
                          f"keep one: set {key}: {_yaml_scalar(kw.value.value)} in the YAML and drop the kwarg, or "
                          f"remove {key} from the YAML")

    def _writes(self, run: _Run) -> None:
        table = self.know.table
        for write, freeze in run.late_writes:
            self._add("write-after-dump", write.key if write.kind != "mirror" else table.key_for(write.key),
                      f"line {write.line} changes {write.key} after {freeze.call}() at line {freeze.line} already "
                      "serialised the config: the engine never sees it",
                      [Location(file=self.script_file, line=write.line),
                       Location(file=self.script_file, line=freeze.line)],
                      {"write_line": write.line, "freeze": freeze.call, "freeze_line": freeze.line},
                      f"move the write above line {freeze.line} (or, better, into the AgentJetJob kwargs / YAML)")
        late = {id(w) for w, _ in run.late_writes}
        for write in run.writes:
            loc = [Location(file=self.script_file, line=write.line)]
            if write.kind == "mirror":
                key = table.key_for(write.key)
                if key is not None and id(write) not in late:
                    self._add("unknown-key", key,
                              f"job.{write.key} = ... (line {write.line}) only changes the job's copy of the "
                              f"resolved value; the config ({key}) that gets dumped is not touched and nothing "
                              "reads the attribute", loc, {"attribute": write.key, "config_key": key},
                              f"pass {write.key}=... to AgentJetJob instead")
                continue
            if write.kind == "method":
                continue
            self._access(write, loc)
            kwarg = table.kwarg_for(write.key)
            leaves = [write.key]
            if write.kind == "whole-dict" and write.value.resolved and isinstance(write.value.value, dict):
                leaves += [f"{write.key}.{k}" for k in flatten(write.value.value)]
                for leaf in leaves[1:]:
                    if not self.know.known(leaf) and self.know.known(write.key) and write.key not in self.know.free_form:
                        close = self.know.closest(leaf)
                        self._add("unknown-key", leaf,
                                  f"the dict written to {write.key} at line {write.line} has key {leaf.rsplit('.', 1)[1]!r}, "
                                  "which AgentJet's defaults do not have" + (f" (did you mean {close}?)" if close else ""),
                                  loc, {"closest": close}, f"use {close}" if close else f"remove it from the dict")
                dropped = sorted(k for k in flatten(get_path(self.know.defaults, write.key, {}) or {})
                                 if k not in flatten(write.value.value)) if isinstance(
                    get_path(self.know.defaults, write.key, None), dict) else []
                if dropped:
                    self.notes.append(f"line {write.line} replaces the whole {write.key} dict: default keys "
                                      f"{', '.join(dropped)} are no longer in the config the engine gets")
            for leaf in leaves:
                kwarg = table.kwarg_for(leaf)
                if kwarg:
                    self._add("escape-hatch-has-kwarg", leaf,
                              f"line {write.line} writes {leaf} after construction although AgentJetJob has the kwarg "
                              f"{kwarg}: the write skips AgentJetJob's checks and hides the setting from the kwargs",
                              loc, {"kwarg": kwarg, "value": write.value.value if write.value.resolved else None},
                              f"pass {kwarg}={_py(write.value)} to AgentJetJob and delete the write")

    def _access(self, write: Write, loc: list[Location]) -> None:
        """Attribute vs item access against the real object types; unknown keys with a suggestion."""
        know = self.know
        parts = [p for p, _ in write.access]
        for i, (part, how) in enumerate(write.access):
            parent = ".".join(parts[:i])
            path = ".".join(parts[: i + 1])
            parent_is_dataclass = parent == "" or parent in know.dataclass_paths
            parent_is_dict = not parent_is_dataclass and isinstance(get_path(know.defaults, parent, None), dict)
            if how == "attr" and parent_is_dict:
                rest = "".join(f"[{p!r}]" for p in parts[i:])
                self._add("unknown-key", write.key,
                          f"{parent} is a plain dict in AgentJet's config, so attribute access "
                          f"(.{part}) at line {write.line} raises AttributeError at run time", loc,
                          {"access_error": "AttributeError", "dict_section": parent},
                          f"write job.config.{parent}{rest} = ... (item access) instead")
                return
            if how == "item" and parent_is_dataclass and parent in know.sections | {""}:
                self._add("unknown-key", write.key,
                          f"{parent or 'config'} is a config dataclass, not a dict: item assignment ['{part}'] at line "
                          f"{write.line} raises TypeError", loc,
                          {"access_error": "TypeError", "dataclass_section": parent},
                          f"write job.config.{path} = ... (attribute access) instead")
                return
            last = i == len(parts) - 1
            if not know.known(path) and not any(path.startswith(p + ".") for p in know.free_form):
                close = know.closest(write.key if last else path)
                if last:
                    message = (f"line {write.line} creates {path}, which AgentJet's defaults and schema do not have: "
                               "nothing reads it (a typo?)")
                else:
                    message = f"{path} does not exist in the config: line {write.line} raises AttributeError"
                if close:
                    message += f"; closest known key: {close}"
                if know.install is None:
                    message += f" (checked against {know.release.label}, bundled; pass agentjet_root for your version)"
                self._add("unknown-key", path if not last else write.key, message, loc, {"closest": close},
                          f"use {close}" if close else "remove the write, or check the key against your AgentJet")
                return

    def _split(self, run: _Run) -> None:
        c = run.construction
        assert c is not None
        customised = run.base.customised
        if not customised:
            return
        table = self.know.table
        kwarg_keys = {table.key_for(k): kw for k, kw in c.kwargs.items()
                      if k not in CONTROL_KWARGS and table.key_for(k) and not (kw.value.resolved and kw.value.value is None)}
        write_keys = {w.key: w for w in run.applied_writes if w.kind != "method"}
        script_keys = set(kwarg_keys) | set(write_keys)
        if not script_keys:
            return
        both = sorted(k for k in script_keys if k in customised or any(c_.startswith(k + ".") for c_ in customised))
        yaml_name = run.base.path.name if run.base.path else "the YAML"
        locs = [Location(file=self.script_file, line=kw.line) for kw in kwarg_keys.values()]
        locs += [Location(file=self.script_file, line=w.line) for w in write_keys.values()]
        locs += [self._yaml_line(run.base, k) for k in sorted(customised)[:20]]
        yaml_first = len(customised) > len(script_keys)
        build_args = {
            "base_yaml": str(run.base.path) if run.base.path else None,
            "kwargs": {k: kw.value.value for k, kw in c.kwargs.items()
                       if k not in CONTROL_KWARGS and kw.value.resolved and kw.value.value is not None},
            "set": {w.key: w.value.value for w in write_keys.values() if w.value.resolved},
            "output_path": "<consolidated>.yaml",
        }
        if yaml_first:
            fix = (f"the YAML holds most of this job ({len(customised)} customised keys): move "
                   + ", ".join(sorted(script_keys)) + f" into {yaml_name} and construct AgentJetJob with only "
                   "base_yaml_config (and run-identity kwargs such as experiment_name if you must)")
        else:
            fix = ("the script holds most of this job: move the YAML's customised keys into AgentJetJob kwargs "
                   "(for keys with a kwarg) and post-construction writes (for the rest), then drop base_yaml_config")
        fix += (". build_config can emit the consolidated YAML the engine would run: call it with the arguments in "
                "values.build_config_arguments")
        overlap = f" ({len(both)} in both places: {', '.join(both)})" if both else ""
        self._add("split-configuration", both[0] if both else None,
                  f"configuration is split: {yaml_name} customises {len(customised)} key(s) and the script sets "
                  f"{len(script_keys)} through kwargs or writes{overlap}; a reader of either place sees half the job",
                  _unique_locations(locs),
                  {"yaml_keys": sorted(customised), "kwarg_keys": sorted(kwarg_keys), "write_keys": sorted(write_keys),
                   "in_both": both, "one_place": "yaml" if yaml_first else "script",
                   "build_config_arguments": build_args}, fix)

    # -- rules on the YAML itself

    def _lint_yaml(self, base: _Base) -> None:
        for key in sorted(base.customised):
            if not key.startswith("ajet.") or self.know.known(key):
                continue
            close = self.know.closest(key)
            self._add("unknown-key", key,
                      f"{key} in {Path(self._yaml_line(base, key).file).name} is not a key of AgentJet's defaults or "
                      "schema: nothing reads it" + (f" (did you mean {close}?)" if close else ""),
                      [self._yaml_line(base, key)], {"value": base.customised[key], "closest": close},
                      f"rename it to {close}" if close else "remove it or check it against your AgentJet version")

    # -- rules on the effective values

    def _lint_effective(self, run: _Run) -> None:
        v = lambda name: self._value(run, K[name])  # noqa: E731
        prompt, response, model_len, one_turn = (v(n) for n in LENGTH_KWARGS)
        if all(_is_num(x) for x in (prompt, response, model_len)) and prompt + response > model_len:
            self._add("length-budget", K["max_model_len"],
                      f"max_prompt_length ({prompt}) + max_response_length ({response}) = {prompt + response} exceeds "
                      f"max_model_len ({model_len}) (AgentJetJob asserts 'illegal token length')",
                      self._where(run, K["max_prompt_length"], K["max_response_length"], K["max_model_len"])
                      or self._construction_location(run),
                      {"max_prompt_length": prompt, "max_response_length": response, "max_model_len": model_len},
                      f"raise max_model_len to at least {prompt + response} or shorten the prompt/response budget")
        if _is_num(one_turn) and _is_num(response) and one_turn > response:
            self._add("length-budget", K["max_response_length_in_one_turn"],
                      f"max_response_length_in_one_turn ({one_turn}) exceeds max_response_length ({response}) "
                      "(AgentJetJob asserts this with an empty message)",
                      self._where(run, K["max_response_length_in_one_turn"], K["max_response_length"])
                      or self._construction_location(run),
                      {"max_response_length_in_one_turn": one_turn, "max_response_length": response},
                      f"set max_response_length_in_one_turn to at most {response}")
        self._lora(run)
        tbs, n, gpus, nodes = v("train_batch_size"), v("num_repeat"), v("n_gpus_per_node"), v("nnodes")
        if all(_is_int(x) and x > 0 for x in (tbs, n, gpus, nodes)) and (tbs * n) % (gpus * nodes):
            world = gpus * nodes
            self._add("batch-not-divisible-by-gpus", K["train_batch_size"],
                      f"train_batch_size x num_repeat = {tbs} x {n} = {tbs * n} is not a multiple of n_gpus_per_node "
                      f"x nnodes = {gpus} x {nodes} = {world}: the trainer refuses to start ('real_train_batch_size "
                      "... must be divisible by minimal possible batch size')",
                      self._where(run, K["train_batch_size"], K["num_repeat"], K["n_gpus_per_node"], K["nnodes"])
                      or self._construction_location(run),
                      {"train_batch_size": tbs, "num_repeat": n, "n_gpus_per_node": gpus, "nnodes": nodes},
                      f"choose train_batch_size so that train_batch_size x {n} is a multiple of {world} "
                      f"(e.g. {_next_batch(tbs, n, world)})")
        self._interchange(run)
        self._swarm_base(run)
        self._cap(run)

    def _lora(self, run: _Run) -> None:
        rank = self._value(run, K["lora_rank"])
        if not (_is_num(rank) and rank > 0):
            return
        checks = (
            ("lora_load_format", lambda x: x == "safetensors", "'safetensors'",
             "AgentJetJob: \"lora_load_format must be 'safetensors'\""),
            ("layered_summon", lambda x: x is True, "True", "AgentJetJob: 'layered_summon must be True'"),
            ("lr", lambda x: _is_num(x) and x > 1e-5, "> 1e-5",
             "AgentJetJob: 'lr should usually be greater than 1e-5 for lora training'"),
        )
        for name, ok, need, quote in checks:
            value = self._value(run, K[name])
            if isinstance(get_path(run.tree, K[name], None), _Unknown) or ok(value):
                continue
            self._add("lora-rules", K[name], f"lora_rank={rank} needs {name} {need}, got {value!r} ({quote})",
                      self._where(run, K[name], K["lora_rank"]) or self._construction_location(run),
                      {"lora_rank": rank, name: value},
                      f"set {name}={'1e-5 or more, e.g. 1e-4' if name == 'lr' else need} (kwarg {name})")

    def _interchange(self, run: _Run) -> None:
        nodes = self._value(run, K["nnodes"])
        if not (_is_int(nodes) and nodes > 1):
            return
        base = run.base
        wrote = [w for w in run.applied_writes if w.key == INTERCHANGE_KEY or INTERCHANGE_KEY.startswith(w.key + ".")]
        final = get_path(run.tree, INTERCHANGE_KEY, None)
        if wrote and final != "tcp" and not isinstance(final, _Unknown):
            w = wrote[-1]
            self._add("interchange-not-tcp", INTERCHANGE_KEY,
                      f"nnodes={nodes} needs the tcp interchange, but the write at line {w.line} sets it to "
                      f"{final!r} after AgentJetJob switched it to tcp", [Location(file=self.script_file, line=w.line)],
                      {"nnodes": nodes, "interchange_method": final},
                      "delete the write: AgentJetJob already sets tcp when nnodes > 1 in swarm mode")
        elif INTERCHANGE_KEY in base.explicit_keys and get_path(base.tree, INTERCHANGE_KEY, None) != "tcp":
            value = get_path(base.tree, INTERCHANGE_KEY, None)
            self._add("interchange-not-tcp", INTERCHANGE_KEY,
                      f"nnodes={nodes} but {base.path.name if base.path else 'the YAML'} sets interchange_method: "
                      f"{value} explicitly; multi-node swarm needs tcp (AgentJetJob only switches it at construction, "
                      "and a server started with this YAML directly keeps ipc)",
                      [self._yaml_line(base, INTERCHANGE_KEY)], {"nnodes": nodes, "interchange_method": value},
                      "set ajet.interchange_server.interchange_method: tcp in the YAML (or remove the line)")

    def _swarm_base(self, run: _Run) -> None:
        off = [k for k in (K["swarm"], K["interchange_server"]) if self._value(run, k) is not True
               and not isinstance(get_path(run.tree, k, None), _Unknown)]
        if not off:
            return
        trap = not run.base.composes_swarm
        message = ", ".join(f"{k} is {self._value(run, k)!r}" for k in off) + ": the swarm server needs both on"
        bare = trap and "ajet_default" not in run.base.layer_names
        if bare:
            message += (f". {run.base.path.name if run.base.path else 'The base'} has no defaults list composing "
                        "AgentJet's YAMLs, so only its own keys and the config dataclass defaults exist")
        elif trap:
            message += (f". {run.base.path.name if run.base.path else 'The base'} composes ajet_default without the "
                        "swarm overlay (ajet_swarm_default), so every key it does not set comes from ajet_default.yaml "
                        "(swarm off, interchange port 'auto', logger swanlab, placeholder model path, "
                        "max_env_worker 64)")
        self._add("base-not-swarm", off[0], message,
                  self._where(run, *off) or ([Location(file=str(run.base.path), line=None)] if run.base.path
                                             else self._construction_location(run)),
                  {k: self._value(run, k) for k in off} | {"composes_swarm_defaults": not trap},
                  "add ajet_swarm_default to the base's defaults list ([verl_default, ajet_default, "
                  "ajet_swarm_default, _self_]) or set ajet.enable_swarm_mode: true and "
                  "ajet.enable_interchange_server: true" if trap else
                  "set ajet.enable_swarm_mode and ajet.enable_interchange_server to true (kwarg swarm_mode=True "
                  "covers the first)")

    def _cap_result(self, run: _Run) -> Any:
        mew, n, tbs = (self._value(run, K[k]) for k in ("max_env_worker", "num_repeat", "train_batch_size"))
        trk = self._value(run, TRACKER_KEY)
        if not (_is_int(mew) and mew > 0 and _is_int(n) and n > 0):
            return None
        try:
            return compute_episode_cap(EpisodeCapInput(
                max_env_worker=mew, num_repeat=n, train_batch_size=tbs if _is_int(tbs) and tbs > 0 else None,
                max_inference_tracker_threads=trk if _is_int(trk) and trk > 0 else None, thread_rule="auto",
                agentjet_root=str(self.know.install.root) if self.know.install else None))
        except ToolInputError as exc:  # defensive: values passed the checks above
            log.debug("episode cap not computed: %s", exc)
            return None

    def _cap(self, run: _Run) -> None:
        r = self._cap_result(run)
        if r is None:
            return
        mew, n, tbs = r.pool_width, r.num_repeat, self._value(run, K["train_batch_size"])
        if not r.divisible:
            self._add("cap-not-divisible", K["max_env_worker"],
                      f"max_env_worker={mew} is not a multiple of num_repeat={n}: "
                      + (f"{r.queued_loops} of the {r.worker_loops} worker loops wait in the queue and never run"
                         if r.thread_rule == "ceil" else f"{r.idle_threads} pool threads stay idle")
                      + f" (episode cap {r.episode_cap})",
                      self._where(run, K["max_env_worker"], K["num_repeat"]) or self._construction_location(run),
                      {"max_env_worker": mew, "num_repeat": n, "episode_cap": r.episode_cap,
                       "thread_rule": r.thread_rule},
                      next((s for s in r.suggestions if "is not a multiple" in s), "make max_env_worker a multiple of "
                           "num_repeat"))
        if _is_int(tbs) and tbs * n < mew:
            self._add("cap-limited-by-batch", K["train_batch_size"],
                      f"train_batch_size x num_repeat = {tbs * n} < max_env_worker={mew}: only {tbs * n} episodes can "
                      f"run at once and {mew - tbs * n} engine threads never work",
                      self._where(run, K["train_batch_size"], K["max_env_worker"]) or self._construction_location(run),
                      {"train_batch_size": tbs, "num_repeat": n, "max_env_worker": mew, "episode_cap": r.episode_cap},
                      next((s for s in r.suggestions if s.startswith("train_batch_size=")),
                           f"raise train_batch_size or lower max_env_worker to {tbs * n}"))
        trk = self._value(run, TRACKER_KEY)
        if _is_int(trk) and trk < r.episode_cap:
            self._add("tracker-threads-below-cap", TRACKER_KEY,
                      f"max_inference_tracker_threads={trk} is below the episode cap ({r.episode_cap}): each running "
                      "episode's LLM proxy holds one of these threads, so episodes beyond it may wait (inferred "
                      "from AgentJet's code)",
                      self._where(run, TRACKER_KEY, K["max_env_worker"]) or self._construction_location(run),
                      {"max_inference_tracker_threads": trk, "episode_cap": r.episode_cap, "max_env_worker": mew},
                      f"set ajet.interchange_server.max_inference_tracker_threads to {mew} (= max_env_worker, as "
                      "AgentJet recommends), in the same place as the other settings")

    # -- output helpers

    def _effective(self, run: _Run) -> Effective:
        keys = {
            "max_env_worker": K["max_env_worker"], "num_repeat": K["num_repeat"],
            "train_batch_size": K["train_batch_size"], "n_gpus_per_node": K["n_gpus_per_node"],
            "nnodes": K["nnodes"], "interchange_method": INTERCHANGE_KEY,
            "max_prompt_length": K["max_prompt_length"], "max_response_length": K["max_response_length"],
            "max_response_length_in_one_turn": K["max_response_length_in_one_turn"],
            "max_model_len": K["max_model_len"], "enable_swarm_mode": K["swarm"],
            "enable_interchange_server": K["interchange_server"], "max_inference_tracker_threads": TRACKER_KEY,
            "swarm_mode_sample_collection_method": K["method"], "model_path": "ajet.model.path",
            "logger": "ajet.trainer_common.logger", "experiment_name": "ajet.experiment_name",
        }
        values = {name: _jsonable(self._value(run, key)) for name, key in keys.items()}
        source = {name: self._source(run, key) for name, key in keys.items()}
        lora_keys = {"lora_rank": K["lora_rank"], "load_format": K["lora_load_format"],
                     "layered_summon": K["layered_summon"], "lr": K["lr"]}
        for name, key in lora_keys.items():
            source[f"lora.{name}"] = self._source(run, key)
        unresolved = {k: v.text for k, v in flatten(run.tree).items() if isinstance(v, _Unknown)}
        cap = self._cap_result(run)
        return Effective(**values, lora=LoraValues(**{n: _jsonable(self._value(run, k)) for n, k in lora_keys.items()}),
                         episode_cap=cap.episode_cap if cap is not None else None, source=source,
                         unresolved=unresolved)

    def _construction_info(self, run: _Run) -> ConstructionInfo:
        c = run.construction
        assert c is not None
        base = run.base
        late = {id(w) for w, _ in run.late_writes}
        return ConstructionInfo(
            line=c.line, variable=c.variable, callee=c.callee,
            kwargs=[KwargInfo(name=k.name, value=_jsonable(k.value.value), resolved=k.value.resolved,
                              expression=k.value.text, how=k.value.how, line=k.line) for k in c.kwargs.values()],
            dynamic_kwargs=c.dynamic,
            base_yaml=BaseYamlInfo(expression=base.expression, path=str(base.path) if base.path else None,
                                   anchor=base.anchor, exists=base.exists),  # type: ignore[arg-type]
            writes=[WriteInfo(key=w.key if w.kind != "mirror" else f"job.{w.key}", value=_jsonable(w.value.value),
                              resolved=w.value.resolved, expression=w.value.text, kind=w.kind, line=w.line,
                              after_freeze=id(w) in late) for w in run.writes],
            freezes=[FreezeInfo(call=f.call, line=f.line) for f in run.freezes],
            effective=self._effective(run),
        )


# --- small helpers -----------------------------------------------------------------------------------

_MISSING = object()


def _happens_after(w_scope: Scope, w_line: int, f_scope: Scope, f_line: int) -> bool:
    """Does a statement at (w_scope, w_line) run after the freeze call? Compared in a shared scope via call sites."""
    if w_scope is f_scope:
        return w_line > f_line
    w_pos = _lift(w_scope, w_line)
    f_pos = _lift(f_scope, f_line)
    for ws, wl in w_pos:
        for fs, fl in f_pos:
            if ws is fs and wl != fl:
                return wl > fl
    return False


def _lift(scope: Scope, line: int, depth: int = 0) -> list[tuple[Scope, int]]:
    out = [(scope, line)]
    if depth < 6:
        for caller, call_line in scope.call_sites:
            out.extend(_lift(caller, call_line, depth + 1))
    return out


def _settable(tree: dict[str, Any], key: str) -> bool:
    node: Any = tree
    for part in key.split(".")[:-1]:
        if not isinstance(node, dict) or part not in node:
            return isinstance(node, dict)
        node = node[part]
    return isinstance(node, dict)


def _key_lines(path: Path) -> dict[str, int]:
    """Dotted key -> 1-based line of its key in a YAML file (the file was already loaded safely once)."""
    try:
        if path.stat().st_size > MAX_YAML_BYTES:
            return {}
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    out: dict[str, int] = {}
    budget = [200_000]
    seen: set[int] = set()

    def walk(n: Any, prefix: str) -> None:
        if not isinstance(n, yaml.MappingNode) or id(n) in seen or budget[0] <= 0:
            return
        seen.add(id(n))
        for k, v in n.value:
            budget[0] -= 1
            if not isinstance(k, yaml.ScalarNode):
                continue
            path_ = f"{prefix}{k.value}"
            out.setdefault(path_, k.start_mark.line + 1)
            walk(v, path_ + ".")

    walk(node, "")
    # leaves below a key without their own line inherit it (flow mappings, lists)
    return out


def _unique_locations(locs: list[Location]) -> list[Location]:
    seen: set[tuple[str, int | None]] = set()
    out: list[Location] = []
    for loc in locs:
        if (loc.file, loc.line) not in seen:
            seen.add((loc.file, loc.line))
            out.append(loc)
    return out


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[Any, ...]] = set()
    out: list[Finding] = []
    for f in findings:
        ident = (f.rule, f.key, f.message)
        if ident not in seen:
            seen.add(ident)
            out.append(f)
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _same(a: Any, b: Any) -> bool:
    if _is_num(a) and _is_num(b):
        return a == b
    return type(a) is type(b) and a == b or (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
                                             and list(a) == list(b))


def _next_batch(tbs: int, n: int, world: int) -> int:
    candidate = tbs
    while (candidate * n) % world:
        candidate += 1
    return candidate


def _yaml_scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _py(value: Any) -> str:
    return repr(value.value) if getattr(value, "resolved", False) else getattr(value, "text", "...")


def _jsonable(value: Any) -> Any:
    if isinstance(value, _Unknown):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, PathRef):
        return value.path
    return repr(value)


def check_config(inp: CheckConfigInput) -> CheckConfigResult:
    """Lint a swarm client script and/or YAML statically; never imports or runs the script."""
    return _Linter(inp).run()
