"""Static extraction of AgentJetJob usage from a swarm client script (``ast`` only; nothing is imported or run).

What a client script does to its config, as data: every ``AgentJetJob(...)`` construction (however the
class was imported) with its kwargs resolved where that is possible statically, the ``base_yaml_config``
path, the post-construction writes to ``job.config...`` and the calls that freeze the config (dump /
sync). The linter turns this into findings; nothing here knows about AgentJet's defaults.

Layout: ``model`` (what a scan produces, as data), ``modules`` (reading files, symbol tables),
``evaluate`` (the static evaluator's core: values, and why one is unknown), ``registry`` and ``units/``
(what the evaluator knows about libraries, as small registered units), ``static`` and ``paths`` (plain
values and path values), ``jobs`` (constructions and job variables), ``effects`` (writes and freezes),
and this module (the passes over the nodes ``modules.walk_module`` listed).
"""

from __future__ import annotations

import ast
from pathlib import Path

from skill_server.analysis.script import registry
from skill_server.analysis.script import units as _units  # noqa: F401  (registers every unit)
from skill_server.analysis.script.effects import FREEZE_CALLS, WRITER_METHODS, EffectCollector
from skill_server.analysis.script.episodes import find_protocol
from skill_server.analysis.script.evaluate import Evaluator
from skill_server.analysis.script.jobs import JobTracker
from skill_server.analysis.script.model import (
    Assumption,
    Construction,
    Freeze,
    Kwarg,
    PathRef,
    Scope,
    ScriptScan,
    Value,
    Write,
)
from skill_server.analysis.script.modules import MAX_SCRIPT_BYTES, ModuleLoader, parse_module
from skill_server.analysis.script.pools import find_pools

__all__ = ["scan_script", "ScriptScan", "Construction", "Kwarg", "Write", "Freeze", "Value", "PathRef", "Scope",
           "Assumption", "FREEZE_CALLS", "WRITER_METHODS", "MAX_SCRIPT_BYTES"]


class _Notes:
    def __init__(self) -> None:
        self.items: list[str] = []

    def __call__(self, text: str) -> None:
        if text not in self.items:
            self.items.append(text)


def scan_script(path: str | Path, *, field: str = "script") -> ScriptScan:
    """Read and scan a client script; a file that cannot be read or parsed is a ``ToolInputError``."""
    main = parse_module(Path(path).expanduser(), field=field)
    notes = _Notes()
    loader = ModuleLoader(main.path.parent)
    evaluator = Evaluator(main, loader, notes)
    nodes = main.effect_nodes
    calls = [(scope, node) for node, scope in nodes if isinstance(node, ast.Call)]
    for scope, call in calls:  # call sites of the script's own functions
        if isinstance(call.func, ast.Name) and call.func.id in main.functions:
            fscope = main.functions[call.func.id]
            if (scope, call.lineno) not in fscope.call_sites:
                fscope.call_sites.append((scope, call.lineno))
            fscope.call_nodes.append((scope, call))
    for prepass in registry.PREPASSES:  # e.g. argparse options attached to their parsers, for args.x
        prepass(evaluator, calls)

    jobs = JobTracker(main, evaluator, notes)
    for _ in range(2):  # twice: a builder function may be defined after its caller
        for node, scope in nodes:
            jobs.visit(node, scope)
    for _ in range(3):
        if not jobs.bind_parameters(calls):
            break
    effects = EffectCollector(main, evaluator, jobs, notes)
    for node, scope in nodes:
        effects.visit(node, scope)
    effects.writes.sort(key=lambda w: w.line)
    effects.freezes.sort(key=lambda f: f.line)
    if not jobs.constructions:
        notes("no AgentJetJob(...) construction found in the script")
    for text in loader.notes:
        notes(text)
    pools = find_pools(main, evaluator)
    return ScriptScan(main.path, jobs.constructions, effects.writes, effects.freezes, notes.items, pools,
                      find_protocol(main, evaluator, pools))
