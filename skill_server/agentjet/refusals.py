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

from dataclasses import dataclass, field as dataclass_field
from typing import Any

from skill_server.errors import ToolInputError

LENGTH_KWARGS = ("max_prompt_length", "max_response_length", "max_model_len", "max_response_length_in_one_turn")


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
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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


def kwarg_causes(kwargs: dict[str, Any], signature: tuple[str, ...], takes_any_kwarg: bool, *, agentjet: str,
                 closest: Any = None) -> list[Cause]:
    """Both checks on the kwargs alone, in AgentJet's order (unknown names, then the length group)."""
    return [*unknown_kwarg_causes(kwargs, signature, takes_any_kwarg, agentjet=agentjet, closest=closest),
            *length_group_causes(kwargs, agentjet=agentjet)]


def base_absent_cause(path: str, *, field: str, agentjet: str) -> Cause:
    return Cause("base-yaml-absent", f"the base YAML {path} does not exist", "ValueError",
                 "Configuration yaml is absent!", field=field, agentjet=agentjet, values={"path": path})


# --- after the overrides: AgentJetJob's own checks, in its order ---------------------------------------------


def _evaluate(expression: str, compute: Any) -> tuple[Any, BaseException | None]:
    try:
        return compute(), None
    except (TypeError, OverflowError, ValueError) as exc:  # what Python's operators raise on these values
        return None, exc


def value_causes(values: dict[str, Any], where: dict[str, str], *, agentjet: str,
                 keys: dict[str, str] | None = None) -> list[Cause]:
    """AgentJetJob's checks after the overrides, on the resolved values (name -> value for
    ``max_prompt_length``, ``max_response_length``, ``max_model_len``, ``max_response_length_in_one_turn``,
    ``lora_rank``, ``lora_load_format``, ``layered_summon``, ``lr``, ``nnodes``, ``swarm_mode``, ``backbone``).

    AgentJet stops at the first failing check; the list holds at most one cause per check and stops where
    AgentJet would. ``where`` maps a name to the tool argument that set it; ``keys`` to its config key."""
    keys = keys or {}
    out: list[Cause] = []

    def cause(cid: str, name: str, summary: str, exc: str, msg: str | None, shown: dict[str, Any],
              verified: bool = True) -> Cause:
        return Cause(cid, summary, exc, msg, field=where.get(name), key=keys.get(name), agentjet=agentjet,
                     verified=verified, values=shown)

    p, r, m, t = (values.get(k) for k in LENGTH_KWARGS)
    ok, error = _evaluate("p + r <= m", lambda: p + r <= m)
    shown = {"max_prompt_length": p, "max_response_length": r, "max_model_len": m}
    if error is not None:
        out.append(cause("token-budget", "max_model_len", (
            f"max_prompt_length ({_show(p)}, {_type(p)}) + max_response_length ({_show(r)}, {_type(r)}) <= "
            f"max_model_len ({_show(m)}, {_type(m)}) cannot be evaluated"), type(error).__name__, str(error), shown))
        return out
    if not ok:
        out.append(cause("token-budget", "max_model_len", (
            f"max_prompt_length ({_show(p)}) + max_response_length ({_show(r)}) exceeds max_model_len ({_show(m)})"
            + (" (these are strings, so + joins them and <= compares text)" if isinstance(p, str) else "")),
            "AssertionError", "illegal token length", shown))
        return out
    ok, error = _evaluate("t <= r", lambda: t <= r)
    shown = {"max_response_length_in_one_turn": t, "max_response_length": r}
    if error is not None:
        out.append(cause("one-turn-over-response", "max_response_length_in_one_turn", (
            f"max_response_length_in_one_turn ({_show(t)}, {_type(t)}) <= max_response_length ({_show(r)}, "
            f"{_type(r)}) cannot be evaluated"), type(error).__name__, str(error), shown))
        return out
    if not ok:
        out.append(cause("one-turn-over-response", "max_response_length_in_one_turn", (
            f"the assertion max_response_length_in_one_turn <= max_response_length failed: {_show(t)} <= {_show(r)} "
            "is false" + (" (a string comparison, character by character)" if isinstance(t, str) else "")),
            "AssertionError", "", shown))
        return out

    rank = values.get("lora_rank")
    on, error = _evaluate("rank > 0", lambda: rank > 0)
    if error is not None:
        out.append(cause("lora-rank-not-a-number", "lora_rank",
                         f"lora_rank > 0 cannot be evaluated for lora_rank {_show(rank)} ({_type(rank)})",
                         type(error).__name__, str(error), {"lora_rank": rank}))
        return out
    if on:
        fmt = values.get("lora_load_format")
        if fmt != "safetensors":
            out.append(cause("lora-load-format", "lora_load_format",
                             f"lora_rank {_show(rank)} needs lora_load_format 'safetensors', got {_show(fmt)}",
                             "ValueError", f"When lora_rank > 0, lora_load_format must be 'safetensors', got {fmt!r}",
                             {"lora_rank": rank, "lora_load_format": fmt}))
            return out
        summon = values.get("layered_summon")
        if not summon:
            out.append(cause("lora-layered-summon", "layered_summon",
                             f"lora_rank {_show(rank)} needs layered_summon True, got {_show(summon)}",
                             "ValueError", "When lora_rank > 0, layered_summon must be True",
                             {"lora_rank": rank, "layered_summon": summon}))
            return out
        lr = values.get("lr")
        if lr is None:
            out.append(cause("lora-lr-missing", "lr", f"lora_rank {_show(rank)} needs an lr, and lr is null",
                             "ValueError", None, {"lora_rank": rank, "lr": lr}))
            return out
        low, error = _evaluate("lr <= 1e-5", lambda: lr <= 1e-5)
        if error is not None:
            out.append(cause("lora-lr-too-low", "lr", f"lr {_show(lr)} ({_type(lr)}) cannot be compared with 1e-5",
                             type(error).__name__, str(error), {"lr": lr}, verified=False))
            return out
        if low:
            out.append(cause("lora-lr-too-low", "lr", f"lora_rank {_show(rank)} needs lr above 1e-5, got {_show(lr)}",
                             "ValueError", f"lr should usually be greater than 1e-5 for lora training, got {lr}",
                             {"lora_rank": rank, "lr": lr}))
            return out

    nnodes = values.get("nnodes")
    _, error = _evaluate("nnodes > 1", lambda: nnodes > 1)
    if error is not None:
        out.append(cause("nnodes-not-a-number", "nnodes", (
            f"nnodes is {_show(nnodes)} ({_type(nnodes)}); AgentJetJob evaluates nnodes > 1 (before the swarm flag) "
            "to decide the interchange method" + (": write a number, not a quoted string" if isinstance(nnodes, str)
                                                  else "")),
            type(error).__name__, str(error), {"nnodes": nnodes}))
        return out
    if values.get("backbone") == "trinity":
        out.append(cause("trinity-backbone", "backbone", "backbone 'trinity' is not supported by AgentJetJob",
                         "NotImplementedError", None, {"backbone": "trinity"}))
    return out


def switches_to_tcp(values: dict[str, Any]) -> bool:
    """AgentJetJob's ``nnodes > 1 and swarm_mode`` (only call after :func:`value_causes` found nothing)."""
    return bool(values.get("nnodes") > 1 and values.get("swarm_mode"))  # type: ignore[operator]
