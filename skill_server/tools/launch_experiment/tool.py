"""launch_experiment: start a run's processes in tmux, here or on ssh hosts, and return at once.

The procedure (a dry run on every host, then the start, rolled back everywhere if any host fails) is
``experiments.launching``, which ``ray_cluster start`` uses too. Before it, what AgentJet's launcher would
refuse in the launch environment is refused here, when that environment is known (``_launch_environment``).
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from skill_server.core.errors import ToolInputError
from skill_server.experiments.launching import launch
from skill_server.tools.launch_experiment.models import LaunchInput, LaunchOutput

#: A run's training YAML is read only when it is this small (it is a config, not data).
MAX_YAML_BYTES = 1024 * 1024


def launch_experiment(inp: LaunchInput) -> LaunchOutput:
    _launch_environment(inp)
    return launch(inp)


def _launch_environment(inp: LaunchInput) -> None:
    """A training YAML on this machine whose logger needs a key (``analysis.launch_env``: swanlab needs
    SWANLAB_API_KEY) that neither ``env`` nor this machine's environment (which a local session inherits)
    holds: AgentJet's launcher would refuse it after the run started, so the launch is refused now. A remote
    host's environment is not known here: nothing is said for it."""
    from skill_server.hosts import LOCAL, normalise

    try:
        here = normalise(inp.host or LOCAL, field="host") == LOCAL
    except ToolInputError:
        return  # the launch itself names the bad host
    if inp.slurm is not None or not here:
        return
    yaml_path = _training_yaml(inp)
    if yaml_path is None:
        return
    from skill_server.analysis.agentjet import KEYS, AgentJet
    from skill_server.analysis.analyse import analyse
    from skill_server.analysis.launch_env import logger_need, missing_in
    from skill_server.core.errors import SkillError

    try:
        run = analyse(AgentJet.select(None, None, yaml_path.parent), None, yaml_path, yaml_path.parent).runs[0]
    except SkillError:
        return  # a YAML check_config cannot read is for check_config to explain, not a reason to refuse here
    logger = run.value(KEYS["logger"])
    need = logger_need(logger)
    if need is None:
        return
    envs = [dict(inp.env or {}), *[{**(inp.env or {}), **(p.env or {})} for p in inp.processes or []], os.environ]
    if missing_in(need, *envs):
        raise ToolInputError(f"{yaml_path} logs to {need.logger} (ajet.trainer_common.logger), and AgentJet's "
                             f"launcher raises {need.exception} ('{need.message}') before training unless "
                             f"{need.variable} is set: neither env nor this machine's environment sets it. Add "
                             f"\"{need.variable}\" to env, or set ajet.trainer_common.logger: tensorboard",
                             field="env")


def _training_yaml(inp: LaunchInput) -> Path | None:
    """The run's YAML on this machine: the blueprint's [exp_yaml_path], else a --conf argument of a command."""
    from skill_server.experiments import blueprint as bp
    from skill_server.experiments.runconfig import conf_arguments

    candidates: list[tuple[str, str]] = []  # (path, the directory a relative one resolves against)
    if inp.blueprint is not None:
        try:
            text, where = bp.read_blueprint(inp.blueprint, "blueprint")
        except ToolInputError:
            return None  # the launch itself reports it
        checked = bp.validate_text(text, where.parent)
        if checked.resolved.get("exp_yaml_path"):
            candidates.append((checked.resolved["exp_yaml_path"], str(where.parent)))
    commands = [(p.command, p.workdir or inp.workdir) for p in inp.processes or []] + \
        ([(inp.command, inp.workdir)] if inp.command else [])
    for command, workdir in commands:
        candidates += [(arg, workdir or os.getcwd()) for arg in conf_arguments(command or "")]
    for path, base in candidates:
        full = Path(path if posixpath.isabs(path) else posixpath.join(base, path)).expanduser()
        if full.is_file() and full.stat().st_size <= MAX_YAML_BYTES:
            return full
    return None
