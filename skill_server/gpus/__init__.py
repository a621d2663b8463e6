"""GPUs of hosts, read with ``nvidia-smi`` through the host layer (one round trip per host).

Modules: ``nvidia_smi`` (the two queries as host operations, and parsing their CSV answers: pure
functions), ``models`` (GPUs, their processes, a host's answer), ``query`` (asking hosts, and the
free-memory check that ``launch_experiment`` and ``ray_cluster`` use) and ``reclaim`` (the host agent's
``reclaim_gpus`` op that ends the processes holding GPU memory, for ``ray_cluster stop`` with
``kill_gpu_processes``).
"""
