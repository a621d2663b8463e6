"""Input and output models of ``experiment_status``."""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictStr

from skill_server.core.models import NonNegativeInt, PositiveInt, ToolInput, ToolOutput
from skill_server.experiments import logs
from skill_server.experiments.models import MAX_HISTORY_POINTS, ExperimentStatus, MetricPattern, RegistryProblem
from skill_server.experiments.progress import MAX_STEPS


class StatusInput(ToolInput):
    id: StrictStr | None = Field(default=None, max_length=200,
                                 description="Experiment id or session name; all when absent.")
    since: StrictStr | None = Field(default=None, max_length=400,
                                    description="Cursor from a previous result (needs id); default: the cursor stored "
                                    "by the previous status call.")
    max_lines: NonNegativeInt | None = Field(default=None, le=logs.MAX_LINES,
                                             description="New lines to return (default 200 for one id, 20 each "
                                             "for all).")
    limit: PositiveInt | None = Field(default=None, le=100, description="When listing all: at most this many, "
                                      "newest first (default 20); see more and next_offset.")
    offset: NonNegativeInt | None = Field(default=None, description="When listing all: skip this many (the "
                                          "previous answer's next_offset) to see the next page.")
    metrics_history: list[MetricPattern] | None = Field(
        default=None, min_length=1, max_length=20,
        description="With id: metrics (names or globs) whose history to return. Fnmatch patterns such as "
        "'critic/score/*', '*loss*', over steps, from every step line scanned so far.")
    history_from_step: NonNegativeInt | None = Field(default=None, le=MAX_STEPS,
                                                     description="First step of the history.")
    history_to_step: NonNegativeInt | None = Field(default=None, le=MAX_STEPS, description="Last step of the history.")
    history_points: PositiveInt | None = Field(default=None, le=MAX_HISTORY_POINTS,
                                               description="Most points per metric (default 200): longer histories "
                                               "are downsampled into buckets (last value, min and max of each).")
    checkpoints: StrictBool | None = Field(default=None, description="List the run's global_step_N checkpoints "
                                           "(default: true with id, false for all runs).")


class RegistryInfo(ToolOutput):
    path: str = Field(description="The registry database of this machine.")
    mode: str = Field(description="'local-wal', or 'node-local (the state dir is on nfs4)' when the state directory "
                      "is shared between machines (runs registered on another login node are seen there).")
    filesystem: str | None = Field(default=None, description="The filesystem type under the registry.")
    warning: str | None = Field(default=None, description="What to know about this place, if anything.")


class StatusOutput(ToolOutput):
    summary: str = Field(description="One line to quote: the runs' states.")
    experiments: list[ExperimentStatus]
    problems: list[RegistryProblem] = Field(default_factory=list,
                                            description="Registry rows that could not be read (each names its id).")
    total: int = Field(default=0, description="Experiments in the registry (when listing all; 1 with id).")
    more: int = Field(default=0, description="Experiments after this page (listing all).")
    next_offset: int | None = Field(default=None, description="offset for the next page; null when none is left.")
    registry: RegistryInfo | None = Field(default=None, description="Where the registry lives, and in which mode.")
