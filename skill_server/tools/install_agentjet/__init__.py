"""Tool ``install_agentjet``: plan, run (as a tracked experiment) and follow an AgentJet install."""
