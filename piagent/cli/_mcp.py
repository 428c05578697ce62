"""``piagent chat --mcp``: the MCP servers named on the command line."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from ..mcp import MCPError, MCPServer
from ._output import CliError

__all__ = ["close_all", "first_duplicate", "open_mcp_servers"]


def open_mcp_servers(specs: Sequence[str]) -> list[MCPServer]:
    """``--mcp`` values as servers, connected: an http(s) URL, else a stdio command line."""
    servers: list[MCPServer] = []
    for spec in specs:
        try:
            if spec.startswith(("http://", "https://")):
                server = MCPServer.http(spec)
            else:
                server = MCPServer.stdio(spec, stderr=subprocess.DEVNULL)
            servers.append(server.connect())
        except (MCPError, ValueError, TypeError) as exc:
            close_all(servers)
            raise CliError(f"--mcp {spec!r}: {exc}") from exc
    return servers


def close_all(servers: Sequence[MCPServer]) -> None:
    for server in servers:
        server.close()


def first_duplicate(names: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None
