"""``MCPServer``: one MCP server's tools for an ``Agent``, from plain synchronous code.

Thread-safe: one connection is shared by every run and thread of the process; each call
waits on its own event. Closed by ``close()``, by leaving a ``with`` block, or at
interpreter exit.
"""

from __future__ import annotations

import atexit
import shlex
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import IO, Any

from ..abort import AbortSignal
from ..messages import TextContent
from ..tools import AgentTool, AgentToolResult, ToolUpdateFn
from ._errors import MCPError
from ._http import HeadersArg, HttpTransport
from ._protocol import PROTOCOLS, STATELESS_VERSION
from ._session import Session, Transport
from ._stdio import StdioTransport
from ._tools import McpToolExecute, make_tool, to_result

__all__ = ["MCPServer"]

_DEFAULT_TIMEOUT_S = 60.0
_open: weakref.WeakSet[MCPServer] = weakref.WeakSet()  # closed at exit (atexit below)
_open_lock = threading.Lock()  # guards _open


class MCPServer:
    """An MCP server: start it with ``MCPServer.stdio(...)`` or ``MCPServer.http(...)``.

    ``tools()`` lists the server's tools as ``AgentTool``s (named ``prefix + name``);
    ``call_tool()`` calls one directly. The connection opens on first use, speaks whichever
    protocol generation the server does (``protocol="auto"``: the stateless 2026-07-28 one,
    else the ``initialize`` handshake up to 2025-11-25), and reopens on the next call after
    the server died (a stdio server's process is started again; the log says so).
    """

    def __init__(self, session: Session, *, name: str, prefix: str,
                 call_timeout: float | None) -> None:
        self._session = session
        self.name = name
        self.prefix = prefix
        self._call_timeout = call_timeout
        self._lock = threading.Lock()  # guards _specs and _expires
        self._specs: list[dict[str, Any]] | None = None
        self._expires: float | None = None
        self._tools_version = 0
        with _open_lock:
            _open.add(self)

    # --- construction --------------------------------------------------------------------

    @classmethod
    def stdio(cls, command: Sequence[str] | str, *, env: Mapping[str, str] | None = None,
              cwd: str | None = None, name: str | None = None, prefix: str = "",
              timeout: float = _DEFAULT_TIMEOUT_S, call_timeout: float | None = None,
              protocol: str = "auto", stderr: int | IO[Any] | None = None) -> MCPServer:
        """A server run as a subprocess (``command`` a list, or one string split like a shell).

        ``env`` is added to this process's environment; ``stderr`` is where the server's
        log goes (default: this process's stderr; ``subprocess.DEVNULL`` drops it).
        """
        argv = _command(command)
        label = name or argv[0]
        _check_common(timeout, call_timeout, protocol, prefix)

        def connect(on_message: Any) -> Transport:
            return StdioTransport(argv, env=env, cwd=cwd, stderr=stderr, label=repr(label),
                                  on_message=on_message)

        session = Session(connect, protocol=protocol, timeout=timeout, label=repr(label))
        return cls(session, name=label, prefix=prefix, call_timeout=call_timeout)

    @classmethod
    def http(cls, url: str, *, headers: HeadersArg = None, name: str | None = None,
             prefix: str = "", timeout: float = _DEFAULT_TIMEOUT_S,
             call_timeout: float | None = None, protocol: str = "auto",
             verify: bool | str = True) -> MCPServer:
        """A server at a streamable-HTTP ``url``.

        ``headers`` are sent with every request: a mapping, or a callable returning one,
        called for each request (a token that refreshes).
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            msg = (f"MCPServer.http(url=...) must be an http:// or https:// URL, "
                   f"not {url!r}.")
            raise ValueError(msg)
        if headers is not None and not (callable(headers) or isinstance(headers, Mapping)):
            msg = (f"MCPServer.http(headers=...) must be a mapping of header names to values "
                   f"or a callable returning one, not {type(headers).__name__}.")
            raise TypeError(msg)
        _check_common(timeout, call_timeout, protocol, prefix)
        label = name or url

        def connect(on_message: Any) -> Transport:
            return HttpTransport(url, headers=headers, label=repr(label), verify=verify,
                                 on_message=on_message)

        session = Session(connect, protocol=protocol, timeout=timeout, label=repr(label))
        return cls(session, name=label, prefix=prefix, call_timeout=call_timeout)

    # --- what the server offers ----------------------------------------------------------

    def connect(self) -> MCPServer:
        """Open the connection now (it opens on first use otherwise)."""
        self._session.transport()
        return self

    @property
    def protocol_version(self) -> str | None:
        """The protocol revision the server speaks (``None`` before the first connection)."""
        return self._session.version

    @property
    def server_info(self) -> dict[str, Any]:
        """The server's ``name``/``version`` as it reported them."""
        return dict(self._session.server_info)

    @property
    def instructions(self) -> str | None:
        return self._session.instructions

    def tools(self) -> list[AgentTool]:
        """The server's tools as ``AgentTool``s, listed again when the server said they
        changed or the list it gave has expired (its ``ttlMs``)."""
        return [make_tool(self, spec, prefix=self.prefix, call=self._call,
                          timeout=self._call_timeout) for spec in self._tool_specs()]

    @property
    def tools_version(self) -> int:
        """A number that grows each time the server's tool list is listed anew."""
        return self._tools_version

    def tools_stale(self) -> bool:
        """Whether the next ``tools()`` lists again (changed or expired)."""
        return (self._specs is None or self._session.tools_changed.is_set()
                or (self._expires is not None and time.monotonic() >= self._expires))

    def owns(self, tool: AgentTool) -> bool:
        """Whether ``tool`` was made by this server's ``tools()``."""
        execute = tool.execute
        return isinstance(execute, McpToolExecute) and execute.owner is self

    def _tool_specs(self) -> list[dict[str, Any]]:
        with self._lock:
            if not self.tools_stale() and self._specs is not None:
                return self._specs
            self._session.tools_changed.clear()
            specs: list[dict[str, Any]] = []
            cursor: str | None = None
            ttl: Any = None
            while True:
                result = self._session.request("tools/list",
                                               {"cursor": cursor} if cursor else None)
                specs.extend(t for t in result.get("tools") or () if isinstance(t, dict)
                             and isinstance(t.get("name"), str))
                ttl = result.get("ttlMs")
                cursor = result.get("nextCursor")
                if not cursor:
                    break
            self._specs = specs
            # a stateless server's ttlMs bounds how long the list holds (0: list every time)
            self._expires = (time.monotonic() + ttl / 1000
                             if isinstance(ttl, (int, float)) and
                             self._session.version == STATELESS_VERSION else None)
            self._tools_version += 1
            return specs

    # --- calling -------------------------------------------------------------------------

    def call_tool(self, name: str, arguments: Mapping[str, Any] | None = None, *,
                  timeout: float | None = None, signal: AbortSignal | None = None,
                  on_update: ToolUpdateFn | None = None) -> AgentToolResult:
        """Call the server's tool ``name`` (its own name, without the prefix).

        Raises ``MCPError`` when the call fails (``MCPTimeoutError`` past ``timeout``,
        ``MCPConnectionError`` when the server is gone); a tool that reports a failure
        returns ``is_error=True``. An aborted ``signal`` cancels the call on the server.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"call_tool(name=...) must be a tool's name, not {name!r}.")
        return self._call(name, dict(arguments or {}), signal, on_update, timeout)

    def _call(self, name: str, arguments: dict[str, Any], signal: AbortSignal | None,
              on_update: ToolUpdateFn | None, timeout: float | None) -> AgentToolResult:
        progress = None
        if on_update is not None:
            def progress(params: dict[str, Any]) -> None:
                on_update(_progress_result(params))
        result = self._session.request("tools/call", {"name": name, "arguments": arguments},
                                       timeout=timeout, signal=signal, progress=progress)
        if result.get("resultType") == "input_required":
            msg = (f"The MCP server {self.name!r} asked for input to run {name!r} "
                   f"(sampling, elicitation or roots), which piagent does not provide.")
            raise MCPError(msg)
        return to_result(result)

    # --- lifetime ------------------------------------------------------------------------

    def close(self, timeout: float = 2.0) -> None:
        """Close the connection (a stdio server's process ends); returns within ``timeout``."""
        self._session.close(timeout)
        with _open_lock:
            _open.discard(self)

    def __enter__(self) -> MCPServer:
        return self.connect()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r}, protocol={self.protocol_version!r})"


def _progress_result(params: dict[str, Any]) -> AgentToolResult:
    progress, total = params.get("progress"), params.get("total")
    text = f"progress {progress}" + (f"/{total}" if total is not None else "")
    if params.get("message"):
        text += f": {params['message']}"
    return AgentToolResult(content=[TextContent(text)], details=dict(params))


def _command(command: Sequence[str] | str) -> list[str]:
    argv = shlex.split(command) if isinstance(command, str) else command
    if (isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence) or not argv
            or not all(isinstance(a, str) for a in argv)):
        msg = (f"MCPServer.stdio(command=...) must be a non-empty list of strings or a "
               f"command line, not {command!r}.")
        raise TypeError(msg)
    return list(argv)


def _check_common(timeout: float, call_timeout: float | None, protocol: str,
                  prefix: str) -> None:
    for label, value in (("timeout", timeout), ("call_timeout", call_timeout)):
        if value is None and label == "call_timeout":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"MCPServer {label}= must be a positive number of seconds, "
                             f"not {value!r}.")
    if protocol not in PROTOCOLS:
        raise ValueError(f"MCPServer protocol= must be one of {', '.join(PROTOCOLS)}, "
                         f"not {protocol!r}.")
    if not isinstance(prefix, str):
        raise TypeError(f"MCPServer prefix= must be a string, not {type(prefix).__name__}.")


@atexit.register
def _close_all() -> None:
    with _open_lock:
        servers = list(_open)
    for server in servers:
        server.close(1.0)
