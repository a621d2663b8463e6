"""Plain static values: the exception for "no static value", bounds, and arithmetic computed exactly."""

from __future__ import annotations

import ast
from typing import Any

from skill_server.analysis.script import paths
from skill_server.analysis.script.model import PathRef

MAX_INT_BITS = 4096  # larger integers are not computed (they would not fit any config value anyway)


class NoValue(Exception):
    """The expression has no static value; ``why`` says what it depends on."""

    def __init__(self, why: str = "") -> None:
        super().__init__(why)
        self.why = why


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


def as_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise NoValue("a path part that is not a string")


def path_join(base: PathRef, part: Any) -> PathRef:
    try:
        return paths.join(base, part)
    except paths.NotAPath:
        raise NoValue("a path part that is not a string") from None


def arith(op: ast.operator, a: Any, b: Any) -> Any:
    """``a op b`` as Python computes it, refusing results past MAX_INT_BITS before computing them."""
    if isinstance(op, ast.Add) and isinstance(a, str) and isinstance(b, str):
        return a + b
    if isinstance(op, ast.Add) and isinstance(a, list) and isinstance(b, list):
        return a + b
    if not (is_number(a) and is_number(b)):
        raise NoValue("arithmetic on values known only at run time")
    try:
        if isinstance(op, ast.Add):
            return bounded(a + b)
        if isinstance(op, ast.Sub):
            return bounded(a - b)
        if isinstance(op, ast.Mult):
            if isinstance(a, int) and isinstance(b, int) and a.bit_length() + b.bit_length() > MAX_INT_BITS + 1:
                raise NoValue("an integer larger than any config value")
            return bounded(a * b)
        if isinstance(op, ast.Div):
            return a / b
        if isinstance(op, ast.FloorDiv):
            return a // b
        if isinstance(op, ast.Mod):
            return a % b
        if isinstance(op, ast.Pow):
            if isinstance(a, int) and isinstance(b, int) and b >= 0:
                if a not in (0, 1, -1) and b * max(1, abs(a).bit_length() - 1) > MAX_INT_BITS:
                    raise NoValue("an integer larger than any config value")
                return bounded(a ** b)
            if abs(b) <= 1024:
                result = a ** b
                if isinstance(result, complex):
                    raise NoValue("a complex number")
                return bounded(result)
    except (ZeroDivisionError, OverflowError):
        raise NoValue("arithmetic that fails or overflows") from None
    except ValueError:  # int/str conversion limits and the like
        raise NoValue("arithmetic that fails at run time") from None
    raise NoValue("an operator that is not read statically")
