"""Input and output models of ``episode_cap`` (AgentJet's cap, ``agentjet.cap``, is also what ``check_config``
and ``swarm_status`` report)."""

from skill_server.agentjet.cap import CapBounds, EpisodeCapInput, EpisodeCapResult

__all__ = ["CapBounds", "EpisodeCapInput", "EpisodeCapResult"]
