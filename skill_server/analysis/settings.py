"""Named settings of each analysed construction, with where each value comes from: for a tool that needs a
few effective values of a client script (``episode_cap``) rather than check_config's whole report.

A value the analysis cannot resolve stays unknown with its reason; nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skill_server.analysis.agentjet import KEYS
from skill_server.analysis.analyse import Analysis
from skill_server.analysis.replay import Run
from skill_server.analysis.values import MISSING, Unknown, jsonable


@dataclass(frozen=True)
class Setting:
    """One effective value: ``value`` is None when it is unknown (``unknown`` says why) or not set at all."""

    key: str
    value: Any
    place: str  # where it is set: "train.py:12 (AgentJetJob kwarg max_env_worker)", "base.yaml:40", a default
    unknown: str | None = None
    assumes: tuple[str, ...] = ()


@dataclass
class RunSettings:
    """The settings of one construction (``line`` None: the YAML alone, or AgentJet's defaults)."""

    line: int | None
    settings: dict[str, Setting] = field(default_factory=dict)
    refusals: list[str] = field(default_factory=list)  # why AgentJet would refuse this construction, if it would


def settings_of(analysis: Analysis, names: tuple[str, ...]) -> list[RunSettings]:
    """``names`` (``agentjet.keys.KEYS`` names or dotted keys) for every run, in source order."""
    return [RunSettings(run.construction.line if run.construction else None,
                        {name: _setting(analysis, run, KEYS.get(name, name)) for name in names},
                        [f"{c.summary} ({c.raised})" for c in run.causes])
            for run in analysis.runs]


def _setting(analysis: Analysis, run: Run, key: str) -> Setting:
    value = run.value(key)
    place = _place(analysis, run, key)
    setter = run.effective_setter(key)
    assumes = tuple(a.describe() for a in setter.assumes) if setter is not None else ()
    if isinstance(value, Unknown):
        return Setting(key, None, place, value.reason, assumes)
    if value is MISSING:
        return Setting(key, None, place, "not in this config", assumes)
    return Setting(key, jsonable(value), place, None, assumes)


def _place(analysis: Analysis, run: Run, key: str) -> str:
    setter = run.effective_setter(key)
    if setter is not None:
        where = f"{setter.file}:{setter.line}" if setter.file and setter.line else setter.file or "the script"
        if setter.kind == "kwarg":
            return f"{where} (AgentJetJob kwarg {setter.name})"
        if setter.kind == "write":
            return f"{where} (written after construction: {setter.text})" if setter.text else f"{where} (a write)"
        if setter.kind == "tcp-switch":
            return f"{where} (AgentJetJob's tcp switch)"
        return where
    if run.base.values_unknown:
        return str(run.base.path) if run.base.path else "the base YAML"
    aj = analysis.session.aj
    file = aj.default_file(key)
    if file:
        line = analysis.session.key_lines(file).get(key)
        return f"{aj.label}'s default ({file}:{line})" if line else f"{aj.label}'s default ({file})"
    return f"{aj.label}'s default"
