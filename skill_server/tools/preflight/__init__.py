"""Tool ``preflight``: is this host (or ssh host, or Slurm allocation) ready to run AgentJet, per role."""
