"""Values as JSON can carry them.

The one policy: a float that is NaN, inf or -inf becomes null. JSON has no such numbers, and null is
what the published schemas already promise wherever one can arise (a metric is a number or null, the
metric history stores them as NULL); it is also what pydantic and JavaScript's ``JSON.stringify`` write,
so a client never meets a string where the schema says number. The information that the value was
not finite is kept elsewhere where it matters (the log line itself, the YAML text of a config).
"""

from __future__ import annotations

import math
from typing import Any


def json_number(value: float) -> float | None:
    """``value``, or None when it is NaN or infinite (ints pass through: they are always finite)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_safe(value: Any) -> Any:
    """A copy of a tree of plain values (dicts, lists, tuples, scalars) that JSON can carry: non-finite
    floats become null and mapping keys become strings. Other leaves are returned as they are."""
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value
