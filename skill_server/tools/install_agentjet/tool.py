"""``install_agentjet``: plan, run and status of an install (``environments.plan`` and ``environments.install``)."""

from __future__ import annotations

from skill_server.environments import install
from skill_server.environments.plan import InstallRequest, Plan
from skill_server.hosts import normalise
from skill_server.tools.install_agentjet.models import InstallInput, InstallOutput, InstallStage


def install_agentjet(inp: InstallInput) -> InstallOutput:
    req = InstallRequest(host=normalise(inp.host, field="host"), env_path=inp.env_path, manager=inp.manager,
                         python_version=inp.python_version, role=inp.role, agentjet_root=inp.agentjet_root,
                         agentjet_ref=inp.agentjet_ref, repo_url=inp.repo_url, index_url=inp.index_url,
                         flash_attn=inp.flash_attn, flash_attn_wheels=inp.flash_attn_wheels, max_jobs=inp.max_jobs)
    if inp.slurm is not None and inp.action != "run":
        from skill_server.core.errors import ToolInputError

        raise ToolInputError("only used with action run", field="slurm")
    if inp.action == "plan":
        plan, label = install.plan_only(req)
        out = _output(plan, label, "planned")
        out.summary = _plan_summary(out, plan)
        return out
    if inp.action == "run":
        plan, label, launched = install.run(req, inp.slurm)
        out = _output(plan, label, "pending")
        out.id, out.log_path = launched["id"], launched["log_path"]
        out.summary = (f"Installing {label} into {plan.env_path} with {plan.manager} as experiment {out.id} "
                       f"({len(plan.stages)} stages; run again, it resumes where it stopped). Follow it with "
                       f"wait_experiment {{\"id\": \"{out.id}\"}}; install_agentjet status shows the stages; "
                       f"watch it live: {launched['attach']}")
        return out
    state, plan, label = install.status(req)
    out = _output(plan, label, "pending")
    for stage in out.stages:
        if stage.name in state.done:
            stage.status = "done"
        if stage.name == state.failed:
            stage.status = "failed"
        elif stage.name == state.stage and state.run_state in ("running", "queued", "stalled"):
            stage.status = "running"
    out.id, out.log_path = state.run_id, state.log_path
    out.checks = install.verify_checks(state, req, plan.python)
    out.summary = _status_summary(out, state, plan)
    return out


def _output(plan: Plan, label: str, status: str) -> InstallOutput:
    return InstallOutput(summary="", env_path=plan.env_path, manager=plan.manager, python=plan.python, agentjet=label,
                         stages=[InstallStage(name=s.name, status=status, commands=s.commands, verify=s.verify,  # type: ignore[arg-type]
                                              note=s.note) for s in plan.stages],
                         root_steps=plan.root_steps, blockers=plan.blockers, checks=[], id=None, log_path=None)


def _plan_summary(out: InstallOutput, plan: Plan) -> str:
    head = f"Plan: {out.agentjet} into {plan.env_path} with {plan.manager}, {len(plan.stages)} stages " \
        f"({', '.join(s.name for s in plan.stages)})"
    if plan.blockers:
        return f"{head}; run would refuse: {plan.blockers[0]}"
    resume = "; the env exists and is ours: run resumes it" if plan.owned else ""
    roots = f"; {len(plan.root_steps)} step(s) need root (root_steps)" if plan.root_steps else ""
    return f"{head}; nothing changed{resume}{roots}. install_agentjet run starts it."


def _status_summary(out: InstallOutput, state: install.InstallState, plan: Plan) -> str:
    if not state.exists:
        return f"No environment at {plan.env_path} yet: install_agentjet run makes it."
    if not state.owned:
        return f"{plan.env_path} exists and was not made by install_agentjet: it is never touched."
    done = [s.name for s in out.stages if s.status == "done"]
    run = f" (run {state.run_id}: {state.run_state or 'state unknown here'})" if state.run_id else ""
    failing = [c.id for c in out.checks if c.status in ("fail", "unknown")]
    verified = f"; verification: {len(out.checks) - len(failing)} of {len(out.checks)} environment checks pass" + (
        f", failing: {', '.join(failing)}" if failing else "") if out.checks else ""
    if state.status == "installed":
        return f"Installed: {plan.env_path} ({plan.python}), all {len(done)} stages done{run}{verified}."
    if state.failed:
        return (f"Failed at stage {state.failed}{run}: experiment_status {{\"id\": \"{state.run_id}\"}} shows the "
                "log and its error signatures; run again after fixing it (done stages are kept).")
    where = f"stage {state.stage}" + (f" ({state.progress})" if state.progress else "")
    if state.run_state in ("running", "queued", "stalled"):
        return f"Installing: {where}; done: {', '.join(done) or 'none yet'}{run}."
    return f"Stopped at {where}; done: {', '.join(done) or 'none'}{run}: install_agentjet run resumes it."
