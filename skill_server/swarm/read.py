"""Reading swarm servers: their routes fetched at once under one deadline, and the scalars of their answers.

Each route's answer is checked for the shape of an AgentJet swarm server before it is used; a value a
server got wrong (a string for a count, a 5,000-digit number, NaN) reads as "not usable", never as an
exception. What a tool makes of the answers (``swarm_status``'s status object, ``episode_cap``'s settings)
is the tool's.
"""

from __future__ import annotations

import logging
import math
import re
import time
from typing import Any

from skill_server.agentjet.swarm_api import ROUTE_ENGINE, ROUTE_EXPERIMENT_DIR, ROUTE_POOL
from skill_server.core.http_json import FetchError, get_json, run_parallel
from skill_server.core.models import MAX_JSON_INT
from skill_server.core.text import shorten, utf8_safe

log = logging.getLogger("skill_server.swarm")

_SECONDS = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(?:s|sec|secs|seconds)?\s*$")
_DIGITS = re.compile(r"^\s*-?[0-9]{1,16}\s*$")


class RawAnswers:
    """What the routes of one server gave: a document or the reason it is missing."""

    def __init__(self, engine: Any, pool: Any, experiment_dir: Any = None) -> None:
        self.engine = engine                  # dict | FetchError
        self.pool = pool                      # dict | None (published nothing yet) | FetchError
        self.experiment_dir = experiment_dir  # dict | FetchError | None (not asked)


def _json_kind(doc: Any) -> str:
    return {type(None): "null", list: "an array", str: "a string", bool: "a boolean"}.get(type(doc), "a number")


def _check_engine(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise FetchError(f"answer is JSON {_json_kind(doc)}, not an object: not an AgentJet swarm server")
    if "engine_status" not in doc:
        raise FetchError("JSON without engine_status: not an AgentJet swarm server")
    return doc


_POOL_KEYS = ("running_episode_details", "completed_episodes", "sample_collection_method", "completed_tasks")


def _check_pool(doc: Any) -> dict[str, Any] | None:
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise FetchError(f"answer is JSON {_json_kind(doc)}, not an object: not an AgentJet swarm server")
    if not any(key in doc for key in _POOL_KEYS):
        raise FetchError("JSON without rollout pool fields (running_episode_details, completed_episodes): "
                         "not an AgentJet swarm server")
    return doc


def _check_experiment_dir(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise FetchError(f"answer is JSON {_json_kind(doc)}, not an object")
    return doc


def read_servers(urls: list[str], timeout: float, *, deadline: float | None = None,
                  with_experiment_dir: bool = False) -> list[RawAnswers]:
    """The routes of every server at once; returns when all answered or the deadline passed."""
    now = time.monotonic()
    if deadline is None or deadline - now >= timeout:
        per_read, end = timeout, now + timeout
    else:  # the call's own bound comes first
        per_read, end = max(0.05, round(deadline - now, 2)), max(now + 0.05, deadline)
    routes: list[tuple[str, Any]] = [(ROUTE_ENGINE, _check_engine), (ROUTE_POOL, _check_pool)]
    if with_experiment_dir:
        routes.append((ROUTE_EXPERIMENT_DIR, _check_experiment_dir))
    calls = [
        (lambda b=base, r=route, check=check: check(get_json(b + r, timeout=per_read, deadline=end)))
        for base in urls for route, check in routes
    ]
    results = run_parallel(
        calls, deadline=end + 0.25,
        late=lambda: FetchError(f"no complete answer within {per_read:g}s (server too slow or stalled)", "timeout"),
    )
    out = []
    width = len(routes)
    for index, url in enumerate(urls):
        got = [_as_fetch(item, url) for item in results[index * width:(index + 1) * width]]
        out.append(RawAnswers(got[0], got[1], got[2] if with_experiment_dir else None))
    return out


def _as_fetch(item: Any, url: str) -> Any:
    if isinstance(item, BaseException) and not isinstance(item, FetchError):
        log.warning("unexpected error reading %s: %r", url, item)
        return FetchError(f"unexpected {type(item).__name__}: {item}"[:300])
    return item


# ----------------------------------------------------------------------------------------------- parsing

def int_or_none(value: Any) -> tuple[int | None, bool]:
    """(integer, ok). None is fine; integral numbers and ASCII digit strings within JSON's exact range are
    accepted; anything else (another type, '²', a 5,000-digit number, 10**400, NaN) is not."""
    if value is None:
        return None, True
    if isinstance(value, bool):
        return None, False
    if isinstance(value, int):
        return (value, True) if abs(value) <= MAX_JSON_INT else (None, False)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) <= MAX_JSON_INT:
            return int(value), True
        return None, False
    if isinstance(value, str) and _DIGITS.match(value):
        number = int(value.strip())
        return (number, True) if abs(number) <= MAX_JSON_INT else (None, False)
    return None, False


def not_an_integer(value: Any) -> str:
    return f"not an integer in range: {value!r}"[:160]


def parse_seconds(value: Any) -> float | None:
    """'12.3s' / '240.0s' / 12.3 → seconds; anything else (garbage, negative, NaN, huge) → None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        if isinstance(value, (int, float)):
            seconds = float(value)
        elif isinstance(value, str) and len(value) <= 64:
            match = _SECONDS.match(value)
            if not match:
                return None
            seconds = float(match.group(1))
        else:
            return None
    except (OverflowError, ValueError):
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def opt_str(value: Any, limit: int = 500) -> str | None:
    """Text a server sent, bounded, with anything UTF-8 cannot carry (lone surrogates) escaped."""
    if value is None:
        return None
    return utf8_safe(shorten(value if isinstance(value, str) else str(value), limit))
