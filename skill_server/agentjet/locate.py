"""Locate an AgentJet install without importing it, and read facts from its source statically."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

from skill_server.errors import ToolInputError

#: Files inside the ``ajet`` package that the tools read (as text, never imported).
SWARM_DEFAULT_YAML = Path("default_config") / "ajet_swarm_default.yaml"
JOB_MODULE = Path("copilot") / "job.py"
SCHEMA_MODULE = Path("default_config") / "ajet_config_schema.py"
ROLLOUT_MODULE = Path("task_rollout") / "native_parallel_worker.py"

MAX_SOURCE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class AgentJetInstall:
    """An AgentJet source tree: ``root`` holds the ``ajet`` package directory ``package``."""

    root: Path
    package: Path
    found_by: str  # "agentjet_root" | "AJET_ROOT" | "find_spec"

    def file(self, relative: Path) -> Path:
        return self.package / relative

    @property
    def version_hint(self) -> str | None:
        return read_version_hint(self)


def _as_install(path: Path, found_by: str) -> AgentJetInstall | None:
    """Accept either a checkout root (containing ``ajet/``) or the ``ajet`` package directory itself."""
    path = path.expanduser()
    if (path / "ajet" / "__init__.py").is_file() or (path / "ajet" / "default_config").is_dir():
        return AgentJetInstall(root=path.resolve(), package=(path / "ajet").resolve(), found_by=found_by)
    if path.name == "ajet" and ((path / "__init__.py").is_file() or (path / "default_config").is_dir()):
        return AgentJetInstall(root=path.parent.resolve(), package=path.resolve(), found_by=found_by)
    return None


def locate_agentjet(agentjet_root: str | None = None, *, field: str = "agentjet_root") -> AgentJetInstall | None:
    """Find AgentJet: the explicit path (an error if it is not one), then ``AJET_ROOT``, then ``find_spec``."""
    if agentjet_root:
        found = _as_install(Path(agentjet_root), "agentjet_root")
        if found is None:
            raise ToolInputError(
                f"{agentjet_root!r} is neither an AgentJet checkout (a folder containing ajet/) "
                "nor the installed ajet package folder",
                field=field,
            )
        return found
    env_root = os.environ.get("AJET_ROOT")
    if env_root:
        found = _as_install(Path(env_root), "AJET_ROOT")
        if found is not None:
            return found
    try:
        spec = importlib.util.find_spec("ajet")  # locates without importing a top-level package
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        locations = list(spec.submodule_search_locations or [])
        if spec.origin and spec.origin not in ("namespace", "built-in"):
            locations.insert(0, str(Path(spec.origin).parent))
        for location in locations:
            found = _as_install(Path(location), "find_spec")
            if found is not None:
                return found
    return None


def read_source(path: Path) -> str | None:
    """Read a source file of the install, or None when it is absent, unreadable or oversized."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


_VERSION_RE = re.compile(r"""^\s*__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_PYPROJECT_VERSION_RE = re.compile(r"""^\s*version\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def read_version_hint(install: AgentJetInstall) -> str | None:
    """Best-effort version: ``ajet/__init__.py``'s ``__version__``, else the checkout's pyproject."""
    for candidate, pattern in (
        (install.package / "__init__.py", _VERSION_RE),
        (install.package / "version.py", _VERSION_RE),
        (install.root / "pyproject.toml", _PYPROJECT_VERSION_RE),
    ):
        text = read_source(candidate)
        if text:
            match = pattern.search(text)
            if match:
                return match.group(1)
    return None


def detect_thread_rule(install: AgentJetInstall | None) -> tuple[str | None, str]:
    """Which rounding ``rollout_swarm`` uses for tasks per round: ("ceil" | "floor" | None, how we know).

    Newer engines submit ``ceil(max_env_worker / num_repeat)`` task groups, older ones floor-divide.
    The function body is inspected as text through ``ast``; nothing is executed.
    """
    if install is None:
        return None, "no AgentJet install found"
    path = install.file(ROLLOUT_MODULE)
    source = read_source(path)
    if source is None:
        return None, f"{path} not readable"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None, f"{path} does not parse"
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "rollout_swarm":
            body = ast.get_source_segment(source, node) or ""
            uses_ceil = any(
                isinstance(n, ast.Call)
                and (
                    (isinstance(n.func, ast.Attribute) and n.func.attr == "ceil")
                    or (isinstance(n.func, ast.Name) and n.func.id == "ceil")
                )
                for n in ast.walk(node)
            )
            uses_floor_div = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv) for n in ast.walk(node))
            if uses_ceil:
                return "ceil", f"ceil() in rollout_swarm of {path}"
            if uses_floor_div or "//" in body:
                return "floor", f"floor division in rollout_swarm of {path}"
            return None, f"rollout_swarm in {path} shows neither ceil() nor //"
    return None, f"{path} has no rollout_swarm (an engine without swarm mode)"
