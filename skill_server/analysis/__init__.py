"""The analysis service: what an AgentJet swarm client script configures, read statically (never imported or run).

One pass through these modules, in the order it runs them:

* ``script``: the scan. The script (and modules next to it) read with ``ast``: every ``AgentJetJob(...)``
  with its kwargs resolved where that is possible statically, the writes to ``job.config`` after it and the
  calls that freeze the config. ``script.evaluate`` is the static evaluator's core (the language); what it
  knows about libraries (environment reads, paths, builtins, argparse, dataclasses) is in small registered
  units, one file per library in ``script.units``, consulted through the table in ``script.registry``.
* ``agentjet``: the adapter, the analysis's one door to AgentJet knowledge (``skill_server.agentjet``).
* ``session``: the state the steps share (the AgentJet described, the scan, notes, YAML line numbers).
* ``bases``: which base YAML each construction composes, found where AgentJetJob opens it.
* ``replay``: AgentJetJob's construction replayed on that base: the one ordered list of construction steps
  of ``skill_server.agentjet.job`` (the one ``build_config`` runs), on values that may be ``Unknown``
  (``values``).
* ``analyse``: the entry, ``analyse(...) -> Analysis``: one ``Run`` per construction.

Tools read the result: ``check_config`` runs its lint rules on it (and builds its consolidation on
``inputs``: a run's kwargs and writes as ``build_config`` takes them, from resolved values only). Nothing
here reports findings.
"""
