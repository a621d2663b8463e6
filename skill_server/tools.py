"""The one table of tools. Both front ends (``cli``, ``mcp_app``) are built from it.

A tool is a plain function ``run(input_model, progress=None) -> output_model``. Its input model
validates arguments (and names bad fields), its output model is the MCP output schema, and its hints
are what the MCP annotations advertise. Adding a tool means adding one ``ToolSpec`` here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from skill_server import cap, overlay
from skill_server.errors import ToolInputError
from skill_server.models import Progress, describe_validation_error


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    run: Callable[..., BaseModel]
    read_only: bool
    destructive: bool = False
    idempotent: bool = True
    open_world: bool = False
    reports_progress: bool = False

    def validate(self, arguments: dict[str, Any]) -> BaseModel:
        """Validate raw arguments into the input model, or raise ``ToolInputError`` naming the field."""
        if not isinstance(arguments, dict):
            raise ToolInputError(f"arguments must be a JSON object, got {type(arguments).__name__}")
        try:
            return self.input_model.model_validate(arguments)
        except ValidationError as exc:
            raise describe_validation_error(exc) from None

    def invoke(self, arguments: dict[str, Any], progress: Progress | None = None) -> BaseModel:
        """Validate and run; the single code path shared by both front ends."""
        model = self.validate(arguments)
        if self.reports_progress:
            return self.run(model, progress=progress)
        return self.run(model)


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="episode_cap",
        title="AgentJet swarm episode cap",
        description=(
            "Exact ceiling of overwatch's 'Running Episodes' gauge for an AgentJet swarm engine: "
            "min(max_env_worker, num_repeat * min(train_batch_size, ceil(max_env_worker/num_repeat))), "
            "further bounded by what the clients together run. Says which bound binds and which knob lifts it. "
            "Adding clients never raises it."
        ),
        input_model=cap.EpisodeCapInput,
        output_model=cap.EpisodeCapResult,
        run=cap.compute_episode_cap,
        read_only=True,
    ),
    ToolSpec(
        name="build_config",
        title="Build the config AgentJetJob hands to the engine",
        description=(
            "Reproduce AgentJetJob's overlay without importing AgentJet: base YAML (Hydra defaults list composed), "
            "then kwargs through the overrides table, then post-construction writes ('set'). Returns the dumped "
            "YAML the engine runs, provenance for every value, AgentJet-style validation errors and warnings. "
            "Writes the YAML atomically when output_path is given (replaces a file only with overwrite=true)."
        ),
        input_model=overlay.BuildConfigInput,
        output_model=overlay.BuildConfigResult,
        run=overlay.build_config,
        read_only=False,
        destructive=True,
        idempotent=True,
    ),
)

TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOLS}


def get_tool(name: str) -> ToolSpec | None:
    return TOOLS_BY_NAME.get(name)
