"""Tool ``compare_experiments``: runs side by side, the leader, and their config differences."""
