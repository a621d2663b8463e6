"""PNG plots of metrics over steps, one run or several overlaid (matplotlib, an optional extra).

matplotlib is imported only when a plot is drawn, with its Agg canvas and no pyplot (no global backend,
no GUI, nothing shared between threads but a lock around drawing). Without it ``PlotsUnavailable``
says how to install it; callers then return the data instead. One panel per metric, one colour per run
(the same in every panel, named in each legend), the step on the x axis. A curve drawn from
downsampled history also shades each bucket's min..max band, so spikes stay visible.

Every picture a tool returns is also kept in ``<state dir>/plots/`` (the newest ``KEPT_MAX``), for clients
that show the model only a tool's structured result: its ``local_path`` can be opened with a file-reading
tool, and its ``uri`` (``agentjet://plot/<name>``) read over MCP.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import math
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from skill_server.core.errors import SkillError, ToolFailure
from skill_server.core.fsutil import write_bytes_atomic
from skill_server.core.models import ImageAttachment
from skill_server.experiments import history
from skill_server.experiments.models import MetricsHistory
from skill_server.experiments.store import Registry, Row, state_dir
from skill_server.hosts.agent import results as host_results

INSTALL_HINT = ("plots need matplotlib, which is not installed in this interpreter: pip install "
                "'agentjet-swarm-skill[plots]' (or pip install matplotlib) where the tools run")
#: Run colours, in order (matplotlib's tab10 first colours): the same run has the same colour in every panel.
RUN_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MAX_PANELS = 6
MAX_RUNS = len(RUN_COLORS)
#: Points per curve read from the history for a plot.
PLOT_POINTS = 1000
#: Points per series returned instead of a plot when matplotlib is missing.
DATA_POINTS = 200
#: Metrics plotted when the caller names none: the first of these (globs) that a run has (a results page's headline
#: metrics, ``hosts.agent.results.HEADLINE``).
DEFAULT_METRICS = host_results.HEADLINE
DEFAULT_PANELS = host_results.HEADLINE_COUNT
_DRAW_LOCK = threading.Lock()
#: Pictures kept for clients that drop image blocks: the newest this many stay.
KEPT_MAX = 100
PLOT_URI = "agentjet://plot/{name}"
_KEPT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,150}\.png$")


class PlotsUnavailable(ToolFailure):
    """matplotlib is not installed; the message says how to install it."""

    def __init__(self) -> None:
        super().__init__(INSTALL_HINT)


@dataclass
class Curve:
    run: str  # legend label
    metric: str
    steps: list[int]
    values: list[float | None]
    lows: list[float | None] = field(default_factory=list)
    highs: list[float | None] = field(default_factory=list)


@dataclass
class Picture:
    png: bytes
    width: int
    height: int

    def attachment(self, title: str, with_data: bool, path: str | None = None, host: str | None = None, *,
                   keep_as: str, notes: list[str]) -> ImageAttachment:
        """The picture as a tool answers with it, kept as ``keep_as`` (``keep``); ``with_data``: the PNG in
        the JSON too, as base64."""
        encoded = base64.b64encode(self.png).decode("ascii") if with_data else None
        local_path, uri = keep(self.png, keep_as, notes)
        return ImageAttachment.of(self.png, mime_type="image/png", title=title, width=self.width, height=self.height,
                                  path=path, host=host, local_path=local_path, uri=uri, data_base64=encoded)


def kept_name(kind: str, ids: list[str]) -> str:
    """The file name a picture of these runs is kept under: one run's by its id (a new picture of the same
    run replaces the old), several runs' by a digest of their ids."""
    if len(ids) == 1:
        return re.sub(r"[^A-Za-z0-9._-]", "_", f"{ids[0]}-{kind}")[:140] + ".png"
    return f"{kind}-{hashlib.sha256(chr(10).join(ids).encode()).hexdigest()[:16]}.png"


def kept_dir() -> Path:
    return state_dir() / "plots"


def keep(png: bytes, name: str, notes: list[str]) -> tuple[str | None, str | None]:
    """Keep a copy of ``png`` as ``name`` in ``kept_dir()`` (atomically; older copies beyond ``KEPT_MAX``
    are removed); (its path, its resource uri). A copy that cannot be written is a note, not a failure:
    the picture still goes out as an image block."""
    try:
        path = write_bytes_atomic(kept_dir() / name, png, overwrite=True)
    except SkillError as exc:
        notes.append(f"the plot was not kept for clients that show no image blocks: {exc.message}")
        return None, None
    _prune(kept_dir())
    return str(path), PLOT_URI.format(name=name)


def _prune(directory: Path) -> None:
    """Remove all but the newest ``KEPT_MAX`` kept pictures (best effort)."""
    try:
        entries = [e for e in os.scandir(directory) if _KEPT_NAME.match(e.name) and e.is_file(follow_symlinks=False)]
        entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
        for entry in entries[KEPT_MAX:]:
            os.unlink(entry.path)
    except OSError:
        pass


def read_kept(name: str) -> bytes:
    """A kept picture's bytes (the ``agentjet://plot/{name}`` resource); ValueError for a name that is not
    one or a picture that is no longer kept."""
    path = kept_dir() / name
    if not _KEPT_NAME.match(name) or not path.is_file() or path.is_symlink():
        raise ValueError(f"no kept plot {name!r}: the newest {KEPT_MAX} plots the tools returned are kept in "
                         f"{kept_dir()}")
    return path.read_bytes()


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def default_metrics(names: list[str], limit: int = DEFAULT_PANELS) -> list[str]:
    """The first ``limit`` names (in ``DEFAULT_METRICS`` order) a run has; its first names if none match."""
    return host_results.headline(names, limit)


def run_labels(rows: list[Row]) -> list[str]:
    """Legend labels: session names, or ids where a session name repeats."""
    sessions = [r.session for r in rows]
    return [r.session if sessions.count(r.session) == 1 else r.id for r in rows]


def curves_from_history(reg: Registry, rows: list[Row], metrics: list[str],
                        max_points: int = PLOT_POINTS, attempts: dict[str, list[str]] | None = None) -> list[Curve]:
    """One curve per run (labelled by ``run_labels``) and metric name, from the metric history (downsampled);
    ``attempts``: a run's experiment's attempts, whose curve is theirs merged by step (``history.read_lineage``)."""
    curves = []
    for label, row in zip(run_labels(rows)[:MAX_RUNS], rows):
        ids = (attempts or {}).get(row.id) or [row.id]
        for metric in metrics[:MAX_PANELS]:
            d = history.downsample(history.read_lineage(reg, ids, metric), max_points)
            if d.steps:
                curves.append(Curve(label, metric, d.steps, d.last, d.min, d.max))
    return curves


def plot_data(reg: Registry, ids: list[str], metrics: list[str]) -> MetricsHistory:
    """The series a plot of the run (or of an experiment's attempts) would show, for answers made where matplotlib
    is missing."""
    return history.history_view(reg, ids, metrics, None, None, DATA_POINTS)


def draw(curves: list[Curve], title: str, notes: list[str]) -> Picture | None:
    """``render``, or None with a note when matplotlib is missing (the answer's plot_data holds the series)."""
    try:
        return render(curves, title)
    except PlotsUnavailable as exc:
        notes.append(f"{exc.message}; plot_data holds the series instead")
        return None


def _nan(values: list[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


#: matplotlib's notice while it builds its font list (first use of a matplotlib version; seconds): it would
#: be the one line on stderr of a CLI call that succeeded, and noise in a server's log.
FONT_CACHE_NOTICE = "Matplotlib is building the font cache"


class _WithoutFontCacheNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(FONT_CACHE_NOTICE)


def quiet_font_cache_notice() -> None:
    """Drop the font-cache notice from matplotlib's font manager logger (before matplotlib is imported; once).
    matplotlib still keeps its font list where it always does (``$MPLCONFIGDIR``, else ``~/.cache/matplotlib``)."""
    logger = logging.getLogger("matplotlib.font_manager")
    if not any(isinstance(f, _WithoutFontCacheNotice) for f in logger.filters):
        logger.addFilter(_WithoutFontCacheNotice())


def render(curves: list[Curve], title: str) -> Picture:
    """The PNG: one panel per metric (at most six), runs overlaid in fixed colours, a legend in each panel."""
    quiet_font_cache_notice()
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise PlotsUnavailable() from None
    metrics = list(dict.fromkeys(c.metric for c in curves))[:MAX_PANELS]
    runs = list(dict.fromkeys(c.run for c in curves))[:MAX_RUNS]
    if not metrics:
        raise ToolFailure("nothing to plot: no step line of the chosen metrics has been scanned yet")
    cols = 1 if len(metrics) == 1 else 2
    rows = math.ceil(len(metrics) / cols)
    width_in, height_in, dpi = 6.4 * cols, 1.0 + 3.4 * rows, 100
    with _DRAW_LOCK:
        fig = Figure(figsize=(width_in, height_in), dpi=dpi)
        FigureCanvasAgg(fig)
        for index, metric in enumerate(metrics):
            ax = fig.add_subplot(rows, cols, index + 1)
            for curve in curves:
                if curve.metric != metric or curve.run not in runs:
                    continue
                colour = RUN_COLORS[runs.index(curve.run)]
                marker = "o" if len(curve.steps) <= 30 else None
                ax.plot(curve.steps, _nan(curve.values), color=colour, marker=marker, markersize=3, linewidth=1.4,
                        label=curve.run)
                if curve.lows and curve.highs and any(lo != hi for lo, hi in zip(curve.lows, curve.highs)):
                    ax.fill_between(curve.steps, _nan(curve.lows), _nan(curve.highs), color=colour, alpha=0.18,
                                    linewidth=0)
            ax.set_title(metric, fontsize=10)
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(metric if len(metric) <= 28 else metric.rsplit("/", 1)[-1])
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8, loc="best")
        fig.suptitle(title, fontsize=11)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi)
    return Picture(buffer.getvalue(), int(round(width_in * dpi)), int(round(height_in * dpi)))
