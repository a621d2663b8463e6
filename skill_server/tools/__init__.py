"""One package per tool, named as the tool: ``models`` (its input and output, the MCP schemas) and ``tool``
(the function the table in ``skill_server.app.table`` runs), plus whatever only that tool needs.

Tool packages never import one another (``tests/test_layering.py``): what two tools share lives in a
service package (``experiments``, ``analysis``, ``gpus``) or a foundation (``agentjet``, ``hosts``, ``core``).
"""
