"""Turning runs into the output models: effective values with their source, construction details."""

from __future__ import annotations

from skill_server.analysis.agentjet import KEYS
from skill_server.analysis.replay import Run
from skill_server.analysis.values import MISSING, Unknown, a_type, describe_unknown, jsonable, show
from skill_server.core.trees import flatten
from skill_server.tools.check_config.context import CAP_INPUTS, LintContext
from skill_server.tools.check_config.models import (
    SWARM_ONLY,
    BaseYamlInfo,
    ConstructionInfo,
    Effective,
    EffectiveValue,
    FreezeInfo,
    KwargInfo,
    Location,
    SetBy,
    Source,
    WriteInfo,
)

#: The computed values (the rest are config keys, read as they are).
COMPUTED = ("episode_cap", "engine_cap", "client_parallelism")
EFFECTIVE_FIELDS = tuple(name for name in Effective.model_fields if name not in (*COMPUTED, "unresolved"))


def effective(ctx: LintContext, run: Run) -> Effective:
    """The run's effective values; a classic-mode config shows none of the swarm-only ones."""
    classic = run.base.classic is not None
    names = [name for name in EFFECTIVE_FIELDS if not (classic and name in SWARM_ONLY)]
    values = {name: effective_value(ctx, run, KEYS[name]) for name in names}
    if classic:
        return Effective(**values, unresolved=_unresolved(run))
    engine = _cap_value(ctx, run, values)
    client = _client_value(ctx)
    return Effective(**values, episode_cap=_bounded_cap(engine, client), engine_cap=engine,
                     client_parallelism=client, unresolved=_unresolved(run))


def _client_value(ctx: LintContext) -> EffectiveValue | None:
    """What the client script runs at once (``analysis.concurrency``); None without a script, or for one that
    neither builds a pool nor claims an episode itself (a driver: its episodes run elsewhere)."""
    scan = ctx.session.scan
    if scan is None or not (scan.pools or (scan.episodes is not None and scan.episodes.claims)):
        return None
    bound = ctx.client_bound
    location = Location(file=ctx.script_file, line=bound.line) if bound.line is not None else None
    if bound.threads is None:
        return EffectiveValue(key="client_parallelism", value=None, source="computed", set_by="computed",
                              location=location, unresolved=bound.why)
    return EffectiveValue(key="client_parallelism", value=bound.threads, source="computed", set_by="computed",
                          location=location, assumes=bound.assumes, note=bound.place)


def _bounded_cap(engine: EffectiveValue, client: EffectiveValue | None) -> EffectiveValue:
    """The gauge's ceiling: the engine's cap, or this client's bound when that is lower (with its line)."""
    if engine.value is None or client is None or not isinstance(client.value, int) or \
            not isinstance(engine.value, int) or client.value >= engine.value:
        why = (f"; this client's own bound is unknown ({client.unresolved})" if client is not None and
               client.unresolved and engine.value is not None else "")
        return engine.model_copy(update={"key": "episode_cap", "note": (engine.note or "") + why or None})
    return EffectiveValue(key="episode_cap", value=client.value, source="computed", set_by="computed",
                          location=client.location, assumes=[*engine.assumes, *client.assumes],
                          note=f"the client binds: {client.note} runs at most {client.value} at once, below the "
                          f"engine's cap of {engine.value} ({engine.note})")


def effective_value(ctx: LintContext, run: Run, key: str) -> EffectiveValue:
    value = run.value(key)
    setter = run.effective_setter(key)
    assumes: list[str] = []
    set_by: SetBy
    source: Source
    location: Location | None
    if setter is not None:
        set_by = setter.kind
        location = Location(file=setter.file, line=setter.line)
        assumes = [a.describe() for a in setter.assumes]
        kinds = {a.kind for a in setter.assumes}
        source = "env-default" if "env" in kinds else "cli-default" if "cli" in kinds else set_by
    elif run.base.values_unknown:
        set_by = source = "yaml"
        location = Location(file=str(run.base.path) if run.base.path else None)
    else:
        set_by = source = "default"
        file = ctx.aj.default_file(key)
        location = Location(file=file, line=ctx.yaml_lines(file).get(key)) if file else None
    unresolved = None
    note = None
    if isinstance(value, Unknown):
        unresolved, value = value.reason, None
    elif value is MISSING:
        note, value = "not in this config", None
    else:
        default = ctx.aj.default(key)
        if isinstance(value, str) and isinstance(default, (int, float)) and not isinstance(default, bool):
            note = (f"a str, while AgentJet's default is {a_type(default)} ({show(default)}); AgentJetJob does "
                    "not convert it")
    return EffectiveValue(key=key, value=jsonable(value), source=source, set_by=set_by, location=location,
                          assumes=assumes, unresolved=unresolved, note=note)


def _cap_value(ctx: LintContext, run: Run, values: dict[str, EffectiveValue]) -> EffectiveValue:
    assumes = [a for name in CAP_INPUTS for a in values[name].assumes]
    facts = ctx.episode_cap(run)
    if facts is not None:
        return EffectiveValue(key="engine_cap", value=facts.episode_cap, source="computed", set_by="computed",
                              assumes=list(dict.fromkeys(assumes)), note=f"thread rule {facts.thread_rule}")
    why = [describe_unknown([(n, Unknown(values[n].unresolved or "")) for n in CAP_INPUTS if values[n].unresolved])]
    why = [w for w in why if w]
    why += [f"{n} is {show(values[n].value)}, not a positive int" for n in CAP_INPUTS
            if not values[n].unresolved and not (isinstance(values[n].value, int) and values[n].value > 0
                                                 and not isinstance(values[n].value, bool))]
    return EffectiveValue(key="engine_cap", value=None, source="computed", set_by="computed",
                          unresolved="; ".join(why) or "the episode cap cannot be computed for these values")


def _unresolved(run: Run) -> dict[str, str]:
    out: dict[str, str] = {}
    if run.base.reason:
        out["(base YAML)"] = f"every value the base YAML would set is unknown: {run.base.reason}"
    for key, value in flatten(run.tree).items():
        if isinstance(value, Unknown) and value.reason != run.base.value_reason:
            out[key] = value.reason
    return out


def construction_info(ctx: LintContext, run: Run, *, with_effective: bool = True) -> ConstructionInfo:
    c = run.construction
    assert c is not None
    base = run.base
    late = {id(w) for w, _ in run.late_writes}
    return ConstructionInfo(
        line=c.line, variable=c.variable, callee=c.callee,
        kwargs=[KwargInfo(name=k.name, value=jsonable(k.value.value), resolved=k.value.resolved,
                          expression=k.value.text, how=k.value.how, assumes=[a.describe() for a in k.value.assumes],
                          unresolved=k.value.why or None if not k.value.resolved else None, line=k.line)
                for k in c.kwargs.values()],
        dynamic_kwargs=c.dynamic,
        # base.state is one of BaseYamlInfo's state literals, kept as a str by the analysis; pydantic checks it
        base_yaml=BaseYamlInfo(expression=base.expression, path=str(base.path) if base.path else None,
                               anchor=base.anchor, state=base.state,  # type: ignore[arg-type]
                               exists=base.state in ("file", "defaults", "refused"), tried=base.tried,
                               launch_dir_known=base.launch_dir_known),
        writes=[WriteInfo(key=w.key if w.kind != "mirror" else f"job.{w.key}", value=jsonable(w.value.value),
                          resolved=w.value.resolved, expression=w.value.text, kind=w.kind, line=w.line,
                          after_freeze=id(w) in late) for w in run.writes],
        freezes=[FreezeInfo(call=f.call, line=f.line) for f in run.freezes],
        effective=effective(ctx, run) if with_effective else None,
    )

