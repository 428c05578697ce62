"""MCP servers' tools from synchronous code: a thread-based client, no event loop.

``MCPServer.stdio([...])`` runs a server as a subprocess, ``MCPServer.http(url)`` speaks
streamable HTTP; ``server.tools()`` gives its tools as ``AgentTool``s (docs/mcp.md).
"""

from ._errors import MCPConnectionError, MCPError, MCPTimeoutError
from ._refresh import refresh_tools
from ._server import MCPServer

__all__ = ["MCPConnectionError", "MCPError", "MCPServer", "MCPTimeoutError", "refresh_tools"]
