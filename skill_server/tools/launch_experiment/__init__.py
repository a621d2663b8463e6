"""Tool ``launch_experiment``: start a run's processes in tmux, here or on ssh hosts."""
