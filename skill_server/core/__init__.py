"""What every layer uses and nothing AgentJet- or host-specific: errors, base models, files, bounded YAML and
bounded HTTP."""
