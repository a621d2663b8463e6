"""Rules on what AgentJet's launcher checks before training starts (``analysis.launch_env``)."""

from __future__ import annotations

from collections.abc import Iterator

from skill_server.analysis.agentjet import KEYS
from skill_server.analysis.launch_env import logger_need
from skill_server.analysis.replay import Run
from skill_server.analysis.values import Unknown
from skill_server.tools.check_config.context import LintContext
from skill_server.tools.check_config.registry import Report, rule


@rule("logger-needs-key", "warning", "The logger needs an API key in the environment that launches training.", """
    AgentJet's launcher checks the environment before the trainer starts: with
    ajet.trainer_common.logger exactly 'swanlab' and SWANLAB_API_KEY unset or empty it raises ImportError
    ('SWANLAB_API_KEY is not set in the environment.'). The process that launches training is the swarm server
    (ajet-swarm start) for a swarm job and ajet --conf for a classic one, not the client. check_config cannot
    see that environment: launch_experiment checks it when it launches (its env, and this machine's own
    environment for a local run), before anything starts.""", example="""
yaml
trainer_common: {logger: swanlab}   # before: the launch fails unless SWANLAB_API_KEY is exported there
trainer_common: {logger: tensorboard}   # after (or export SWANLAB_API_KEY in the launch environment)""")
def logger_needs_key(ctx: LintContext, run: Run) -> Iterator[Report]:
    key = KEYS["logger"]
    logger = run.value(key)
    if isinstance(logger, Unknown):
        ctx.skip("logger-needs-key", f"the logger is unknown ({logger.reason})")
        return
    need = logger_need(logger)
    if need is None:
        return
    where = "the swarm server's (ajet-swarm start)" if run.base.classic is None else "ajet --conf's"
    yield Report(key, f"logger {need.logger}: AgentJet's launcher raises {need.exception} ('{need.message}') before "
                 f"training unless {need.variable} is set in {where} environment", ctx.locate(run, "logger"),
                 {"logger": logger, "variable": need.variable},
                 f"export {need.variable} where training is launched (launch_experiment: put it in env), or use the "
                 f"tensorboard logger ({ctx.where_to_set(run, key, 'tensorboard')})")
