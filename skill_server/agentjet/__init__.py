"""What this project knows about AgentJet, as data plus loaders that never import AgentJet.

* ``locate``: find an AgentJet checkout or installed package (explicit path, ``AJET_ROOT``, ``find_spec``).
* ``snapshot.json``: the bundled defaults (the three YAML layers, the overrides table, the schema-only
  fields) for machines without AgentJet.
* ``overrides``: the kwarg -> YAML key table, read statically from an install's ``job.py`` when present.
* ``schema``: the config dataclass tree, read statically from an install's schema module when present.
* ``compose``: Hydra-style composition of a base YAML's ``defaults`` list.
"""
