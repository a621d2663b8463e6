"""Helpers shared by the check_config tests."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from skill_server.tools.check_config import CheckConfigInput, check_config
from tests.agentjet_fixtures import write_reference_checkout

CLIENTS = Path(__file__).parent / "fixtures" / "clients"
#: What a base needs to compose AgentJet's layers: Hydra finds them only through the base's own search path.
LAYERS_TAIL = ("hydra:\n  searchpath:\n    - file://ajet/default_config\n    - file://ajet/default_config/verl\n"
               "defaults:\n  - verl_default\n  - ajet_default\n  - _self_\n")
#: A YAML-first base in the werewolves style: AgentJet's layers, and the swarm switches set in the base itself.
SWARM_TAIL = "  enable_swarm_mode: true\n  enable_interchange_server: true\n" + LAYERS_TAIL
#: AgentJetJob of an older release: no nnodes kwarg (only base_yaml_config, experiment_name, num_repeat).
OLD_JOB = """
class AgentJetJob:
    def __init__(self, base_yaml_config=None, experiment_name=None, num_repeat=None):
        overrides = {"ajet.experiment_name": "experiment_name", "ajet.rollout.num_repeat": "num_repeat"}
"""


def old_install(root: Path) -> Path:
    """An AgentJet 0.0.2 checkout at ``root`` whose AgentJetJob is ``OLD_JOB``."""
    return write_reference_checkout(root, version="0.0.2", job=OLD_JOB)


def lint(script: Path | str | None = None, **kw: Any):
    """check_config with every detail (locations, values, constructions): what most tests assert on."""
    kw.setdefault("detail", "full")
    return check_config(CheckConfigInput(script=str(script) if script else None, **kw))


def rules(result) -> set[str]:
    return {f.rule for f in result.findings}


def only(result, rule: str):
    found = [f for f in result.findings if f.rule == rule]
    assert len(found) == 1, (rule, [f.message for f in found])
    return found[0]


def skipped(result) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in result.skipped:
        out.setdefault(s.rule, []).append(s.reason)
    return out


def write(folder: Path, name: str, text: str, tail: str = "") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text) + tail)
    return path


def where(finding) -> list[tuple[str | None, int | None]]:
    return [(Path(loc.file).name if loc.file else None, loc.line) for loc in finding.locations]
