"""Rules about writes to ``job.config`` after construction: keys that exist, keys with a kwarg, writes too late."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from skill_server.analysis.access import access_problem
from skill_server.analysis.replay import Run
from skill_server.analysis.script import Value, Write
from skill_server.analysis.values import show
from skill_server.core.trees import flatten
from skill_server.tools.check_config.context import LintContext
from skill_server.tools.check_config.models import Location
from skill_server.tools.check_config.registry import Report, rule


@rule("escape-hatch-has-kwarg", "warning", "A write after construction sets a key that has a kwarg.", """
    Writes to job.config are the escape hatch for keys without a kwarg. Writing a key that has one skips
    AgentJetJob's checks and hides the setting from the kwargs; when the script also passes that kwarg, the
    write silently replaces it.""", example="""
python
job = AgentJetJob(n_gpu=8); job.config.ajet.trainer_common.nnodes = 2   # before
job = AgentJetJob(n_gpu=8, nnodes=2)                                     # after (also switches to tcp)""")
def escape_hatch_has_kwarg(ctx: LintContext, run: Run) -> Iterator[Report]:
    c = run.construction
    if c is None:
        return
    label = ctx.aj.label
    for write in run.writes:
        if write.kind in ("mirror", "method"):
            continue
        for leaf in _leaves(write):
            kwarg = ctx.aj.kwarg_for(leaf)
            if kwarg is None:
                continue
            loc = [Location(file=ctx.script_file, line=write.line, key=leaf, source="write")]
            value = write.value.value.get(leaf[len(write.key) + 1:]) if leaf != write.key and isinstance(
                write.value.value, dict) else write.value.value
            shown = show(value) if write.value.resolved else write.value.text
            passed = c.kwargs.get(kwarg)
            if passed is not None:
                loc.append(Location(file=ctx.script_file, line=passed.line, key=leaf, source="kwarg"))
                fix = (f"the script already passes {kwarg}={_py(passed.value)} at line {passed.line} and the write "
                       f"replaces it after AgentJetJob's checks ran: keep one, preferably the kwarg (change it to "
                       f"{kwarg}={shown} if that is the value you want) and delete the write")
            else:
                fix = (f"pass {kwarg}={shown} to AgentJetJob (a kwarg of {label}) and delete the write")
            yield Report(leaf, f"line {write.line} writes {leaf} after construction although AgentJetJob has the "
                         f"kwarg {kwarg}: the write skips AgentJetJob's checks and hides the setting from the kwargs",
                         loc, {"kwarg": kwarg, "value": value if write.value.resolved else None,
                               "kwarg_passed": passed is not None}, fix)


@rule("unknown-key", "error", "A key AgentJet's config does not have, or an access that fails at run time.", """
    A YAML key or a write that AgentJet's defaults and schema do not have: nothing reads it (the message gives
    the closest known key, or says none is close). Also access that fails at run time: attribute access on a
    plain-dict section (multi_turn, val_kwargs, debug, fsdp_config, verl sections) raises AttributeError,
    item access on a dataclass section raises TypeError, and job.num_repeat = ... after construction only
    changes the job's copy, never the config. Checked against the AgentJet version named in the message.""",
      example="""
python
job.config.ajet.rollout.temprature = 0.7            # before: creates a key nothing reads
job.config.ajet.rollout.multi_turn.max_steps = 5    # before: AttributeError, multi_turn is a dict
job.config.ajet.rollout.temperature = 0.7           # after
job.config.ajet.rollout.multi_turn["max_steps"] = 5 # after""")
def unknown_key(ctx: LintContext, run: Run) -> Iterator[Report]:
    aj = ctx.aj
    label = aj.label
    if run.base.is_users:
        for key in sorted(run.base.explicit):
            if not key.startswith("ajet.") or aj.known(key):
                continue
            close = aj.closest(key)
            loc = ctx.yaml_location(run.base, key)
            yield Report(key, f"{key} in {Path(loc.file).name if loc.file else run.base.name} is not a key of "
                         f"AgentJet's defaults or schema ({label}): nothing reads it; closest known key: "
                         f"{close or 'none'}", [loc], {"value": run.base.explicit[key], "closest": close},
                         f"rename it to {close}" if close else "remove it, or check it against your AgentJet version")
    c = run.construction
    if c is None:
        return
    late = {id(w) for w, _ in run.late_writes}
    for write in run.writes:
        at = [Location(file=ctx.script_file, line=write.line, source="write")]
        if write.kind == "mirror":
            config_key = aj.key_for(write.key)
            if config_key is None or id(write) in late:
                continue
            passed = c.kwargs.get(write.key)
            fix = (f"delete this line; the script already passes {write.key}={passed.value.text} at line "
                   f"{passed.line}: change that kwarg instead" if passed is not None else
                   f"pass {write.key}={_py(write.value)} to AgentJetJob instead (a kwarg of {label})")
            yield Report(config_key, f"job.{write.key} = ... (line {write.line}) only changes the job's copy of the "
                         f"resolved value; the config ({config_key}) that gets dumped is not touched and nothing reads "
                         "the attribute", at, {"attribute": write.key, "config_key": config_key}, fix)
            continue
        if write.kind == "method":
            continue
        report = _access(ctx, write, at, label)
        if report is not None:
            yield report
        if write.kind == "whole-dict" and write.value.resolved and isinstance(write.value.value, dict):
            yield from _whole_dict(ctx, write, at)


@rule("write-after-dump", "error", "A write comes after the config was serialised.", """
    A write after dump_job_as_yaml, sync_train_config, auto_sync_train_config_and_start_engine or
    async_and_start_multi_engine never reaches the engine. The order follows helper functions through their
    call sites in the same file.""", example="""
python
job.dump_job_as_yaml(p); job.config.ajet.rollout.temperature = 0.6   # before: never shipped
job.config.ajet.rollout.temperature = 0.6; job.dump_job_as_yaml(p)   # after""")
def write_after_dump(ctx: LintContext, run: Run) -> Iterator[Report]:
    for write, freeze in run.late_writes:
        key = write.key if write.kind != "mirror" else ctx.aj.key_for(write.key)
        yield Report(key, f"line {write.line} changes {write.key} after {freeze.call}() at line {freeze.line} already "
                     "serialised the config: the engine never sees it",
                     [Location(file=ctx.script_file, line=write.line, key=key, source="write"),
                      Location(file=ctx.script_file, line=freeze.line)],
                     {"write_line": write.line, "freeze": freeze.call, "freeze_line": freeze.line},
                     f"move the write above line {freeze.line} (or, better, into the AgentJetJob kwargs / YAML)")


# --- helpers ---------------------------------------------------------------------------------------


def _leaves(write: Write) -> list[str]:
    leaves = [write.key]
    if write.kind == "whole-dict" and write.value.resolved and isinstance(write.value.value, dict):
        leaves += [f"{write.key}.{k}" for k in flatten(write.value.value)]
    return leaves


def _whole_dict(ctx: LintContext, write: Write, loc: list[Location]) -> Iterator[Report]:
    aj = ctx.aj
    if not aj.known(write.key) or aj.is_free_form(write.key):
        return
    for leaf in _leaves(write)[1:]:
        if aj.known(leaf):
            continue
        close = aj.closest(leaf)
        yield Report(leaf, f"the dict written to {write.key} at line {write.line} has key "
                     f"{leaf.rsplit('.', 1)[1]!r}, which AgentJet's defaults do not have ({aj.label}); "
                     f"closest known key: {close or 'none'}", loc, {"closest": close},
                     f"use {close}" if close else "remove it from the dict")
    default = aj.default(write.key)
    if isinstance(default, dict):
        written = flatten(write.value.value)
        dropped = sorted(k for k in flatten(default) if k not in written)
        if dropped:
            ctx.note(f"line {write.line} replaces the whole {write.key} dict: default keys {', '.join(dropped)} are no "
                     "longer in the config the engine gets")


def _access(ctx: LintContext, write: Write, loc: list[Location], label: str) -> Report | None:
    """Attribute vs item access against the real object types; unknown keys with the closest known one
    (``analysis.access``: build_config judges the same line the same way)."""
    problem = access_problem(ctx.aj, write)
    if problem is None:
        return None
    parent, part = problem.parent, problem.part
    if problem.kind == "attribute-on-dict":
        rest = "".join(f"[{p!r}]" for p in [p for p, _ in write.access][len(parent.split(".")) if parent else 0:])
        return Report(write.key, f"{parent} is a plain dict in AgentJet's config, so attribute access "
                      f"(.{part}) at line {write.line} raises AttributeError at run time", loc,
                      {"access_error": "AttributeError", "dict_section": parent},
                      f"write job.config.{parent}{rest} = ... (item access) instead")
    if problem.kind == "item-on-dataclass":
        path = f"{parent}.{part}" if parent else part
        return Report(write.key, f"{parent or 'config'} is a config dataclass, not a dict: item assignment "
                      f"['{part}'] at line {write.line} raises TypeError", loc,
                      {"access_error": "TypeError", "dataclass_section": parent},
                      f"write job.config.{path} = ... (attribute access) instead")
    close = problem.closest
    if problem.kind == "new-key":
        message = (f"line {write.line} creates {problem.key}, which AgentJet's defaults and schema ({label}) do not "
                   "have: nothing reads it")
    else:
        message = f"{problem.key} does not exist in the config ({label}): line {write.line} raises AttributeError"
    message += f"; closest known key: {close or 'none'}"
    return Report(problem.key, message, loc, {"closest": close},
                  f"use {close}" if close else "remove the write, or check the key against your AgentJet")


def _py(value: Value) -> str:
    return show(value.value) if value.resolved else value.text
