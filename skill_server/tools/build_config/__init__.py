"""Tool ``build_config``: the YAML ``AgentJetJob`` hands to the engine, byte for byte, without AgentJet."""
