"""``piagent chat --mcp``: the MCP servers named on the command line."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import IO

from ..mcp import MCPError, MCPServer
from ._output import CliError

__all__ = ["close_all", "first_duplicate", "open_mcp_servers"]


# each stdio server's stderr: a temporary file, whose tail the server's errors say when it
# exits (piagent.mcp reads it); closed with the server by close_all. The CLI's thread only.
_LOGS: dict[int, IO[bytes]] = {}


def open_mcp_servers(specs: Sequence[str]) -> list[MCPServer]:
    """``--mcp`` values as servers, connected: an http(s) URL, else a stdio command line
    (its stderr kept in a temporary file: an exit says its last lines)."""
    servers: list[MCPServer] = []
    for spec in specs:
        log: IO[bytes] | None = None
        try:
            if spec.startswith(("http://", "https://")):
                server = MCPServer.http(spec)
            else:
                log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close_all
                server = MCPServer.stdio(spec, stderr=log)
            servers.append(server.connect())
            if log is not None:
                _LOGS[id(server)] = log
        except (MCPError, ValueError, TypeError) as exc:
            if log is not None:
                log.close()
            close_all(servers)
            raise CliError(f"--mcp {spec!r}: {exc}") from exc
    return servers


def close_all(servers: Sequence[MCPServer]) -> None:
    for server in servers:
        server.close()
        log = _LOGS.pop(id(server), None)
        if log is not None:
            log.close()


def first_duplicate(names: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None
