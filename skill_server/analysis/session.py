"""The state one analysis shares between its steps: the AgentJet described, the scan, the launch directory,
the notes said so far, and the line of every key in the YAML files read (each file read once)."""

from __future__ import annotations

from pathlib import Path

from skill_server.analysis.agentjet import AgentJet
from skill_server.analysis.script import ScriptScan
from skill_server.core.safe_yaml import key_lines


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
            self._key_lines[file] = key_lines(Path(file))
        return self._key_lines[file]
