"""Which AgentJet an answer describes: the ``agentjet`` block of every output, and the two arguments that
select it.

Tools that use AgentJet knowledge declare::

    agentjet_version: AgentJetVersionArg = None
    agentjet_root: AgentJetRootArg = None

call :func:`skill_server.agentjet.release.select_agentjet` with them, and return ``agentjet=release.ref``.
Version-dependent messages name ``release.label`` (for example "AgentJet 0.1.0 (c68c154f)").
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictStr

from skill_server.core.models import ToolOutput

AgentJetVersionArg = Annotated[StrictStr | None, Field(
    max_length=200,
    description="Bundled AgentJet release, e.g. '0.1.0' or 'c68c154f'. A version or a commit prefix. Default: the "
    "newest bundled release (or the AgentJet found through AJET_ROOT / the Python path). An unknown value is an "
    "error that lists the bundled releases.",
)]
AgentJetRootArg = Annotated[StrictStr | None, Field(
    max_length=4096,
    description="AgentJet checkout or installed ajet folder, read statically. A folder containing ajet/ or the ajet "
    "package itself; never imported; used instead of a bundled release. Relative paths resolve against cwd.",
)]


class AgentJetRef(ToolOutput):
    """The AgentJet an answer describes. Never null: a tool that cannot say which AgentJet it used errs."""

    source: Literal["bundled", "install"] = Field(
        description="bundled: a release shipped with this tool; install: an AgentJet checkout or package read "
        "statically.")
    version: str | None = Field(description="ajet.__version__ (null when the install does not declare one).")
    commit: str | None = Field(description="Git commit of the release (null for an install without .git).")
    date: str | None = Field(description="Commit date, ISO 8601 (null when unknown).")
    path: str = Field(description="The bundled release folder, or the install's root folder.")
    layers_match: str | None = Field(
        default=None,
        description="For an install without .git (commit null): the bundled release whose YAML layers (the files "
        "its swarm default composes) this install has with identical data, e.g. '0.1.0 (c68c154f)'; null "
        "otherwise. AgentJetJob and the config dataclasses are still read from the install.")


def short_commit(commit: str | None) -> str | None:
    return commit[:8] if commit else None


def bundled_name(ref: AgentJetRef) -> str:
    """'0.1.0 (c68c154f)': a bundled release by version and commit."""
    return f"{ref.version or 'of unknown version'} ({short_commit(ref.commit) or 'commit unknown'})"


def agentjet_label(ref: AgentJetRef) -> str:
    """One line naming the AgentJet, e.g. ``AgentJet 0.1.0 (c68c154f)`` or, for an install,
    ``AgentJet 0.0.2 (commit unknown) at /opt/AgentJet``; an install without .git whose layers are a bundled
    release's says so: ``AgentJet 0.1.0 (commit unknown; layers as in bundled 0.1.0 (c68c154f)) at ...``."""
    version = ref.version or "of unknown version"
    commit = short_commit(ref.commit) or "commit unknown"
    if ref.commit is None and ref.layers_match is not None:
        commit += f"; layers as in bundled {ref.layers_match}"
    where = f" at {ref.path}" if ref.source == "install" else ""
    return f"AgentJet {version} ({commit}){where}"
