"""``preflight`` (read-only): what each host has for AgentJet, per role (``environments.preflight``)."""

from __future__ import annotations

from skill_server.environments.preflight import parse_request, run
from skill_server.tools.preflight.models import PreflightInput, PreflightOutput


def preflight(inp: PreflightInput) -> PreflightOutput:
    job = ("slurm", inp.slurm_job, "slurm_job") if inp.slurm_job is not None else None
    req = parse_request(inp.hosts, inp.role, inp.python, inp.agentjet_root, inp.config, inp.network, inp.gpu_probe,
                        inp.timeout_s, job, inp.index_url)
    reports = run(req)
    return PreflightOutput(summary="\n".join(r.summary for r in reports), agentjet=req.ctx.label, hosts=reports)
