"""PNG plots of metrics over steps, one run or several overlaid (matplotlib, an optional extra).

matplotlib is imported only when a plot is drawn, with its Agg canvas and no pyplot (no global backend,
no GUI, nothing shared between threads but a lock around drawing). Without it ``PlotsUnavailable``
says how to install it; callers then return the data instead. One panel per metric, one colour per run
(the same in every panel, named in each legend), the step on the x axis. A curve drawn from
downsampled history also shades each bucket's min..max band, so spikes stay visible.
"""

from __future__ import annotations

import base64
import io
import math
import threading
from dataclasses import dataclass, field

from skill_server.core.errors import ToolFailure
from skill_server.core.models import ImageAttachment
from skill_server.experiments import history
from skill_server.experiments.models import MetricsHistory
from skill_server.experiments.store import Registry, Row

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
#: Metrics plotted when the caller names none: the first of these (globs) that a run has.
DEFAULT_METRICS = ("critic/score/mean", "critic/real_reward", "critic/rewards/mean", "critic/success_rate",
                   "val-core/*", "actor/pg_loss", "actor/kl_loss", "actor/entropy", "response_length/mean")
DEFAULT_PANELS = 4
_DRAW_LOCK = threading.Lock()


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

    def attachment(self, title: str, with_data: bool, path: str | None = None,
                   host: str | None = None) -> ImageAttachment:
        """The picture as a tool answers with it; ``with_data``: the PNG in the JSON too, as base64."""
        encoded = base64.b64encode(self.png).decode("ascii") if with_data else None
        return ImageAttachment.of(self.png, mime_type="image/png", title=title, width=self.width, height=self.height,
                                  path=path, host=host, data_base64=encoded)


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def default_metrics(names: list[str], limit: int = DEFAULT_PANELS) -> list[str]:
    """The first ``limit`` names (in ``DEFAULT_METRICS`` order) a run has; its first names if none match."""
    chosen: list[str] = []
    for pattern in DEFAULT_METRICS:
        matched, _ = history.match_names(names, [pattern])
        for name in matched[:1]:
            if name not in chosen:
                chosen.append(name)
    return (chosen or names)[:limit]


def run_labels(rows: list[Row]) -> list[str]:
    """Legend labels: session names, or ids where a session name repeats."""
    sessions = [r.session for r in rows]
    return [r.session if sessions.count(r.session) == 1 else r.id for r in rows]


def curves_from_history(reg: Registry, rows: list[Row], metrics: list[str],
                        max_points: int = PLOT_POINTS) -> list[Curve]:
    """One curve per run (labelled by ``run_labels``) and metric name, from the metric history (downsampled)."""
    curves = []
    for label, row in zip(run_labels(rows)[:MAX_RUNS], rows):
        for metric in metrics[:MAX_PANELS]:
            d = history.downsample(history.read_series(reg, row.id, metric), max_points)
            if d.steps:
                curves.append(Curve(label, metric, d.steps, d.last, d.min, d.max))
    return curves


def plot_data(reg: Registry, exp_id: str, metrics: list[str]) -> MetricsHistory:
    """The series a plot of the run would show, for answers made where matplotlib is missing."""
    return history.history_view(reg, exp_id, metrics, None, None, DATA_POINTS)


def draw(curves: list[Curve], title: str, notes: list[str]) -> Picture | None:
    """``render``, or None with a note when matplotlib is missing (the answer's plot_data holds the series)."""
    try:
        return render(curves, title)
    except PlotsUnavailable as exc:
        notes.append(f"{exc.message}; plot_data holds the series instead")
        return None


def _nan(values: list[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


def render(curves: list[Curve], title: str) -> Picture:
    """The PNG: one panel per metric (at most six), runs overlaid in fixed colours, a legend in each panel."""
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
