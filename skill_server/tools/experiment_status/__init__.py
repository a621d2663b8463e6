"""Tool ``experiment_status``: state, new lines, errors, metrics, progress and checkpoints of runs."""
