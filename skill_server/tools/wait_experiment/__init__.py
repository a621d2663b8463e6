"""Tool ``wait_experiment``: a bounded, read-only wait for what a run does next."""
