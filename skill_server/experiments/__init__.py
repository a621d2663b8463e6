"""Experiment lifecycle on a dedicated tmux server, on this machine or on ssh hosts.

One module per tool or concern: ``models`` (inputs, outputs, states), ``launch``, ``status``, ``wait``,
``stop``, ``results`` (collect_results), ``blueprint_tool``; underneath them ``observe`` (one round trip
per host: states, scan), ``states`` (pure state derivation), ``store`` (the SQLite registry), ``logs``
(cursor reads, metric-line parsing), ``signatures`` (the error-signature table) and ``blueprint`` (parse,
validate, render). Everything that touches a host goes through ``skill_server.hosts``.
"""
