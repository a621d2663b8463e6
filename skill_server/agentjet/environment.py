"""What an AgentJet release needs of its Python environment, as data: preflight judges by it and
install_agentjet installs by it.

Each row names where its facts come from. The accepted verl versions are the launcher's own check
(``verify_python_env`` in ``ajet/utils/launch_utils.py``: a substring test on ``verl.__version__``); the
Python versions are those its install guides create (3.10) and its ``pyproject.toml`` allows; the ports are
the swarm default's interchange port and Ray's defaults; the Ray versions to avoid are the regressions
vLLM pinned or excluded Ray for. A release without a row of its own is judged by the newest row, and every
``expected`` text says which release that is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvironmentFacts:
    """One release's environment, as its install guides and launcher state it."""

    commit: str
    python_recommended: str
    python_accepted: tuple[str, ...]
    #: substrings of verl's version, any of which the launcher accepts (for the verl backbone)
    verl_accepted: tuple[str, ...]
    extra: str
    flash_attn: str
    swarm_port: int
    ray_gcs_port: int = 6379
    ray_dashboard_port: int = 8265
    #: Ray versions with a known regression for vLLM-based training: version prefix -> why
    ray_avoid: tuple[tuple[str, str], ...] = ()
    repo_url: str = "https://github.com/modelscope/AgentJet.git"

    def verl_ok(self, version: str) -> bool:
        """The launcher's own test: some accepted string occurs in the version."""
        return any(token in version for token in self.verl_accepted)

    @property
    def verl_text(self) -> str:
        return ", ".join(self.verl_accepted)


RAY_REGRESSIONS = (
    ("2.41.", "Ray 2.41 broke vLLM's tensor + pipeline parallelism (vLLM pinned Ray 2.40, vllm-project/vllm 13490)"),
    ("2.44.", "Ray 2.44 has a regression vLLM excluded it for (vllm-project/vllm 15556)"),
)

FACTS: tuple[EnvironmentFacts, ...] = (
    EnvironmentFacts(
        commit="c68c154f9653233ded73867c9e0553d53ca4ac30",
        python_recommended="3.10",
        python_accepted=("3.10", "3.11", "3.12"),
        verl_accepted=("0.5.0.post", "0.5.0.dev", "0.7.0.post", "0.7.1", "0.8.0.dev"),
        extra="verl",
        flash_attn="2.8.3",
        swarm_port=10086,
        ray_avoid=RAY_REGRESSIONS,
    ),
)


def environment_for(commit: str | None) -> tuple[EnvironmentFacts, bool]:
    """The facts of the release at ``commit``, and whether they are its own (False: the newest row stands in)."""
    for facts in FACTS:
        if commit and facts.commit.startswith(commit[:8]):
            return facts, True
    return FACTS[0], False
