"""The shared text and JSON helpers of ``skill_server.core``: one rule each, the same at every call site."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from skill_server.core.errors import SkillError, internal_error_message
from skill_server.core.jsonsafe import json_number, json_safe
from skill_server.core.text import ELLIPSIS, one_line, shorten, utf8_safe


@given(st.text(), st.integers(min_value=0, max_value=400))
def test_shorten_never_exceeds_the_limit_and_keeps_both_ends(text, limit):
    out = shorten(text, limit)
    assert len(out) <= limit or out == text
    if len(text) <= limit:
        assert out == text
    elif limit > len(ELLIPSIS):
        head, _, tail = out.partition(ELLIPSIS)
        assert len(out) == limit and text.startswith(head) and text.endswith(tail)
        assert len(head) >= len(tail) >= len(head) - 1


def test_shorten_of_a_path_keeps_the_file_name():
    path = "/data/" + "x" * 300 + "/checkpoints/global_step_40/actor.pt"
    out = shorten(path, 120)
    assert len(out) == 120 and out.startswith("/data/xxx") and out.endswith("actor.pt") and "..." in out


@given(st.text())
def test_one_line_is_one_printable_line_and_loses_nothing(text):
    out = one_line(text)
    assert "\n" not in out and "\r" not in out and all(ch.isprintable() or ch == " " for ch in out)
    if text.isprintable():
        assert out == text


def test_one_line_shows_what_a_value_holds():
    assert one_line("a\nb\tc\x07") == "a\\nb\\tc\\x07"
    assert str(SkillError("no file 'x\ny'", field="path")) == "path: no file 'x\\ny'"


def test_an_internal_error_is_folded_prose_of_bounded_length():
    assert internal_error_message(ValueError("one\n  two")).startswith("internal error: ValueError: one two (")
    long = internal_error_message(RuntimeError("y" * 1000))
    assert "\n" not in long and len(long) < 400 and ELLIPSIS in long


def test_utf8_safe_escapes_lone_surrogates_only():
    assert utf8_safe("caf\u00e9") == "caf\u00e9"
    assert utf8_safe("a\udcffb").encode("utf-8") == b"a\\udcffb"


def test_non_finite_numbers_become_null_everywhere_in_a_tree():
    assert [json_number(v) for v in (math.nan, math.inf, -math.inf, 1.5, 3)] == [None, None, None, 1.5, 3]
    tree = {"lr": math.nan, 1: [math.inf, (2.0, -math.inf)], "ok": {"s": "nan", "b": True, "n": None}}
    safe = json_safe(tree)
    assert safe == {"lr": None, "1": [None, [2.0, None]], "ok": {"s": "nan", "b": True, "n": None}}
    json.dumps(safe, allow_nan=False)
