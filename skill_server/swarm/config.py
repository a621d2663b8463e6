"""The config a swarm engine runs, as the engine dumped it: where the dump is (the server's experiment
directory holds ``yaml_backup.yaml``) and the settings in it that the episode cap and the gauge depend on,
each with the line it is on.

``swarm_status`` and ``episode_cap`` read a dumped config through here, whether the user gave the file or
the server named its directory, so both say the same about the same file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from skill_server.agentjet.keys import KEYS
from skill_server.agentjet.swarm_api import ROUTE_EXPERIMENT_DIR
from skill_server.core.errors import SkillError, ToolInputError
from skill_server.core.http_json import FetchError
from skill_server.core.models import MAX_JSON_INT
from skill_server.core.safe_yaml import key_lines, load_yaml_file
from skill_server.core.trees import get_path
from skill_server.swarm.links import ExperimentLink, is_local
from skill_server.swarm.read import opt_str

T = TypeVar("T")

DUMPED_CONFIG = "yaml_backup.yaml"
#: The whole-number settings read from a dump, by their name in ``agentjet.keys.KEYS``.
INT_SETTINGS = ("max_env_worker", "num_repeat", "train_batch_size", "max_inference_tracker_threads")
#: ... and the text one (the sample collection method, for the gauge's targets).
METHOD_SETTING = "sample_collection_method"
_METHOD_KEY = KEYS["swarm_mode_sample_collection_method"]


@dataclass
class EngineSettings:
    """The settings one dumped config sets (a setting it leaves out is absent), and the line of each."""

    path: Path
    values: dict[str, int | str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def key_of(self, name: str) -> str:
        return _METHOD_KEY if name == METHOD_SETTING else KEYS[name]

    def where(self, name: str) -> str:
        """``/path/yaml_backup.yaml:42`` (the file alone when the line is unknown)."""
        line = self.lines.get(name)
        return f"{self.path}:{line}" if line else str(self.path)


def _int_at(data: dict[str, Any], path: str, field: str) -> int | None:
    node = get_path(data, path, None)
    if node is None:
        return None
    if isinstance(node, bool) or not isinstance(node, int) or not 1 <= node <= MAX_JSON_INT:
        raise ToolInputError(f"{path} in the file must be a positive integer, got {node!r}"[:300], field=field)
    return node


def _str_at(data: dict[str, Any], path: str, field: str) -> str | None:
    node = get_path(data, path, None)
    if node is None:
        return None
    if not isinstance(node, str):
        raise ToolInputError(f"{path} in the file must be a string, got {node!r}"[:300], field=field)
    return node


def read_settings(path: str | Path, *, field: str) -> EngineSettings:
    """The settings of a dumped AgentJet config (bounded safe loading); a file that is missing, is no YAML
    mapping, has no ``ajet`` mapping or holds a setting of the wrong type is an input error naming ``field``."""
    data = load_yaml_file(path, field=field)
    if not isinstance(data.get("ajet"), dict):
        raise ToolInputError(f"{path} has no 'ajet' mapping; give a config dumped by AgentJetJob "
                             "(for example saved_experiments/<name>/yaml_backup.yaml)", field=field)
    found = EngineSettings(Path(path))
    read: dict[str, int | str | None] = {name: _int_at(data, KEYS[name], field) for name in INT_SETTINGS}
    read[METHOD_SETTING] = _str_at(data, _METHOD_KEY, field)
    lines = key_lines(path)
    for name, value in read.items():
        if value is not None:
            found.values[name] = value
            line = lines.get(found.key_of(name))
            if line is not None:
                found.lines[name] = line
    return found


def read_dumped(path: Path, reader: Callable[[Path], T]) -> T | str:
    """What ``reader`` makes of the config an engine dumped on this machine (it reads it with
    :func:`read_settings` under the field ``config``), or why the dump cannot be read."""
    if not path.is_file():
        return f"{path} is not on this machine; give yaml"
    try:
        return reader(path)
    except SkillError as exc:
        return exc.message


@dataclass(frozen=True)
class DumpLocation:
    """Where the engine's dump is, from its ``/get_server_experiment_dir`` answer."""

    experiment_dir: str | None = None  # what the server reported (bounded), once an experiment started
    path: Path | None = None  # the dump, on this machine
    problem: tuple[str, str] | None = None  # (route or "config", why the dump cannot be read here)


def locate_dump(url: str, answer: Any, link: ExperimentLink | None) -> DumpLocation:
    """The dump of the engine at ``url`` on this machine, or why it cannot be read here (a directory relative
    to an unknown working directory, a server on another machine). ``link``: the experiment of this skill
    that runs the server, which knows its working directory and host."""
    if isinstance(answer, FetchError):
        if answer.status == 404:  # an AgentJet without the route: nothing to report
            return DumpLocation()
        return DumpLocation(problem=(ROUTE_EXPERIMENT_DIR, str(answer)))
    directory = answer.get("server_experiment_dir") if isinstance(answer, dict) else None
    if not isinstance(directory, str) or not directory.strip():
        return DumpLocation()  # the engine has not started an experiment yet
    shown = opt_str(directory, 1000)
    where = Path(directory)
    if not where.is_absolute():
        if link is None or not link.workdir:
            return DumpLocation(shown, problem=("config", f"the experiment directory {directory!r} is relative to the "
                                                "server's working directory, which is unknown; give yaml"))
        where = Path(link.workdir) / where
    if not is_local(url) and (link is None or link.host is not None):
        return DumpLocation(shown, problem=("config", f"the server runs on another machine; its config is "
                                            f"{where / DUMPED_CONFIG} there (copy it here and give yaml)"))
    return DumpLocation(shown, where / DUMPED_CONFIG)
