"""Input and output models of ``collect_results``."""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictStr

from skill_server.core.models import ImageAttachment, ToolInput, ToolOutput
from skill_server.experiments import plots
from skill_server.experiments.models import (
    HOST_DESCRIPTION,
    ErrorHit,
    ExperimentInfo,
    MetricPattern,
    MetricsHistory,
    RunKey,
)
from skill_server.experiments.summaries import MetricSummary

MAX_OVERLAYS = plots.MAX_RUNS - 1

class CollectInput(ToolInput):
    id: StrictStr | None = Field(default=None, max_length=200, description="Experiment id or session name.")
    host: StrictStr | None = Field(default=None, max_length=255,
                                   description="Without id: where result_dir and the files are. " + HOST_DESCRIPTION)
    result_dir: StrictStr | None = Field(default=None, max_length=4096,
                                         description="Absolute, on the host; default: the experiment's result dir.")
    val_markdown: StrictStr | None = Field(default=None, max_length=4096,
                                           description="Validation metrics file on the host; default: "
                                           "ajet.trainer_common.val_print_to_markdown_file_path of the run's YAML.")
    train_markdown: StrictStr | None = Field(default=None, max_length=4096,
                                             description="Training metrics file on the host; default: "
                                             "ajet.trainer_common.train_print_to_markdown_file_path.")
    yaml_path: StrictStr | None = Field(default=None, max_length=4096,
                                        description="Training YAML on the host to read those two paths from.")
    write_finish_flag: StrictBool | None = Field(default=None, description="finish.flag once the experiment ended. "
                                                 "Default: only when it finished (succeeded or timed out); true also "
                                                 "after a failure or a stop; never while it runs.")
    plot: StrictBool | None = Field(default=None, description="Draw metrics.png beside results.md (default true with "
                                    "id). The page embeds it; needs matplotlib, else the data is returned in "
                                    "plot_data.")
    plot_metrics: list[MetricPattern] | None = Field(default=None, min_length=1, max_length=6,
                                               description="Metric names or globs to plot (default: reward, "
                                               "validation, loss and entropy metrics the run has; at most 6 panels).")
    overlay_ids: list[RunKey] | None = Field(default=None, min_length=1, max_length=MAX_OVERLAYS,
                                             description="Other experiments (ids or session names) drawn on the "
                                             "same plot, one colour each.")
    image_data: StrictBool | None = Field(default=None, description="Also put the PNG in the JSON as base64 "
                                          "(MCP clients get it as an image block anyway).")


class CollectOutput(ToolOutput):
    summary: str = Field(description="One line to quote: what was written, and what it holds.")
    host: str = Field(description="Where results.md and finish.flag were written ('local' or the ssh destination).")
    results_path: str = Field(description="The experiment's own page, <result_dir>/<id>/results.md.")
    document_path: str | None = Field(default=None, description="<result_dir>/results.md beside finish.flag: this "
                                      "page, or an index when several experiments share result_dir (null: a "
                                      "results.md there is not this skill's; notes say so).")
    finish_flag_path: str | None
    state: str | None = Field(description="The experiment's state (its newest attempt's).")
    exit_code: int | None
    alive: bool | None = Field(default=None, description="Anything of the experiment still runs (any attempt, a "
                               "monitor, a pending relaunch), checked now.")
    experiment: ExperimentInfo | None = Field(default=None, description="Every attempt and the merged metrics, as "
                                              "experiment_status gives them.")
    val_markdown: str | None
    train_markdown: str | None
    val_metrics: list[MetricSummary]
    train_metrics: list[MetricSummary]
    metrics_source: dict[str, str] = Field(description="Per table (validation, training): the markdown file, the "
                                           "log's step lines (metric history), or none.")
    plateau: dict[str, bool]
    errors: list[ErrorHit]
    log_paths: list[str]
    plot: ImageAttachment | None = Field(default=None, description="metrics.png: where it was written.")
    plot_data: MetricsHistory | None = Field(default=None, description="The series a plot would show, when "
                                             "matplotlib is not installed.")
    notes: list[str]
