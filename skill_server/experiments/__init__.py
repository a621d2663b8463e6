"""Experiment lifecycle on a dedicated tmux server, on this machine or on ssh hosts.

One module per tool or concern: ``models`` (inputs, outputs, states), ``launch``, ``status``, ``wait``,
``stop``, ``results`` (collect_results), ``compare`` (compare_experiments), ``blueprint_tool`` and ``watch``
(the CLI's event stream); underneath them ``observe`` (one round trip per host: states, scan), ``states``
(pure state derivation), ``store`` (the SQLite registry), ``logs`` (cursor reads, step lines, the scan),
``progress`` (restarts, seconds per step, ETA), ``history`` (every step line's metrics, downsampled reads),
``runconfig`` (the run's YAML: total steps, checkpoint directory, config differences), ``checkpoints``,
``plots`` (matplotlib, optional), ``summaries`` (metric files and per-metric summaries), ``signatures``
(the error-signature table) and ``blueprint`` (parse, validate, render). Everything that touches a host
goes through ``skill_server.hosts``.
"""
