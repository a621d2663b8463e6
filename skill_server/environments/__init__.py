"""Environments: what a host has for AgentJet (``preflight``) and making one there (``install_agentjet``).

Layout: ``hostside`` holds the stdlib-only programs shipped to a host (Python 3.8 and newer): ``probe`` reads
the host's facts and runs ``envprobe`` inside the target interpreter (and ``gpuprobe`` when asked);
``installer`` is the install job itself. ``shipping`` packs them. The server side judges: ``judge`` turns
facts into checks against what the selected AgentJet release accepts (``agentjet.environment``), ``roles``
says which checks each role needs, ``preflight`` asks the hosts in parallel (a Slurm allocation's nodes
through its login node), ``plan`` writes an install's stages and ``install`` runs them as a tracked
experiment and reads their markers.
"""
