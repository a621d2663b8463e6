"""stop_experiment: a stop that stops, on every host of the run, and says what it had to kill.

The procedure (Ctrl-C, grace, SIGTERM, SIGKILL, verify; survivors listed) is ``experiments.stopping``,
which ``ray_cluster stop`` uses too.
"""

from __future__ import annotations

from skill_server.experiments.stopping import stop_run
from skill_server.tools.stop_experiment.models import StopInput, StopOutput


def stop_experiment(inp: StopInput) -> StopOutput:
    return stop_run(inp.id, inp.grace_s)
