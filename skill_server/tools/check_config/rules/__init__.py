"""The rules. Importing this package registers every rule, in the order the reference page lists them
(the import order below is that order: keep it)."""

# isort: off
from skill_server.tools.check_config.rules import split  # noqa: F401  (registration)
from skill_server.tools.check_config.rules import kwargs  # noqa: F401
from skill_server.tools.check_config.rules import writes  # noqa: F401
from skill_server.tools.check_config.rules import budgets  # noqa: F401
from skill_server.tools.check_config.rules import base  # noqa: F401
from skill_server.tools.check_config.rules import cap  # noqa: F401
from skill_server.tools.check_config.rules import protocol  # noqa: F401
from skill_server.tools.check_config.rules import resume  # noqa: F401
from skill_server.tools.check_config.rules import launch  # noqa: F401
from skill_server.tools.check_config.rules import refusal  # noqa: F401
# isort: on
