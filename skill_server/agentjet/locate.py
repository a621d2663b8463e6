"""Find an AgentJet checkout or installed package without importing it (read by ``release.InstallRelease``)."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from skill_server.core.errors import ToolInputError


@dataclass(frozen=True)
class AgentJetInstall:
    """An AgentJet source tree: ``root`` holds the ``ajet`` package directory ``package``."""

    root: Path
    package: Path


def _as_install(path: Path) -> AgentJetInstall | None:
    """Accept either a checkout root (containing ``ajet/``) or the ``ajet`` package directory itself."""
    path = path.expanduser()
    try:
        if (path / "ajet" / "__init__.py").is_file() or (path / "ajet" / "default_config").is_dir():
            return AgentJetInstall(root=path.resolve(), package=(path / "ajet").resolve())
        if path.name == "ajet" and ((path / "__init__.py").is_file() or (path / "default_config").is_dir()):
            return AgentJetInstall(root=path.parent.resolve(), package=path.resolve())
    except OSError:
        return None
    return None


def locate_agentjet(agentjet_root: str | None = None, *, field: str = "agentjet_root") -> AgentJetInstall | None:
    """Find AgentJet: the explicit path (an error if it is not one), then ``AJET_ROOT``, then ``find_spec``."""
    if agentjet_root:
        found = _as_install(Path(agentjet_root))
        if found is None:
            raise ToolInputError(
                f"{Path(agentjet_root).expanduser()} is neither an AgentJet checkout (a folder containing ajet/) "
                "nor the installed ajet package folder",
                field=field,
            )
        return found
    env_root = os.environ.get("AJET_ROOT")
    if env_root:
        found = _as_install(Path(env_root))
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
            found = _as_install(Path(location))
            if found is not None:
                return found
    return None
