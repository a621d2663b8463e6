"""Which Python type each YAML value ends up with on its way through AgentJetJob.

Two loaders meet in AgentJet's pipeline, and they disagree on some scalars:

* **PyYAML** (``yaml.safe_load``) reads the base YAML. It reads ``3e-6`` (a float without a dot) as a
  string and ``2026-05-26`` as a ``date``.
* **OmegaConf's loader** reads every file Hydra composes: the default layers and the temporary copy of
  the base that AgentJetJob writes with ``yaml.dump`` (keys sorted). It has no timestamp type and reads
  more spellings as floats (an exponent needs neither a dot nor a sign).

So a base value takes the type OmegaConf's loader gives to the text ``yaml.dump`` writes for it
(:func:`retype_base`), while a layer value takes the type OmegaConf's loader gives to its own text
(``safe_yaml.OmegaConfLoader``). The rules here were learned from OmegaConf 2.3 and PyYAML 6 as facts; nothing
of either is imported at run time except PyYAML itself.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import yaml

# OmegaConf's float rule, both loaders and the bounds of every YAML read (depth, values) are written once,
# in safe_yaml.
from skill_server.core.safe_yaml import (
    FLOAT_FIRST_CHARS,
    MAX_DEPTH,
    MAX_EXPANDED_NODES,
    OMEGACONF_FLOAT,
    OmegaConfLoader,
    PyYAMLLoader,
    parse_events,
    replaying,
)

STR_TAG = "tag:yaml.org,2002:str"
_FLOAT_FIRST_CHARS = frozenset(FLOAT_FIRST_CHARS)



class UnsupportedValue(ValueError):
    """A value AgentJet's composition cannot carry (a set, an omap, bytes...), with its dotted location."""

    def __init__(self, where: str, what: str) -> None:
        self.where = where
        self.what = what
        super().__init__(f"{where or 'top level'}: {what}")


class TooDeep(ValueError):
    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(f"nested deeper than {MAX_DEPTH} levels at {where or 'top level'}")


class TooLarge(ValueError):
    def __init__(self) -> None:
        super().__init__(f"expands to more than {MAX_EXPANDED_NODES} values (an alias bomb or an oversized document)")


# --- OmegaConf's typing of a YAML text --------------------------------------------------------------


def load_layer_text(text: str) -> Any:
    """Parse one composed file as OmegaConf would (raises ``yaml.YAMLError`` on bad YAML)."""
    return _load(OmegaConfLoader(text))


def load_base_text(text: str) -> Any:
    """Parse a base as AgentJetJob's ``yaml.safe_load`` does, bounded (raises ``yaml.YAMLError`` on bad YAML)."""
    return _load(PyYAMLLoader(text))


def load_layer_and_base_text(text: str, check: Callable[[Any], None] = lambda data: None) -> tuple[Any, Any]:
    """``load_layer_text`` and ``load_base_text`` of one text for not much more than one of them: the text is
    parsed once and its events composed in each dialect; ``check`` runs on the layer reading before the base
    one is composed, as when the two are read one after the other. A text the parser refuses is read each
    way on its own, so every error is the one those functions give."""
    try:
        events = parse_events(text)
    except Exception:  # noqa: BLE001 - the readings below raise what a single reading raises
        events = None
    if events is None:
        layer = load_layer_text(text)
        check(layer)
        return layer, load_base_text(text)
    layer = _load(replaying(OmegaConfLoader, events))
    check(layer)
    return layer, _load(replaying(PyYAMLLoader, events))


def _load(loader: PyYAMLLoader) -> Any:
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


# --- the base's round trip: yaml.safe_load -> yaml.dump(sort_keys=True) -> OmegaConf's loader --------

_PYYAML_RESOLVER = yaml.resolver.Resolver()


def _pyyaml_plain_tag(text: str) -> str:
    # types-PyYAML leaves BaseResolver.resolve unannotated: its result is the tag, a str
    tag: str = _PYYAML_RESOLVER.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]  # PyYAML ships no annotations
    return tag


def omegaconf_float(text: str) -> float:
    """The float OmegaConf's loader constructs for ``text`` (PyYAML's float constructor rules)."""
    value = text.replace("_", "").lower()
    sign = -1.0 if value.startswith("-") else 1.0
    if value[:1] in "+-":
        value = value[1:]
    if value == ".inf":
        return sign * float("inf")
    if value == ".nan":
        return float("nan")
    if ":" in value:
        total, base = 0.0, 1.0
        for part in reversed(value.split(":")):
            total += float(part) * base
            base *= 60
        return sign * total
    return sign * float(value)


def retype_string(text: str) -> str | float:
    """A base string after the round trip: ``yaml.dump`` writes it plain when PyYAML would read the plain
    text back as a string, and OmegaConf's loader then reads ``3e-6``-style spellings as floats."""
    if text[:1] in _FLOAT_FIRST_CHARS and OMEGACONF_FLOAT.match(text) and _pyyaml_plain_tag(text) == STR_TAG:
        return omegaconf_float(text)
    return text


def _retype_scalar(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return retype_string(value)
    if isinstance(value, datetime.datetime):  # yaml.dump writes isoformat(' '); OmegaConf has no timestamps
        return value.isoformat(" ")
    if isinstance(value, datetime.date):
        return value.isoformat()
    raise UnsupportedValue(where, _describe_unsupported(value))


def _describe_unsupported(value: Any) -> str:
    kinds: dict[type, str] = {set: "a !!set value", tuple: "an !!omap or !!pairs entry", bytes: "!!binary data"}
    kind = kinds.get(type(value))
    kind = kind or f"a {type(value).__name__} value"
    return f"{kind}, which AgentJet's OmegaConf composition cannot hold"


def retype_base(data: Any, where: str = "", depth: int = 0) -> Any:
    """The base tree as Hydra sees it in AgentJetJob's temporary copy: every mapping's keys sorted (as
    ``yaml.dump`` sorts them, left unsorted when they do not compare), scalars retyped."""
    if depth > MAX_DEPTH:
        raise TooDeep(where)
    if isinstance(data, dict):
        items = list(data.items())
        try:
            items.sort(key=lambda kv: kv[0])
        except TypeError:
            pass
        out: dict[Any, Any] = {}
        for key, value in items:
            label = f"{where}.{key}" if where else str(key)
            out[_retype_scalar(key, label)] = retype_base(value, label, depth + 1)
        return out
    if isinstance(data, list):
        return [retype_base(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(data)]
    return _retype_scalar(data, where)


def check_plain(data: Any, where: str = "", depth: int = 0) -> None:
    """Refuse values the rest of the pipeline cannot carry, absurd nesting and alias bombs, iteratively,
    before anything recurses."""
    stack: list[tuple[Any, str, int]] = [(data, where, depth)]
    budget = MAX_EXPANDED_NODES
    while stack:
        node, at, level = stack.pop()
        budget -= 1
        if budget < 0:
            raise TooLarge()
        if level > MAX_DEPTH:
            raise TooDeep(at)
        if isinstance(node, dict):
            for key, value in node.items():
                stack.append((value, f"{at}.{key}" if at else str(key), level + 1))
        elif isinstance(node, list):
            stack.extend((item, f"{at}[{i}]", level + 1) for i, item in enumerate(node))
        elif not (node is None or isinstance(node, (bool, int, float, str, datetime.date))):
            raise UnsupportedValue(at, _describe_unsupported(node))
