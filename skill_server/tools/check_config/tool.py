"""check_config's entry: read the inputs, analyse the script once, run every registered rule, assemble the result."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from skill_server.analysis.analyse import analyse_arguments
from skill_server.analysis.values import jsonable
from skill_server.tools.check_config import rules as _rules  # noqa: F401  (registers every rule)
from skill_server.tools.check_config.context import LintContext
from skill_server.tools.check_config.models import (
    CheckConfigInput,
    CheckConfigResult,
    Effective,
    EffectiveValue,
    Finding,
    Location,
    Skipped,
    Summary,
)
from skill_server.tools.check_config.registry import REFUSAL_RULE, RULES, claimed_causes
from skill_server.tools.check_config.report import construction_info, effective

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def check_config(inp: CheckConfigInput) -> CheckConfigResult:
    """Lint a swarm client script and/or YAML statically; never imports or runs the script. ``detail``
    compact: the findings without their value tables and the first construction's values by name; full:
    every location, value and construction, each block once (the first construction's values are the
    top-level ``effective``)."""
    aj, analysis = analyse_arguments(inp.script, inp.yaml, inp.cwd, inp.agentjet_version, inp.agentjet_root)
    ctx = LintContext(analysis)
    findings = _run_rules(ctx, ctx.script_file)
    first = effective(ctx, ctx.runs[0])  # the first construction's run, or the YAML's alone
    skipped = [Skipped(rule=r, reason=why) for r, why in ctx.skipped]
    counts = Summary(errors=sum(f.severity == "error" for f in findings),
                     warnings=sum(f.severity == "warning" for f in findings),
                     infos=sum(f.severity == "info" for f in findings), skipped=len(skipped))
    result = CheckConfigResult(summary=_summary(findings, counts, aj.label), findings=findings, counts=counts,
                               skipped=skipped, agentjet=aj.ref, notes=list(ctx.notes))
    if inp.detail == "compact":
        for finding in findings:
            finding.locations = finding.values = None
        result.values, result.unknown = compact_values(first)
        result.skipped = compact_skips(skipped)
        return result
    result.effective = first
    result.constructions = [construction_info(ctx, run, with_effective=i > 0)
                            for i, run in enumerate(r for r in ctx.runs if r.construction is not None)]
    result.yaml_customised = sorted(ctx.runs[0].base.customised)
    return result


_UNKNOWN_BECAUSE = re.compile(r"^.{1,300}? (?:is|are) unknown \((.+)\)$")


def compact_skips(skipped: list[Skipped]) -> list[Skipped]:
    """The skipped checks with one cause said once: 'x is unknown (set by the base YAML ..., not found)' for
    twelve rules is one entry naming the twelve."""
    groups: dict[str, list[str]] = {}
    for item in skipped:
        found = _UNKNOWN_BECAUSE.match(item.reason)
        because = f"values unknown ({found.group(1)})" if found else item.reason
        groups.setdefault(because, [])
        if item.rule not in groups[because]:
            groups[because].append(item.rule)
    return [Skipped(rule=", ".join(rules), reason=because) for because, rules in groups.items()]


def compact_values(values: Effective) -> tuple[dict[str, Any], dict[str, str]]:
    """The effective values by name, and why the unknown ones are unknown: the base YAML's reason first, then
    each reason once, keyed by the names it holds for (comma-separated)."""
    plain: dict[str, Any] = {}
    reasons: dict[str, list[str]] = {}
    for name in type(values).model_fields:
        item = getattr(values, name)
        if not isinstance(item, EffectiveValue):
            continue
        plain[name] = item.value
        if item.unresolved:
            reasons.setdefault(item.unresolved, []).append(name)
    unknown = {"(base YAML)": values.unresolved["(base YAML)"]} if "(base YAML)" in values.unresolved else {}
    unknown |= {", ".join(names): why for why, names in reasons.items()}
    return plain, unknown


def _summary(findings: list[Finding], counts: Summary, label: str) -> str:
    """One line: the counts, then the worst finding (findings come sorted, errors first)."""
    parts = [f"{n} {kind}{'s' if n != 1 else ''}" for n, kind in
             ((counts.errors, "error"), (counts.warnings, "warning"), (counts.infos, "info")) if n]
    skipped = f"; {counts.skipped} check{'s' if counts.skipped != 1 else ''} could not run (see skipped)" \
        if counts.skipped else ""
    if not findings:
        return f"No findings against {label}{skipped}."
    worst = findings[0]
    line = f"{', '.join(parts)} against {label}; worst: {worst.severity} {worst.rule}: {worst.message}"
    line = " ".join(line.split())
    line = line if len(line) <= 500 else line[:497] + "..."
    return line + skipped + "."


def _place(locations: list[Location], script: str | None) -> str | None:
    """``file:line`` of the first location that names a file (the script checked by its name alone)."""
    for loc in locations:
        if loc.file:
            file = Path(loc.file).name if loc.file == script else loc.file
            return f"{file}:{loc.line}" if loc.line else file
    return None


def _run_rules(ctx: LintContext, script: str | None) -> list[Finding]:
    claimed = claimed_causes()
    findings: list[Finding] = []
    seen: set[tuple[Any, ...]] = set()
    for rule in sorted(RULES.values(), key=lambda r: r.order):
        for run in ctx.runs:
            if rule.swarm_only and run.base.classic is not None:
                ctx.skip(rule.id, f"{run.base.name} is a classic-mode config ({run.base.classic}); this check is "
                         "about the swarm engine")
                continue
            for report in rule.check(ctx, run):
                ident = (rule.id, report.key, report.message)
                if ident in seen:
                    continue
                seen.add(ident)
                findings.append(Finding(rule=rule.id, severity=rule.severity, key=report.key,
                                        location=_place(report.locations, script), message=report.message,
                                        fix=report.fix,
                                        locations=report.locations, values=jsonable(report.values)))
            for skipped in run.cause_skips:
                if skipped.cause in rule.claims or (rule.id == REFUSAL_RULE and skipped.cause not in claimed):
                    ctx.skip(rule.id, skipped.reason)
    # Within a severity, a line that makes the script raise comes first: nothing after it runs.
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], not (f.values and "access_error" in f.values),
                                 (f.locations[0].line or 0) if f.locations else 0, f.rule, f.key or ""))
    return findings
