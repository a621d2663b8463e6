"""Input and output models of ``compare_experiments``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictBool, StrictStr

from skill_server.core.models import ImageAttachment, JsonValue, PositiveInt, ToolInput, ToolOutput
from skill_server.experiments import plots
from skill_server.experiments.models import MetricPattern, MetricsHistory, RunKey

MAX_RUNS = plots.MAX_RUNS
MAX_METRICS = 10

class CompareInput(ToolInput):
    ids: list[RunKey] = Field(min_length=1, max_length=MAX_RUNS,
                              description="Experiment ids or session names (1 to 8, each once; one id gives that "
                              "run's final, best and best_step per metric).")
    metrics: list[MetricPattern] | None = Field(default=None, min_length=1, max_length=MAX_METRICS,
                                          description="Metric names or globs (fnmatch: 'critic/score/*'); default: "
                                          "reward, validation, loss and entropy metrics every run has.")
    primary: MetricPattern | None = Field(default=None, description="The metric that decides the leader (a name or a "
                                    "glob matching one; default: the first compared metric).")
    higher_is_better: StrictBool | None = Field(default=None, description="Direction of the primary metric "
                                                "(default: lower for loss/error/time-like names, else higher).")
    last_k: PositiveInt | None = Field(default=None, le=100_000, description="Values averaged for 'last_k_mean' "
                                       "(default 10).")
    max_config_keys: PositiveInt | None = Field(default=None, le=500, description="Most differing config keys "
                                                "listed (default 40).")
    plot: StrictBool | None = Field(default=None, description="Overlay the runs' metrics in one PNG, returned as an "
                                    "image (default false; needs matplotlib).")
    image_data: StrictBool | None = Field(default=None, description="Also put the PNG in the JSON as base64 (the CLI "
                                          "has no other way to carry it; MCP clients get an image block anyway).")
    yaml_paths: list[Annotated[StrictStr, Field(max_length=4096)] | None] | None = Field(
        default=None, min_length=1, max_length=MAX_RUNS,
        description="Per id, in order: the YAML to compare, or null for the run's own. The YAML to compare for that "
        "run (absolute, on the run's main host; e.g. the config AgentJetJob dumped), or null for the run's own (its "
        "blueprint's exp_yaml_path or a --conf argument).")


class MetricStats(ToolOutput):
    metric: str
    n: int = Field(description="Steps with a value.")
    final: float | None
    final_step: int | None
    best: float | None
    best_step: int | None
    last_k_mean: float | None = Field(description="Mean of the last k finite values.")


class RunSummary(ToolOutput):
    id: str
    session: str
    host: str
    state: str
    global_step: int | None
    total_steps: int | None
    steps_per_hour: float | None
    steps_per_hour_source: str | None
    elapsed_s: float
    config_file: str | None = Field(description="The YAML compared ('host:path' when not local), if one was read.")
    metrics: list[MetricStats]


class Leader(ToolOutput):
    metric: str
    statistic: str = Field(description="What was compared.")
    direction: str = Field(description="'higher' or 'lower' is better.")
    direction_source: str = Field(description="Given, or assumed from the metric's name.")
    leader: str = Field(description="Id of the leading run.")
    value: float
    runner_up: str | None
    runner_up_value: float | None
    margin: float | None = Field(description="How far the leader is ahead, in the metric's units (always >= 0).")
    relative_margin: float | None = Field(description="margin / |runner_up_value|, when that is not 0.")
    ranking: list[str] = Field(description="Run ids, best first (runs without a value are left out).")


class ConfigDifference(ToolOutput):
    key: str = Field(description="Dotted key.")
    values: list[JsonValue] = Field(description="One per run, in the order of runs; '(absent)' where a YAML lacks it.")


class CompareOutput(ToolOutput):
    summary: str = Field(description="One line to quote: who leads, and how the configs differ.")
    runs: list[RunSummary]
    metrics: list[str] = Field(description="The metric names compared.")
    leader: Leader | None = Field(description="Null when no run has a value of the primary metric (see notes).")
    config_differences: list[ConfigDifference]
    config_keys_differing: int = Field(description="All differing keys (the list is bounded by max_config_keys).")
    plot: ImageAttachment | None = None
    plot_data: dict[str, MetricsHistory] | None = Field(default=None, description="Per run id, the series a plot "
                                                        "would show, when matplotlib is not installed.")
    notes: list[str]
