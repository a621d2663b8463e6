"""Tool ``episode_cap``."""
