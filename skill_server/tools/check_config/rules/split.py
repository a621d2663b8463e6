"""split-configuration: the job lives half in the YAML, half in the script; and the safe consolidation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from skill_server.analysis.inputs import job_inputs
from skill_server.analysis.replay import Run
from skill_server.analysis.script import Construction, Kwarg, Write
from skill_server.tools.check_config.context import LintContext, unique_locations
from skill_server.tools.check_config.models import Location
from skill_server.tools.check_config.registry import Report, rule

RULE = "split-configuration"
#: Kwargs that name a run rather than configure it: passing them next to a YAML-first job is fine.
RUN_IDENTITY = ("experiment_name", "project_name", "experiment_dir")


#: YAML keys named in the finding (a dumped config writes hundreds; ``yaml_key_count`` counts them all).
YAML_KEYS_SHOWN = 20


@rule(RULE, "warning", "The YAML and the script both configure the job.", """
    The user's base YAML writes settings and the script also sets keys through kwargs or writes, so a reader
    of either place sees half the job (run-identity kwargs such as experiment_name do not count).
    values.one_place says which side already holds most of it.
    values.build_config_arguments holds only resolved values, ready for build_config to write the consolidated
    YAML; it is null when something is known only at run time (values.build_config_missing lists what), and
    misspelt kwargs or keys are left out (values.build_config_left_out).""", example="""
python
# before: werewolves.yaml sets num_repeat 6, max_env_worker 64 ...; the client adds
AgentJetJob(base_yaml_config=BASE, max_env_worker=128)
# after (YAML side): max_env_worker: 128 in werewolves.yaml
AgentJetJob(base_yaml_config=BASE)""")
def split_configuration(ctx: LintContext, run: Run) -> Iterator[Report]:
    c = run.construction
    if c is None:
        return
    kwarg_keys, write_keys = _script_side(ctx, run, c)
    script_keys = set(kwarg_keys) | set(write_keys)
    if run.base.values_unknown:
        if script_keys:
            ctx.skip(RULE, f"what the base YAML sets is unknown ({run.base.reason})")
        return
    yaml_keys = run.base.explicit
    if not yaml_keys or not script_keys:
        return
    both = sorted(k for k in script_keys if k in yaml_keys or any(y.startswith(k + ".") for y in yaml_keys))
    yaml_first = ctx.yaml_first(run)
    consolidation = consolidate(ctx, run)
    overlap = f" ({len(both)} in both places: {', '.join(both)})" if both else ""
    yield Report(both[0] if both else None,
                 f"configuration is split: {run.base.name} writes {len(yaml_keys)} key(s) and the script sets "
                 f"{len(script_keys)} through kwargs or writes{overlap}; a reader of either place sees half the job",
                 _locations(ctx, run, kwarg_keys, write_keys),
                 {"yaml_key_count": len(yaml_keys), "yaml_keys": sorted(yaml_keys)[:YAML_KEYS_SHOWN],
                  "kwarg_keys": sorted(kwarg_keys), "write_keys": sorted(write_keys),
                  "in_both": both, "one_place": "yaml" if yaml_first else "script", **consolidation},
                 _fix(ctx, run, yaml_first, script_keys, consolidation["build_config_arguments"] is not None))


def _script_side(ctx: LintContext, run: Run, c: Construction) -> tuple[dict[str, Kwarg], dict[str, Write]]:
    """The config keys the script sets: through kwargs (not run-identity ones, not None) and through writes."""
    aj = ctx.aj
    kwarg_keys = {key: kw for name, kw in c.kwargs.items() if (key := aj.key_for(name))
                  and name not in RUN_IDENTITY and not (kw.value.resolved and kw.value.value is None)}
    write_keys = {w.key: w for w in run.applied_writes if w.kind != "method"}
    return kwarg_keys, write_keys


def _locations(ctx: LintContext, run: Run, kwarg_keys: dict[str, Kwarg], write_keys: dict[str, Write]
               ) -> list[Location]:
    """The script's side first (kwargs, then writes), then the YAML's (its first 20 keys)."""
    script = ctx.script_file
    locations = [Location(file=script, line=kw.line, key=key, source="kwarg") for key, kw in kwarg_keys.items()]
    locations += [Location(file=script, line=w.line, key=w.key, source="write") for w in write_keys.values()]
    locations += [ctx.yaml_location(run.base, k) for k in sorted(run.base.explicit)[:YAML_KEYS_SHOWN]]
    return unique_locations(locations)


def _fix(ctx: LintContext, run: Run, yaml_first: bool, script_keys: set[str], consolidated: bool) -> str:
    """Move everything to the side that holds most of the job; build_config writes the result when it can. A
    key AgentJet does not have is never moved as written: its correction is named, or it is left out."""
    into = (f"a base YAML of your own (a copy of {run.base.name}: that file is the engine's, rewritten at every "
            "start)" if run.base.engine_copy else run.base.name)
    misspelt = ctx.misspelt(run)
    if yaml_first:
        moved, dropped = _corrected(sorted(script_keys), misspelt)
        fix = (f"the YAML holds most of this job ({len(run.base.explicit)} keys): move {', '.join(moved)} into "
               f"{into} and construct AgentJetJob with only base_yaml_config (and run-identity kwargs such as "
               "experiment_name if you must)" + dropped)
    else:
        _, dropped = _corrected(sorted(k for k in run.base.explicit if k in misspelt), misspelt)
        fix = ("the script holds most of this job: move the YAML's keys into AgentJetJob kwargs (for keys with a "
               "kwarg) and writes right after construction (for the rest), then drop base_yaml_config" + dropped)
    script = ctx.script_file or "the script"
    if consolidated:
        return fix + (f". build_config {{\"script\": \"{script}\"}} returns the consolidated YAML the engine would run "
                      "(detail=full: values.build_config_arguments); keep it in a file of your choice")
    return fix + (". build_config cannot consolidate it yet: values.build_config_missing (detail=full) lists what is "
                  "known only at run time")


def _corrected(keys: list[str], misspelt: dict[str, str | None]) -> tuple[list[str], str]:
    """``keys`` with each misspelt one replaced by its correction, and a sentence on the corrected and the
    left-out ones (the unknown-key finding reports each)."""
    out: list[str] = []
    fixed: list[str] = []
    left: list[str] = []
    for key in keys:
        if key not in misspelt:
            out.append(key)
        elif misspelt[key]:
            out.append(str(misspelt[key]))
            fixed.append(f"{misspelt[key]} for the misspelt {key}")
        else:
            left.append(key)
    said = ""
    if fixed:
        said += f" ({'; '.join(fixed)}: see unknown-key)"
    if left:
        said += (f"; {', '.join(left)} {'is' if len(left) == 1 else 'are'} left out: AgentJet's config has no such "
                 "key and none close to it (see unknown-key)")
    return list(dict.fromkeys(out)), said


def consolidate(ctx: LintContext, run: Run) -> dict[str, Any]:
    """build_config arguments that reproduce this job, only from resolved values (else null + what is missing)."""
    inputs = job_inputs(ctx.aj, run)
    arguments: dict[str, Any] | None = None
    if not inputs.missing:
        arguments = {"base_yaml": str(run.base.path) if run.base.path else None, "kwargs": inputs.kwargs}
        if inputs.sets:
            arguments["set"] = inputs.sets
    return {"build_config_arguments": arguments, "build_config_missing": inputs.missing,
            "build_config_left_out": inputs.left_out, "build_config_assumes": inputs.assumes}
