"""Error signatures over log text in one pass per chunk: what every byte of a run's logs goes through.

The signatures are data (``skill_server/experiments/signatures.py`` is their one source; a launch hands a
host the rows in the run's monitor spec): a name, a regular expression applied to one line at a time, and
*needles*, ASCII strings at least one of which every line the expression matches contains, in any
case. A row without needles runs its expression on every line of the chunk: correct but slow, so the
project's table gives every row needles (a test keeps them necessary and selective).

A chunk is lowered once (ASCII only, so no position moves), and its lines that hold a needle are found in
one pass of one compiled expression over it (``Needles``): each needle is an alternative that starts at
one of its rare bytes, its *anchor* (then the bytes after it, then the whole needle as a look-behind), so
the expression engine skips, at C speed, every byte that anchors no needle and stops only at the few that
do. Its cost is those stops (``BYTE_SHARE``, ``choose_anchors``): a needle made only of bytes that fill
every log (``error``, ``nan``) would stop it everywhere, so such a needle is looked for with ``bytes.find``
instead, a pass of its own. Only the lines that hold a needle are decoded and given to the expressions of
the rows that listed one of the needles they hold, in the order the table first lists those needles, then
rows; a row's count, first and last line are the same however the needles are found (a property test
checks it against a line-by-line reference scan).

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
#: A line end written as ``\\r\\n`` or a lone ``\\r`` (one pass: the same as replacing ``\\r\\n`` then ``\\r``).
CARRIAGE_RETURN = re.compile("\r\n?")
#: Longest kept error line (the server shortens with the same rule, ``core.text.shorten``).
MAX_LINE = 400
_ELLIPSIS = "..."


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text) if "\x1b" in text else text


def normalise(text: str) -> str:
    """Lines as the signatures and the step parser read them: a tqdm redraw (``\\r``) ends a line, and a
    ``Training Progress`` bar is cut from the next writer's text printed right after it."""
    if "\r" in text:
        text = CARRIAGE_RETURN.sub("\n", text)
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
    """One row, compiled: its expression and its needles (lowercase bytes). An empty needle is in every line, so
    a row that lists one runs its expression on every line, as a row without needles does."""

    __slots__ = ("name", "regex", "needles")

    def __init__(self, row: SignatureRow) -> None:
        self.name = row["name"]
        flags = re.MULTILINE | (re.IGNORECASE if "i" in (row.get("flags") or "") else 0)
        self.regex = re.compile(row["pattern"], flags)
        needles = tuple(n.lower().encode("ascii") for n in row.get("needles") or ())
        self.needles = needles if all(needles) else ()


#: About how many of every hundred bytes of a training log (lowercased) are this byte: English words, numbers
#: and the punctuation of log lines (bench/scan.py's log measured, rounded). A byte not listed counts as
#: ``OTHER_SHARE``. Only speed depends on these figures, never a result.
BYTE_SHARE = {
    " ": 13.0, "e": 7.0, "t": 4.5, "o": 4.2, "r": 4.0, "a": 4.0, "s": 3.8, "n": 3.7, "i": 3.5, ":": 3.0,
    "l": 2.5, "p": 2.3, "d": 2.3, ".": 2.2, "u": 2.0, "c": 2.0, "h": 1.8, "g": 1.6, "m": 1.4, "-": 1.2,
    "f": 1.2, "w": 1.1, "k": 1.0, "v": 0.8, "_": 0.8, "y": 0.7, "b": 0.6, "(": 0.4, "q": 0.2, "j": 0.2,
    "x": 0.1, "z": 0.1, "+": 0.05,
}
OTHER_SHARE = 1.0
#: One ``bytes.find`` pass costs about what one expression pass pays for stopping at a byte this common (in
#: percent of the bytes): the expression engine enters its match loop at every such byte (~85 ns), while a
#: pass of ``bytes.find`` costs ~0.6 ms per MiB.
FIND_SHARE = 0.7


def _share(byte: int) -> float:
    return BYTE_SHARE.get(chr(byte), OTHER_SHARE)


def choose_anchors(needles: list[bytes]) -> list[int | None]:
    """For each needle, the offset of the byte the one expression stops at for it, or None to look for it with
    ``bytes.find``: bytes are taken rarest first while what a byte costs the expression (its share) is below
    the passes of ``bytes.find`` it saves (``FIND_SHARE`` for each needle it is the rarest taken byte of)."""
    anchors: list[int | None] = [None] * len(needles)
    for byte in sorted({b for n in needles for b in n}, key=lambda b: (_share(b), b)):
        newly = [i for i, n in enumerate(needles) if anchors[i] is None and byte in n]
        if newly and _share(byte) <= FIND_SHARE * len(newly):
            for i in newly:
                anchors[i] = needles[i].index(byte)
    return anchors


def _overlaps(a: bytes, ka: int, b: bytes, kb: int) -> bool:
    """Whether an occurrence of ``b`` can have its anchor (offset ``kb``) inside the span of an occurrence of ``a``
    from its anchor (offset ``ka``) on: then one pass that reported ``a`` there may have stepped over ``b``."""
    for j in range(ka, len(a)):
        shift = j - kb  # where b starts, in a's offsets
        if all(b[i] == a[shift + i] for i in range(len(b)) if 0 <= shift + i < len(a)):
            return True
    return False


class Needles:
    """Every distinct needle of a table, numbered in the order the table first lists them, and how to find the
    lines that hold them: one expression for the needles anchored on a rare byte, ``bytes.find`` for the rest."""

    def __init__(self, needles: list[bytes]) -> None:
        self.needles = needles
        anchors = choose_anchors(needles)
        #: (bit, needle) of the needles looked for one by one.
        self.one_by_one = [(1 << i, n) for i, n in enumerate(needles) if anchors[i] is None]
        anchored = {i: k for i, k in enumerate(anchors) if k is not None}
        groups: dict[bytes, list[int]] = {}
        for i, k in anchored.items():
            groups.setdefault(needles[i][k:k + 1], []).append(i)
        #: Group number of the expression -> (the bit of its needle, the bits of needles it may have stepped over);
        #: each alternative ends in an empty group, numbered in the order the alternatives are written.
        self.by_group: list[tuple[int, int]] = [(0, 0)]
        alternatives = []
        for byte, members in groups.items():
            inner = []
            for i in members:
                needle, k = needles[i], anchored[i]
                whole = b"(?<=" + re.escape(needle) + b")" if k else b""  # the bytes after the anchor first: cheaper
                inner.append(re.escape(needle[k + 1:]) + whole + b"()")  # to rule out than the look-behind
                maybe = sum(1 << j for j, kj in anchored.items() if j != i and _overlaps(needle, k, needles[j], kj))
                self.by_group.append((1 << i, maybe))
            alternatives.append(re.escape(byte) + b"(?:" + b"|".join(inner) + b")")
        self.expression = re.compile(b"|".join(alternatives)) if alternatives else None
        self.by_bit = {1 << i: n for i, n in enumerate(needles)}

    def find(self, lowered: bytes) -> dict[int, list[int]]:
        """Line start -> [line end, bits of the needles the line holds, bits of needles it may also hold]."""
        lines: dict[int, list[int]] = {}
        size = len(lowered)
        if self.expression is not None:
            by_group = self.by_group
            end = -1
            line: list[int] = []
            for match in self.expression.finditer(lowered):
                pos = match.start()
                if pos >= end:  # a line not seen in this pass yet
                    start = lowered.rfind(b"\n", 0, pos) + 1
                    end = lowered.find(b"\n", pos)
                    if end < 0:
                        end = size
                    line = lines.setdefault(start, [end, 0, 0])
                sure, maybe = by_group[match.lastindex or 0]
                line[1] |= sure
                line[2] |= maybe
        for bit, needle in self.one_by_one:
            pos = lowered.find(needle)
            while pos >= 0:
                start = lowered.rfind(b"\n", 0, pos) + 1
                end = lowered.find(b"\n", pos)
                if end < 0:
                    end = size
                lines.setdefault(start, [end, 0, 0])[1] |= bit
                pos = lowered.find(needle, end)
        return lines

    def held(self, lowered: bytes, start: int, entry: list[int]) -> int:
        """The bits of the needles the line at ``start`` holds (those it may hold, checked)."""
        end, sure, maybe = entry
        maybe &= ~sure
        while maybe:
            bit = maybe & -maybe
            maybe ^= bit
            if lowered.find(self.by_bit[bit], start, end) >= 0:
                sure |= bit
        return sure


class Table:
    """The signatures of a run, ready to scan chunks of its logs (``scan``)."""

    def __init__(self, rows: Iterable[SignatureRow]) -> None:
        self.signatures = [Signature(row) for row in rows]
        #: needle -> the signatures that listed it, in table order (needles in the order first listed).
        by_needle: dict[bytes, list[Signature]] = {}
        self.everywhere: list[Signature] = []
        for sig in self.signatures:
            if not sig.needles:
                self.everywhere.append(sig)
            for needle in sig.needles:
                sigs = by_needle.setdefault(needle, [])
                if sig not in sigs:
                    sigs.append(sig)
        self.needles = Needles(list(by_needle))
        self._rows_of = list(by_needle.values())
        #: bits of needles a line holds -> the signatures to try on it, in the order the table lists them.
        self._tried: dict[int, list[Signature]] = {}

    def _to_try(self, bits: int) -> list[Signature]:
        tried = self._tried.get(bits)
        if tried is None:
            tried = []
            for i, sigs in enumerate(self._rows_of):
                if bits >> i & 1:
                    tried += [sig for sig in sigs if sig not in tried]
            if len(self._tried) < 4096:
                self._tried[bits] = tried
        return tried

    def scan(self, text: str) -> dict[str, Hit]:
        """Every signature that matches a line of ``text`` (already ``normalise``d): how many lines it matched,
        and the first and last of them (stripped, ``clip``ped), in line order."""
        raw = text.encode("utf-8", "replace")
        lowered = raw.lower()
        hits: dict[str, _Tally] = {}
        lines = self.needles.find(lowered)
        for start in sorted(lines):
            entry = lines[start]
            bits = self.needles.held(lowered, start, entry)
            line = raw[start:entry[0]].decode("utf-8", "replace")
            for sig in self._to_try(bits):
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
