"""A run's inputs as ``build_config`` takes them (kwargs, and writes as ``set``), from resolved values only.

What a script passes that is known only at run time is listed as ``missing``, never guessed; what
AgentJet would not take (a kwarg this release lacks, a key its config does not have) is ``left_out``; the
values that rest on an environment or command-line default name that assumption. The YAML consolidation
of ``check_config`` is built on this, and so can ``build_config`` from a client script.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skill_server.analysis.agentjet import AgentJet
from skill_server.analysis.replay import Run
from skill_server.analysis.script import Construction, Value


@dataclass
class JobInputs:
    kwargs: dict[str, Any] = field(default_factory=dict)  # AgentJetJob kwargs (base_yaml_config excluded)
    sets: dict[str, Any] = field(default_factory=dict)  # dotted key -> value written before any dump
    missing: list[str] = field(default_factory=list)  # what is known only at run time, with its line
    unknown_keys: dict[str, str] = field(default_factory=dict)  # config key (or **splat) -> why its value is unknown
    left_out: list[str] = field(default_factory=list)  # what AgentJet would not take, with why
    assumes: list[str] = field(default_factory=list)  # the assumptions the values rest on, described

    def assume(self, value: Value) -> None:
        self.assumes.extend(a.describe() for a in value.assumes if a.describe() not in self.assumes)


def job_inputs(aj: AgentJet, run: Run) -> JobInputs:
    """The resolved kwargs and writes of one construction's run (``run.construction`` must be set)."""
    c = run.construction
    assert c is not None
    out = JobInputs()
    _kwargs(aj, c, out)
    for splat in c.dynamic:
        out.missing.append(f"{splat} (line {c.line}): the kwargs it passes are known only at run time")
        out.unknown_keys[splat] = f"line {c.line}: the kwargs it passes, so the keys they set, are known at run time"
    _writes(aj, run, out)
    return out


def _kwargs(aj: AgentJet, c: Construction, out: JobInputs) -> None:
    for name, kw in c.kwargs.items():
        if name == "base_yaml_config":
            continue
        if name == "ensure_new_experiment":
            if kw.value.resolved and kw.value.value:
                out.left_out.append(f"ensure_new_experiment (line {kw.line}): it would bake today's timestamp into "
                                    "the consolidated YAML's experiment_name")
        elif not aj.accepts(name):
            out.left_out.append(f"kwarg {name} (line {kw.line}): not a kwarg of {aj.label}")
        elif not kw.value.resolved:
            why = f"kwarg {name} (line {kw.line}): {kw.value.describe_unresolved()}"
            out.missing.append(why)
            out.unknown_keys[aj.key_for(name) or name] = why
        elif kw.value.value is not None:  # None keeps the YAML value: nothing to pass
            out.kwargs[name] = kw.value.value
            out.assume(kw.value)


def _writes(aj: AgentJet, run: Run, out: JobInputs) -> None:
    late = {id(w) for w, _ in run.late_writes}
    for w in run.writes:
        if w.kind == "mirror" or id(w) in late:
            continue
        if w.kind == "method":
            out.missing.append(f"{w.value.text} (line {w.line}): sets {w.key} at run time")
            out.unknown_keys[w.key] = f"{w.value.text} (line {w.line}) sets it at run time"
        elif not aj.known(w.key):
            out.left_out.append(f"write {w.key} (line {w.line}): not a key of AgentJet's config ({aj.label})")
        elif not w.value.resolved:
            out.missing.append(f"write {w.key} (line {w.line}): {w.value.describe_unresolved()}")
            out.unknown_keys[w.key] = f"write (line {w.line}): {w.value.describe_unresolved()}"
        else:
            out.sets[w.key] = w.value.value
            out.assume(w.value)
