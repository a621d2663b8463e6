"""What this project knows about AgentJet, version by version, as data plus readers that never import it.

* ``release``: one AgentJet version as data. Bundled releases live in ``releases/<commit8>/`` (written by
  ``python -m skill_server snapshot``); an install given as ``agentjet_root`` is read statically and
  cached per file. ``select_agentjet`` maps the tools' ``agentjet_version`` / ``agentjet_root`` to one.
* ``identity``: the ``agentjet`` block every answer carries (``AgentJetRef``) and the two arguments.
* ``compose`` + ``yamltypes``: Hydra's composition of a base YAML as AgentJetJob runs it.
* ``job``: ``AgentJetJob(...)``, post-construction writes and ``dump_job_as_yaml()`` on plain data; the
  construction's steps are one ordered list (``ConstructionSteps``) that the linter's replay follows too.
* ``refusals``: what AgentJet refuses, as structured causes (for errors and for linter findings).
* ``keys``: the dotted config keys of the values the tools read by name (one table for every tool).
* ``pysource``, ``gitmeta``, ``locate``: static readers of a checkout (``ast``, ``.git``, finding it).
* ``snapshot``: the maintainer command that turns a checkout into a bundled release.
"""
