"""episode_cap: the exact ceiling of overwatch's "Running Episodes" gauge, which bound binds, which knob lifts it."""

from __future__ import annotations

from skill_server.agentjet.cap import episode_cap_for
from skill_server.core.models import Progress
from skill_server.tools.episode_cap.models import EpisodeCapInput, EpisodeCapResult


def compute_episode_cap(inp: EpisodeCapInput, progress: Progress | None = None) -> EpisodeCapResult:
    """Compute the cap under the selected AgentJet and say which knob moves it."""
    from skill_server.agentjet.release import select_agentjet

    return episode_cap_for(inp, select_agentjet(inp.agentjet_version, inp.agentjet_root))
