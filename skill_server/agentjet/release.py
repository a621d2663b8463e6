"""One AgentJet version as data: bundled releases, installs read statically, and choosing between them.

A :class:`Release` answers everything the tools need to know about one AgentJet: its identity
(:class:`~skill_server.agentjet.identity.AgentJetRef`), ``AgentJetJob``'s signature and overrides table,
the config dataclass tree, the swarm thread rule, and its YAML files. Two kinds exist:

* :class:`BundledRelease`: ``releases/<commit8>/release.json`` (identity, rule, table, schema; small) and
  ``layers.json`` (the YAML files, loaded only when a config is built). ``python -m skill_server snapshot``
  writes both from a checkout, so adding a version is one command.
* :class:`InstallRelease`: a checkout or installed package, read file by file with ``ast`` and YAML
  loaders. Everything read is cached per file and reused until the file's mtime or size changes. An
  install is read completely or refused; nothing missing is filled in from bundled data.

:func:`select_agentjet` maps the tools' ``agentjet_version`` / ``agentjet_root`` arguments to a release.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import posixpath
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skill_server.agentjet import gitmeta, pysource
from skill_server.agentjet.identity import AgentJetRef, agentjet_label, bundled_name, short_commit
from skill_server.agentjet.locate import AgentJetInstall, locate_agentjet
from skill_server.core.errors import ToolInputError
from skill_server.core.fsutil import resolve_path

RELEASES_DIR = Path(__file__).with_name("releases")
RELEASE_FILE = "release.json"
LAYERS_FILE = "layers.json"
RELEASE_FORMAT = 1

SWARM_DEFAULT = "ajet/default_config/ajet_swarm_default.yaml"
JOB_MODULE = "ajet/copilot/job.py"
SCHEMA_MODULE = "ajet/default_config/ajet_config_schema.py"
ROLLOUT_MODULE = "ajet/task_rollout/native_parallel_worker.py"
INIT_MODULE = "ajet/__init__.py"

MAX_SOURCE_BYTES = 4 * 1024 * 1024
DATACLASS_MARK = pysource.DATACLASS_MARK


# --- the facts of one release ----------------------------------------------------------------------


@dataclass(frozen=True)
class OverridesTable:
    """``AgentJetJob.__init__``'s keyword parameters (signature order, with defaults) and its overrides
    table: (kwarg, dotted key) rows in the order AgentJetJob walks them."""

    rows: tuple[tuple[str, str], ...]
    signature: tuple[tuple[str, Any], ...]
    takes_any_kwarg: bool = False

    @property
    def kwargs(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.rows)

    @property
    def constructor_kwargs(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.signature)

    @property
    def control_kwargs(self) -> tuple[str, ...]:
        """Parameters without a row (``base_yaml_config``, ``ensure_new_experiment``)."""
        mapped = set(self.kwargs)
        return tuple(name for name, _ in self.signature if name not in mapped)

    def key_for(self, kwarg: str) -> str | None:
        return next((key for name, key in self.rows if name == kwarg), None)

    def kwarg_for(self, key: str) -> str | None:
        return next((name for name, k in self.rows if k == key), None)

    def accepts(self, kwarg: str) -> bool:
        return self.takes_any_kwarg or any(name == kwarg for name, _ in self.signature)

    def closest(self, kwarg: str) -> str | None:
        close = difflib.get_close_matches(kwarg, self.constructor_kwargs, n=1, cutoff=0.6)
        return close[0] if close else None


@dataclass
class Schema:
    """The dataclass tree ``Config()`` builds; each dataclass node carries ``__dataclass__`` (its class)."""

    tree: dict[str, Any]

    def dataclass_paths(self) -> set[str]:
        return {path for path, _ in _dataclass_nodes(self.tree, "") if path}

    def field_paths(self) -> set[str]:
        out: set[str] = set()
        for path, node in _dataclass_nodes(self.tree, ""):
            out.update(f"{path}.{k}" if path else k for k in node if k != DATACLASS_MARK)
        return out


def _dataclass_nodes(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for key, value in node.items():
        if isinstance(value, dict) and DATACLASS_MARK in value:
            out.extend(_dataclass_nodes(value, f"{path}.{key}" if path else key))
    return out


@dataclass(frozen=True)
class ThreadRule:
    """How ``rollout_swarm`` rounds ``max_env_worker / num_repeat`` in one release, and how that is known."""

    rule: str | None  # "ceil" | "floor" | None (unknown)
    evidence: str  # e.g. "ceil() in rollout_swarm of ajet/task_rollout/native_parallel_worker.py"
    agentjet: str  # the release's label

    @property
    def source(self) -> str:
        return f"{self.agentjet}: {self.evidence}"


@dataclass(frozen=True)
class ConfigFile:
    """One YAML file of a release: ``data`` typed as Hydra's loader reads a layer, ``raw`` as
    ``yaml.safe_load`` reads a base (the two differ only for some scalars; ``raw`` is None unless asked for)."""

    rel: str
    data: Any
    raw: Any
    origin: str  # where it was read from, for messages and provenance


class Release:
    """What one AgentJet version says. Subclasses load lazily; all attributes are read-only."""

    ref: AgentJetRef
    kind: str  # "bundled" | "install"

    @property
    def label(self) -> str:
        return agentjet_label(self.ref)

    @property
    def overrides(self) -> OverridesTable:
        raise NotImplementedError

    @property
    def schema(self) -> Schema:
        raise NotImplementedError

    @property
    def thread_rule(self) -> ThreadRule:
        raise NotImplementedError

    @property
    def default_base(self) -> str:
        """The base AgentJetJob uses without ``base_yaml_config``, relative to the AgentJet root."""
        return SWARM_DEFAULT

    @property
    def root(self) -> Path | None:
        """The AgentJet folder on disk, whose files messages and the linter name (None: bundled data)."""
        return None

    def config_file(self, rel: str, *, raw: bool = False) -> ConfigFile | None:
        """A YAML file under the AgentJet root (``ajet/default_config/...``), or None when it has none;
        ``raw=True`` also reads it as a base (``yaml.safe_load`` typing)."""
        raise NotImplementedError

    def has_folder(self, rel: str) -> bool:
        """Whether this AgentJet has the folder ``rel`` (relative to its root)."""
        raise NotImplementedError


# --- bundled releases ----------------------------------------------------------------------------------


class BundledRelease(Release):
    kind = "bundled"

    def __init__(self, folder: Path, document: dict[str, Any]) -> None:
        self.folder = folder
        self.document = document
        meta = document["agentjet"]
        self.ref = AgentJetRef(source="bundled", version=meta.get("version"), commit=meta.get("commit"),
                               date=meta.get("date"), path=str(folder))
        self._files: dict[str, ConfigFile] | None = None
        self._lock = threading.Lock()

    @functools.cached_property
    def overrides(self) -> OverridesTable:
        job = self.document["job"]
        return OverridesTable(rows=tuple((k, v) for k, v in job["overrides"]),
                              signature=tuple((k, v) for k, v in job["signature"]),
                              takes_any_kwarg=bool(job.get("takes_any_kwarg")))

    @functools.cached_property
    def schema(self) -> Schema:
        return Schema(tree=self.document["schema"])

    @property
    def thread_rule(self) -> ThreadRule:
        rule = self.document["thread_rule"]
        return ThreadRule(rule.get("rule"), f"{rule.get('evidence')} (bundled)", self.label)

    @property
    def default_base(self) -> str:
        rel: str = self.document.get("default_base", SWARM_DEFAULT)
        return rel

    def _file_table(self) -> dict[str, ConfigFile]:
        """``layers.json``, read on first use only: tools that build no config never load it."""
        if self._files is None:
            with self._lock:
                if self._files is None:
                    with (self.folder / LAYERS_FILE).open(encoding="utf-8") as handle:
                        files = json.load(handle)["files"]
                    self._files = {
                        name: ConfigFile(name, entry["data"], entry.get("raw", entry["data"]), f"bundled:{name}")
                        for name, entry in files.items()
                    }
        return self._files

    def config_file(self, rel: str, *, raw: bool = False) -> ConfigFile | None:
        return self._file_table().get(_normal_rel(rel))

    def layer_files(self) -> list[str]:
        """Every YAML file of this release (relative to the AgentJet root)."""
        return list(self._file_table())

    def has_folder(self, rel: str) -> bool:
        prefix = _normal_rel(rel).rstrip("/") + "/"
        return any(name.startswith(prefix) for name in self._file_table())


def _normal_rel(rel: str) -> str:
    return posixpath.normpath(rel.replace(os.sep, "/"))


@functools.lru_cache(maxsize=1)
def bundled_releases() -> tuple[BundledRelease, ...]:
    """Every bundled release, newest first (by commit date)."""
    found: list[BundledRelease] = []
    try:
        folders = sorted(p for p in RELEASES_DIR.iterdir() if (p / RELEASE_FILE).is_file())
    except OSError:
        folders = []
    for folder in folders:
        with (folder / RELEASE_FILE).open(encoding="utf-8") as handle:
            found.append(BundledRelease(folder, json.load(handle)))
    found.sort(key=lambda r: (r.ref.date or "", r.ref.commit or ""), reverse=True)
    return tuple(found)


def newest_bundled() -> BundledRelease:
    releases = bundled_releases()
    if not releases:
        raise ToolInputError(f"no bundled AgentJet release found in {RELEASES_DIR}; reinstall this package")
    return releases[0]


def bundled_summary() -> str:
    return ", ".join(f"{r.ref.version} ({short_commit(r.ref.commit)}, {(r.ref.date or '?')[:10]})"
                     for r in bundled_releases()) or "none"


def find_bundled(wanted: str, *, field: str = "agentjet_version") -> BundledRelease:
    """A bundled release by version ('0.1.0', 'v0.1.0') or commit prefix (at least 4 hex digits)."""
    text = wanted.strip()
    matches = [r for r in bundled_releases() if _matches(r.ref, text)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ToolInputError(
            f"AgentJet {text!r} is not bundled; bundled releases: {bundled_summary()}. Give one of these versions "
            "or commit prefixes, or agentjet_root to read another AgentJet from disk", field=field)
    raise ToolInputError(
        f"AgentJet {text!r} matches several bundled releases ({', '.join(r.label for r in matches)}); give a commit "
        "prefix", field=field)


# --- installs, read statically and cached by file ---------------------------------------------------------


_CACHE: dict[tuple[str, str], tuple[tuple[int, int, int, int], Any]] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 256


def cached_file(path: Path, kind: str, parse: Callable[[str], Any]) -> Any:
    """``parse(text)`` of ``path``, reused while the file's mtime, size and inode stay the same.

    Raises ``FileNotFoundError`` for an absent (or non-regular) file, ``OSError`` when unreadable and
    whatever ``parse`` raises. Oversized files raise ``ValueError``."""
    try:
        st = path.stat()
    except OSError:
        raise FileNotFoundError(str(path)) from None
    if not stat.S_ISREG(st.st_mode):
        raise FileNotFoundError(str(path))
    signature = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)
    key = (str(path), kind)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
    if hit is not None and hit[0] == signature:
        return hit[1]
    if st.st_size > MAX_SOURCE_BYTES:
        raise ValueError(f"{path} is {st.st_size} bytes, over the {MAX_SOURCE_BYTES // (1024 * 1024)} MiB limit")
    text = path.read_bytes().decode("utf-8", errors="replace")
    value = parse(text)
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = (signature, value)
    return value


def cached_value(path: Path, kind: str) -> Any:
    """What ``cached_file(path, kind, ...)`` holds for the file as it is now, or None (not read yet, or changed)."""
    try:
        st = path.stat()
    except OSError:
        return None
    with _CACHE_LOCK:
        hit = _CACHE.get((str(path), kind))
    return hit[1] if hit is not None and hit[0] == (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev) else None


def clear_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()


def _parse_layer(text: str) -> Any:
    from skill_server.agentjet import yamltypes

    data = yamltypes.load_layer_text(text)
    yamltypes.check_plain(data)
    return data


def _parse_layer_and_raw(text: str) -> tuple[Any, Any]:
    from skill_server.agentjet import yamltypes

    data, raw = yamltypes.load_layer_and_base_text(text, check=yamltypes.check_plain)
    yamltypes.check_plain(raw)
    return data, raw


def read_yaml_file(path: Path, *, origin: str, rel: str = "", field: str = "agentjet_root",
                   raw: bool = False) -> ConfigFile | None:
    """A YAML file on disk as layer data (and as base data with ``raw``: both from one parse), cached; None when it
    does not exist."""
    import yaml

    from skill_server.core.safe_yaml import yaml_error_text

    try:
        both = cached_file(path, "layer+raw", _parse_layer_and_raw) if raw else cached_value(path, "layer+raw")
        data = both[0] if both is not None else cached_file(path, "layer", _parse_layer)
        raw_data = both[1] if raw else None
    except FileNotFoundError:
        return None
    except yaml.YAMLError as exc:
        raise ToolInputError(f"cannot read {path}: not valid YAML{yaml_error_text(exc)}", field=field) from None
    except RecursionError:
        raise ToolInputError(f"cannot read {path}: nested too deeply", field=field) from None
    except OSError as exc:
        raise ToolInputError(f"cannot read {path}: {exc.strerror or exc}", field=field) from None
    except ValueError as exc:  # oversized, or a value a config cannot carry (yamltypes.check_plain)
        raise ToolInputError(f"cannot read {path}: {' '.join(str(exc).split())}", field=field) from None
    return ConfigFile(rel or str(path), data, raw_data, origin)


def same_data(a: Any, b: Any) -> bool:
    """Equal as YAML data including types and key order (``1 == 1.0 == True`` in Python, not here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_data(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_data(x, y) for x, y in zip(a, b))
    return bool(a == b or (a != a and b != b))  # nan


class InstallRelease(Release):
    """An AgentJet checkout or installed package, read statically, every fact cached per file."""

    kind = "install"

    def __init__(self, install: AgentJetInstall, *, field: str = "agentjet_root") -> None:
        self.install = install
        self.field = field
        version = self._optional(INIT_MODULE, "version", pysource.read_init_version)
        if version is None:
            version = self._optional("pyproject.toml", "pyproject", pysource.read_pyproject_version)
        commit = gitmeta.head_commit(install.root)
        date = gitmeta.commit_date(install.root, commit) if commit else None
        self.ref = AgentJetRef(source="install", version=version, commit=commit, date=date, path=str(install.root))
        if commit is None:  # no .git: say which bundled release it is, when its layers are that release's
            match = self._bundled_with_same_layers()
            if match is not None:
                self.ref = self.ref.model_copy(update={"layers_match": bundled_name(match.ref)})

    @property
    def root(self) -> Path:
        return self.install.root

    def _bundled_with_same_layers(self) -> BundledRelease | None:
        """The newest bundled release whose every layer file (the YAMLs its swarm default composes) this install
        has with the same data, read the same way; None when none does or a file cannot be read. The swarm
        default's own defaults list is one of those files, so equal files compose equal layers."""
        for other in bundled_releases():
            try:
                if all(self._same_layer(rel, other.config_file(rel, raw=True)) for rel in other.layer_files()):
                    return other
            except ToolInputError:
                return None
        return None

    def _same_layer(self, rel: str, bundled: ConfigFile | None) -> bool:
        mine = self.config_file(rel, raw=True)
        return (mine is not None and bundled is not None and same_data(mine.data, bundled.data)
                and same_data(mine.raw, bundled.raw))

    @property
    def pyproject_version(self) -> str | None:
        """The checkout's ``pyproject.toml`` version, which may differ from ``ajet.__version__``."""
        found: str | None = self._optional("pyproject.toml", "pyproject", pysource.read_pyproject_version)
        return found

    def _optional(self, rel: str, kind: str, parse: Callable[[str], Any]) -> Any:
        try:
            return cached_file(self.install.root / rel, kind, parse)
        except (OSError, ValueError):
            return None

    def _read(self, rel: str, kind: str, parse: Callable[[str], Any], missing: str) -> Any:
        """A required fact: absent, unreadable or not stated exactly is a refusal naming the file."""
        path = self.install.root / rel
        try:
            return cached_file(path, kind, parse)
        except FileNotFoundError:
            raise ToolInputError(f"{self.label} has no {rel}: {missing}", field=self.field) from None
        except pysource.SourceUnreadable as exc:
            raise ToolInputError(f"{self.label}: cannot read {rel} exactly: {exc}", field=self.field) from None
        except (OSError, ValueError) as exc:
            raise ToolInputError(f"{self.label}: cannot read {path}: {exc}", field=self.field) from None

    def require_swarm(self) -> None:
        """Refuse an AgentJet without swarm mode: no swarm default layer or no overrides table."""
        missing = []
        if not (self.install.root / SWARM_DEFAULT).is_file():
            missing.append(f"the swarm default layer {SWARM_DEFAULT}")
        try:
            cached_file(self.install.root / JOB_MODULE, "job", pysource.read_job_source)
        except FileNotFoundError:
            missing.append(f"{JOB_MODULE} (AgentJetJob and its overrides table)")
        except pysource.NoOverridesTable:
            missing.append(f"an overrides table in AgentJetJob.__init__ ({JOB_MODULE})")
        except (pysource.SourceUnreadable, OSError, ValueError):
            pass  # reported with its reason when the table is used
        if missing:
            raise ToolInputError(
                f"{self.label} has no swarm support: missing {' and '.join(missing)}. It predates AgentJetJob's swarm "
                "mode, so this tool will not describe it (nothing is filled in from bundled data). Point agentjet_root "
                f"at a newer checkout, or pass agentjet_version to use a bundled release ({bundled_summary()})",
                field=self.field)

    @property
    def overrides(self) -> OverridesTable:
        signature, rows, any_kwarg = self._read(JOB_MODULE, "job", pysource.read_job_source,
                                                "AgentJetJob's signature and overrides table cannot be read")
        return OverridesTable(rows=tuple(rows), signature=tuple(signature), takes_any_kwarg=any_kwarg)

    @property
    def schema(self) -> Schema:
        tree = self._read(SCHEMA_MODULE, "schema", pysource.read_schema_source,
                          "the config dataclasses (field order and defaults) cannot be read, and this tool does not "
                          "fill them in from a bundled release")
        if not isinstance(tree.get("ajet"), dict) or DATACLASS_MARK not in tree["ajet"]:
            raise ToolInputError(f"{self.label}: Config in {SCHEMA_MODULE} has no dataclass field 'ajet'",
                                 field=self.field)
        return Schema(tree=tree)

    @property
    def thread_rule(self) -> ThreadRule:
        try:
            rule, evidence = cached_file(self.install.root / ROLLOUT_MODULE, "rollout", pysource.read_thread_rule)
        except FileNotFoundError:
            return ThreadRule(None, f"no {ROLLOUT_MODULE}", self.label)
        except (pysource.SourceUnreadable, OSError, ValueError) as exc:
            return ThreadRule(None, f"cannot read {ROLLOUT_MODULE}: {exc}", self.label)
        return ThreadRule(rule, f"{evidence} of {ROLLOUT_MODULE}", self.label)

    def has_folder(self, rel: str) -> bool:
        return (self.install.root / rel).is_dir()

    def config_file(self, rel: str, *, raw: bool = False) -> ConfigFile | None:
        rel = _normal_rel(rel)
        path = self.install.root / rel
        return read_yaml_file(path, origin=str(path), rel=rel, field=self.field, raw=raw)


# --- choosing ----------------------------------------------------------------------------------------------


def select_agentjet(agentjet_version: str | None = None, agentjet_root: str | None = None, *,
                    cwd: str | Path | None = None, discover: bool = True,
                    version_field: str = "agentjet_version", root_field: str = "agentjet_root") -> Release:
    """The AgentJet a tool call describes.

    ``agentjet_root`` (resolved against ``cwd``) wins and must agree with ``agentjet_version`` when both
    are given; then ``agentjet_version`` picks a bundled release; then, with ``discover``, an install found
    through ``AJET_ROOT`` or the Python path; else the newest bundled release. Installs without swarm
    support are refused."""
    if agentjet_root is not None:
        if not agentjet_root.strip():
            raise ToolInputError("is empty; give an AgentJet checkout folder or omit it", field=root_field)
        path = resolve_path(agentjet_root, field=root_field, base=cwd)
        install = locate_agentjet(str(path), field=root_field)
        assert install is not None
        release = InstallRelease(install, field=root_field)
        release.require_swarm()
        if agentjet_version is not None and not _matches(release.ref, agentjet_version):
            raise ToolInputError(
                f"agentjet_root is {release.label}, not AgentJet {agentjet_version!r}; give one of the two",
                field=version_field)
        return release
    if agentjet_version is not None:
        return find_bundled(agentjet_version, field=version_field)
    if discover:
        install = locate_agentjet(None)
        if install is not None:
            release = InstallRelease(install, field=root_field)
            release.require_swarm()
            return release
    return newest_bundled()


def _matches(ref: AgentJetRef, wanted: str) -> bool:
    """``wanted`` names this AgentJet: its version ('0.1.0', 'v0.1.0') or a commit prefix of 4+ hex digits."""
    text = wanted.strip()
    version = text[1:] if text[:1] in "vV" and text[1:2].isdigit() else text
    lowered = text.lower()
    return ref.version == version or (len(lowered) >= 4 and ref.commit is not None
                                      and ref.commit.lower().startswith(lowered))
