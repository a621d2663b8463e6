"""argparse, statically: the parsers a script builds, their options, and ``args.x`` as the option's default.

An option left at its default is an assumption (``cli``): the value holds while the option is not given.
String defaults go through ``type=int``/``float`` as argparse does; a required option or a positional
argument has no static value.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skill_server.analysis.script.model import Assumption, Prov, Scope, combine
from skill_server.analysis.script.modules import dotted
from skill_server.analysis.script.static import NoValue

if TYPE_CHECKING:
    from skill_server.analysis.script.evaluate import Evaluator

PARSER_CALLS = ("argparse.ArgumentParser", "ArgumentParser")
LITERAL = Prov("literal")


@dataclass
class Option:
    flag: str  # the name users type (--batch-size, or the positional's name)
    positional: bool
    call: ast.Call
    scope: Scope


@dataclass(eq=False)
class ArgParser:
    """An ``argparse.ArgumentParser`` built in the script, with the options added to it (groups included)."""

    line: int
    options: dict[str, Option] = field(default_factory=dict)  # dest -> option
    overrides: dict[str, tuple[ast.expr, Scope, int]] = field(default_factory=dict)  # set_defaults(dest=...)


@dataclass(frozen=True, eq=False)
class ParsedArgs:
    parser: ArgParser


class _Opaque:
    """An element of a result that is never static (the unknown-args list of ``parse_known_args``)."""


OPAQUE_ITEM = _Opaque()


def register_options(ev: Evaluator, calls: list[tuple[Scope, ast.Call]]) -> None:
    """Attach every ``X.add_argument(...)`` / ``X.set_defaults(...)`` to the parser X evaluates to."""
    for scope, call in calls:
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in ("add_argument", "set_defaults"):
            continue
        try:
            owner, _ = ev.eval(func.value, scope, call.lineno, 0)
        except (NoValue, RecursionError):
            continue
        if not isinstance(owner, ArgParser):
            continue
        if func.attr == "set_defaults":
            for kw in call.keywords:
                if kw.arg:
                    owner.overrides[kw.arg] = (kw.value, scope, call.lineno)
            continue
        flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not flags:
            continue
        dest_kw = next((k.value for k in call.keywords if k.arg == "dest"), None)
        positional = not flags[0].startswith("-")
        long = next((f for f in flags if f.startswith("--")), flags[0])
        dest = long.lstrip("-").replace("-", "_")
        if isinstance(dest_kw, ast.Constant) and isinstance(dest_kw.value, str):
            dest = dest_kw.value
        owner.options[dest] = Option(long, positional, call, scope)


def option_default(ev: Evaluator, parser: ArgParser, dest: str, d: int) -> tuple[Any, Prov]:
    option = parser.options.get(dest)
    if option is None:
        raise NoValue(f"no argparse option of the script stores {dest}")
    call, scope = option.call, option.scope
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    if dest in parser.overrides:
        expr, scope, at = parser.overrides[dest]
        value, p = ev.eval(expr, scope, at, d)
        default_text = scope.module.text(expr) if scope.module else repr(value)
    elif "default" in kw:
        value, p = ev.eval(kw["default"], scope, call.lineno, d)
        default_text = scope.module.text(kw["default"]) if scope.module else repr(value)
    else:
        if option.positional and "nargs" not in kw:
            raise NoValue(f"positional argument {option.flag} is given on the command line")
        action = kw.get("action")
        flag = action.value if isinstance(action, ast.Constant) else None
        value = {"store_true": False, "store_false": True}.get(flag) if isinstance(flag, str) else None
        p, default_text = LITERAL, repr(value)
    required = kw.get("required")
    if isinstance(required, ast.Constant) and required.value is True:
        raise NoValue(f"option {option.flag} is required (no default)")
    convert = dotted(kw["type"]) if "type" in kw else None
    if isinstance(value, str) and convert in ("int", "float"):  # argparse converts string defaults
        try:
            value = int(value) if convert == "int" else float(value)
        except ValueError:
            raise NoValue(f"the default of {option.flag} is not a valid {convert}") from None
    elif isinstance(value, str) and convert not in (None, "str"):
        raise NoValue(f"the default of {option.flag} goes through type={convert}")
    return value, combine([p, Prov("cli-default", (Assumption("cli", option.flag, default_text),))])
