"""The client the MCP conformance suite drives: ``conformance_client.py URL``.

It connects with ``piagent.mcp`` the way an application would (``protocol="auto"``), lists
the server's tools and calls each one; the suite's server checks what it receives.
"""

import sys

from piagent.mcp import MCPServer

ARGUMENTS = {"add_numbers": {"a": 2, "b": 3}}

with MCPServer.http(sys.argv[-1], timeout=20) as server:
    for tool in server.tools():
        result = server.call_tool(tool.name, ARGUMENTS.get(tool.name, {}))
        print(tool.name, [block.type for block in result.content], file=sys.stderr)
