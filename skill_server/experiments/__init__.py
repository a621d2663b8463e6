"""Experiment lifecycle on a dedicated tmux server: blueprints, launch, bounded waits, status, results.

Modules: ``tmux`` (the libtmux wrapper), ``store`` (the SQLite registry), ``logs`` (incremental log
reading and metric parsing), ``signatures`` (the error-signature table), ``blueprint`` (parse, validate
and render blueprint markdown), ``results`` (collect_results) and ``api`` (the tool functions).
"""
