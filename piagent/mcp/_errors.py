"""The exceptions of ``piagent.mcp``."""

from __future__ import annotations

from typing import Any

from ..abort import AbortSignal
from ..errors import PiAgentError

__all__ = ["MCPConnectionError", "MCPError", "MCPTimeoutError", "aborted_error"]


class MCPError(PiAgentError):
    """An MCP server answered with an error, or cannot be spoken to.

    ``code`` and ``data`` are the JSON-RPC error's, when the server sent one.
    """

    def __init__(self, message: str, *, code: int | None = None, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class MCPConnectionError(MCPError, ConnectionError):
    """The server could not be reached, or its process or connection ended."""


class MCPTimeoutError(MCPError, TimeoutError):
    """The server did not answer within the timeout."""


def aborted_error(signal: AbortSignal | None) -> MCPError:
    """The error of a call its run's abort cancelled."""
    reason = signal.reason if signal is not None else None
    return MCPError("The call was cancelled: the run was aborted"
                    + (f" ({reason})" if isinstance(reason, str) and reason else "") + ".")
