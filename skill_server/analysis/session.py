"""The state one analysis shares between its steps: the AgentJet described, the scan, the launch directory,
the notes said so far, and the line of every key in the YAML files read (each file read once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from skill_server.analysis.agentjet import AgentJet
from skill_server.analysis.script import ScriptScan
from skill_server.core.safe_yaml import MAX_YAML_BYTES, PyYAMLLoader


class Session:
    """What the base locator, the replay and (later) a tool's rules all read and add notes to."""

    def __init__(self, aj: AgentJet, scan: ScriptScan | None, cwd: Path | None) -> None:
        self.aj = aj
        self.scan = scan
        self.cwd = cwd  # the directory the client is launched from, when the caller knows it
        self.script_file = str(scan.path) if scan is not None else None
        self.notes: list[str] = []
        self._key_lines: dict[str, dict[str, int]] = {}

    def note(self, text: str) -> None:
        """Say something about the analysis once (the same note twice is one note)."""
        if text not in self.notes:
            self.notes.append(text)

    def key_lines(self, file: str | None) -> dict[str, int]:
        """Dotted key -> 1-based line of that key in a YAML file ({} for no file or one that cannot be read)."""
        if not file:
            return {}
        if file not in self._key_lines:
            self._key_lines[file] = _key_lines(Path(file))
        return self._key_lines[file]


def _key_lines(path: Path) -> dict[str, int]:
    """Dotted key -> 1-based line of its key in a YAML file (the file was already loaded safely once)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_YAML_BYTES:
            return {}
        loader = PyYAMLLoader(path.read_text(encoding="utf-8"))  # bounded like every other read of a YAML
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return {}
    out: dict[str, int] = {}
    budget = 200_000
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(node, "")]
    while stack and budget > 0:
        n, prefix = stack.pop()
        if not isinstance(n, yaml.MappingNode) or id(n) in seen:
            continue
        seen.add(id(n))
        for k, v in n.value:
            budget -= 1
            if isinstance(k, yaml.ScalarNode):
                dotted = f"{prefix}{k.value}"
                out.setdefault(dotted, k.start_mark.line + 1)
                stack.append((v, dotted + "."))
    return out
