"""agentjet-swarm-skill: tools that make coding assistants expert operators of AgentJet swarm training.

The domain modules (``cap``, ``overlay``, ...) are plain typed Python; ``cli`` and ``mcp_app`` are thin
front ends built from the one tool table in ``tools``.
"""

__version__ = "0.1.0"
