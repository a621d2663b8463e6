"""agentjet-refusal: every reason AgentJet refuses the inputs that no dedicated rule reports."""

from __future__ import annotations

from collections.abc import Iterator

from skill_server.lint.agentjet import KEYS
from skill_server.lint.context import LintContext, Run
from skill_server.lint.models import Location
from skill_server.lint.registry import Report, claimed_causes, rule

FIXES = {
    "nnodes-type": "give nnodes as an int (convert an environment or command-line value with int(...))",
    "length-types": "give the four lengths as ints (convert environment or command-line values with int(...))",
    "base-without-defaults": "give the base a defaults list [verl_default, ajet_default, _self_] with the "
                             "hydra.searchpath block of AgentJet's swarm default, and set the swarm keys in the base",
    "base-includes-swarm-default": "remove ajet_swarm_default from the base's defaults list and set "
                                   "ajet.enable_swarm_mode, ajet.enable_interchange_server and the other swarm values "
                                   "in the base itself",
    "backbone-trinity": "use backbone verl (AgentJetJob does not support trinity)",
}


@rule("agentjet-refusal", "error", "AgentJet refuses these inputs (a cause no other rule reports).", """
    Every cause for which AgentJetJob or its config composition raises, as the AgentJet version in use
    describes it: a base whose defaults list includes ajet_swarm_default (Hydra's
    ConfigCompositionException), a base without a defaults list (KeyError), nnodes given as a string
    (TypeError), lengths given as strings (AssertionError or TypeError), backbone trinity
    (NotImplementedError). Causes with a rule of their own (unsupported-kwarg, kwarg-group-incomplete,
    length-budget, lora-rules) are reported there. The message names the cause, the version and AgentJet's
    exception.""", example="""
python
AgentJetJob(nnodes=os.getenv("NNODES", "2"))        # before: TypeError ('>' between str and int)
AgentJetJob(nnodes=int(os.getenv("NNODES", "2")))   # after""")
def agentjet_refusal(ctx: LintContext, run: Run) -> Iterator[Report]:
    claimed = claimed_causes()
    label = ctx.aj.version_label()
    for cause in run.causes:
        if cause.code in claimed:
            continue
        config_keys = [k for k in cause.keys if k.startswith("ajet.")]
        if config_keys:
            names = [next((n for n, k in KEYS.items() if k == key), key) for key in config_keys]
            locations = ctx.locate(run, *names)
        elif run.base.path is not None:
            line = ctx.yaml_lines(str(run.base.path)).get(cause.keys[0]) if cause.keys else None
            locations = [Location(file=str(run.base.path), line=line, key=cause.keys[0] if cause.keys else None,
                                  source="yaml")]
        else:
            locations = ctx.construction_location(run)
        yield Report(config_keys[0] if config_keys else None,
                     f"{cause.message}; {label} raises {cause.exception}", locations,
                     {"cause": cause.code, "exception": cause.exception, **cause.values},
                     FIXES.get(cause.code, "change the inputs so that AgentJetJob accepts them"))
