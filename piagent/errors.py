"""The exception hierarchy of piagent.

Failures inside a run are data (error messages and error tool results); exceptions
are for misuse of the API and for callers who use a lower layer directly. Every exception
class piagent defines derives from ``PiAgentError`` and keeps a fitting builtin base,
so ``except KeyError`` and ``except PiAgentError`` both catch a ``RunNotFoundError``::

    PiAgentError
    ├── AgentBusyError (+RuntimeError)        a second run, continue, reset or resume while one is
    │   │                                     active; a runner's start() while the session has a
    │   │                                     live run in any process (the session-busy error)
    │   └── SessionBusy                       a runs backend's: the session's live run is run_id
    │                                         (private to piagent.runs; caught as AgentBusyError)
    ├── AgentLoopError (+RuntimeError)        a hook or convert_to_llm raised inside agent_loop()
    ├── AgentRunError (+RuntimeError)         run.raise_for_error(): the run failed or was aborted
    ├── ApprovalError (+ValueError)           approve()/deny() of an unknown or decided call, or a stale digest
    ├── ApprovalPendingError (+RuntimeError)  prompt()/continue_() while tool calls wait for approval
    ├── StreamFnError (+LookupError)          no stream function configured
    ├── ToolArgumentError (+ValueError)       arguments failed a tool's schema (becomes a tool result)
    ├── UnknownMessageTypeError (+ValueError) a dict whose role/type is not registered
    ├── SessionCorruptError (+ValueError)     a stored record that cannot be decoded (piagent.sessions)
    ├── RunNotFoundError (+KeyError)          no run has this id (piagent.runs)
    ├── ProviderError                         a provider request failed (mapped into error messages)
    │   ├── ProviderConnectionError
    │   └── ProviderResponseError (+ValueError)
├── RequestCacheMismatch (+AssertionError)  PIAGENT_REQUEST_CACHES=check only: a request cache
│                                         gave what building the request afresh does not
    ├── ProxyError
    │   └── ProxyProtocolError (+ValueError)  a proxy request or event failed its schema
    ├── MCPError                              an MCP server answered an error (piagent.mcp)
    │   ├── MCPConnectionError (+ConnectionError)  it cannot be reached, or went away
    │   └── MCPTimeoutError (+TimeoutError)   it did not answer within the timeout
    ├── CompactionError (+RuntimeError)       a summary could not be made (piagent.compaction)
    └── CliError                              the CLI's one-line problem, exit code 2 (piagent.cli)

``SessionCorruptError`` lives in ``piagent.sessions``, ``RunNotFoundError`` and
``SessionBusy`` in ``piagent.runs``, the MCP errors in ``piagent.mcp``, ``CompactionError`` in
``piagent.compaction`` and ``CliError`` in
``piagent.cli``, beside what raises them. Besides these, piagent raises builtin exceptions
on purpose: ``TypeError``/``ValueError`` for a wrong argument (naming the parameter and what
is accepted), ``TimeoutError`` from blocking waits that pass their timeout,
``ConnectionError`` for a PostgreSQL server that cannot be reached, ``ImportError`` for a
missing extra, ``LookupError`` for an unknown catalogue model, and ``RuntimeError`` for a
closed store or a file written by a newer piagent (docs/errors.md lists them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "AgentBusyError",
    "AgentLoopError",
    "AgentRunError",
    "ApprovalError",
    "ApprovalPendingError",
    "PiAgentError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderResponseError",
    "ProxyError",
    "ProxyProtocolError",
    "StreamFnError",
    "ToolArgumentError",
    "UnknownMessageTypeError",
]


class PiAgentError(Exception):
    """Base class of every exception class piagent defines (see the module's tree)."""


class AgentBusyError(PiAgentError, RuntimeError):
    """The agent is running; the call needs it idle."""


class AgentLoopError(PiAgentError, RuntimeError):
    """The low-level loop stopped because a hook, a listener or the stream function raised.

    The original exception is chained as ``__cause__``.
    """


class AgentRunError(PiAgentError, RuntimeError):
    """A run ended in an error or was aborted, raised on request by ``run.raise_for_error()``.

    ``run`` is the run (its messages, its ``error_message``); ``stop_reason`` is
    ``"error"`` or ``"aborted"``.
    """

    def __init__(self, message: str, *, run: Any, stop_reason: str) -> None:
        super().__init__(message)
        self.run = run
        self.stop_reason = stop_reason


class StreamFnError(PiAgentError, LookupError):
    """No stream function was given and no default is configured."""


class ToolArgumentError(PiAgentError, ValueError):
    """A tool call's arguments failed the tool's JSON Schema.

    Raised while a call is prepared and always turned into an error tool result, so the
    model can read the message and fix its call.
    """

    def __init__(self, message: str, *, tool_name: str, errors: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        self.errors = list(errors)


class UnknownMessageTypeError(PiAgentError, ValueError):
    """A serialised message or content block names a role or type nobody registered."""


class ProviderError(PiAgentError):
    """A provider request failed. Stream functions map it into an error message."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status_code: int | None = None,
        body: Any = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after


class ProviderConnectionError(ProviderError):
    """The provider could not be reached, or the connection broke."""


class ProviderResponseError(ProviderError, ValueError):
    """The provider answered with something that is not its documented wire format."""


class ProxyError(PiAgentError):
    """A proxy request failed."""


class ProxyProtocolError(ProxyError, ValueError):
    """A proxy request body or event does not match the proxy protocol."""


class ApprovalError(PiAgentError, ValueError):
    """A decision refused: no such waiting call, the call was decided already, or the
    digest given does not match the call's current arguments (the message says which)."""


class ApprovalPendingError(PiAgentError, RuntimeError):
    """``prompt()``/``continue_()`` while tool calls wait for a decision (``approve()`` or
    ``deny()`` each of them first); ``call_ids`` names them."""

    def __init__(self, message: str, *, call_ids: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.call_ids = list(call_ids)
