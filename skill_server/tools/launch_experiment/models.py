"""Input and output models of ``launch_experiment``: the launch service's request and answer."""

from skill_server.experiments.models import LaunchInput, LaunchOutput, ProcessInfo, ProcessSpec

__all__ = ["LaunchInput", "LaunchOutput", "ProcessInfo", "ProcessSpec"]
