"""The static evaluator stays open: its units see it only through the registry, and never one another.

Adding a library is adding a unit file (skill_server/analysis/script/units/); that holds only while no
unit reaches into the core (``evaluate``) or into another unit, and the core into no unit.
"""

from __future__ import annotations

import pytest

from tests.test_layering import MODULES, _imports

UNITS = "skill_server.analysis.script.units"
CORE = "skill_server.analysis.script.evaluate"
UNIT_MODULES = sorted(m for m in MODULES if m.startswith(UNITS + "."))


def test_there_are_units():
    assert len(UNIT_MODULES) >= 6


@pytest.mark.parametrize("module", UNIT_MODULES)
def test_a_unit_imports_neither_the_core_nor_another_unit(module):
    imported = _imports(module, MODULES[module])
    bad = sorted(n for n in imported if n == CORE or (n.startswith(UNITS) and n != module))
    assert not bad, f"{module} imports {bad}: a unit sees the evaluator only through script.registry"


def test_the_core_imports_no_unit():
    imported = _imports(CORE, MODULES[CORE])
    assert not [n for n in imported if n.startswith(UNITS)]
