"""Input and output models of ``stop_experiment`` (the answer is the stop service's report)."""

from __future__ import annotations

from pydantic import Field, StrictStr

from skill_server.core.models import NonNegativeInt, ToolInput
from skill_server.experiments.models import ProcessRef, StopOutput

__all__ = ["ProcessRef", "StopInput", "StopOutput"]


class StopInput(ToolInput):
    id: StrictStr = Field(max_length=200,
                          description="Experiment id or session name (only experiments this server launched).")
    grace_s: NonNegativeInt | None = Field(default=None, le=120, description="Seconds after Ctrl-C before SIGTERM "
                                           "(default 10); SIGKILL follows 3 s later.")
