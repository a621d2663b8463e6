"""The evaluator's units: what each library gives a meaning to, one file per library.

Importing this package registers every unit in ``..registry`` (the core, ``..evaluate``, consults that
table and never imports a unit). Where two units answer for the same key (``str(...)``: a path, or a
plain value), the one imported first is asked first: the import order below is that order.

To teach the evaluator a library: add a file here with small functions decorated with the registry's
``@call``, ``@attribute``, ``@method``, ... (each returns ``None`` when the expression is not its case),
import it below, and add the cases to tests/test_check_config_values.py.
"""

# isort: off
from skill_server.analysis.script.units import environment  # noqa: F401  (registration)
from skill_server.analysis.script.units import filesystem  # noqa: F401
from skill_server.analysis.script.units import builtin_types  # noqa: F401
from skill_server.analysis.script.units import command_line  # noqa: F401
from skill_server.analysis.script.units import argparse_options  # noqa: F401
from skill_server.analysis.script.units import dataclass_objects  # noqa: F401
from skill_server.analysis.script.units import instances  # noqa: F401  (after dataclasses: plain classes only)
# isort: on
