"""Tool ``check_config``: a static linter for AgentJet swarm client scripts and their YAML.

AgentJet's rule for swarm clients is one place per setting: ``AgentJetJob`` kwargs (plus writes to
``job.config.ajet...`` after construction for fields without a kwarg), or the YAML, never both.

What the script configures comes from the analysis service (``skill_server.analysis``: the scan, the base
YAML, the replayed construction, one ``Run`` per construction). This package is the linter on top of it:
``context`` (the analysis plus the lint bookkeeping: skipped checks, finding locations, fix wording),
``registry`` and ``rules`` (one small function per rule), ``report`` (runs as output models), ``models``,
``docs`` (the rule reference, generated from the registry) and ``tool`` (the entry). Nothing is imported
or executed.
"""

from skill_server.tools.check_config.models import CheckConfigInput, CheckConfigResult
from skill_server.tools.check_config.registry import RULES
from skill_server.tools.check_config.tool import check_config

__all__ = ["check_config", "CheckConfigInput", "CheckConfigResult", "RULES"]
