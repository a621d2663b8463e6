"""Input and output models of ``gpu_status``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictStr

from skill_server.core.models import ToolInput, ToolOutput
from skill_server.gpus.models import MAX_HOSTS, GpuHost


class GpuStatusInput(ToolInput):
    hosts: list[Annotated[StrictStr, Field(max_length=255)]] | None = Field(
        default=None, min_length=1, max_length=MAX_HOSTS,
        description="Hosts to ask in parallel: 'local' or ssh destinations. For example 'gpu1', 'user@10.0.0.5', "
        "'ssh://user@host:2222'. Default: ['local'].")
    experiment: StrictStr | None = Field(default=None, max_length=200,
                                         description="Or the id of a run in a scheduler's job.")


class GpuStatusOutput(ToolOutput):
    summary: str = Field(description="One line to quote: per host, how many GPUs are free.")
    hosts: list[GpuHost]
