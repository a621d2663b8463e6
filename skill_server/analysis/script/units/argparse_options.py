"""argparse, statically: the parsers a script builds, their options, and ``args.x`` as the option's default.

An option left at its default is an assumption (``cli``): the value holds while the option is not given.
String defaults go through ``type=int``/``float`` as argparse does; a required option or a positional
argument has no static value. Options are attached to their parser before any value is resolved (a
prepass over the script's ``add_argument`` / ``set_defaults`` calls).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from skill_server.analysis.script.model import LITERAL, Assumption, Prov, Scope, UnitObject, combine
from skill_server.analysis.script.modules import dotted
from skill_server.analysis.script.registry import Evaluation, Result, Site, attribute, call, kind, method, prepass
from skill_server.analysis.script.static import OPAQUE_ITEM, NoValue


@dataclass
class Option:
    flag: str  # the name users type (--batch-size, or the positional's name)
    positional: bool
    call: ast.Call
    scope: Scope


@dataclass(eq=False)
class ArgParser(UnitObject):
    """An ``argparse.ArgumentParser`` built in the script, with the options added to it (groups included)."""

    line: int
    options: dict[str, Option] = field(default_factory=dict)  # dest -> option
    overrides: dict[str, tuple[ast.expr, Scope, int]] = field(default_factory=dict)  # set_defaults(dest=...)


@dataclass(frozen=True, eq=False)
class ParsedArgs(UnitObject):
    """What ``parser.parse_args()`` returns: ``args.x`` is option x's default."""

    parser: ArgParser


@call("argparse.ArgumentParser", "ArgumentParser")
def parser(site: Site, node: ast.Call) -> Result | None:
    return site.ev.made(node, lambda: ArgParser(node.lineno)), LITERAL


@method(ArgParser)
def parser_method(site: Site, owner: ArgParser, prov: Prov, attr: str, node: ast.Call) -> Result | None:
    if attr in ("add_argument_group", "add_mutually_exclusive_group"):
        return owner, prov  # a group's options are the parser's
    if attr in ("parse_args", "parse_known_args"):
        given = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "args"), None)
        if given is not None and not (isinstance(given, (ast.List, ast.Tuple)) and not given.elts):
            raise NoValue(f"{attr}() is given an explicit argument list")
        parsed = ParsedArgs(owner)
        return (parsed if attr == "parse_args" else (parsed, OPAQUE_ITEM)), prov
    return None


@attribute(ParsedArgs)
def parsed_option(site: Site, owner: ParsedArgs, prov: Prov, attr: str) -> Result | None:
    return option_default(site.ev, owner.parser, attr, site.depth)


@kind(ParsedArgs)
def parsed_kind(value: ParsedArgs) -> str:
    return "the parsed command line"


@prepass
def register_options(ev: Evaluation, calls: list[tuple[Scope, ast.Call]]) -> None:
    """Attach every ``X.add_argument(...)`` / ``X.set_defaults(...)`` to the parser X evaluates to."""
    for scope, node in calls:
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr not in ("add_argument", "set_defaults"):
            continue
        try:
            owner, _ = ev.eval(func.value, scope, node.lineno, 0)
        except (NoValue, RecursionError):
            continue
        if not isinstance(owner, ArgParser):
            continue
        if func.attr == "set_defaults":
            for kw in node.keywords:
                if kw.arg:
                    owner.overrides[kw.arg] = (kw.value, scope, node.lineno)
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not flags:
            continue
        dest_kw = next((k.value for k in node.keywords if k.arg == "dest"), None)
        positional = not flags[0].startswith("-")
        long = next((f for f in flags if f.startswith("--")), flags[0])
        dest = long.lstrip("-").replace("-", "_")
        if isinstance(dest_kw, ast.Constant) and isinstance(dest_kw.value, str):
            dest = dest_kw.value
        owner.options[dest] = Option(long, positional, node, scope)


def option_default(ev: Evaluation, parser: ArgParser, dest: str, d: int) -> Result:
    """``args.<dest>`` while the option is not given: its default, converted as argparse converts it."""
    option = parser.options.get(dest)
    if option is None:
        raise NoValue(f"no argparse option of the script stores {dest}")
    kw = {k.arg: k.value for k in option.call.keywords if k.arg}
    value, p, default_text = _default(ev, parser, option, dest, kw, d)
    required = kw.get("required")
    if isinstance(required, ast.Constant) and required.value is True:
        raise NoValue(f"option {option.flag} is required (no default)")
    value = _converted(value, option, dotted(kw["type"]) if "type" in kw else None)
    return value, combine([p, Prov("cli-default", (Assumption("cli", option.flag, default_text),))])


def _default(ev: Evaluation, parser: ArgParser, option: Option, dest: str, kw: dict[str, ast.expr],
             d: int) -> tuple[Any, Prov, str]:
    """The default as given (``set_defaults`` wins over ``default=``; a flag action's implied default)."""
    if dest in parser.overrides:
        expr, scope, at = parser.overrides[dest]
    elif "default" in kw:
        expr, scope, at = kw["default"], option.scope, option.call.lineno
    else:
        if option.positional and "nargs" not in kw:
            raise NoValue(f"positional argument {option.flag} is given on the command line")
        action = kw.get("action")
        flag = action.value if isinstance(action, ast.Constant) else None
        value = {"store_true": False, "store_false": True}.get(flag) if isinstance(flag, str) else None
        return value, LITERAL, repr(value)
    value, p = ev.eval(expr, scope, at, d)
    return value, p, scope.module.text(expr) if scope.module else repr(value)


def _converted(value: Any, option: Option, convert: str | None) -> Any:
    """argparse runs a string default through ``type=``; only int and float are done statically."""
    if isinstance(value, str) and convert in ("int", "float"):
        try:
            return int(value) if convert == "int" else float(value)
        except ValueError:
            raise NoValue(f"the default of {option.flag} is not a valid {convert}") from None
    if isinstance(value, str) and convert not in (None, "str"):
        raise NoValue(f"the default of {option.flag} goes through type={convert}")
    return value
