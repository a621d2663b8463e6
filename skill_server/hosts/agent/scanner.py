"""Error signatures over log text at the speed of ``bytes.find``: what every byte of a run's logs goes through.

The signatures are data (``skill_server/experiments/signatures.py`` is their one source; a launch hands a
host the rows in the run's monitor spec): a name, a regular expression applied to one line at a time, and
*needles*, ASCII strings at least one of which every line the expression matches contains, in any
case. A chunk is lowered once (ASCII only, so no position moves); each distinct needle of the table is
looked for with ``bytes.find`` (C speed, one pass per needle however many rows share it); the lines that
hold one are the candidates, and only they are decoded and given to the expressions of the rows that
listed that needle. A row without needles runs its expression on every line of the chunk: correct but
slow, so the project's table gives every row needles (a test keeps them necessary and selective).

Text is prepared the same way on the host (the run monitor) and on the server (runs started before the
monitor): ``strip_ansi`` removes colour codes, ``normalise`` makes a tqdm redraw (``\\r``) a line end and
cuts a ``Training Progress`` bar from the text glued after it. Stdlib only, Python 3.8.
"""

from __future__ import annotations

import re

from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .protocol import SignatureRow

    #: What one chunk gave one signature: (lines matched, first matching line, last matching line).
    Hit = tuple[int, str, str]

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]")
#: The end of a tqdm ``Training Progress`` bar with more text glued after it on the same line.
AFTER_BAR = re.compile(r"(Training Progress:[^\n\]]{0,400}\])(?=[^\n])")
#: Longest kept error line (the server shortens with the same rule, ``core.text.shorten``).
MAX_LINE = 400
_ELLIPSIS = "..."


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def normalise(text: str) -> str:
    """Lines as the signatures and the step parser read them: a tqdm redraw (``\\r``) ends a line, and a
    ``Training Progress`` bar is cut from the next writer's text printed right after it."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "Training Progress" in text:
        text = AFTER_BAR.sub("\\1\n", text)
    return text


def clip(text: str, limit: int = MAX_LINE) -> str:
    """``text`` in at most ``limit`` characters, keeping its start and its end around ``...`` (the rule of
    ``skill_server.core.text.shorten``, which the agent cannot import; a test keeps the two equal)."""
    if len(text) <= limit:
        return text
    if limit <= len(_ELLIPSIS):
        return text[:limit]
    kept = limit - len(_ELLIPSIS)
    head = (kept + 1) // 2
    return text[:head] + _ELLIPSIS + text[len(text) - (kept - head):]


class Signature:
    """One row, compiled: its expression and its needles (lowercase bytes)."""

    __slots__ = ("name", "regex", "needles")

    def __init__(self, row: SignatureRow) -> None:
        self.name = row["name"]
        flags = re.MULTILINE | (re.IGNORECASE if "i" in (row.get("flags") or "") else 0)
        self.regex = re.compile(row["pattern"], flags)
        self.needles = tuple(n.lower().encode("ascii") for n in row.get("needles") or ())


class Table:
    """The signatures of a run, ready to scan chunks of its logs (``scan``)."""

    def __init__(self, rows: Iterable[SignatureRow]) -> None:
        self.signatures = [Signature(row) for row in rows]
        #: needle -> the signatures that listed it, so each needle costs one pass per chunk.
        self.by_needle: dict[bytes, list[Signature]] = {}
        self.everywhere: list[Signature] = []
        for sig in self.signatures:
            if not sig.needles:
                self.everywhere.append(sig)
            for needle in sig.needles:
                self.by_needle.setdefault(needle, []).append(sig)

    def scan(self, text: str) -> dict[str, Hit]:
        """Every signature that matches a line of ``text`` (already ``normalise``d): how many lines it matched,
        and the first and last of them (stripped, ``clip``ped), in line order."""
        raw = text.encode("utf-8", "replace")
        lowered = raw.lower()
        candidates: dict[int, dict[int, Signature]] = {}  # line start -> signatures to try there
        ends: dict[int, int] = {}
        for needle, sigs in self.by_needle.items():
            pos = lowered.find(needle)
            while pos >= 0:
                start = raw.rfind(b"\n", 0, pos) + 1
                end = raw.find(b"\n", pos)
                if end < 0:
                    end = len(raw)
                ends[start] = end
                chosen = candidates.setdefault(start, {})
                for sig in sigs:
                    chosen[id(sig)] = sig
                pos = lowered.find(needle, end)
        hits: dict[str, _Tally] = {}
        for start in sorted(candidates):
            line = raw[start:ends[start]].decode("utf-8", "replace")
            for sig in candidates[start].values():
                if sig.regex.search(line):
                    _tally(hits, sig.name, line)
        if self.everywhere:
            for line in text.split("\n"):
                for sig in self.everywhere:
                    if sig.regex.search(line):
                        _tally(hits, sig.name, line)
        return {name: (t.count, t.first, t.last) for name, t in hits.items()}


class _Tally:
    __slots__ = ("count", "first", "last")

    def __init__(self, line: str) -> None:
        self.count, self.first, self.last = 1, line, line


def _tally(hits: dict[str, _Tally], name: str, line: str) -> None:
    kept = clip(line.strip())
    tally = hits.get(name)
    if tally is None:
        hits[name] = _Tally(kept)
    else:
        tally.count += 1
        tally.last = kept
