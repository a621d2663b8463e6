"""The runs service: everything the experiment tools (and ``ray_cluster``) share about runs in tmux, on this
machine or on ssh hosts. The tools themselves are thin modules under ``skill_server.tools``.

Procedures: ``launching`` (dry run on every host, start, roll back), ``stopping`` (Ctrl-C, grace, SIGTERM,
SIGKILL, verify), ``queries`` (find a run; observe runs with new lines, progress, checkpoints and metric
history; the status fields every answer carries), ``checks`` (names, paths' form, environment, regexes)
and ``watch`` (the CLI's event stream). Underneath: ``models`` (the shared answer pieces and the launch
request), ``observe`` (one round trip per host: states, scan), ``states`` (pure state derivation),
``store`` (the SQLite registry: it only stores), ``upkeep`` (the healing a tool asks for by name), ``lineage``
(a resumed run's attempts in order), ``attempts`` (taking them into the registry), ``backends`` (where runs
execute), ``logs`` (cursor reads, step lines, the scan), ``progress`` (restarts,
seconds per step, ETA), ``history`` (every step line's metrics, downsampled reads), ``runconfig`` (the
run's YAML: total steps, checkpoint directory, config differences), ``checkpoints``, ``plots``
(matplotlib, optional), ``summaries`` (metric files and per-metric summaries), ``signatures`` (the
error-signature table) and ``blueprint`` (parse, validate, render). Everything that touches a host goes
through ``skill_server.hosts``.
"""
