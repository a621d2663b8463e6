"""core.trees: the one flatten and the one dotted lookup every tool uses."""

from __future__ import annotations

import pytest

from skill_server.core.trees import flatten, get_path, has_path, sections

TREE = {"ajet": {"rollout": {"num_repeat": 4, "multi_turn": {}}, "tags": [1, 2]}, "trainer": {"nnodes": 1}}


def test_flatten_lists_leaves_in_document_order():
    assert list(flatten(TREE).items()) == [("ajet.rollout.num_repeat", 4), ("ajet.rollout.multi_turn", {}),
                                           ("ajet.tags", [1, 2]), ("trainer.nnodes", 1)]


def test_flatten_prefix_names_the_tree_itself():
    assert flatten({"a": 1, "b": {"c": 2}}, prefix="x") == {"x.a": 1, "x.b.c": 2}
    assert flatten(5, prefix="x.y") == {"x.y": 5}


def test_flatten_bounds_and_the_root_leaf():
    assert flatten(TREE, max_depth=1) == {"ajet": TREE["ajet"], "trainer": {"nnodes": 1}}
    assert list(flatten(TREE, max_keys=2)) == ["ajet.rollout.num_repeat", "ajet.rollout.multi_turn"]
    assert flatten(7) == {} and flatten({}) == {}
    assert flatten(7, root="(root)") == {"(root)": 7} and flatten({"": 3}, root="(root)") == {"(root)": 3}


def test_flatten_is_iterative():
    deep: dict = {}
    node = deep
    for _ in range(5000):
        node["k"] = {}
        node = node["k"]
    node["leaf"] = 1
    (key, value), = flatten(deep).items()
    assert value == 1 and key.count(".") == 5000


def test_sections_include_empty_mappings():
    assert sections(TREE) == {"ajet", "ajet.rollout", "ajet.rollout.multi_turn", "trainer"}


class Opaque:
    pass


def test_get_path_defaults_and_opaque_nodes():
    assert get_path(TREE, "ajet.rollout.num_repeat") == 4
    assert get_path(TREE, "ajet.tags.x", None) is None
    with pytest.raises(KeyError):
        get_path(TREE, "ajet.nope")
    hidden = Opaque()
    assert get_path({"a": hidden}, "a.b.c", None, opaque=Opaque) is hidden
    assert has_path(TREE, "ajet.rollout.multi_turn") and not has_path(TREE, "ajet.rollout.multi_turn.x")
