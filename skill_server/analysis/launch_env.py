"""What AgentJet's launcher checks in the launch environment before it starts training, as data: one table,
read by check_config (the config side) and launch_experiment (the environment side, when it is known).

Fact (AgentJet's ``verify_python_env``, run by the classic launcher and by the swarm server's
``start_engine`` before the trainer starts): when ``ajet.trainer_common.logger`` is exactly the string
``"swanlab"`` and ``SWANLAB_API_KEY`` is unset or empty in that process's environment, it raises
``ImportError("SWANLAB_API_KEY is not set in the environment. To use the swanlab logger, please set
`SWANLAB_API_KEY`. Otherwise, set `ajet.trainer_common.logger=tensorboard`")`` after a 5 s pause. A list
logger is not checked there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoggerNeed:
    logger: str
    variable: str
    exception: str
    message: str


LOGGER_NEEDS = (
    LoggerNeed("swanlab", "SWANLAB_API_KEY", "ImportError", "SWANLAB_API_KEY is not set in the environment."),
)


def logger_need(logger: Any) -> LoggerNeed | None:
    """The environment variable AgentJet's launcher requires for this logger value, if any (exact string match,
    as AgentJet compares it)."""
    return next((need for need in LOGGER_NEEDS if logger == need.logger), None)


def missing_in(need: LoggerNeed, *environments: Mapping[str, str]) -> bool:
    """The variable is unset or empty in every environment given (AgentJet reads it with a '' default)."""
    return not any(env.get(need.variable, "") != "" for env in environments)
