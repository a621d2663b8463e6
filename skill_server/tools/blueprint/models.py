"""Input and output models of ``blueprint``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictStr

from skill_server.core.models import ToolInput, ToolOutput
from skill_server.experiments import blueprint as bp


class BlueprintInput(ToolInput):
    action: Literal["validate", "template"] = Field(description="'template' renders one, 'validate' checks one.")
    path: StrictStr | None = Field(default=None, max_length=4096,
                                   description="validate: the blueprint, here or 'gpu1:/abs/blueprint.md'; template: "
                                   "a new file to write. A path on a host is read there and its paths checked there "
                                   "(relative ones against its folder); 'local:/path' reads one here and checks its "
                                   "paths on host. Relative paths here resolve against the server's working "
                                   "directory; an existing file is never replaced.")
    host: StrictStr | None = Field(default=None, max_length=255,
                                   description="validate: check the blueprint's paths on this ssh host (a plain "
                                   "path is read there too).")
    text: StrictStr | None = Field(default=None, max_length=bp.MAX_BLUEPRINT_BYTES,
                                   description="validate: blueprint text instead of a file.")
    purpose: StrictStr | None = Field(default=None, max_length=4096,
                                      description="template: [exp_purpose]. One or two sentences.")
    codebase_dir: StrictStr | None = Field(default=None, max_length=4096,
                                           description="template: [exp_codebase_dir], absolute.")
    venv_exe: StrictStr | None = Field(default=None, max_length=4096,
                                       description="template: [exp_venv_exe]. The venv's python.")
    yaml_path: StrictStr | None = Field(default=None, max_length=4096,
                                        description="template: [exp_yaml_path]. The training YAML.")
    launch_command: StrictStr | None = Field(default=None, max_length=16000,
                                             description="template: [exp_launch_command]. One line.")
    result_dir: StrictStr | None = Field(default=None, max_length=4096,
                                         description="template: [exp_result_dir]. Default ./auto_agent/exp_results/.")
    max_time: StrictStr | None = Field(default=None, max_length=200,
                                       description="template: [exp_max_time]. For example '24 hours' (default), "
                                       "'90 min', '1.5h'.")
    first_step_timeout: StrictStr | None = Field(default=None, max_length=200,
                                                 description="template: the first-step deadline. For example '20 min' "
                                                 "(default).")
    notes: StrictStr | None = Field(default=None, max_length=64 * 1024, description="template: free notes.")


class BlueprintProblem(ToolOutput):
    field: str
    severity: Literal["error", "warning"]
    message: str


class BlueprintOutput(ToolOutput):
    summary: str = Field(description="One line to quote: valid or not, and the first problem.")
    action: str
    ok: bool
    fields: dict[str, str]
    resolved: dict[str, str]
    max_time_s: float | None
    first_step_timeout_s: float | None
    notes: str
    problems: list[BlueprintProblem]
    text: str | None = None
    path: str | None = None
