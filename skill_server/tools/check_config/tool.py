"""check_config's entry: read the inputs, analyse the script once, run every registered rule, assemble the result."""

from __future__ import annotations

from typing import Any

from skill_server.analysis.analyse import analyse_arguments
from skill_server.analysis.values import jsonable
from skill_server.tools.check_config import rules as _rules  # noqa: F401  (registers every rule)
from skill_server.tools.check_config.context import LintContext
from skill_server.tools.check_config.models import CheckConfigInput, CheckConfigResult, Finding, Skipped, Summary
from skill_server.tools.check_config.registry import REFUSAL_RULE, RULES, claimed_causes
from skill_server.tools.check_config.report import construction_info, effective

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def check_config(inp: CheckConfigInput) -> CheckConfigResult:
    """Lint a swarm client script and/or YAML statically; never imports or runs the script."""
    aj, analysis = analyse_arguments(inp.script, inp.yaml, inp.cwd, inp.agentjet_version, inp.agentjet_root)
    ctx = LintContext(analysis)
    findings = _run_rules(ctx)
    infos = [construction_info(ctx, run) for run in ctx.runs if run.construction is not None]
    skipped = [Skipped(rule=r, reason=why) for r, why in ctx.skipped]
    counts = Summary(errors=sum(f.severity == "error" for f in findings),
                     warnings=sum(f.severity == "warning" for f in findings),
                     infos=sum(f.severity == "info" for f in findings), skipped=len(skipped))
    return CheckConfigResult(
        summary=_summary(findings, counts, aj.label),
        findings=findings,
        counts=counts,
        skipped=skipped,
        effective=infos[0].effective if infos else effective(ctx, ctx.runs[0]),  # runs[0] is infos[0]'s run
        constructions=infos,
        yaml_customised=sorted(ctx.runs[0].base.customised),
        agentjet=aj.ref,
        notes=list(ctx.notes),
    )


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


def _run_rules(ctx: LintContext) -> list[Finding]:
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
                findings.append(Finding(rule=rule.id, severity=rule.severity, key=report.key, message=report.message,
                                        locations=report.locations, values=jsonable(report.values), fix=report.fix))
            for skipped in run.cause_skips:
                if skipped.cause in rule.claims or (rule.id == REFUSAL_RULE and skipped.cause not in claimed):
                    ctx.skip(rule.id, skipped.reason)
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], (f.locations[0].line or 0) if f.locations else 0,
                                 f.rule, f.key or ""))
    return findings
