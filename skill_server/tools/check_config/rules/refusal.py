"""agentjet-refusal: every reason AgentJet refuses the inputs that no dedicated rule reports."""

from __future__ import annotations

from collections.abc import Iterator

from skill_server.analysis.agentjet import KEYS
from skill_server.analysis.replay import Run
from skill_server.tools.check_config.context import LintContext, cause_values
from skill_server.tools.check_config.models import Location
from skill_server.tools.check_config.registry import Report, claimed_causes, rule

LAYERS = "[verl_default, ajet_default, _self_]"
SEARCH = "hydra.searchpath [file://ajet/default_config, file://ajet/default_config/verl]"
#: cause id -> what to do about it (the message already says what is wrong and what AgentJet raises)
FIXES = {
    "nnodes-not-a-number": "give nnodes as an int (convert an environment or command-line value with int(...))",
    "trinity-backbone": "use backbone verl (AgentJetJob does not support trinity)",
    "base-without-defaults": f"give the base the defaults list {LAYERS} and the {SEARCH} that finds them, and set "
                             "the swarm keys (ajet.enable_swarm_mode, ajet.enable_interchange_server, ...) in the "
                             "base itself",
    "base-without-hydra": f"give the base the {SEARCH} block that finds AgentJet's layers",
    "defaults-includes-swarm-default": f"list {LAYERS} instead and set ajet.enable_swarm_mode, "
                                       "ajet.enable_interchange_server and the other swarm values you rely on in the "
                                       "base itself (or start from a copy of AgentJet's ajet_swarm_default.yaml)",
    "nested-searchpath": "set hydra.searchpath in the base only, never in a layer its defaults list names",
    "defaults-entry-missing": "put the entry's folder on the base's hydra.searchpath (an absolute file:// folder, or "
                              "one relative to the launch directory), or remove the entry; Hydra never looks in the "
                              "base's own folder",
    "missing-key": f"compose ajet_default: the base's defaults list should be {LAYERS}",
    "searchpath-invalid": "make hydra.searchpath a list of file:// strings",
    "defaults-invalid": "make defaults a list of names, e.g. " + LAYERS,
    "duplicate-self": "list _self_ once in the defaults list",
    "merge-mapping-with-list": "give the key the same kind of value (a mapping or a list) in every layer",
    "non-string-key": "quote the key in the YAML so that it is a string",
}


@rule("agentjet-refusal", "error", "AgentJet refuses these inputs (a cause no other rule reports).", """
    Every cause for which AgentJetJob or its Hydra composition raises, as the AgentJet release named in the
    message describes it, with AgentJet's exception: a base whose defaults list includes ajet_swarm_default
    (ConfigCompositionException), a defaults entry Hydra cannot find on the base's search path
    (MissingConfigException), a base without a defaults list (KeyError), a base whose layers lack a key
    AgentJetJob reads (AttributeError), nnodes given as a string (TypeError), backbone trinity
    (NotImplementedError). A base AgentJet refuses to compose leaves every value it would set unknown.
    Causes with a rule of their own (unsupported-kwarg, kwarg-group-incomplete, length-budget, lora-rules,
    base-yaml-missing) are reported there.""", example="""
python
AgentJetJob(nnodes=os.getenv("NNODES", "2"))        # before: TypeError ('>' between str and int)
AgentJetJob(nnodes=int(os.getenv("NNODES", "2")))   # after""")
def agentjet_refusal(ctx: LintContext, run: Run) -> Iterator[Report]:
    claimed = claimed_causes()
    for cause in run.causes:
        if cause.id in claimed:
            continue
        names = [n for n in cause.values if n in KEYS]  # a check on config values: point at who sets them
        key: str | None
        if names:
            locations = ctx.locate(run, *names)
            key = KEYS[names[0]]
        elif run.base.path is not None:  # about the base file itself
            lines = ctx.yaml_lines(str(run.base.path))
            line = lines.get("defaults") if cause.id == "missing-key" else lines.get(cause.key or "")
            locations = [Location(file=str(run.base.path), line=line, key=cause.key, source="yaml")]
            key = cause.key if cause.key and cause.key.startswith("ajet.") else None
        else:
            locations = ctx.construction_location(run)
            key = None
        yield Report(key, cause.message, locations,
                     {**cause_values(cause), **cause.values},
                     FIXES.get(cause.id, f"change the inputs so that {ctx.aj.label} accepts them"))
