"""The raw command line: ``sys.argv[...]`` is known only at run time (argparse defaults: ``argparse_options``)."""

from __future__ import annotations

import ast

from skill_server.analysis.script.registry import Result, Site, item
from skill_server.analysis.script.static import NoValue


@item("sys.argv")
def argument(site: Site, node: ast.Subscript) -> Result | None:
    raise NoValue("a command-line argument (sys.argv), known only at run time")
