"""Metric retention: what plots and comparisons need survives (first, last, min, max, the best step), on the
host's points files (hosts/agent/points.py) and in the registry (experiments/history.py)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from skill_server.experiments import history
from skill_server.experiments.progress import StepLine
from skill_server.experiments.spec import RunSpec
from skill_server.experiments.store import open_registry
from skill_server.hosts.agent import points
from skill_server.tools.compare_experiments.tool import stats


def _series(n: int, seed: int = 7) -> list[float | None]:
    rng = random.Random(seed)
    values: list[float | None] = [math.sin(i / 50) + rng.random() * 0.1 for i in range(n)]
    values[n // 3] = 42.0  # a spike
    values[n // 2] = -42.0
    values[n // 4] = None  # a NaN
    return values


def _summary(steps: list[int], values: list[float | None]) -> dict[str, object]:
    pairs = [(s, v) for s, v in zip(steps, values) if v is not None]
    return {"first": (steps[0], values[0]), "last": (steps[-1], values[-1]),
            "max": max(pairs, key=lambda p: p[1]), "min": min(pairs, key=lambda p: p[1]),
            "has_null": any(v is None for v in values)}


def test_keep_holds_first_last_min_max_and_the_first_null_of_each_bucket():
    values = [3.0, 1.0, None, 5.0, 5.0, 2.0, None, 4.0]
    assert points.keep(values, bucket=4) == {0, 1, 2, 3} | {4, 5, 6, 7}
    assert points.keep([1.0, 9.0, 9.0, 0.5, 2.0, 3.0], bucket=6) == {0, 1, 3, 5}  # the first of equal maxima
    assert points.keep([], bucket=4) == set()


def test_compaction_keeps_what_plots_and_comparisons_read():
    n = 5000
    a, b = _series(n, 1), _series(n, 2)
    pts = [points.point(i + 1, i + 1, {"a": a[i] if a[i] is not None else math.nan, "b": b[i] or 0.0})
           for i in range(n)]
    kept = points.compact(pts, keep_first=1, keep_recent=500)
    assert len(kept) < n // 2 and kept[0] == pts[0] and kept[-500:] == pts[-500:]
    for name, values in (("a", a), ("b", [v or 0.0 for v in b])):
        steps = [p["step"] for p in kept if name in p["m"]]
        got = [p["m"][name] for p in kept if name in p["m"]]
        assert _summary(steps, got) == _summary(list(range(1, n + 1)), values)
        assert len(steps) < n // 2


def test_a_points_file_stays_bounded_and_a_reader_follows_it_across_compactions(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(points, "FILE_MAX_POINTS", 300)
    monkeypatch.setattr(points, "FILE_KEEP_RECENT", 100)
    path = str(tmp_path / "main.metrics.jsonl")
    f = points.PointsFile(path)
    copied: dict[int, dict] = {}
    cursor = None
    for step in range(1, 2001):
        f.append([(step, {"loss": 1.0 / step, "reward": math.sin(step), "nan": math.nan})])
        if step % 37 == 0 or step == 2000:
            got, cursor, more = points.read_after(path, cursor)
            assert not more
            copied.update({p["seq"]: p for p in got})
    lines = Path(path).read_text().splitlines()
    assert json.loads(lines[0])["generation"] > 1 and len(lines) - 1 <= 300
    assert max(copied) == 2000 and f.seq == 2000 and f.dropped == 0
    again, cursor2, _ = points.read_after(path, cursor)  # nothing new: nothing read twice
    assert again == [] and cursor2 == cursor
    fresh, _, _ = points.read_after(path, None)
    assert fresh[0]["seq"] == 1 and fresh[-1]["seq"] == 2000 and len(fresh) <= 300
    assert fresh[0]["m"] == {"loss": 1.0, "reward": math.sin(1), "nan": None}


def test_a_restarted_monitor_drops_points_written_after_what_it_resumes_from(tmp_path: Path):
    path = str(tmp_path / "main.metrics.jsonl")
    f = points.PointsFile(path)
    f.append([(s, {"x": float(s)}) for s in range(1, 11)])
    again = points.PointsFile(path)
    again.load(upto_seq=6)
    assert again.seq == 6 and again.count == 6
    again.append([(7, {"x": 70.0})])
    got, _, _ = points.read_after(path, None)
    assert [p["seq"] for p in got] == [1, 2, 3, 4, 5, 6, 7] and got[-1]["m"] == {"x": 70.0}


def test_a_burst_of_step_lines_is_thinned_as_it_is_written(tmp_path: Path):
    f = points.PointsFile(str(tmp_path / "m.jsonl"))
    written = f.append([(s, {"x": float(s % 17)}) for s in range(1, 3 * points.BURST + 1)])
    assert written < 3 * points.BURST and f.seq == 3 * points.BURST
    got, _, _ = points.read_after(f.path, None)
    xs = [p["m"]["x"] for p in got if "x" in p["m"]]
    assert got[0]["step"] == 1 and got[-1]["step"] == 3 * points.BURST and min(xs) == 0.0 and max(xs) == 16.0


def test_a_line_cut_short_by_a_full_disk_is_skipped(tmp_path: Path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"generation":1}\n{"seq":1,"step":1,"m":{"x":1}}\n{"seq":2,"st\n{"seq":3,"step":3,"m":{}}\n')
    got, cursor, _ = points.read_after(str(path), None)
    assert [p["seq"] for p in got] == [1, 3] and cursor[0] == 3


def test_the_registry_thins_old_points_and_keeps_the_best_step(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(history, "MAX_POINTS_PER_SERIES", 2000)
    monkeypatch.setattr(history, "KEEP_RECENT_POINTS", 500)
    monkeypatch.setattr(history, "RETAIN_EVERY", 1000)
    n = 6000
    values = _series(n)
    with open_registry() as reg:
        reg.insert(id="r", session="s", socket="sock", created=0.0, started_at="",
                   spec=RunSpec.from_json({"processes": [{"role": "main", "log_path": "/x.log"}], "run_dir": "/r"}))
        version = reg.get("r").scan_version
        for lo in range(0, n, 250):
            lines = [StepLine(i + 1, {"score": math.nan if values[i] is None else values[i]}, "main")
                     for i in range(lo, lo + 250)]
            assert history.save_scan_and_points(reg, "r", {}, version, lines, lo)
            version += 1
        series = history.read_series(reg, "r", "score")
        assert len(series.steps) <= 2000 + 1000 and series.steps[-500:] == list(range(n - 499, n + 1))
        assert _summary(series.steps, series.values) == _summary(list(range(1, n + 1)), values)
        full = stats(history.Series("score", list(range(1, n + 1)), values), 10, lower=False)
        assert stats(series, 10, lower=False).model_dump(exclude={"n"}) == full.model_dump(exclude={"n"})
        low = stats(history.Series("score", list(range(1, n + 1)), values), 10, lower=True)
        assert stats(series, 10, lower=True).best_step == low.best_step


def _content(path: str) -> bytes | None:
    return Path(path).read_bytes() if Path(path).exists() else None


class _ReadBack(points.PointsFile):
    """The points file as it was compacted before points were held in memory: the file read back and parsed."""

    def compact(self) -> None:
        header, pts = points._read_all(self.path)
        if header is None:
            return
        kept = points.compact(pts, keep_first=1, keep_recent=points.FILE_KEEP_RECENT)
        if len(kept) < len(pts):
            self._rewrite(kept, int(header.get("generation", 0)) + 1)


def test_a_monitor_compacts_from_memory_into_the_same_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Compaction never reads the file back (a restarted monitor reads it once), and writes what compacting the
    file read back would write: byte for byte, through sparse points, NaN, ints, a burst and a restart."""
    monkeypatch.setattr(points, "FILE_MAX_POINTS", 200)
    monkeypatch.setattr(points, "FILE_KEEP_RECENT", 60)
    rng = random.Random(28)
    looks = []
    for look in range(300):
        n = 1500 if look == 150 else rng.randint(0, 4)  # one look is a burst beyond points.BURST
        looks.append([(look * 10 + i, {"loss": rng.random(), "acc": rng.choice([math.nan, 1, 0.5]),
                                       **({"rare": rng.random()} if rng.random() < 0.2 else {})})
                      for i in range(n)])
    mine, theirs = str(tmp_path / "memory.jsonl"), str(tmp_path / "read_back.jsonl")
    held, reference = points.PointsFile(mine), _ReadBack(theirs)
    reads: list[str] = []
    real_read = points._read_all
    monkeypatch.setattr(points, "_read_all", lambda path: (reads.append(path), real_read(path))[1])
    for look, steps in enumerate(looks):
        if look == 200:  # a restarted monitor takes both files up again, from findings a few points older
            resume = held.seq - 3
            held, reference = points.PointsFile(mine), _ReadBack(theirs)
            held.load(upto_seq=resume)
            reference.load(upto_seq=resume)
        assert held.append(steps) == reference.append(steps)
        assert _content(mine) == _content(theirs), f"look {look}"
    assert json.loads(Path(mine).read_text().split("\n", 1)[0])["generation"] > 3
    assert reads.count(mine) == 1, "the file of the monitor holding its points was read once: when it restarted"
    assert (held.count, held.seq, held.generation) == (reference.count, reference.seq, reference.generation)
