"""Input and output models of ``wait_experiment``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictStr

from skill_server.core.models import NonNegativeInt, PositiveInt, ToolInput
from skill_server.experiments.models import ExperimentStatus


class WaitInput(ToolInput):
    id: StrictStr = Field(max_length=200, description="Experiment id or session name.")
    timeout_s: NonNegativeInt | None = Field(default=None, le=3600,
                                             description="Default 30; values above 50 are clamped to 50.")
    until: Literal["exit", "first_step", "pattern", "stall", "error", "end", "started"] | None = Field(
        default=None, description="Default 'exit' (also 'error', 'end'); 'started': a queued job started.")
    pattern: StrictStr | None = Field(default=None, max_length=500, description="Regex, for until='pattern'.")
    stall_s: PositiveInt | None = Field(default=None, ge=5, le=7 * 86400,
                                        description="Also end ('stalled') once the run is quiet this long (quiet_s).")
    since: StrictStr | None = Field(default=None, max_length=400,
                                    description="For until='pattern': also search output after this cursor (default: "
                                    "only output appended while waiting).")


#: Why a wait ended.
WaitReason = Literal["exited", "first_step", "pattern", "started", "error", "stalled", "timeout", "unreachable"]


class WaitOutput(ExperimentStatus):
    reason: WaitReason
    next_wait_s: int = Field(description="Suggested seconds before the next check (0 when finished).")
    waited_s: float
    timeout_s: int
    matched_line: str | None = None
