"""Tool ``stop_experiment``: a complete, verified stop of a run this server launched."""
