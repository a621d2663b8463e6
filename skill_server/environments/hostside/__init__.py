"""Programs shipped to a host: standard library only, Python 3.8 syntax, no imports from ``skill_server``.

Each module is sent as source text (``environments.shipping``) and run by the host's ``python3`` (``probe``,
``installer``) or by the interpreter under test (``envprobe``, ``gpuprobe``). They print facts, one JSON
object per line, and judge nothing: what a fact means for AgentJet is decided on the server.
"""
