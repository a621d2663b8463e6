"""Rules about the AgentJetJob kwargs: names this version has, the length group, kwargs against the YAML."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from skill_server.analysis.replay import Run
from skill_server.analysis.script import Kwarg
from skill_server.analysis.values import Unknown, is_num, same, show
from skill_server.tools.check_config.context import LintContext, cause_values, yaml_scalar
from skill_server.tools.check_config.models import Location
from skill_server.tools.check_config.registry import Report, rule
from skill_server.tools.check_config.rules.split import RUN_IDENTITY


@rule("kwarg-overrides-yaml", "warning", "A kwarg silently replaces a value the user's YAML writes.", """
    AgentJetJob writes every non-None kwarg over the base YAML, so the line the user edits in the YAML no
    longer reaches the engine. The finding points at the kwarg first (the value that wins), then the YAML
    line. Run-identity kwargs (experiment_name, project_name, experiment_dir) are exempt: naming each run in
    the script over the YAML's name is the intended use.""", example="""
python
AgentJetJob(base_yaml_config=BASE, num_repeat=4)   # before: YAML says num_repeat: 6, the engine gets 4
AgentJetJob(base_yaml_config=BASE)                 # after: the value lives in the YAML only""")
def kwarg_overrides_yaml(ctx: LintContext, run: Run) -> Iterator[Report]:
    for kwarg, key, kw, yaml_value in _kwargs_over_yaml(ctx, run):
        if not same(kw.value.value, yaml_value):
            yield Report(key, f"kwarg {kwarg}={show(kw.value.value)} silently replaces {key}: {show(yaml_value)} "
                         f"written in {run.base.name}", _both(ctx, run, kw.line, key),
                         {"kwarg": kwarg, "kwarg_value": kw.value.value, "yaml_value": yaml_value},
                         _override_fix(run, kwarg, key, kw.value.value))


def _override_fix(run: Run, kwarg: str, key: str, value: object) -> str:
    """One place for the value; never the engine's own copy, which the next start rewrites."""
    if run.base.engine_copy:
        return (f"keep one: {run.base.name} is the engine's copy (rewritten at every start), so keep "
                f"{kwarg}={show(value)} in the script, or move the base to a YAML of your own and set {key} there")
    return (f"keep one: set {key}: {yaml_scalar(value)} in {run.base.name} and drop the kwarg, or remove {key} "
            "from the YAML")


@rule("redundant-kwarg", "info", "A kwarg repeats the value the user's YAML writes.", """
    Harmless today, and a trap once one side is edited: the kwarg keeps winning. Run-identity kwargs are
    exempt, as for kwarg-overrides-yaml.""", example="""
python
AgentJetJob(base_yaml_config=BASE, num_repeat=6)   # before: YAML also says 6
AgentJetJob(base_yaml_config=BASE)                 # after""")
def redundant_kwarg(ctx: LintContext, run: Run) -> Iterator[Report]:
    for kwarg, key, kw, yaml_value in _kwargs_over_yaml(ctx, run):
        if same(kw.value.value, yaml_value):
            yield Report(key, f"kwarg {kwarg}={show(kw.value.value)} repeats the YAML value of {key}",
                         _both(ctx, run, kw.line, key),
                         {"kwarg": kwarg, "kwarg_value": kw.value.value, "yaml_value": yaml_value},
                         f"drop {kwarg}=... or remove {key} from {run.base.name}, so the value lives in one place")


def _kwargs_over_yaml(ctx: LintContext, run: Run) -> Iterator[tuple[str, str, Kwarg, Any]]:
    c = run.construction
    if c is None or not run.base.is_users:
        return
    for kwarg, key in ctx.aj.kwarg_rows():
        kw = c.kwargs.get(kwarg)
        if kw is None or key not in run.base.explicit or kwarg in RUN_IDENTITY:
            continue
        if not kw.value.resolved or kw.value.value is None:
            continue  # unknown: split-configuration names it; None keeps the YAML value
        yield kwarg, key, kw, run.base.explicit[key]


def _both(ctx: LintContext, run: Run, line: int, key: str) -> list[Location]:
    return [Location(file=ctx.script_file, line=line, key=key, source="kwarg"), ctx.yaml_location(run.base, key)]


@rule("unsupported-kwarg", "error", "AgentJetJob of this version has no such kwarg.", """
    The kwarg is not in AgentJetJob's signature in the AgentJet release checked (named in the message: the
    newest bundled one, agentjet_version, or the install at agentjet_root), so the call raises TypeError. A
    misspelt kwarg gets the closest known one. A kwarg another bundled release has names that release and the
    key it sets; otherwise config keys of the same name are listed, with the write that sets one.""",
      claims=("unknown-kwarg",), example="""
python
AgentJetJob(num_repeats=4)                     # before (typo)       ->  AgentJetJob(num_repeat=4)
AgentJetJob(ulysses_sequence_parallel_size=2)  # before: not a kwarg ->  write the config key after construction""")
def unsupported_kwarg(ctx: LintContext, run: Run) -> Iterator[Report]:
    c = run.construction
    if c is None:
        return
    aj = ctx.aj
    for cause in run.causes_for("unknown-kwarg"):
        name = cause.values["kwarg"]
        kw = c.kwargs.get(name)
        loc = [Location(file=ctx.script_file, line=kw.line if kw else c.line, source="kwarg")]
        close = cause.values.get("closest")
        value = kw.value.value if kw is not None and kw.value.resolved else None
        values = {**cause_values(cause), "kwarg": name, "value": value, "closest": close}
        elsewhere = aj.kwarg_elsewhere(name)
        if elsewhere is not None:
            key, other = elsewhere
            if aj.known(key):
                fix = (f"set {key} in the YAML or write {aj.write_expression(key)} = ... right after construction "
                       f"(a key of {aj.label}), or select {other} (agentjet_version / agentjet_root)")
            else:
                fix = (f"remove it: {aj.label}'s config has no {key} either; to use it, select {other} "
                       "(agentjet_version / agentjet_root) and upgrade AgentJet")
            yield Report(key, f"{cause.message}. {other} has this kwarg (it sets {key})", loc,
                         {**values, "key": key, "agentjet_with_kwarg": other}, fix)
            continue
        if close:
            fix = f"rename it to {close}"
        else:
            same = aj.same_leaf_keys(name)
            fix = "remove it; " + (
                f"{aj.label}'s config has {', '.join(same[:4])}: to set one, write "
                f"{aj.write_expression(same[0])} = ... right after construction" if same else
                "valid kwargs: " + ", ".join(aj.valid_kwargs()))
        yield Report(None, cause.message, loc, values, fix)


@rule("kwarg-group-incomplete", "error", "Only some of the four length kwargs are given.", """
    max_prompt_length, max_response_length, max_model_len and max_response_length_in_one_turn must all be
    passed or all be left out; otherwise AgentJetJob raises ValueError before reading the YAML.""",
      claims=("length-group-incomplete",), example="""
python
AgentJetJob(max_prompt_length=4000, max_response_length=16000)          # before: ValueError
AgentJetJob(max_prompt_length=4000, max_response_length=16000,
            max_model_len=20000, max_response_length_in_one_turn=4000)  # after""")
def kwarg_group_incomplete(ctx: LintContext, run: Run) -> Iterator[Report]:
    c = run.construction
    if c is None:
        return
    for cause in run.causes_for("length-group-incomplete"):
        given, missing = cause.values["given"], cause.values["missing"]
        values = {name: run.at_build(name) for name in LENGTH_NAMES}
        for name in given:
            if name in c.kwargs and c.kwargs[name].value.resolved:
                values[name] = c.kwargs[name].value.value
        fitted = _fit_lengths(values, missing)
        suggestions = [f"{name}=..." if isinstance(fitted[name], Unknown) or fitted[name] is None
                       else f"{name}={show(fitted[name])}" for name in missing]
        raised = [name for name in missing if fitted[name] is not values[name] and fitted[name] != values[name]]
        why = ("the values the config holds now" if not raised else
               f"the values the config holds now, {', '.join(raised)} raised so that AgentJetJob's length checks hold")
        yield Report(ctx.aj.key_for(missing[0]), cause.message,
                     [Location(file=ctx.script_file, line=c.kwargs[k].line, key=ctx.aj.key_for(k), source="kwarg")
                      for k in given if k in c.kwargs],
                     {**cause_values(cause), "given": given, "missing": missing},
                     "also pass " + ", ".join(suggestions) + f" ({why}; kwargs of {ctx.aj.label}), or drop the length "
                     "kwargs and set all four in one place")


LENGTH_NAMES = ("max_prompt_length", "max_response_length", "max_model_len", "max_response_length_in_one_turn")


def _fit_lengths(values: dict[str, Any], missing: list[str]) -> dict[str, Any]:
    """The missing lengths at their config values, raised (model length) or lowered (one turn) only as far as
    AgentJetJob's checks need: prompt + response <= max_model_len, one turn <= response."""
    out = dict(values)
    prompt, response = out["max_prompt_length"], out["max_response_length"]
    if not (is_num(prompt) and is_num(response)):
        return out
    model = out["max_model_len"]
    if "max_model_len" in missing and is_num(model) and prompt + response > model:
        out["max_model_len"] = prompt + response
    one_turn = out["max_response_length_in_one_turn"]
    if "max_response_length_in_one_turn" in missing and is_num(one_turn) and one_turn > response:
        out["max_response_length_in_one_turn"] = response
    return out
