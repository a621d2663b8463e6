"""The front ends and the one tool table they are built from: ``table`` (every tool's name, models, function
and MCP hints, and the one validation path), ``arguments`` (checks on raw argument trees), ``cli`` (no MCP
SDK), ``mcp_server`` (the only module that imports the SDK), ``schema_text`` (``call TOOL --help``)."""
