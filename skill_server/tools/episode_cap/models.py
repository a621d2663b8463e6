"""Input and output models of ``episode_cap`` (AgentJet's cap, ``agentjet.cap``, is also what ``check_config``
and ``swarm_status`` report). The tool takes the numbers, or the artifact that holds them: an engine YAML, a
client script (read as check_config reads it), or a live swarm server."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictStr, field_validator, model_validator

from skill_server.agentjet.cap import CapBounds, EpisodeCapInput, EpisodeCapResult
from skill_server.core.models import PositiveInt, ToolOutput
from skill_server.swarm.links import normalize_url

__all__ = ["CapBounds", "CapSource", "EpisodeCapAnswer", "EpisodeCapInput", "EpisodeCapQuery", "EpisodeCapResult",
           "UnknownSetting"]

#: The artifacts a cap can be read from; at most one is given (``yaml`` may come with ``script`` as its base).
SOURCES = ("yaml", "script", "url", "id")


class EpisodeCapQuery(EpisodeCapInput):
    max_env_worker: PositiveInt | None = Field(  # type: ignore[assignment]  # optional here: an artifact may hold it
        default=None,
        description=f"{EpisodeCapInput.model_fields['max_env_worker'].description} Needed without yaml/script/url/id.")
    yaml: StrictStr | None = Field(
        default=None, max_length=4096,
        description="An engine YAML to read the settings from. E.g. yaml_backup.yaml or any dumped config; with "
                    "script, the base YAML to use instead of the script's own.")
    script: StrictStr | None = Field(
        default=None, max_length=4096, description="A swarm client script, read statically as check_config reads it.")
    cwd: StrictStr | None = Field(
        default=None, max_length=4096, description="The script's launch directory (relative paths resolve here).")
    url: StrictStr | None = Field(
        default=None, description="A live swarm server: read the config its engine dumped.")
    id: StrictStr | None = Field(
        default=None, min_length=1, max_length=200,
        description="An experiment this skill launched: read the config its swarm server's engine dumped.")
    timeout_s: float = Field(default=3.0, gt=0, le=30, description="Limit in seconds for reading url or id.")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return None if value is None else normalize_url(value)

    @model_validator(mode="after")
    def _one_group_size(self) -> EpisodeCapQuery:
        """Exactly one artifact, or the numbers; explicit numbers may come with an artifact and override it."""
        given = [name for name in SOURCES if getattr(self, name) is not None
                 and not (name == "yaml" and self.script is not None)]  # with script, yaml is its base
        if len(given) > 1:
            raise ValueError(f"give one source of the settings, not {' and '.join(given)}")
        if self.cwd is not None and self.script is None and self.yaml is None:
            raise ValueError("cwd: only used with script or yaml")
        if self.num_repeat is not None and self.grpo_n is not None and self.num_repeat != self.grpo_n:
            raise ValueError(f"num_repeat={self.num_repeat} and grpo_n={self.grpo_n} disagree; give one of them")
        if not given:
            if self.max_env_worker is None:
                raise ValueError("max_env_worker is required (or give yaml, script, url or id to read it from)")
            if self.num_repeat is None and self.grpo_n is None:
                raise ValueError("num_repeat (or its alias grpo_n) is required")
        return self

    @property
    def source(self) -> Literal["yaml", "script", "url", "id"] | None:
        """The artifact to read (a script comes first: a yaml with it is its base)."""
        if self.script is not None:
            return "script"
        if self.yaml is not None:
            return "yaml"
        if self.url is not None:
            return "url"
        return "id" if self.id is not None else None


class CapSource(ToolOutput):
    name: str = Field(description="The setting, e.g. max_env_worker.")
    key: str = Field(description="Its dotted config key.")
    value: int | list[int]
    source: Literal["argument", "yaml", "script", "server"]
    place: str = Field(description="Where it was read: file:line, the server's route, or 'given'.")
    overrides: str | None = Field(default=None, description="What the artifact said, when an argument replaced it.")


class UnknownSetting(ToolOutput):
    name: str
    key: str
    reason: str


class EpisodeCapAnswer(EpisodeCapResult):
    inputs: list[CapSource] = Field(description="Each value used, and where it came from.")
    unknown: list[UnknownSetting] = Field(description="Settings the artifact leaves unknown, with why.")
