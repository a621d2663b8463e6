"""What real AgentJet refuses, as structured causes that tools report instead of a traceback.

A :class:`Cause` names the rule (a stable ``id``), the tool argument and config key involved, says what
is wrong in plain words, and gives the exception AgentJet raises for it (type and message, when known).
``build_config`` raises the first cause as :class:`AgentJetRefusal`; ``check_config`` can call the same
check functions and turn causes into findings.

The value checks evaluate AgentJet's own expressions (``prompt + response <= model_len``, ``nnodes > 1``,
...) with Python's operators on the plain values, so a string length compares like a string and an
impossible comparison raises the very ``TypeError`` AgentJet would.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from skill_server.core.errors import ToolInputError
from skill_server.core.text import shorten

LENGTH_KWARGS = ("max_prompt_length", "max_response_length", "max_model_len", "max_response_length_in_one_turn")

#: Every cause id this package raises (stable: ``check_config``'s rules claim them by id; a test keeps the
#: catalogue equal to the ids in the code).
CAUSE_IDS = frozenset({
    # the call and the base file
    "unknown-kwarg", "base-yaml-absent", "length-group-incomplete",
    # Hydra's composition (compose.py)
    "searchpath-invalid", "defaults-invalid", "duplicate-self", "defaults-entry-missing",
    "defaults-includes-swarm-default", "nested-searchpath", "merge-mapping-with-list",
    # after composition: the blocks copied back, the dataclasses, the overrides walk (job.py)
    "base-without-defaults", "base-without-hydra", "non-string-key", "missing-key",
    # AgentJetJob's value checks
    "token-budget", "one-turn-over-response", "lora-rank-not-a-number", "lora-load-format", "lora-layered-summon",
    "lora-lr-missing", "lora-lr-too-low", "nnodes-not-a-number", "trinity-backbone",
    # post-construction writes (build_config's set)
    "write-below-missing-section", "write-through-value",
})


@dataclass(frozen=True)
class Cause:
    """One reason AgentJet stops. ``exception_message`` is None when the message is not known."""

    id: str
    summary: str  # plain words: what is wrong and what to do
    exception: str  # AgentJet's exception type, e.g. "TypeError"
    exception_message: str | None
    field: str | None = None  # the tool argument, e.g. "kwargs.nnodes", "base_yaml", "set.ajet.x"
    key: str | None = None  # the dotted config key, when one is involved
    agentjet: str = ""  # label of the AgentJet this describes, e.g. "AgentJet 0.1.0 (c68c154f)"
    verified: bool = True  # False: the exception is inferred from the code's shape, not seen in a real run
    values: dict[str, Any] = dataclass_field(default_factory=dict)

    @property
    def raised(self) -> str:
        """``Type: message`` as AgentJet prints it."""
        if self.exception_message is None:
            return f"{self.exception} (message not recorded)"
        return f"{self.exception}: {self.exception_message}" if self.exception_message else \
            f"{self.exception} with an empty message"

    @property
    def message(self) -> str:
        """One line: the cause, then what AgentJet raises."""
        who = f"{self.agentjet} " if self.agentjet else "AgentJet "
        verb = "raises" if self.verified else "would raise (inferred)"
        return " ".join(f"{self.summary.rstrip('.')}. {who}{verb} {self.raised}".split())


class AgentJetRefusal(ToolInputError):
    """A tool input that real AgentJet refuses; carries the structured cause."""

    def __init__(self, cause: Cause) -> None:
        self.cause = cause
        super().__init__(cause.message, field=cause.field)


def _type(value: Any) -> str:
    return type(value).__name__


def _show(value: Any) -> str:
    return shorten(repr(value), 60)


# --- before composition -----------------------------------------------------------------------------


def unknown_kwarg_causes(kwargs: dict[str, Any], signature: tuple[str, ...], takes_any_kwarg: bool, *,
                         agentjet: str, closest: Any = None) -> list[Cause]:
    """Kwargs the selected ``AgentJetJob.__init__`` does not have (Python's TypeError at the call).
    ``closest(name)`` suggests a known kwarg."""
    out: list[Cause] = []
    if takes_any_kwarg:
        return out
    for name in kwargs:
        if name not in signature:
            near = closest(name) if closest else None
            hint = f"closest known kwarg: {near}" if near else "closest known kwarg: none"
            out.append(Cause(
                "unknown-kwarg", f"AgentJetJob of {agentjet} has no kwarg {name!r} ({hint})",
                "TypeError", f"AgentJetJob.__init__() got an unexpected keyword argument '{name}'",
                field=f"kwargs.{name}", agentjet=agentjet, values={"kwarg": name, "closest": near}))
    return out


def length_group_causes(kwargs: dict[str, Any], *, agentjet: str) -> list[Cause]:
    """The four length kwargs must be all None or all set (checked before any YAML is read)."""
    given = [k for k in LENGTH_KWARGS if kwargs.get(k) is not None]
    if not given or len(given) == len(LENGTH_KWARGS):
        return []
    missing = [k for k in LENGTH_KWARGS if k not in given]
    return [Cause(
        "length-group-incomplete",
        f"the four length kwargs go together (all given or all left unset): given {', '.join(given)}; missing "
        f"{', '.join(missing)}",
        "ValueError", "(`max_prompt_length`, `max_response_length`, `max_model_len`, "
        "`max_response_length_in_one_turn`) must all be None or all be non-None",
        field=f"kwargs.{missing[0]}", agentjet=agentjet, values={"given": given, "missing": missing})]


def base_absent_cause(path: str, *, field: str, agentjet: str) -> Cause:
    return Cause("base-yaml-absent", f"the base YAML {path} does not exist", "ValueError",
                 "Configuration yaml is absent!", field=field, agentjet=agentjet, values={"path": path})


# --- after composition -------------------------------------------------------------------------------------


def base_block_causes(raw: dict[str, Any], display: str, *, field: str, agentjet: str) -> list[Cause]:
    """AgentJetJob copies the base's ``defaults`` and then its ``hydra`` block back into the composed config;
    a base without one of them raises ``KeyError`` there. One cause per missing block, in that order."""
    out: list[Cause] = []
    for block in ("defaults", "hydra"):
        if block in raw:
            continue
        out.append(Cause(
            "base-without-defaults" if block == "defaults" else "base-without-hydra",
            f"{display} has no '{block}' block; AgentJetJob copies the base's 'defaults' and then its 'hydra' block "
            "back into the config after composition" + (
                " (a base needs defaults: [verl_default, ajet_default, _self_] and the hydra.searchpath that finds "
                "them)" if block == "defaults" else ""),
            "KeyError", f"'{block}'", field=field, key=block, agentjet=agentjet, verified=block == "defaults"))
    return out


# --- after the overrides: AgentJetJob's own checks, in its order ---------------------------------------------
#
# Each check reads a few named values and returns the cause it finds (or None). ``value_causes`` runs them
# the way AgentJetJob does (in order, stopping at the first); ``each_value_cause`` runs every check on its
# own over partially known values, for a linter that reports every cause at once and says which checks
# it could not run.

#: The names the checks read (``value_causes``'s ``values``), each with the kwarg of the same name.
CHECK_NAMES = (*LENGTH_KWARGS, "lora_rank", "lora_load_format", "layered_summon", "lr", "nnodes", "swarm_mode",
               "backbone")


def _evaluate(compute: Any) -> tuple[Any, BaseException | None]:
    try:
        return compute(), None
    except (TypeError, OverflowError, ValueError) as exc:  # what Python's operators raise on these values
        return None, exc


@dataclass(frozen=True)
class _Make:
    """Builds a cause with the caller's argument names, config keys and label."""

    where: dict[str, str]
    keys: dict[str, str]
    agentjet: str

    def __call__(self, cid: str, name: str, summary: str, exc: str, msg: str | None, shown: dict[str, Any],
                 verified: bool = True) -> Cause:
        return Cause(cid, summary, exc, msg, field=self.where.get(name), key=self.keys.get(name),
                     agentjet=self.agentjet, verified=verified, values=shown)


def _token_budget(v: dict[str, Any], make: _Make) -> Cause | None:
    p, r, m = v["max_prompt_length"], v["max_response_length"], v["max_model_len"]
    ok, error = _evaluate(lambda: p + r <= m)
    shown = {"max_prompt_length": p, "max_response_length": r, "max_model_len": m}
    if error is not None:
        return make("token-budget", "max_model_len", (
            f"max_prompt_length ({_show(p)}, {_type(p)}) + max_response_length ({_show(r)}, {_type(r)}) <= "
            f"max_model_len ({_show(m)}, {_type(m)}) cannot be evaluated"), type(error).__name__, str(error), shown)
    if not ok:
        return make("token-budget", "max_model_len", (
            f"max_prompt_length ({_show(p)}) + max_response_length ({_show(r)}) exceeds max_model_len ({_show(m)})"
            + (" (these are strings, so + joins them and <= compares text)" if isinstance(p, str) else "")),
            "AssertionError", "illegal token length", shown)
    return None


def _one_turn(v: dict[str, Any], make: _Make) -> Cause | None:
    t, r = v["max_response_length_in_one_turn"], v["max_response_length"]
    ok, error = _evaluate(lambda: t <= r)
    shown = {"max_response_length_in_one_turn": t, "max_response_length": r}
    if error is not None:
        return make("one-turn-over-response", "max_response_length_in_one_turn", (
            f"max_response_length_in_one_turn ({_show(t)}, {_type(t)}) <= max_response_length ({_show(r)}, "
            f"{_type(r)}) cannot be evaluated"), type(error).__name__, str(error), shown)
    if not ok:
        return make("one-turn-over-response", "max_response_length_in_one_turn", (
            f"the assertion max_response_length_in_one_turn <= max_response_length failed: {_show(t)} <= {_show(r)} "
            "is false" + (" (a string comparison, character by character)" if isinstance(t, str) else "")),
            "AssertionError", "", shown)
    return None


def _lora_on(v: dict[str, Any], make: _Make) -> tuple[bool, Cause | None]:
    """AgentJetJob's ``lora_rank > 0``: whether the LoRA checks run, or the cause when it cannot be evaluated."""
    rank = v["lora_rank"]
    on, error = _evaluate(lambda: rank > 0)
    if error is not None:
        return False, make("lora-rank-not-a-number", "lora_rank",
                           f"lora_rank > 0 cannot be evaluated for lora_rank {_show(rank)} ({_type(rank)})",
                           type(error).__name__, str(error), {"lora_rank": rank})
    return bool(on), None


def _lora_load_format(v: dict[str, Any], make: _Make) -> Cause | None:
    rank, fmt = v["lora_rank"], v["lora_load_format"]
    if fmt == "safetensors":
        return None
    return make("lora-load-format", "lora_load_format",
                f"lora_rank {_show(rank)} needs lora_load_format 'safetensors', got {_show(fmt)}", "ValueError",
                f"When lora_rank > 0, lora_load_format must be 'safetensors', got {fmt!r}",
                {"lora_rank": rank, "lora_load_format": fmt})


def _lora_layered_summon(v: dict[str, Any], make: _Make) -> Cause | None:
    rank, summon = v["lora_rank"], v["layered_summon"]
    if summon:
        return None
    return make("lora-layered-summon", "layered_summon",
                f"lora_rank {_show(rank)} needs layered_summon True, got {_show(summon)}", "ValueError",
                "When lora_rank > 0, layered_summon must be True", {"lora_rank": rank, "layered_summon": summon})


def _lora_lr(v: dict[str, Any], make: _Make) -> Cause | None:
    rank, lr = v["lora_rank"], v["lr"]
    if lr is None:
        return make("lora-lr-missing", "lr", f"lora_rank {_show(rank)} needs an lr, and lr is null", "ValueError",
                    None, {"lora_rank": rank, "lr": lr})
    low, error = _evaluate(lambda: lr <= 1e-5)
    if error is not None:
        return make("lora-lr-too-low", "lr", f"lr {_show(lr)} ({_type(lr)}) cannot be compared with 1e-5",
                    type(error).__name__, str(error), {"lora_rank": rank, "lr": lr}, verified=False)
    if low:
        return make("lora-lr-too-low", "lr", f"lora_rank {_show(rank)} needs lr above 1e-5, got {_show(lr)}",
                    "ValueError", f"lr should usually be greater than 1e-5 for lora training, got {lr}",
                    {"lora_rank": rank, "lr": lr})
    return None


def _nnodes(v: dict[str, Any], make: _Make) -> Cause | None:
    nnodes = v["nnodes"]
    _, error = _evaluate(lambda: nnodes > 1)
    if error is None:
        return None
    return make("nnodes-not-a-number", "nnodes", (
        f"nnodes is {_show(nnodes)} ({_type(nnodes)}); AgentJetJob evaluates nnodes > 1 (before the swarm flag) "
        "to decide the interchange method" + (": write a number, not a quoted string" if isinstance(nnodes, str)
                                              else "")), type(error).__name__, str(error), {"nnodes": nnodes})


def _trinity(v: dict[str, Any], make: _Make) -> Cause | None:
    if v["backbone"] != "trinity":
        return None
    return make("trinity-backbone", "backbone", "backbone 'trinity' is not supported by AgentJetJob",
                "NotImplementedError", None, {"backbone": "trinity"})


_Check = Callable[[dict[str, Any], _Make], "Cause | None"]
#: (cause id, names read, check): the length checks, then LoRA's (only when lora_rank > 0), in AgentJet's order.
_LENGTH_CHECKS: tuple[tuple[str, tuple[str, ...], _Check], ...] = (
    ("token-budget", ("max_prompt_length", "max_response_length", "max_model_len"), _token_budget),
    ("one-turn-over-response", ("max_response_length_in_one_turn", "max_response_length"), _one_turn),
)
_LORA_CHECKS: tuple[tuple[str, tuple[str, ...], _Check], ...] = (
    ("lora-load-format", ("lora_rank", "lora_load_format"), _lora_load_format),
    ("lora-layered-summon", ("lora_rank", "layered_summon"), _lora_layered_summon),
    ("lora-lr-too-low", ("lora_rank", "lr"), _lora_lr),
)
_LATE_CHECKS: tuple[tuple[str, tuple[str, ...], _Check], ...] = (
    ("nnodes-not-a-number", ("nnodes",), _nnodes),
    ("trinity-backbone", ("backbone",), _trinity),
)


#: Every check AgentJetJob makes on the config's values after the overrides, by cause id, in its order.
VALUE_CHECK_IDS: tuple[str, ...] = (*(c for c, _, _ in _LENGTH_CHECKS), "lora-rank-not-a-number",
                                    *(c for c, _, _ in _LORA_CHECKS), "lora-lr-missing",
                                    *(c for c, _, _ in _LATE_CHECKS))


def value_causes(values: dict[str, Any], where: dict[str, str], *, agentjet: str,
                 keys: dict[str, str] | None = None) -> list[Cause]:
    """AgentJetJob's checks after the overrides, on the resolved values (name -> value for
    ``max_prompt_length``, ``max_response_length``, ``max_model_len``, ``max_response_length_in_one_turn``,
    ``lora_rank``, ``lora_load_format``, ``layered_summon``, ``lr``, ``nnodes``, ``swarm_mode``, ``backbone``).

    AgentJet stops at the first failing check; so does this list (at most one cause). ``where`` maps a name
    to the tool argument that set it; ``keys`` to its config key."""
    make = _Make(where, keys or {}, agentjet)
    v = {name: values.get(name) for name in CHECK_NAMES}
    for _, _, check in _LENGTH_CHECKS:
        found = check(v, make)
        if found is not None:
            return [found]
    on, found = _lora_on(v, make)
    if found is not None:
        return [found]
    for _, _, check in _LORA_CHECKS if on else ():
        found = check(v, make)
        if found is not None:
            return [found]
    for _, _, check in _LATE_CHECKS:
        found = check(v, make)
        if found is not None:
            return [found]
    return []


def each_value_cause(values: dict[str, Any], unknown: Collection[str] = (), *, agentjet: str,
                     keys: dict[str, str] | None = None, where: dict[str, str] | None = None,
                     ) -> tuple[list[Cause], list[tuple[str, tuple[str, ...]]]]:
    """Every one of AgentJetJob's value checks on its own, over partially known values (for linters).

    ``values`` holds the known values; names in ``unknown`` are known only at run time; a name in neither
    is absent from the config (AgentJet stops earlier, at the overrides walk), and the checks that read it
    do not run. Unlike AgentJet, a failing check does not stop the later ones, so every cause is found at
    once. Returns the causes and the checks skipped for unknown inputs: (cause id, the unknown names)."""
    make = _Make(where or {}, keys or {}, agentjet)
    unknown = set(unknown)
    causes: list[Cause] = []
    skipped: list[tuple[str, tuple[str, ...]]] = []

    def run(checks: tuple[tuple[str, tuple[str, ...], _Check], ...]) -> None:
        for cid, names, check in checks:
            if any(n not in values and n not in unknown for n in names):
                continue
            missing = tuple(n for n in names if n in unknown)
            if missing:
                skipped.append((cid, missing))
                continue
            found = check(values, make)
            if found is not None:
                causes.append(found)

    run(_LENGTH_CHECKS)
    if "lora_rank" in unknown:
        skipped.extend((cid, ("lora_rank",)) for cid, _, _ in _LORA_CHECKS)
    elif "lora_rank" in values:
        on, found = _lora_on(values, make)
        if found is not None:
            causes.append(found)
        elif on:
            run(_LORA_CHECKS)
    run(_LATE_CHECKS)
    return causes, skipped


def switches_to_tcp(values: dict[str, Any]) -> bool:
    """AgentJetJob's ``nnodes > 1 and swarm_mode`` (only call after :func:`value_causes` found nothing)."""
    nnodes = values.get("nnodes")
    return bool(isinstance(nnodes, int) and nnodes > 1 and values.get("swarm_mode"))
