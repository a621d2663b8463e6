"""Nested mappings addressed by dotted keys (``ajet.rollout.num_repeat``): the one flatten and the one lookup.

A config is a tree of mappings; a *leaf* is anything that is not a non-empty mapping (a scalar, a list,
an empty mapping). A dotted key joins the keys on the way down with ``.`` (non-string keys as ``str()``).
Every tool that flattens a config or reads a value by dotted key uses these, so every tool agrees on what
``a.b`` means. The walks are iterative: a deep tree cannot overflow the stack.
"""

from __future__ import annotations

from typing import Any

_REQUIRED: Any = object()


def flatten(tree: Any, *, prefix: str = "", max_keys: int | None = None, max_depth: int | None = None,
            root: str | None = None) -> dict[str, Any]:
    """Dotted key -> leaf, in document order.

    ``prefix`` is the dotted key of ``tree`` itself (its leaves are ``prefix.x``). Mappings nested deeper
    than ``max_depth`` levels count as leaves, and only the first ``max_keys`` leaves are kept (for trees
    from untrusted files). A leaf whose dotted key is empty (``tree`` itself when it is a leaf, or a
    top-level ``""`` key) is kept under the key ``root``; with ``root=None`` it is left out."""
    out: dict[str, Any] = {}
    stack: list[tuple[str, Any, int]] = [(prefix, tree, 0)]
    while stack and (max_keys is None or len(out) < max_keys):
        path, node, depth = stack.pop()
        if isinstance(node, dict) and node and (max_depth is None or depth < max_depth):
            stack.extend((f"{path}.{key}" if path else str(key), value, depth + 1)
                         for key, value in reversed(list(node.items())))
        elif path:
            out[path] = node
        elif root is not None:
            out[root] = node
    return out


def sections(tree: dict[str, Any]) -> set[str]:
    """The dotted keys of every mapping below the root (empty ones included): where a key can be written."""
    out: set[str] = set()
    stack: list[tuple[dict[str, Any], str]] = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for key, value in node.items():
            if isinstance(value, dict):
                out.add(prefix + str(key))
                stack.append((value, f"{prefix}{key}."))
    return out


def get_path(tree: Any, dotted: str, default: Any = _REQUIRED, *, opaque: type | None = None) -> Any:
    """The value at a dotted key.

    When a part is missing, or a node on the way is not a mapping: ``default`` (``KeyError`` when none is
    given). A node of type ``opaque`` met on the way stands for its whole subtree and is returned as the
    value of every key below it (the linter's ``Unknown``: a section whose content is known only at run
    time)."""
    node = tree
    for part in dotted.split("."):
        if opaque is not None and isinstance(node, opaque):
            return node
        if not isinstance(node, dict) or part not in node:
            if default is _REQUIRED:
                raise KeyError(dotted)
            return default
        node = node[part]
    return node


def has_path(tree: Any, dotted: str) -> bool:
    """Whether ``get_path`` finds a value at ``dotted`` (``None`` counts as a value)."""
    missing = object()
    return get_path(tree, dotted, missing) is not missing
