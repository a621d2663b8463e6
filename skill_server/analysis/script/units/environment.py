"""Environment variables: ``os.getenv("X", "4")`` / ``os.environ.get("X", "4")`` read as their default (the
value while X is unset, an ``env`` assumption); ``os.environ["X"]`` has no default, so no static value."""

from __future__ import annotations

import ast

from skill_server.analysis.script.model import LITERAL, Assumption, Prov, combine
from skill_server.analysis.script.registry import Result, Site, call, item
from skill_server.analysis.script.static import NoValue


@call("os.getenv", "getenv", "os.environ.get", "environ.get")
def default_of_variable(site: Site, node: ast.Call) -> Result | None:
    args = node.args
    if not args or node.keywords:
        return None
    variable = variable_name(site, args[0])
    if len(args) > 1:
        value, p = site.eval(args[1])
        default_text = site.text(args[1])
    else:
        value, p, default_text = None, LITERAL, "None"
    return value, combine([p, Prov("env-default", (Assumption("env", variable, default_text),))])


@item("os.environ", "environ")
def variable_without_default(site: Site, node: ast.Subscript) -> Result | None:
    raise NoValue(f"environment variable {variable_name(site, node.slice)} (read with os.environ[...], which has "
                  "no default)")


def variable_name(site: Site, node: ast.expr) -> str:
    try:
        name, _ = site.eval(node)
    except NoValue:
        raise NoValue("an environment variable whose name is computed at run time") from None
    if not isinstance(name, str):
        raise NoValue("an environment variable whose name is not a string")
    return name
