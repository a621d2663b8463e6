"""Loading untrusted YAML safely: size cap, alias cap, expanded-size cap, safe constructors only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from skill_server.errors import ToolInputError
from skill_server.fsutil import read_text_bounded

MAX_YAML_BYTES = 4 * 1024 * 1024
MAX_ALIASES = 1000
MAX_EXPANDED_NODES = 500_000


class _CountingLoader(yaml.SafeLoader):
    """SafeLoader that refuses documents with too many alias references."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_count = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            self.alias_count += 1
            if self.alias_count > MAX_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_ALIASES} alias references")
        return super().compose_node(parent, index)


def _check_expanded_size(data: Any, field: str) -> None:
    """Aliases share objects; a dump or deep copy would expand them. Refuse 'billion laughs' trees."""
    budget = MAX_EXPANDED_NODES
    stack = [data]
    while stack:
        node = stack.pop()
        budget -= 1
        if budget < 0:
            raise ToolInputError(
                f"YAML expands to more than {MAX_EXPANDED_NODES} nodes (alias bomb or oversized document)", field=field
            )
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def parse_yaml_text(text: str, *, field: str, source: str = "YAML") -> Any:
    """Parse YAML text with the limits above; errors name ``field`` and say where the problem is."""
    if len(text.encode("utf-8", errors="replace")) > MAX_YAML_BYTES:
        raise ToolInputError(f"{source} is larger than {MAX_YAML_BYTES // (1024 * 1024)} MiB", field=field)
    loader = _CountingLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ToolInputError(f"{source} is not valid YAML{where}: {' '.join(str(problem).split())}", field=field) from None
    finally:
        loader.dispose()
    _check_expanded_size(data, field)
    return data


def load_yaml_file(path: str | Path, *, field: str, require_mapping: bool = True) -> Any:
    """Read and parse a YAML file; a missing, unreadable, oversized or non-mapping file is a clear error."""
    p, text = read_text_bounded(path, field=field, max_bytes=MAX_YAML_BYTES)
    data = parse_yaml_text(text, field=field, source=str(p))
    if data is None:
        data = {}
    if require_mapping and not isinstance(data, dict):
        raise ToolInputError(f"{p} must hold a YAML mapping at top level, not a {type(data).__name__}", field=field)
    return data
