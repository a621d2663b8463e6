"""Hostile YAML: one-line errors naming the field and the place, never RecursionError, ReaderError,
OverflowError or a constructed Python object; and OmegaConf's reading of ordinary scalars."""

from __future__ import annotations

import pytest

from skill_server.core.errors import ToolInputError
from skill_server.core.safe_yaml import MAX_ALIASES, load_yaml_file, parse_yaml_text
from tests.conftest import call_cli

HOSTILE = {
    "deep-flow": ("a: " + "[" * 50_000 + "]" * 50_000, "nested deeper than 100 levels"),
    "deep-block": ("".join("  " * i + f"k{i}:\n" for i in range(400)), "nested deeper than 100 levels"),
    "bell": ("a: b\x07c\n", "unprintable character 0x07"),
    "nul": ("a: \x00\n", "unprintable character 0x00"),
    "set": ("ajet: !!set {x, y}\n", "the tag !!set is not supported"),
    "omap": ("ajet: !!omap [{rollout: 1}]\n", "the tag !!omap is not supported"),
    "pairs": ("a: !!pairs [{x: 1}]\n", "the tag !!pairs is not supported"),
    "binary": ("a: !!binary aGVsbG8=\n", "the tag !!binary is not supported"),
    "timestamp": ("a: !!timestamp 2020-01-01\n", "the tag !!timestamp is not supported"),
    "python": ("a: !!python/object/apply:os.system ['true']\n", "could not determine a constructor"),
    "digits": ("a: " + "9" * 5000 + "\n", "integer with too many digits"),
    "10**400": (f"a: {10**400}\n", "integer out of range"),
    "2**64": (f"a: {2**64}\n", "integer out of range (more than 64 bits)"),
    "hex": ("a: 0x" + "f" * 40 + "\n", "integer out of range"),
    "duplicate": ("a: 1\nb: 2\na: 3\n", "duplicate key 'a'"),
    "unhashable": ("? [1]\n: 2\n", "unhashable key"),
    "aliases": ("a: &x 1\nb: [" + ", ".join(["*x"] * (MAX_ALIASES + 1)) + "]\n", "alias references"),
    "bomb": ("a: &a [" + ",".join(["x"] * 100) + "]\nb: &b [" + ",".join(["*a"] * 100) + "]\n"
             "c: &c [" + ",".join(["*b"] * 100) + "]\n", "expands to more than"),
    "unclosed": ("a: [1, 2\n", "not valid YAML at line 2"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_yaml_is_one_line_naming_the_field(name):
    text, needle = HOSTILE[name]
    with pytest.raises(ToolInputError) as err:
        parse_yaml_text(text, field="base_yaml", source="/x/base.yaml")
    message = str(err.value)
    assert err.value.field == "base_yaml" and needle in message and "\n" not in message, message
    assert len(message) < 400


def test_place_of_the_problem_is_named():
    with pytest.raises(ToolInputError, match=r"at line 3, column 4: integer out of range"):
        parse_yaml_text("a: 1\nb: 2\nc: 99999999999999999999999\n", field="yaml")


def test_scalars_read_like_omegaconf():
    data = parse_yaml_text(
        "lr: 1e-5\nbig: 1_000.5\ndate: 2024-01-02\nwhen: 2024-01-02 10:00:00\nmax: 9223372036854775807\n"
        "neg: -9223372036854775807\ninf: .inf\nflag: true\nnothing: null\nname: '1e5'\n", field="yaml")
    assert data == {"lr": 1e-5, "big": 1000.5, "date": "2024-01-02", "when": "2024-01-02 10:00:00",
                    "max": 2**63 - 1, "neg": -(2**63 - 1), "inf": float("inf"), "flag": True, "nothing": None,
                    "name": "1e5"}


def test_a_document_that_is_fine_stays_fine():
    text = "ajet:\n  rollout: {max_env_worker: 128, num_repeat: 6}\n  data:\n    train_batch_size: 32\n" \
           "defaults: &d {a: 1}\nother: *d\n"
    assert parse_yaml_text(text, field="yaml")["other"] == {"a": 1}


def test_files_and_tools_report_the_same_way(tmp_path):
    bad = tmp_path / "base.yaml"
    bad.write_text("ajet: !!set {rollout}\n")
    with pytest.raises(ToolInputError) as err:
        load_yaml_file(bad, field="yaml")
    assert str(err.value).startswith(f"yaml: {bad} is not valid YAML at line 1, column 7: the tag !!set")
    deep = tmp_path / "deep.yaml"
    deep.write_text("ajet: " + "[" * 5000 + "]" * 5000 + "\n")
    code, _, stderr = call_cli("swarm_status", {"url": "http://127.0.0.1:9", "yaml": str(deep)})
    assert code == 1 and stderr.count("\n") == 1 and "nested deeper than 100 levels" in stderr
    assert "Traceback" not in stderr and "RecursionError" not in stderr
