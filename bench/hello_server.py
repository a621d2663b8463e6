"""Baseline for bench/startup.py: a one-tool MCPServer, started the same way as ours."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("hello")


@server.tool()
def hello(name: str) -> str:
    """Say hello."""
    return f"hello {name}"


if __name__ == "__main__":
    server.run()
