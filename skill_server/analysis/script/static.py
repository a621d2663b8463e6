"""Plain static values: the exception for "no static value", bounds, and arithmetic computed exactly."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

MAX_INT_BITS = 4096  # larger integers are not computed (they would not fit any config value anyway)


class NoValue(Exception):
    """The expression has no static value; ``why`` says what it depends on."""

    def __init__(self, why: str = "") -> None:
        super().__init__(why)
        self.why = why


class _Opaque:
    """An element of a result that is never static (the unknown-args list of ``parse_known_args``)."""


#: Subscripting it has no static value; a tuple holding it stays a tuple (messages name it as one).
OPAQUE_ITEM = _Opaque()


def plain(v: Any, depth: int = 0) -> bool:
    """A value a config can hold (None, bool, number, str, and lists/dicts of them), not an object."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if depth > 16:
        return False
    if isinstance(v, (list, tuple)):
        return all(plain(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, (str, int, float, bool)) and plain(x, depth + 1) for k, x in v.items())
    return False


def agree(a: Any, b: Any) -> bool:
    """Two places give the same thing: equal plain values of one type, or the very same object (a unit makes
    one object per call site)."""
    if plain(a) and plain(b):
        return type(a) is type(b) and bool(a == b)
    return a is b


def hashable(v: Any) -> bool:
    """Usable as a dict key of a config."""
    return v is None or isinstance(v, (bool, int, float, str))


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def bounded(v: Any) -> Any:
    """``v`` itself, or NoValue for what no config holds (oversized integers, bytes, complex numbers)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_INT_BITS:
        raise NoValue(f"an integer of {v.bit_length()} bits (larger than any config value)")
    if isinstance(v, (bytes, complex)) or v is Ellipsis:
        raise NoValue(f"a {type(v).__name__} literal")
    return v


def arith(op: ast.operator, a: Any, b: Any) -> Any:
    """``a op b`` as Python computes it, refusing results past MAX_INT_BITS before computing them."""
    if isinstance(op, ast.Add) and _concatenable(a, b):
        return a + b
    if not (is_number(a) and is_number(b)):
        raise NoValue("arithmetic on values known only at run time")
    compute = _NUMERIC.get(type(op))
    if compute is None:
        raise NoValue("an operator that is not read statically")
    try:
        return compute(a, b)
    except (ZeroDivisionError, OverflowError):
        raise NoValue("arithmetic that fails or overflows") from None
    except ValueError:  # int/str conversion limits and the like
        raise NoValue("arithmetic that fails at run time") from None


def _concatenable(a: Any, b: Any) -> bool:
    return (isinstance(a, str) and isinstance(b, str)) or (isinstance(a, list) and isinstance(b, list))


def _multiply(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and a.bit_length() + b.bit_length() > MAX_INT_BITS + 1:
        raise NoValue("an integer larger than any config value")
    return bounded(a * b)


def _power(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b >= 0:
        if a not in (0, 1, -1) and b * max(1, abs(a).bit_length() - 1) > MAX_INT_BITS:
            raise NoValue("an integer larger than any config value")
        return bounded(a ** b)
    if abs(b) > 1024:
        raise NoValue("an operator that is not read statically")
    result = a ** b
    if isinstance(result, complex):
        raise NoValue("a complex number")
    return bounded(result)


#: The arithmetic on numbers read statically; each refuses results no config holds before computing them.
_NUMERIC: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: bounded(a + b),
    ast.Sub: lambda a, b: bounded(a - b),
    ast.Mult: _multiply,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: _power,
}


def own_nodes(fnode: ast.AST) -> list[ast.AST]:
    """Nodes of a function body, not those of functions, classes or lambdas defined inside it."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(fnode))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out
