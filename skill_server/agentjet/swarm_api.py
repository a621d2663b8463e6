"""Facts about AgentJet's swarm server HTTP API (c68c154f): the status routes and the engine states.

``swarm_status`` reads these routes; the stand-in server of the tests answers them.
"""

from __future__ import annotations

ROUTE_ENGINE = "/get_engine_status"
ROUTE_POOL = "/get_current_batch_rollout_pool_information"
ROUTE_EXPERIMENT_DIR = "/get_server_experiment_dir"

ENGINE_STATES = (
    "ENGINE.OFFLINE", "ENGINE.BOOTING", "ENGINE.ROLLING", "ENGINE.ROLLING_POST",
    "ENGINE.WEIGHT_SYNCING", "ENGINE.WEIGHT_EXPORTING",
)
