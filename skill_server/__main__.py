"""``python -m skill_server``: the MCP stdio server by default, or the CLI (``tools``, ``call``)."""

from skill_server.app.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
