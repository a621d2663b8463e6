"""Tool ``swarm_status``: live AgentJet swarm servers and the episode gauge explained."""
