"""The rule registry: one small function per rule, registered with its id, severity, summary and explanation.

A rule is ``check(ctx, run) -> Iterable[Report]``: it reads the shared ``LintContext`` (computed once) for
one ``Run`` and reports what it finds; the engine stamps the rule id and severity. A rule that cannot run
for want of a value calls ``ctx.skip(rule_id, reason)``. ``claims`` lists the AgentJet refusal causes the
rule reports itself; the ``agentjet-refusal`` rule (``REFUSAL_RULE``) reports every other cause. The same
table renders the rule reference (``skill_server.tools.check_config.docs``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skill_server.tools.check_config.models import Location, Severity

if TYPE_CHECKING:
    from skill_server.analysis.replay import Run
    from skill_server.tools.check_config.context import LintContext


@dataclass
class Report:
    """What a rule found (the engine turns it into a ``Finding``)."""

    key: str | None
    message: str
    locations: list[Location]
    values: dict[str, Any]
    fix: str


Check = Callable[["LintContext", "Run"], Iterable[Report]]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    summary: str  # one line
    explanation: str  # a short paragraph for the reference page
    check: Check
    example: str = ""  # a before/after snippet (a fenced code block's body; first line names the language)
    claims: tuple[str, ...] = ()  # AgentJet refusal causes this rule reports
    order: int = field(default=0, compare=False)
    swarm_only: bool = False  # about the swarm engine: not run on a classic-mode config


RULES: dict[str, Rule] = {}


def rule(rule_id: str, severity: Severity, summary: str, explanation: str, *, example: str = "",
         claims: tuple[str, ...] = (), swarm_only: bool = False) -> Callable[[Check], Check]:
    """Register ``check`` under ``rule_id`` (ids are stable API: never rename one). ``swarm_only``: the rule is
    about the swarm engine, so a classic-mode config (``ajet --conf``) skips it."""

    def register(check: Check) -> Check:
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id} registered twice")
        RULES[rule_id] = Rule(rule_id, severity, " ".join(summary.split()), " ".join(explanation.split()), check,
                              example.strip("\n"), claims, len(RULES), swarm_only)
        return check

    return register


#: The rule that reports every AgentJet refusal cause no other rule claims.
REFUSAL_RULE = "agentjet-refusal"


def claimed_causes() -> set[str]:
    return {cause for r in RULES.values() for cause in r.claims}


def causes_of(rule_id: str, every_cause: set[str] | frozenset[str]) -> list[str]:
    """The refusal causes ``rule_id`` reports: its claims, or (for the refusal rule) every unclaimed one."""
    if rule_id == REFUSAL_RULE:
        return sorted(set(every_cause) - claimed_causes())
    return list(RULES[rule_id].claims)
