"""Metric points of a run, kept on its host (``<run_dir>/<role>.metrics.jsonl``) under a retention rule.

The run monitor writes one point per step line: ``{"seq": N, "step": S, "m": {name: value}}`` (NaN and inf
as null), ``seq`` counting points 1, 2, ... in the order written. The first line is a header,
``{"generation": G}``: a compaction rewrites the file (atomically) under the next generation, so a reader
that kept a byte offset knows when it must start over (``read_after``). The server copies points by
``seq`` into its registry; nothing on the host needs it to.

The retention rule (``keep``, also the registry's: ``experiments.history``): consecutive points are cut
into buckets, and of each bucket, per metric, only the first, the last, the smallest, the largest and
the first null value stay. What plots and comparisons read survives it: the first and last value, every
spike, the best value of either direction and its step. Points are compacted only beyond a bound, and
never the first point nor the newest ones; a point then keeps only the metrics it stood for, so points
become sparse (``m`` lists fewer names).

A monitor keeps what its file holds in memory too (``PointsFile``), so compacting never reads the file back:
the file is read once, when a restarted monitor takes it up. Stdlib only, Python 3.8.
"""

from __future__ import annotations

import json
import math
import os

from . import files
from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    Point = dict[str, Any]  # {"seq": int, "step": int, "m": {name: float | int | None}}
    #: A point as a monitor holds it: (seq, step, metric names, their values in that order).
    Held = tuple[int, int, tuple[str, ...], tuple[Any, ...]]

#: Points of one bucket of the retention rule.
BUCKET = 16
#: The file is compacted when it holds this many points ...
FILE_MAX_POINTS = 3000
#: ... and its newest this many points are never touched.
FILE_KEEP_RECENT = 1000
#: At most this many points per role and look (a look is a quarter second, or one 4 MiB chunk of a backlog):
#: a burst of step lines beyond it (thousands a second) is thinned by the retention rule as it is written.
BURST = 1024
#: Most bytes of points one read returns (the rest comes with the next read).
READ_BUDGET = 2 * 1024 * 1024


def keep(values: Sequence[float | int | None], bucket: int = BUCKET) -> set[int]:
    """The indices that survive the retention rule: per bucket of ``bucket`` consecutive values, the first,
    the last, the smallest, the largest and the first None."""
    kept: set[int] = set()
    size = max(1, bucket)
    for lo in range(0, len(values), size):
        hi = min(len(values), lo + size)
        kept.add(lo)
        kept.add(hi - 1)
        numbers = [(v, i) for i, v in enumerate(values[lo:hi], lo) if v is not None]
        if numbers:  # the first of equal values, as a comparison's best step is the first one
            kept.add(min(numbers, key=lambda pair: pair[0])[1])
            kept.add(max(numbers, key=lambda pair: pair[0])[1])
        missing = next((i for i in range(lo, hi) if values[i] is None), None)
        if missing is not None:
            kept.add(missing)
    return kept


def compact(points: list[Point], *, keep_first: int, keep_recent: int, bucket: int = BUCKET) -> list[Point]:
    """``points`` (oldest first) under the retention rule: the first ``keep_first`` and the newest ``keep_recent``
    stay whole; in between, each metric keeps only what ``keep`` keeps, and a point left with no metric goes."""
    middle = points[keep_first: max(keep_first, len(points) - keep_recent)]
    if len(middle) <= bucket:
        return points
    names: dict[str, None] = {}
    for p in middle:
        for name in p["m"]:
            names[name] = None
    thinned: list[dict[str, float | int | None]] = [{} for _ in middle]
    for name in names:
        where = [i for i, p in enumerate(middle) if name in p["m"]]
        for j in keep([middle[i]["m"][name] for i in where], bucket):
            thinned[where[j]][name] = middle[where[j]]["m"][name]
    out = points[:keep_first]
    out += [{"seq": p["seq"], "step": p["step"], "m": m} for p, m in zip(middle, thinned) if m]
    return out + points[keep_first + len(middle):]


def point(seq: int, step: int, metrics: dict[str, float | int]) -> Point:
    """One step line's metrics as a point (NaN and inf as None)."""
    return {"seq": seq, "step": step,
            "m": {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}}


class PointsFile:
    """One role's points file, as its monitor writes it: appended to, compacted beyond ``FILE_MAX_POINTS``.

    What the file holds is also held here, oldest first, each point's names a tuple shared by the points with
    the same ones (a few MB at ``FILE_MAX_POINTS`` points of 60 metrics, about the file's own size)."""

    #: Distinct name tuples kept for sharing between compactions (points turned sparse have many).
    MAX_NAME_SETS = 1024

    def __init__(self, path: str) -> None:
        self.path = path
        self.generation = 0
        self.count = 0  # points in the file
        self.seq = 0  # the last seq written
        self.dropped = 0  # points that could not be written (a full disk)
        self._held: list[Held] = []
        self._names: dict[tuple[str, ...], tuple[str, ...]] = {}

    def load(self, upto_seq: int | None = None) -> None:
        """Take up an existing file (a restarted monitor): its generation, its points and last seq. Points after
        ``upto_seq`` (written after the findings that the restarted monitor resumes from) are dropped."""
        header, points = _read_all(self.path)
        if header is None:
            return
        self.generation = int(header.get("generation", 0))
        if upto_seq is not None and any(p["seq"] > upto_seq for p in points):
            points = [p for p in points if p["seq"] <= upto_seq]
            self._rewrite(points, self.generation + 1)
        self._held = []
        self._hold(points)
        self.count = len(points)
        self.seq = max([p["seq"] for p in points] + [upto_seq or 0])

    def append(self, steps: Iterable[tuple[int, dict[str, float | int]]]) -> int:
        """Write one look's step lines (step, metrics) as points; a burst beyond ``BURST`` is compacted first.
        Returns how many points were written."""
        new = []
        for step, metrics in steps:
            self.seq += 1
            new.append(point(self.seq, step, metrics))
        if len(new) > BURST:
            new = compact(new, keep_first=1, keep_recent=1, bucket=max(BUCKET, 4 * len(new) // BURST))
        if not new:
            return 0
        text = "".join(_line(p) for p in new)
        try:
            if self.generation == 0 and not os.path.exists(self.path):
                self.generation = 1
                text = _line({"generation": 1}) + text
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(text)
        except OSError:
            self.dropped += len(new)
            return 0
        self._hold(new)
        self.count += len(new)
        if self.count > FILE_MAX_POINTS:
            self.compact()
        return len(new)

    def compact(self) -> None:
        """Rewrite the file under the retention rule (the newest ``FILE_KEEP_RECENT`` points untouched), from the
        points held here; a file that is gone (its run discarded) stays gone."""
        if not os.path.isfile(self.path):
            return
        points = [{"seq": seq, "step": step, "m": dict(zip(names, values))}
                  for seq, step, names, values in self._held]
        kept = compact(points, keep_first=1, keep_recent=FILE_KEEP_RECENT)
        if len(kept) < len(points):
            self._rewrite(kept, self.generation + 1)

    def _rewrite(self, points: list[Point], generation: int) -> None:
        text = _line({"generation": generation}) + "".join(_line(p) for p in points)
        try:
            files.write_atomic(self.path, text.encode("utf-8"), replace=True, mode=0o600)
        except files.AgentError:
            return  # a full disk: the file stays as it was, the next compaction tries again
        self.generation, self.count = generation, len(points)
        self._held, self._names = [], {}
        self._hold(points)

    def _hold(self, points: Iterable[Point]) -> None:
        names_of = self._names
        for p in points:
            metrics = p["m"]
            names = tuple(metrics)
            shared = names_of.get(names)
            if shared is None:
                shared = names
                if len(names_of) < self.MAX_NAME_SETS:
                    names_of[names] = names
            self._held.append((p["seq"], p["step"], shared, tuple(metrics.values())))


def _line(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), allow_nan=False) + "\n"


def _parse(line: bytes) -> Point | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None  # a line cut short by a full disk
    if (isinstance(data, dict) and isinstance(data.get("seq"), int) and isinstance(data.get("step"), int)
            and isinstance(data.get("m"), dict)):
        return data
    return None


def _read_all(path: str) -> tuple[dict[str, Any] | None, list[Point]]:
    """(header, points) of a points file; (None, []) when there is none."""
    try:
        with open(path, "rb") as handle:
            lines = handle.read().split(b"\n")
    except OSError:
        return None, []
    try:
        header = json.loads(lines[0])
    except ValueError:
        header = None
    if not isinstance(header, dict) or "generation" not in header:
        return None, []
    return header, [p for p in (_parse(x) for x in lines[1:-1]) if p is not None]


def read_all(path: str) -> tuple[dict[str, Any] | None, list[Point]]:
    """(header, points) of a points file, every point it holds; (None, []) when there is none."""
    return _read_all(path)


def merge_attempts(attempts: Sequence[tuple[int | None, Mapping[str, Mapping[int, Any]]]]
                   ) -> dict[str, dict[int, Any]]:
    """The metrics of an experiment's attempts (first attempt first; each its first step, and metric -> step ->
    value) merged by step: a later attempt's points replace the earlier ones' from its first step on (it redid
    those steps after resuming from a checkpoint before them); an attempt with no point replaces nothing."""
    merged: dict[str, dict[int, Any]] = {}
    cut: int | None = None  # the first step of the attempts after the one being merged
    for first, series in reversed(list(attempts)):
        for name, values in series.items():
            mine = merged.setdefault(name, {})
            for step, value in values.items():
                if (cut is None or step < cut) and step not in mine:
                    mine[step] = value
        steps = [s for values in series.values() for s in values]
        start = first if first is not None else (min(steps) if steps else None)
        if start is not None:
            cut = start if cut is None else min(cut, start)
    return {name: dict(sorted(values.items())) for name, values in sorted(merged.items()) if values}


def read_after(path: str, cursor: Sequence[int] | None, budget: int = READ_BUDGET
               ) -> tuple[list[Point], list[int], bool]:
    """Points after ``cursor`` (``[seq, offset, generation]`` from the previous read, or None), at most about
    ``budget`` bytes of them: (points, the next cursor, whether more are waiting). Only whole lines are read."""
    seq, offset, generation = (list(cursor) + [0, 0, 0])[:3] if cursor else (0, 0, 0)
    try:
        fd, size = files.open_regular(path)
    except (OSError, files.AgentError):
        return [], [seq, offset, generation], False
    try:
        head = os.pread(fd, 256, 0)
        first = head.split(b"\n", 1)[0]
        try:
            found = int(json.loads(first)["generation"])
        except (ValueError, KeyError, TypeError):
            return [], [seq, offset, generation], False
        if found != generation or offset > size or offset <= 0:
            offset, generation = len(first) + 1, found
        data = os.pread(fd, min(budget, max(0, size - offset)), offset)
    finally:
        os.close(fd)
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].split(b"\n")[:-1]:
        p = _parse(line)
        if p is not None and p["seq"] > seq:
            out.append(p)
            seq = p["seq"]
    more = offset + end < size
    return out, [seq, offset + end, generation], more
