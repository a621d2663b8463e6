"""The entry: what a client script (and/or a YAML) configures, one ``Run`` per ``AgentJetJob`` construction.

``analyse`` scans the script (``script``), locates each construction's base YAML where AgentJetJob opens
it (``bases``), and replays AgentJetJob's construction on it (``replay``). Without a construction the YAML
alone (or AgentJet's defaults) is replayed. Tools build on the result: ``check_config`` runs its rules on
it; a tool that needs a script's effective values reads them from ``Run.value``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skill_server.analysis.agentjet import AgentJet
from skill_server.analysis.bases import base_for, defaults_base, file_base
from skill_server.analysis.replay import Run, replay
from skill_server.analysis.script import scan_script
from skill_server.analysis.session import Session
from skill_server.core.fsutil import resolve_directory, resolve_path
from skill_server.core.safe_yaml import load_yaml_file


@dataclass
class Analysis:
    session: Session  # the AgentJet described, the scan, the notes
    runs: list[Run]  # one per construction, in source order; else one for the YAML (or the defaults) alone


def analyse(aj: AgentJet, script: Path | None, yaml: Path | None, cwd: Path | None) -> Analysis:
    """Everything resolved statically about ``script`` (read, never run) and ``yaml`` (the base to compare
    instead of the script's own, or the YAML alone). Input errors name the fields ``script`` and ``yaml``."""
    scan = scan_script(script, field="script") if script is not None else None
    session = Session(aj, scan, cwd)
    for text in scan.notes if scan else []:
        session.note(text)
    runs: list[Run] = []
    if scan is not None:
        runs = [replay(session, c, base_for(session, c, yaml)) for c in scan.constructions]
        orphans = [w for w in scan.writes if w.construction is None]
        if orphans and len(scan.constructions) != 1:
            session.note(f"{len(orphans)} write(s) to a job's config could not be tied to one construction (lines "
                         f"{', '.join(str(w.line) for w in orphans[:8])}); they are not checked")
    if not runs:
        base = file_base(session, yaml, "explicit", None, field="yaml", alone=True) if yaml else defaults_base(session)
        if base.classic is not None:
            session.note(f"{base.name} is a classic-mode config ({base.classic}): it is read as `python -m "
                         f"ajet.launcher --conf {base.name}` composes it (backbone verl), not as an AgentJetJob base, "
                         "so AgentJetJob's refusals and the swarm engine's checks do not apply to it")
        runs.append(replay(session, None, base))
        if yaml is None:
            session.note("nothing to compare: no construction and no yaml; AgentJet's defaults were checked")
    if any(run.base.engine_copy and run.construction is not None for run in runs):
        session.note(f"the script builds its job on {yaml.name if yaml else 'the base'}, the copy the swarm engine "
                     "writes at start (a full dump of the synced job, rewritten at every start): each start makes "
                     "the last synced job the next base; keep the base in a YAML of your own")
    elif any(run.base.engine_copy for run in runs):
        session.note(f"{yaml.name if yaml else 'the base'} is the copy the swarm engine writes at start (a full dump "
                     "of the synced job, rewritten at every start): its values are what the engine ran, but a change "
                     "belongs in the job the client builds (its AgentJetJob kwargs or its base YAML); pass script= "
                     "to have fixes located there")
    return Analysis(session, runs)


def analyse_arguments(script: str | None, yaml: str | None, cwd: str | None, agentjet_version: str | None,
                      agentjet_root: str | None) -> tuple[AgentJet, Analysis]:
    """``analyse`` on the tools' arguments as check_config takes them (relative paths against ``cwd``), so every
    tool that reads a script resolves it the same way; input errors name ``script``, ``yaml``, ``cwd`` and the
    AgentJet selection."""
    directory = resolve_directory(cwd, field="cwd") if cwd is not None else None
    aj = AgentJet.select(agentjet_version, agentjet_root, directory)
    explicit: Path | None = None
    if yaml:
        explicit = resolve_path(yaml, field="yaml", base=directory)
        load_yaml_file(explicit, field="yaml", dialect="pyyaml")  # clear errors first: missing, no mapping, too large
        explicit = explicit.resolve()
    path = resolve_path(script, field="script", base=directory) if script else None
    return aj, analyse(aj, path, explicit, directory)
