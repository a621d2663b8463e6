"""Hydra-style composition of an AgentJet base YAML, without Hydra.

AgentJet composes a base file through its ``defaults`` list (``[verl_default, ajet_default, _self_]``)
and ``hydra.searchpath``; later layers win, mappings merge deeply, everything else (lists included)
is replaced. The base file's own ``defaults``/``hydra`` blocks are set aside and copied back into the
dump as written. Names that cannot be found on disk fall back to the bundled layers of the snapshot.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skill_server.agentjet.knowledge import bundled_layer
from skill_server.agentjet.locate import SWARM_DEFAULT_YAML, AgentJetInstall
from skill_server.errors import ToolInputError
from skill_server.safe_yaml import load_yaml_file

TAIL_KEYS = ("hydra", "defaults")
MAX_LAYERS = 32
MAX_DEPTH = 8
SELF = "_self_"


@dataclass
class Layer:
    """One composed file: ``name`` as the defaults list calls it, ``origin`` a path or ``bundled:<name>``."""

    name: str
    origin: str
    data: dict[str, Any]


@dataclass
class Composition:
    layers: list[Layer]  # in merge order; the last one wins
    tail: dict[str, Any]  # the base file's own hydra/defaults blocks, in file order
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BaseSpec:
    """Where the base YAML comes from: an explicit file, an AgentJet install, or the bundled snapshot."""

    kind: str  # "file" | "agentjet" | "bundled"
    path: Path | None
    install: AgentJetInstall | None


def resolve_base(base_yaml: str | None, install: AgentJetInstall | None, *, field: str = "base_yaml") -> BaseSpec:
    if base_yaml:
        path = Path(base_yaml).expanduser()
        if not path.is_file():
            raise ToolInputError(
                f"configuration YAML not found: {path} (AgentJetJob raises 'Configuration yaml is absent!'); "
                "relative paths resolve against the server's working directory, so prefer an absolute path",
                field=field,
            )
        return BaseSpec("file", path.resolve(), install)
    if install is not None:
        candidate = install.file(SWARM_DEFAULT_YAML)
        if candidate.is_file():
            return BaseSpec("agentjet", candidate, install)
    return BaseSpec("bundled", None, install)


def compose(base: BaseSpec, *, field: str = "base_yaml") -> Composition:
    """Expand the base's defaults list into ordered layers."""
    warnings: list[str] = []
    layers: list[Layer] = []
    if base.path is None:
        data = bundled_layer("ajet_swarm_default") or {}
        origin, cfg_dir = "bundled:ajet_swarm_default", None
    else:
        data = load_yaml_file(base.path, field=field)
        origin, cfg_dir = str(base.path), base.path.parent
    tail = {k: copy.deepcopy(v) for k, v in data.items() if k in TAIL_KEYS}
    search = _search_dirs(data.get("hydra"), cfg_dir, base.install, warnings)
    _expand(
        name=Path(origin).stem if base.path else "ajet_swarm_default",
        origin=origin,
        data=data,
        cfg_dir=cfg_dir,
        search=search,
        base_kind=base.kind,
        layers=layers,
        warnings=warnings,
        depth=0,
        seen=set(),
        field=field,
    )
    return Composition(layers=layers, tail=tail, warnings=warnings)


def _search_dirs(hydra_block: Any, cfg_dir: Path | None, install: AgentJetInstall | None,
                 warnings: list[str]) -> list[Path]:
    """The primary config's ``hydra.searchpath``, relative ``file://`` entries anchored like AgentJet does."""
    dirs: list[Path] = []
    entries = hydra_block.get("searchpath") if isinstance(hydra_block, dict) else None
    if not isinstance(entries, list):
        return dirs
    for entry in entries:
        if not isinstance(entry, str):
            continue
        if not entry.startswith("file://"):
            warnings.append(f"hydra.searchpath entry {entry!r} is not a file:// path; skipped")
            continue
        raw = Path(entry[len("file://"):]).expanduser()
        if raw.is_absolute():
            dirs.append(raw)
            continue
        anchors = [a for a in (install.root if install else None, cfg_dir, Path(os.getcwd())) if a is not None]
        for anchor in anchors:
            if (anchor / raw).is_dir():
                dirs.append((anchor / raw).resolve())
                break
        else:
            dirs.append(raw)  # kept so the name is tried; the bundled fallback covers AgentJet's own layers
    return dirs


def _expand(*, name: str, origin: str, data: dict[str, Any], cfg_dir: Path | None, search: list[Path],
            base_kind: str, layers: list[Layer], warnings: list[str], depth: int, seen: set[str],
            field: str) -> None:
    if depth > MAX_DEPTH:
        raise ToolInputError(f"defaults lists nest deeper than {MAX_DEPTH} levels at {origin}", field=field)
    if origin in seen:
        raise ToolInputError(f"defaults lists form a cycle through {origin}", field=field)
    seen = seen | {origin}
    own = {k: v for k, v in data.items() if k not in TAIL_KEYS}
    entries = data.get("defaults")
    if entries is None:
        layers.append(Layer(name, origin, own))
        return
    if not isinstance(entries, list):
        raise ToolInputError(f"'defaults' in {origin} must be a list", field=field)
    if SELF not in entries:
        entries = [*entries, SELF]  # Hydra >= 1.1 merges a config after its defaults unless told otherwise
    for entry in entries:
        if len(layers) >= MAX_LAYERS:
            raise ToolInputError(f"more than {MAX_LAYERS} config files in the defaults lists", field=field)
        if entry == SELF:
            layers.append(Layer(name, origin, own))
            continue
        group, option = _parse_entry(entry, origin, warnings)
        if option is None:
            continue
        rel = f"{group}/{option}" if group else option
        found = _find(rel, cfg_dir, search)
        if found is not None:
            child = load_yaml_file(found, field=field)
            child_origin, child_dir = str(found), found.parent
        else:
            bundled = bundled_layer(Path(rel).name)
            if bundled is None:
                where = ", ".join(str(d) for d in ([cfg_dir] if cfg_dir else []) + search) or "no search path"
                raise ToolInputError(
                    f"defaults entry {rel!r} of {origin} not found (searched: {where})", field=field
                )
            if base_kind != "bundled":
                warnings.append(f"defaults entry {rel!r} not found on disk; used the bundled AgentJet layer")
            child, child_origin, child_dir = bundled, f"bundled:{Path(rel).name}", None
        if group:
            child = {group: {k: v for k, v in child.items() if k not in TAIL_KEYS}} | {
                k: v for k, v in child.items() if k == "defaults"
            }
        _expand(name=Path(rel).name, origin=child_origin, data=child, cfg_dir=child_dir, search=search,
                base_kind=base_kind, layers=layers, warnings=warnings, depth=depth + 1, seen=seen, field=field)


def _parse_entry(entry: Any, origin: str, warnings: list[str]) -> tuple[str | None, str | None]:
    if isinstance(entry, str):
        name = entry.strip()
        if name.startswith("optional "):
            name = name[len("optional "):].strip()
        return None, name.removesuffix(".yaml")
    if isinstance(entry, dict) and len(entry) == 1:
        (key, value), = entry.items()
        key = str(key).strip()
        if key.startswith("override "):
            warnings.append(f"defaults entry {entry!r} in {origin} overrides a group; not supported, skipped")
            return None, None
        if key.startswith("optional "):
            key = key[len("optional "):].strip()
        if value is None:
            return None, None
        return key.strip("/"), str(value).removesuffix(".yaml")
    warnings.append(f"defaults entry {entry!r} in {origin} not understood; skipped")
    return None, None


def _find(rel: str, cfg_dir: Path | None, search: list[Path]) -> Path | None:
    for directory in ([cfg_dir] if cfg_dir else []) + search:
        candidate = directory / f"{rel}.yaml"
        if candidate.is_file():
            return candidate
    return None


def merge_layers(layers: list[Layer], start: dict[str, Any] | None = None,
                 start_origin: str = "schema") -> tuple[dict[str, Any], dict[str, str]]:
    """Deep-merge the layers in order; returns the tree and, per leaf (dotted), the layer that set it."""
    tree: dict[str, Any] = copy.deepcopy(start) if start else {}
    origin: dict[str, str] = {}
    if start:
        mark_leaves(tree, "", start_origin, origin)
    for layer in layers:
        merge_into(tree, layer.data, layer.name, origin)
    return tree, origin


def merge_into(dst: dict[str, Any], src: dict[str, Any], source: str, origin: dict[str, str], prefix: str = "") -> None:
    for key, value in src.items():
        path = f"{prefix}{key}"
        current = dst.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merge_into(current, value, source, origin, path + ".")
            continue
        if isinstance(current, dict):
            for stale in [k for k in origin if k.startswith(path + ".")]:
                del origin[stale]
        dst[key] = copy.deepcopy(value)
        mark_leaves(value, path, source, origin)


def mark_leaves(value: Any, path: str, source: str, origin: dict[str, str]) -> None:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            mark_leaves(child, f"{path}.{key}" if path else str(key), source, origin)
    elif path:
        origin[path] = source


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted leaf -> value (an empty mapping counts as a leaf)."""
    out: dict[str, Any] = {}
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif prefix:
        out[prefix] = tree
    return out


_MISSING = object()


def get_path(tree: dict[str, Any], dotted: str, default: Any = _MISSING) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is _MISSING:
                raise KeyError(dotted)
            return default
        node = node[part]
    return node


def set_path(tree: dict[str, Any], dotted: str, value: Any, *, create_parents: bool = True) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            if not create_parents:
                raise KeyError(dotted)
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = copy.deepcopy(value)
