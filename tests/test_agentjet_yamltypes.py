"""The product's own YAML typing rules against the real thing (PyYAML's dump plus OmegaConf's loader).

OmegaConf and Hydra are test dependencies: the product re-implements the few rules it needs. These
property tests drive both with the same random data and demand identical results, types included.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from skill_server.agentjet import yamltypes
from skill_server.agentjet.job import Obj, dump

omegaconf_utils = pytest.importorskip("omegaconf._utils")

# strings that look like numbers, booleans, dates and nulls in some spelling, plus ordinary words
NUMBERISH = st.text(alphabet="0123456789.eE+-_:", min_size=1, max_size=10)
WORDS = st.sampled_from(["true", "False", "yes", "off", "null", "~", "nan", ".nan", ".inf", "-.Inf", "1e5", "1.0e5",
                         "3e-6", "+1_000", "0x1F", "0o17", "2026-05-26", "2026-05-26 10:30:00", "12:30:00",
                         "${a.b}", "???", "plain words", "", " lead", "tail ", "a: b", "#x", "0.5", "1_0e1_0"])
SCALARS = st.one_of(NUMBERISH, WORDS, st.text(max_size=8), st.integers(), st.booleans(), st.none(),
                    st.floats(allow_nan=False), st.dates(),
                    st.datetimes(min_value=datetime.datetime(1971, 1, 1), max_value=datetime.datetime(2100, 1, 1)))
KEYS = st.one_of(NUMBERISH.filter(lambda s: not yamltypes.OMEGACONF_FLOAT.match(s)), st.text(min_size=1, max_size=6))
TREES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(KEYS, inner, max_size=4)), max_leaves=20)


def strict_equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def omegaconf_reads(text: str) -> Any:
    return yaml.load(text, Loader=omegaconf_utils.get_yaml_loader())


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(KEYS, TREES, max_size=6))
def test_base_round_trip_equals_yaml_dump_then_omegaconf(tree):
    """What AgentJetJob does to a base: yaml.dump (sorted) to a temp file that Hydra reads with OmegaConf's loader."""
    expected = omegaconf_reads(yaml.dump(tree))
    assert strict_equal(yamltypes.retype_base(tree), expected)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.one_of(NUMBERISH, WORDS)), max_size=8))
def test_layer_loader_types_scalars_like_omegaconf(pairs):
    text = "".join(f"{key}: {value}\n" for key, value in pairs if value.strip() and not value.startswith(("#", " ")))
    try:
        expected = omegaconf_reads(text)
    except yaml.YAMLError as exc:
        with pytest.raises(yaml.YAMLError) as ours:
            yamltypes.load_layer_text(text)
        assert type(ours.value) is type(exc)
        return
    assert strict_equal(yamltypes.load_layer_text(text), expected)


def test_layer_loader_refuses_duplicate_keys_like_omegaconf():
    for loader in (omegaconf_reads, yamltypes.load_layer_text):
        with pytest.raises(yaml.constructor.ConstructorError, match=r"duplicate key '?a\b"):
            loader("a: 1\nb: 2\na: 3\n")


PRINTABLE = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=120)
DUMPABLE = st.recursive(st.one_of(PRINTABLE, st.integers(), st.floats(), st.booleans(), st.none()),
                        lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                st.dictionaries(PRINTABLE, inner, max_size=5)), max_leaves=30)


@pytest.mark.skipif(not hasattr(yaml, "CSafeDumper"), reason="PyYAML built without libyaml")
@settings(max_examples=500, deadline=None)
@given(st.dictionaries(PRINTABLE, DUMPABLE, max_size=6))
def test_fast_dumper_writes_what_safe_dump_writes(tree):
    """build_config's dump uses libyaml's emitter for printable-ASCII documents: it must equal safe_dump's."""
    config = Obj("Config")
    config.update(tree)
    assert dump(config) == yaml.safe_dump(tree, sort_keys=False)


def test_dump_falls_back_to_the_python_emitter_beyond_ascii():
    config = Obj("Config")
    config.update({"name": "ünïcode\nline", "tab": "a\tb", "emoji": "\U0001f600"})
    assert dump(config) == yaml.safe_dump(dict(config), sort_keys=False)


def test_refused_values_name_their_place():
    with pytest.raises(yamltypes.UnsupportedValue) as info:
        yamltypes.check_plain({"ajet": {"tags": {"a", "b"}}})
    assert info.value.where == "ajet.tags" and "!!set" in info.value.what
    deep: Any = 1
    for _ in range(yamltypes.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(yamltypes.TooDeep):
        yamltypes.check_plain({"a": deep})


def _reading(read, text: str) -> tuple[str, Any]:
    """What one reading gives: ("ok", data) or ("error", its type and what it says, as the tools report it)."""
    from skill_server.core.safe_yaml import yaml_error_text

    try:
        return "ok", read(text)
    except yaml.YAMLError as exc:
        return "error", (type(exc).__name__, yaml_error_text(exc))
    except (ValueError, RecursionError) as exc:
        return "error", (type(exc).__name__, str(exc))


def _same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    return a[0] == b[0] and (strict_equal(a[1], b[1]) if a[0] == "ok" else a[1] == b[1])


#: Pieces of YAML documents: structure, anchors and aliases, duplicate keys, tags, scalars of both dialects.
YAML_PIECES = st.sampled_from(["a: 1\n", "b:\n", "  - x\n", "  c: 3e-6\n", "d: &x [1, 2]\n", "e: *x\n", "a: 2\n",
                               "f: !!str 5\n", "g: 2026-05-26\n", "h: {k: v, k: w}\n", "i: |\n  text\n", "---\n",
                               "j: [\n", "k: \t1\n", "l: ${a}\n", "m: !!set {x}\n", "n: 1_000\n", "o: *nope\n",
                               "- top\n", "p: 99999999999999999999\n", "q: 'it''s'\n", "r: .inf\n", "\x07\n"])


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.lists(YAML_PIECES, max_size=12).map("".join))
def test_one_parse_read_both_ways_is_each_reading(text):
    """A layer file read both ways from one parse (build_config's install layers) gives what each reading alone
    gives: the same data and types, or the same error at the same place."""
    layer = _reading(yamltypes.load_layer_text, text)
    base = _reading(yamltypes.load_base_text, text)
    both = _reading(yamltypes.load_layer_and_base_text, text)
    if layer[0] == "error":
        assert _same(both, layer)
    elif base[0] == "error":
        assert _same(both, base)
    else:
        assert both[0] == "ok" and strict_equal(both[1][0], layer[1]) and strict_equal(both[1][1], base[1])
