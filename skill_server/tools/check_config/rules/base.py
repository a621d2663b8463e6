"""Rules about the base YAML: that it exists, that it is a swarm config, and the multi-node interchange."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from skill_server.analysis.agentjet import KEYS
from skill_server.analysis.replay import Run
from skill_server.analysis.values import Unknown, describe_unknown, is_int, show
from skill_server.tools.check_config.context import LintContext, cause_values
from skill_server.tools.check_config.models import Location
from skill_server.tools.check_config.registry import Report, rule


@rule("base-yaml-missing", "error", "The base_yaml_config the script passes is not there.", """
    AgentJetJob opens base_yaml_config as given and raises ValueError('Configuration yaml is absent!') when it
    is missing: an absolute path (or one built from __file__) is that file, a relative one is relative to
    the launch directory (cwd). The finding names every path tried. Without cwd, a relative path depends on
    the launch directory: the candidates checked (the script's folder up to its repository root) are listed
    as candidates. Nothing falls back to AgentJet's defaults: the values the base would set are unknown.""",
      claims=("base-yaml-absent",), example="""
python
AgentJetJob(base_yaml_config="configs/run.yaml")   # before: relative to wherever the client is started
AgentJetJob(base_yaml_config=os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs/run.yaml"))""")
def base_yaml_missing(ctx: LintContext, run: Run) -> Iterator[Report]:
    base, c = run.base, run.construction
    if base.state != "missing" or c is None:
        return
    kw = c.kwargs.get("base_yaml_config")
    loc = [Location(file=ctx.script_file, line=kw.line if kw else c.line, key="base_yaml_config", source="kwarg")]
    tried = ", ".join(base.tried) or "nothing"
    absent = run.causes_for("base-yaml-absent")
    values = {"expression": base.expression, "tried": base.tried, "anchor": base.anchor,
              "launch_dir_known": base.launch_dir_known}
    if base.anchor == "cwd" and not base.launch_dir_known:
        cause = ctx.aj.absent_base_cause(base.path or Path(base.expression or ""))
        message = (f"base_yaml_config {base.expression} is relative to the launch directory, which is not known; it "
                   f"is not at any candidate checked ({tried}). If it is missing where the client starts, "
                   f"{cause.agentjet} raises {cause.raised}")
        fix = ("pass cwd= (the directory the client is launched from) to check it there, or build the path from "
               "__file__ so it does not depend on the launch directory")
    elif absent:
        cause = absent[0]
        message = f"base_yaml_config {base.expression}: {base.reason} (tried: {tried}); {cause.agentjet} raises " \
                  f"{cause.raised}"
        fix = "create the YAML there or fix the path (a path built from __file__ does not depend on the launch " \
              "directory)"
    else:  # there, but not a regular file: AgentJetJob would try to read it as YAML anyway
        cause = None
        message = (f"base_yaml_config {base.expression}: {base.reason} (tried: {tried}); AgentJetJob cannot read "
                   "it as a YAML file")
        fix = "point base_yaml_config at a regular YAML file"
    if cause is not None:
        values = {**cause_values(cause), **values}
    yield Report("base_yaml_config", message, loc, values, fix)


@rule("base-not-swarm", "warning", "Swarm mode or the interchange server is off in the effective config.", """
    The swarm server needs ajet.enable_swarm_mode and ajet.enable_interchange_server on. Typical causes: a
    custom base whose defaults list stops at ajet_default (every key it does not set comes from
    ajet_default.yaml: swarm off, interchange port 'auto', logger swanlab, placeholder model path,
    max_env_worker 64), or a YAML without a defaults list. The fix never adds ajet_swarm_default to a base's
    defaults list: Hydra refuses that.""", swarm_only=True, example="""
yaml
defaults: [verl_default, ajet_default, _self_]   # before: swarm off
ajet: {enable_swarm_mode: true, enable_interchange_server: true}   # after: set both in the base""")
def base_not_swarm(ctx: LintContext, run: Run) -> Iterator[Report]:
    names = ("enable_swarm_mode", "enable_interchange_server")
    values = {n: run.value(n) for n in names}
    unknown = [(n, v) for n, v in values.items() if isinstance(v, Unknown)]
    off = [n for n, v in values.items() if not isinstance(v, Unknown) and v is not True]
    if not off:
        if unknown:
            ctx.skip("base-not-swarm", describe_unknown(unknown))
        return
    base = run.base
    composed = base.composed
    trap = composed is not None and not composed.composes_swarm
    bare = trap and composed is not None and "ajet_default" not in composed.layer_names
    message = ", ".join(f"{KEYS[n]} is {show(values[n])}" for n in off) + ": the swarm server needs both on"
    if bare:
        message += (f". {base.name} has no defaults list composing AgentJet's YAMLs, so only its own keys and the "
                    "config dataclass defaults exist")
    elif trap:
        message += (f". {base.name} composes ajet_default without the swarm overlay, so every key it does not set "
                    "comes from ajet_default.yaml (swarm off, interchange port 'auto', logger swanlab, placeholder "
                    "model path, max_env_worker 64)")
    where = base.name if base.is_users else "the YAML"
    fix = f"set {' and '.join(KEYS[n] + ': true' for n in off)} in {where}"
    if trap:
        fix += (" together with the other swarm values you rely on (interchange_server_port 10086, logger, model path, "
                "max_env_worker), as ajet_swarm_default.yaml does; do not add ajet_swarm_default to the defaults list "
                "(Hydra refuses it: ConfigCompositionException)")
    c = run.construction
    if "enable_swarm_mode" in off and c is not None and "swarm_mode" not in c.kwargs:
        fix += f" (the kwarg swarm_mode=True of {ctx.aj.label} covers enable_swarm_mode)"
    locations = ctx.locate(run, *off) if any(run.effective_setter(KEYS[n]) for n in off) else (
        [Location(file=str(base.path), line=None)] if base.path else ctx.construction_location(run))
    yield Report(KEYS[off[0]], message, locations, {**{n: values[n] for n in off},
                                                    "composes_swarm_defaults": not trap}, fix)


@rule("interchange-not-tcp", "error", "Several nodes, but the interchange is not tcp.", """
    With nnodes > 1 in swarm mode AgentJetJob switches ajet.interchange_server.interchange_method to tcp. A
    write after construction that sets it back, or a YAML that sets ipc explicitly for a server started from
    that YAML directly, breaks multi-node training.""", swarm_only=True, example="""
python
job = AgentJetJob(nnodes=2); job.config.ajet.interchange_server.interchange_method = "ipc"   # before
job = AgentJetJob(nnodes=2)                                                                  # after""")
def interchange_not_tcp(ctx: LintContext, run: Run) -> Iterator[Report]:
    nodes = run.value("nnodes")
    if isinstance(nodes, Unknown):
        if run.value("enable_swarm_mode") is not False:
            ctx.skip("interchange-not-tcp", f"nnodes is unknown ({nodes.reason})")
        return
    if not (is_int(nodes) and nodes > 1):
        return
    key = KEYS["interchange_method"]
    final = run.value(key)
    wrote = [w for w in run.applied_writes if w.key == key or key.startswith(w.key + ".")]
    if wrote and final != "tcp" and not isinstance(final, Unknown):
        w = wrote[-1]
        yield Report(key, f"nnodes={nodes} needs the tcp interchange, but the write at line {w.line} sets it to "
                     f"{show(final)} after AgentJetJob switched it to tcp", ctx.locate(run, "interchange_method",
                                                                                       "nnodes"),
                     {"nnodes": nodes, "interchange_method": final},
                     "delete the write: AgentJetJob already sets tcp when nnodes > 1 in swarm mode")
        return
    base = run.base
    yaml_value = base.explicit.get(key)
    if key in base.explicit and yaml_value != "tcp":
        yield Report(key, f"nnodes={nodes} but {base.name} sets interchange_method: {yaml_value} explicitly; "
                     "multi-node swarm needs tcp (AgentJetJob only switches it at construction, and a server started "
                     "with this YAML directly keeps it)", [ctx.yaml_location(base, key), *ctx.locate(run, "nnodes")],
                     {"nnodes": nodes, "interchange_method": yaml_value},
                     f"set {key}: tcp in {base.name} (or remove the line)")
