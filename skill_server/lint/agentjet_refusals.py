"""AgentJetJob's refusals, as the knowledge API used today describes them (part of the adapter).

Each check mirrors one refusal of AgentJet's fact sheet and evaluates the comparison the way Python
evaluates it inside AgentJet, so strings fail the way they fail there. When the versioned knowledge API
provides refusal causes, ``AgentJet.refusal_causes`` returns those instead and this module goes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skill_server.lint.agentjet import KEYS, SWARM_OVERLAY, AgentJet, RefusalCause, SkippedCheck
from skill_server.lint.values import MISSING, Unknown, a_type, describe_unknown


def refusal_causes(aj: AgentJet, get: Callable[[str], Any], kwargs: dict[str, Any], dynamic: bool,
                   base_own: dict[str, Any] | None) -> tuple[list[RefusalCause], list[SkippedCheck]]:
    """Every reason AgentJetJob (of this version) refuses a construction, and the checks that could not run.

    ``get(key)`` is the value at construction (base + kwargs): a value, ``Unknown`` or MISSING.
    ``kwargs`` maps each given kwarg to its value (``Unknown`` when computed at run time); ``dynamic``:
    a splat may pass more. ``base_own``: the base file's own mapping (None: AgentJet's defaults, or
    unknown). Each check mirrors a refusal of the fact sheet; comparisons are evaluated as Python
    evaluates them, so strings fail the way they fail in AgentJet.
    """
    causes: list[RefusalCause] = []
    skipped: list[SkippedCheck] = []
    label = aj.version_label()
    for name in kwargs:
        if not aj.accepts(name):
            newer = aj.newer_key_for(name)
            causes.append(RefusalCause(
                "unknown-kwarg", "TypeError",
                f"{label[:1].upper()}{label[1:]} has no AgentJetJob kwarg {name!r}"
                + (" (newer versions have it)" if newer else ""),
                (newer,) if newer else (), {"kwarg": name, "closest": aj.closest_kwarg(name),
                                            "key_in_newer_versions": newer}))
    if base_own is not None:
        causes.extend(_base_causes(base_own))
    _length_group(aj, kwargs, dynamic, causes, skipped)
    _lengths(get, causes, skipped)
    _lora(get, causes, skipped)
    nnodes = get(KEYS["nnodes"])
    if isinstance(nnodes, Unknown):
        skipped.append(SkippedCheck("nnodes-type", f"nnodes is unknown ({nnodes.reason})"))
    elif nnodes is not MISSING and _compare(nnodes, ">", 1) is TypeError:
        causes.append(RefusalCause(
            "nnodes-type", "TypeError",
            f"nnodes is {nnodes!r} ({a_type(nnodes)}): AgentJetJob compares nnodes > 1 before anything else "
            "about it, and that comparison fails", (KEYS["nnodes"],), {"nnodes": nnodes}))
    backbone = get(KEYS["backbone"])
    if backbone == "trinity":
        causes.append(RefusalCause("backbone-trinity", "NotImplementedError",
                                   "backbone 'trinity' is not supported by AgentJetJob", (KEYS["backbone"],),
                                   {"backbone": backbone}))
    return causes, skipped

def _base_causes(own: dict[str, Any]) -> list[RefusalCause]:
    out: list[RefusalCause] = []
    entries = own.get("defaults", MISSING)
    if entries is MISSING:
        out.append(RefusalCause(
            "base-without-defaults", "KeyError",
            "the base YAML has no defaults list: AgentJetJob copies the base's defaults back after composing "
            "and raises KeyError: 'defaults' (and without ajet_default, keys such as ajet.trainer_common.logger "
            "do not exist)", ("defaults",), {}))
    elif isinstance(entries, list) and any(_entry_name(e) == SWARM_OVERLAY for e in entries):
        out.append(RefusalCause(
            "base-includes-swarm-default", "ConfigCompositionException",
            f"the base's defaults list includes {SWARM_OVERLAY}, which sets hydra.searchpath itself; Hydra "
            "refuses: 'Overriding hydra.searchpath is only supported from the primary config'", ("defaults",),
            {"defaults": entries}))
    return out

def _length_group(aj: AgentJet, kwargs: dict[str, Any], dynamic: bool, causes: list[RefusalCause],
                  skipped: list[SkippedCheck]) -> None:
    unknown = [k for k in aj.length_kwargs if isinstance(kwargs.get(k), Unknown)]
    given = [k for k in aj.length_kwargs if k in kwargs and kwargs[k] is not None and k not in unknown]
    if unknown:
        skipped.append(SkippedCheck("length-group", "whether " + ", ".join(unknown) + " is None is known only at "
                                    "run time"))
        return
    if not given or len(given) == len(aj.length_kwargs):
        return
    if dynamic:
        skipped.append(SkippedCheck("length-group", "the construction also passes **kwargs or positional "
                                    "arguments, which may give the other length kwargs"))
        return
    missing = [k for k in aj.length_kwargs if k not in given]
    causes.append(RefusalCause(
        "length-group", "ValueError",
        f"the four length kwargs must all be set or all be unset; given {', '.join(given)}, missing "
        f"{', '.join(missing)} ('must all be None or all be non-None')",
        tuple(aj.key_for(k) or k for k in missing), {"given": given, "missing": missing}))

def _lengths(get: Callable[[str], Any], causes: list[RefusalCause], skipped: list[SkippedCheck]) -> None:
    names = ("max_prompt_length", "max_response_length", "max_model_len", "max_response_length_in_one_turn")
    v = {n: get(KEYS[n]) for n in names}
    checks = (("token-budget", ("max_prompt_length", "max_response_length", "max_model_len")),
              ("one-turn-budget", ("max_response_length_in_one_turn", "max_response_length")))
    for code, involved in checks:
        unknown = [(n, v[n]) for n in involved if isinstance(v[n], Unknown)]
        if unknown:
            skipped.append(SkippedCheck(code, describe_unknown(unknown)))
            continue
        if any(v[n] is MISSING or v[n] is None for n in involved):
            continue  # a key the base lacks fails differently (the overrides walk), not this assert
        if code == "token-budget":
            total = _binary(v["max_prompt_length"], "+", v["max_response_length"])
            verdict = TypeError if total is TypeError else _compare(total, "<=", v["max_model_len"])
        else:
            verdict = _compare(v["max_response_length_in_one_turn"], "<=", v["max_response_length"])
        if verdict is True:
            continue
        values = {n: v[n] for n in involved}
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in values.values())
        keys = tuple(KEYS[n] for n in involved)
        if not numbers:
            kinds = ", ".join(f"{n}={values[n]!r} ({a_type(values[n])})" for n in involved)
            exc = "TypeError" if verdict is TypeError else "AssertionError (empty message)"
            causes.append(RefusalCause(
                "length-types", exc, f"AgentJetJob compares the lengths without converting them: {kinds}",
                keys, values))
        elif code == "token-budget":
            p, r, m = values["max_prompt_length"], values["max_response_length"], values["max_model_len"]
            causes.append(RefusalCause(
                code, "AssertionError", f"max_prompt_length ({p}) + max_response_length ({r}) = {p + r} exceeds "
                f"max_model_len ({m}) ('illegal token length')", (KEYS["max_model_len"], *keys[:2]), values))
        else:
            o, r = values["max_response_length_in_one_turn"], values["max_response_length"]
            causes.append(RefusalCause(
                code, "AssertionError", f"max_response_length_in_one_turn ({o}) exceeds max_response_length ({r}) "
                "(an assert with an empty message)", keys, values))

def _lora(get: Callable[[str], Any], causes: list[RefusalCause], skipped: list[SkippedCheck]) -> None:
    rank = get(KEYS["lora_rank"])
    if isinstance(rank, Unknown):
        skipped.append(SkippedCheck("lora-rank", f"lora_rank is unknown ({rank.reason})"))
        return
    if rank is MISSING or rank is None or _compare(rank, ">", 0) is not True:
        return
    checks = (
        ("lora-load-format", "lora_load_format", lambda x: x == "safetensors", "'safetensors'",
         "lora_load_format must be 'safetensors'"),
        ("lora-layered-summon", "layered_summon", lambda x: x is True, "True", "layered_summon must be True"),
        ("lora-lr", "lr", lambda x: _compare(x, ">", 1e-5) is True, "above 1e-5",
         "lr should usually be greater than 1e-5 for lora training"),
    )
    for code, name, ok, need, quote in checks:
        value = get(KEYS[name])
        if isinstance(value, Unknown):
            skipped.append(SkippedCheck(code, f"{name} is unknown ({value.reason})"))
            continue
        value = None if value is MISSING else value
        if not ok(value):
            causes.append(RefusalCause(code, "ValueError", f"lora_rank={rank} needs {name} {need}, got {value!r} "
                                       f"('{quote}')", (KEYS[name], KEYS["lora_rank"]),
                                       {"lora_rank": rank, name: value}))


def _entry_name(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry.strip().removeprefix("optional ").strip().removesuffix(".yaml").rsplit("/", 1)[-1]
    return None


def _binary(a: Any, op: str, b: Any) -> Any:
    try:
        return a + b if op == "+" else None
    except TypeError:
        return TypeError


def _compare(a: Any, op: str, b: Any) -> Any:
    """Python's own comparison (True/False), or TypeError when Python raises it."""
    try:
        return bool({"<=": lambda: a <= b, ">": lambda: a > b}[op]())
    except TypeError:
        return TypeError
