"""launch_experiment: start a run's processes in tmux, here or on ssh hosts, and return at once.

The procedure (a dry run on every host, then the start, rolled back everywhere if any host fails) is
``experiments.launching``, which ``ray_cluster start`` uses too.
"""

from __future__ import annotations

from skill_server.experiments.launching import launch
from skill_server.tools.launch_experiment.models import LaunchInput, LaunchOutput


def launch_experiment(inp: LaunchInput) -> LaunchOutput:
    return launch(inp)
