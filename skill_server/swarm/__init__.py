"""The live swarm server service: what ``swarm_status`` and ``episode_cap`` both need of a running engine.

* ``read``: its routes fetched at once under one deadline, each answer checked for a swarm server's shape,
  and the scalars read without trusting them;
* ``links``: which experiment of this skill launched a server, and on which port;
* ``config``: where the engine's dumped config is, and the settings in it (with their lines).
"""
