"""The host agent: the small stdlib-only program that does all experiment work on a host.

One request in, one reply out (JSON). ``LocalHost`` calls :func:`ops.handle` in-process; ``SshHost`` ships
this package's source over ``ssh <dest> python3 -c <bootstrap>`` and sends the request on stdin, so a
status call over many runs on one host costs one round trip. The same program, started by a launch, is
the run's monitor (``monitor``, the daemon of rooms: ``runstate``, ``phases``, ``watchers``, ``stall``,
``policy``, ``notifier``, ``scheduler``, ``waker``; ``observer`` is what observations read of it): it enforces
the max time and reads every byte of the run's logs where the run lives. Where a run's processes execute is
its backend's (``backend``: ``backend_tmux``, ``backend_slurm``); what is in its run directory, ``rundir``'s.

Rules for every module here: standard library only, Python 3.8 syntax, no imports from ``skill_server``
outside this package (relative imports only), no output on stdout except the reply. What crosses the
wire, and the constants the server shares with the agent, are in ``protocol``.
"""
