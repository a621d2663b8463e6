"""Tool ``check_config``: a static linter for AgentJet swarm client scripts and their YAML.

AgentJet's rule for swarm clients is one place per setting: ``AgentJetJob`` kwargs (plus writes to
``job.config.ajet...`` after construction for fields without a kwarg), or the YAML, never both. The
script is read with ``ast`` (``script``), the base YAML located where AgentJetJob would open it
(``bases``), the config replayed the way AgentJetJob builds it (``context``), then every rule of the
registry (``registry``, ``rules``) runs on that one shared context. AgentJet knowledge comes only through
the adapter (``agentjet``). Nothing is imported or executed.
"""

from skill_server.tools.check_config.models import CheckConfigInput, CheckConfigResult
from skill_server.tools.check_config.registry import RULES
from skill_server.tools.check_config.tool import check_config

__all__ = ["check_config", "CheckConfigInput", "CheckConfigResult", "RULES"]
