"""Hydra's composition of a base YAML, as AgentJetJob runs it, re-implemented without Hydra.

AgentJetJob reads the base with ``yaml.safe_load``, writes it to a temporary file with ``yaml.dump``
(keys sorted) and has Hydra compose that file. So:

* the base's scalars take OmegaConf's types and its mappings are sorted (:func:`yamltypes.retype_base`);
* its ``defaults`` entries are looked up in the temporary file's folder (which holds nothing of the
  user's) and in its ``hydra.searchpath``; never in the base's own folder;
* the layers merge in defaults order (``_self_`` is the base; appended at the end when absent), later
  wins: mappings deep-merge keeping the first position of every key, a scalar/list/null replaces, a
  mapping and a list never merge, and ``???`` never replaces a value;
* only the primary config may set ``hydra.searchpath``; Hydra's own ``hydra`` node is dropped.

Errors are :class:`~skill_server.agentjet.refusals.AgentJetRefusal` with Hydra's exception and message.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skill_server.agentjet import yamltypes
from skill_server.agentjet.refusals import AgentJetRefusal, Cause, base_absent_cause
from skill_server.agentjet.release import ConfigFile, Release, read_yaml_file
from skill_server.core.errors import ToolInputError
from skill_server.core.fsutil import read_text_bounded
from skill_server.core.safe_yaml import MAX_YAML_BYTES, parse_yaml_text
from skill_server.core.trees import flatten

PRIMARY = "tmp….yaml"  # Hydra calls the base by AgentJetJob's random temporary file name
SELF = "_self_"
MISSING = "???"
MAX_LAYERS = 64
MAX_NESTING = 16


@dataclass
class Layer:
    """One merged config: ``name`` as the defaults list calls it, ``origin`` a path or ``bundled:<rel>``."""

    name: str
    origin: str
    data: dict[str, Any]
    package: str = ""
    primary: bool = False  # the base itself (Hydra's primary config)


@dataclass(frozen=True)
class Base:
    """The base YAML AgentJetJob composes: a user's file or the release's swarm default."""

    kind: str  # "file" | "default"
    path: Path | None  # the file on disk (None for a bundled default)
    origin: str  # where it was read: a path, or "bundled:<rel>"
    display: str  # how messages name it
    name: str  # its layer name in provenance
    raw: dict[str, Any]  # as yaml.safe_load read it


@dataclass
class Composition:
    layers: list[Layer]  # in merge order; the last one wins
    composed: dict[str, Any]  # Hydra's result, key order included, without the hydra node
    origin: dict[str, str]  # dotted leaf -> name of the layer that set it
    base: Base


def default_base(release: Release) -> Base:
    rel = release.default_base
    found = release.config_file(rel, raw=True)
    if found is None:
        raise ToolInputError(f"{release.label} has no {rel}", field="agentjet_root")
    path = (release.root / rel) if release.root is not None else None
    display = str(path) if path is not None else f"{release.label}'s {rel}"
    return Base("default", path, found.origin, display, Path(rel).stem, found.raw)


def load_base(path: Path, *, field: str, release: Release) -> Base:
    """Read a base YAML as AgentJetJob does (``yaml.safe_load``), bounded, refusing what it cannot carry."""
    try:
        os.stat(path)
    except FileNotFoundError:
        raise AgentJetRefusal(base_absent_cause(str(path), field=field, agentjet=release.label)) from None
    except OSError as exc:
        raise ToolInputError(f"cannot read {path}: {exc.strerror or exc}", field=field) from None
    _, text = read_text_bounded(path, field=field, max_bytes=MAX_YAML_BYTES)  # a regular file only: never blocks
    data = parse_yaml_text(text, field=field, source=str(path), dialect="pyyaml")
    if data is None:
        raise ToolInputError(f"{path} is empty; a base needs at least defaults and hydra blocks", field=field)
    if not isinstance(data, dict):
        raise ToolInputError(f"{path} must hold a YAML mapping at top level, not a {type(data).__name__}", field=field)
    try:
        yamltypes.check_plain(data)
    except yamltypes.UnsupportedValue as exc:
        raise ToolInputError(f"{path}: {exc.where or 'top level'} holds {exc.what}", field=field) from None
    except (yamltypes.TooDeep, yamltypes.TooLarge) as exc:
        raise ToolInputError(f"{path}: {exc}", field=field) from None
    return Base("file", path, str(path), str(path), path.stem, data)


def _refuse(cid: str, summary: str, exception: str, message: str | None, *, field: str, agentjet: str,
            verified: bool = True, key: str | None = None) -> AgentJetRefusal:
    return AgentJetRefusal(Cause(cid, summary, exception, message, field=field, key=key, agentjet=agentjet,
                                 verified=verified))


# --- the search path ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _SearchDir:
    entry: str  # as written in hydra.searchpath
    rel: str | None  # a folder under the AgentJet root, read through the release (bundled or installed)
    disk: Path | None  # or a folder on disk outside AgentJet (the user's own layers)


def _search_dirs(primary: dict[str, Any], release: Release, field: str, cwd: Path | None) -> list[_SearchDir]:
    """The base's ``hydra.searchpath``. A relative ``file://`` folder is AgentJet's own when the release has
    it (AgentJet runs from its root: ``file://ajet/default_config``); any other relative folder is looked
    up relative to ``cwd`` (the launch directory)."""
    hydra = primary.get("hydra")
    entries = hydra.get("searchpath") if isinstance(hydra, dict) else None
    if entries is None:
        return []
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise _refuse("searchpath-invalid", "hydra.searchpath must be a list of strings", "ConfigCompositionException",
                      f"hydra.searchpath must be a list of strings. Got: {entries}", field=field,
                      agentjet=release.label, key="hydra.searchpath")
    dirs: list[_SearchDir] = []
    for entry in entries:
        scheme, _, rest = entry.partition("://")
        if scheme == "file" and rest:
            target = Path(rest).expanduser()
            if target.is_absolute():
                dirs.append(_SearchDir(entry, None, target))
            elif release.has_folder(rest):
                dirs.append(_SearchDir(entry, rest, None))
            else:
                dirs.append(_SearchDir(entry, None, (cwd or Path(os.getcwd())) / rest))
        elif scheme == "pkg" and rest.replace("/", ".").split(".")[0] == "ajet":
            dirs.append(_SearchDir(entry, rest.replace(".", "/"), None))
        else:
            raise ToolInputError(
                f"hydra.searchpath entry {entry!r} is not supported by this tool (it reads file:// folders and "
                "pkg://ajet...); AgentJet's own layers are found through file://ajet/default_config", field=field)
    return dirs


def _lookup(name: str, dirs: list[_SearchDir], release: Release, field: str) -> ConfigFile | None:
    for d in dirs:
        if d.rel is not None:
            found = release.config_file(f"{d.rel}/{name}.yaml")
        else:
            assert d.disk is not None
            path = d.disk / f"{name}.yaml"
            found = read_yaml_file(path, origin=str(path), field=field)
        if found is not None:
            return found
    return None


# --- the defaults tree ---------------------------------------------------------------------------------


@dataclass
class _Entry:
    name: str  # config path, e.g. "verl_default" or "group/option"
    package: str  # "" (global) or the group's package
    optional: bool


def _entries(config_name: str, data: dict[str, Any], field: str, agentjet: str) -> list[_Entry | None]:
    """The defaults list, ``None`` standing for ``_self_`` (added at the end when absent)."""
    what = "the base" if config_name == PRIMARY else config_name
    if "defaults" not in data:
        return [None]
    raw = data["defaults"]
    if not isinstance(raw, list):
        raise _refuse("defaults-invalid", f"'defaults' in {what} must be a list", "ValueError",
                      f"Invalid defaults list in '{config_name}', defaults must be a list (got {type(raw).__name__})",
                      field=field, agentjet=agentjet, key="defaults")
    out: list[_Entry | None] = []
    selves = 0
    for item in raw:
        if isinstance(item, str):
            name = item.strip()
            optional = name.startswith("optional ")
            name = name.removeprefix("optional ").strip()
            if name == SELF:
                selves += 1
                out.append(None)
                continue
            if "@" in name or name.startswith("override "):
                raise ToolInputError(f"defaults entry {item!r} in {what} is not supported by this tool "
                                     "(package overrides and 'override' entries)", field=field)
            out.append(_Entry(name.strip("/").removesuffix(".yaml"), "", optional))
        elif isinstance(item, dict):
            if len(item) != 1:
                raise _refuse("defaults-invalid", f"a defaults entry of {what} has more than one key",
                              "ValueError", f"In {config_name}: Too many keys in default item {item}", field=field,
                              agentjet=agentjet, key="defaults")
            (key, value), = item.items()
            group = str(key).strip()
            optional = group.startswith("optional ")
            group = group.removeprefix("optional ").strip()
            if "@" in group or group.startswith("override "):
                raise ToolInputError(f"defaults entry {item!r} in {what} is not supported by this tool "
                                     "(package overrides and 'override' entries)", field=field)
            if value is None:
                continue
            if not isinstance(value, str):
                raise ToolInputError(f"defaults entry {item!r} in {what}: this tool reads one option name per "
                                     "group", field=field)
            group = group.strip("/")
            out.append(_Entry(f"{group}/{value.removesuffix('.yaml')}", group.replace("/", "."), optional))
        else:
            raise _refuse("defaults-invalid", f"a defaults entry of {what} is a {type(item).__name__}",
                          "ValueError", f"Unsupported type in defaults : {type(item).__name__}", field=field,
                          agentjet=agentjet, key="defaults")
    if selves > 1:
        raise _refuse("duplicate-self", f"the defaults list of {what} names _self_ twice",
                      "ConfigCompositionException", f"Duplicate _self_ defined in {config_name}", field=field,
                      agentjet=agentjet, key="defaults")
    if selves == 0:
        out.append(None)
    return out


def _expand(config_name: str, layer_name: str, origin: str, data: dict[str, Any], package: str,
            dirs: list[_SearchDir], release: Release, field: str, order: list[Layer], depth: int,
            trail: tuple[str, ...]) -> None:
    """Append ``data``'s defaults (recursively) and itself at its ``_self_`` position to ``order``."""
    if depth > MAX_NESTING or config_name in trail:
        raise ToolInputError(f"defaults lists nest too deeply or form a cycle at {config_name}", field=field)
    for entry in _entries(config_name, data, field, release.label):
        if len(order) >= MAX_LAYERS:
            raise ToolInputError(f"more than {MAX_LAYERS} configs in the defaults lists", field=field)
        if entry is None:
            own = {k: v for k, v in data.items() if k != "defaults"}
            order.append(Layer(layer_name, origin, _under(package, own), package, primary=depth == 0))
            continue
        found = _lookup(entry.name, dirs, release, field)
        if found is None:
            if entry.optional:
                continue
            raise _missing(entry.name, config_name, dirs, release, field)
        if not isinstance(found.data, dict):
            raise ToolInputError(f"{found.origin} must hold a mapping, not a {type(found.data).__name__}", field=field)
        child_package = ".".join(p for p in (package, entry.package) if p)
        _expand(entry.name, entry.name.rsplit("/", 1)[-1], found.origin, found.data, child_package, dirs, release,
                field, order, depth + 1, (*trail, config_name))


def _under(package: str, data: dict[str, Any]) -> dict[str, Any]:
    for part in reversed(package.split(".") if package else []):
        data = {part: data}
    return data


def _missing(name: str, parent: str, dirs: list[_SearchDir], release: Release, field: str) -> AgentJetRefusal:
    where = ", ".join(d.entry for d in dirs) or "no hydra.searchpath"
    beside = ""
    bundled_note = ""
    if release.kind == "bundled" and any(d.rel is not None for d in dirs):
        bundled_note = (f"; it is not among the files of {release.label} bundled with this tool (pass agentjet_root "
                        "if your AgentJet has it)")
    if parent == PRIMARY:
        beside = " (Hydra searches the temporary copy's folder and hydra.searchpath, never the base's own folder)"
    return _refuse("defaults-entry-missing",
                   f"the defaults entry {name!r} of {'the base' if parent == PRIMARY else parent} is not found in the "
                   f"search path ({where}){beside}{bundled_note}",
                   "MissingConfigException", f"In '{parent}': Could not load '{name}'.", field=field,
                   agentjet=release.label, key="defaults")


# --- merging ---------------------------------------------------------------------------------------


class _Conflict(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def clone(value: Any) -> Any:
    """A copy of plain YAML data (dicts, lists, scalars), much faster than ``copy.deepcopy``."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def _merge(dst: dict[Any, Any], src: dict[Any, Any], layer: str, origin: dict[str, str] | None, prefix: str) -> None:
    for key, value in src.items():
        path = f"{prefix}{key}"
        present = key in dst
        current = dst.get(key)
        if value == MISSING and isinstance(value, str) and present:
            continue  # OmegaConf: a missing value never replaces one that is set
        if isinstance(value, dict):
            if isinstance(current, dict):
                _merge(current, value, layer, origin, path + ".")
                continue
            if isinstance(current, list):
                raise _Conflict(path)
        elif isinstance(value, list) and isinstance(current, dict):
            raise _Conflict(path)
        dst[key] = clone(value)
        if origin is not None:
            if isinstance(current, dict):
                for stale in [k for k in origin if k.startswith(path + ".")]:
                    del origin[stale]
            for leaf in flatten(value, prefix=path):
                origin[leaf] = layer


_CACHE: dict[tuple[Any, ...], tuple[list[Any], Composition]] = {}
_CACHE_LOCK = threading.Lock()


def compose(release: Release, base: Base, *, field: str, cwd: Path | None = None) -> Composition:
    """Compose ``base`` against ``release`` exactly as AgentJetJob has Hydra do it.

    The composition of a bundled release's own default base never changes, so it is computed once and
    shared: callers must :func:`clone` ``composed`` before changing it. (An install's layers are cached per
    file instead, and composed on every call: any of them may change.)"""
    cache_key = (id(release), id(base.raw)) if base.kind == "default" and release.kind == "bundled" else None
    if cache_key is not None:
        with _CACHE_LOCK:
            hit = _CACHE.get(cache_key)
        if hit is not None and hit[0][1] is base.raw:
            return hit[1]
    try:
        primary = yamltypes.retype_base(base.raw)
    except yamltypes.UnsupportedValue as exc:
        raise ToolInputError(f"{base.display}: {exc.where or 'top level'} holds {exc.what}", field=field) from None
    except yamltypes.TooDeep as exc:
        raise ToolInputError(f"{base.display}: {exc}", field=field) from None
    dirs = _search_dirs(primary, release, field, cwd)
    order: list[Layer] = []
    _expand(PRIMARY, base.name, base.origin, primary, "", dirs, release, field, order, 0, ())
    composed: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for layer in order:
        config_name = PRIMARY if layer.primary else layer.name
        hydra = layer.data.get("hydra")
        if not layer.primary and isinstance(hydra, dict) and hydra.get("searchpath") is not None:
            cid = "defaults-includes-swarm-default" if layer.name == "ajet_swarm_default" else "nested-searchpath"
            extra = (": it is AgentJet's swarm default, which is a base, not a layer. Compose verl_default, "
                     "ajet_default and _self_ and copy the swarm keys you need into your base") \
                if cid == "defaults-includes-swarm-default" else ""
            raise _refuse(cid, f"the defaults list includes {layer.name!r}, which sets hydra.searchpath; Hydra allows "
                          f"that only in the primary config{extra}", "ConfigCompositionException",
                          f"In '{layer.name}': Overriding hydra.searchpath is only supported from the primary config",
                          field=field, agentjet=release.label, key="defaults")
        try:
            _merge(composed, layer.data, layer.name, origin, "")
        except _Conflict as conflict:
            raise _refuse("merge-mapping-with-list",
                          f"{conflict.key} is a mapping in one config and a list in another ({layer.name} merges over "
                          "it); Hydra cannot merge the two", "ConfigCompositionException",
                          f"In '{config_name}': ConfigTypeError raised while composing config: Cannot merge "
                          "DictConfig with ListConfig", field=field, agentjet=release.label, key=conflict.key) from None
    composed.pop("hydra", None)
    for stale in [k for k in origin if k == "hydra" or k.startswith("hydra.")]:
        del origin[stale]
    result = Composition(order, composed, origin, base)
    if cache_key is not None:
        with _CACHE_LOCK:
            if len(_CACHE) > 16:
                _CACHE.clear()
            _CACHE[cache_key] = ([release, base.raw], result)
    return result
