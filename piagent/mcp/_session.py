"""One MCP connection: the protocol generation negotiated, requests, and reconnection.

``Session`` owns a transport (stdio or HTTP). The first request starts it and negotiates:
a ``server/discover`` probe (the stateless 2026-07-28 generation), else the ``initialize``
handshake. A transport that died (the process exited, the HTTP session expired) is
replaced on the next request, once per request, and the log says so.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..abort import AbortSignal
from ._errors import MCPConnectionError, MCPError
from ._protocol import (
    HANDSHAKE_VERSIONS,
    STATELESS_VERSION,
    error_text,
    initialize_params,
    notification,
    request,
)

__all__ = ["ProgressFn", "Session", "Transport"]

_log = logging.getLogger("piagent.mcp")

ProgressFn = Callable[[dict[str, Any]], None]
"""Receives each ``notifications/progress`` params of one call."""


class Transport(Protocol):
    label: str

    @property
    def alive(self) -> bool: ...

    def send(self, message: dict[str, Any], *, timeout: float,
             signal: AbortSignal | None) -> dict[str, Any]: ...

    def notify(self, message: dict[str, Any]) -> None: ...

    def cancel(self, message: dict[str, Any]) -> None:
        """Send ``notifications/cancelled``; returns within 0.5 s even if the server hangs."""

    def close(self, timeout: float = 2.0) -> None: ...


class Session:
    """A connection that starts on first use and restarts after its transport died."""

    def __init__(self, connect: Callable[[Callable[[dict[str, Any]], None]], Transport], *,
                 protocol: str, timeout: float, label: str) -> None:
        self.label = label
        self.timeout = timeout
        self._connect = connect
        self._protocol = protocol
        self._ids = itertools.count(1)  # next() is atomic under the GIL
        self._lock = threading.Lock()  # guards _transport, _version, _closed (connecting too)
        self._transport: Transport | None = None
        self._connecting: Transport | None = None  # the one negotiating (close() stops it)
        self._version: str | None = None
        self._closed = False
        self.server_info: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}
        self.instructions: str | None = None
        self.tools_changed = threading.Event()  # set by notifications/tools/list_changed
        self._progress: dict[str, ProgressFn] = {}  # progress token -> callback (GIL-atomic)

    @property
    def version(self) -> str | None:
        """The negotiated protocol revision (``None`` before the first connection)."""
        return self._version

    # --- connecting ----------------------------------------------------------------------

    def transport(self) -> Transport:
        """The live transport, connecting (or reconnecting) first if needed."""
        transport = self._transport
        if transport is not None and transport.alive:
            return transport
        with self._lock:
            if self._closed:
                raise MCPConnectionError(f"The MCP server {self.label} was closed.")
            transport = self._transport
            if transport is not None and transport.alive:
                return transport
            if transport is not None:
                _log.warning("MCP server %s: the connection ended; reconnecting", self.label)
                transport.close(0.5)
            self._transport = None
            transport = self._connecting = self._connect(self._on_message)
            try:
                self._negotiate(transport)
            except BaseException:
                transport.close(1.0)
                raise
            finally:
                self._connecting = None
            if self._closed:  # close() ran meanwhile
                transport.close(1.0)
                raise MCPConnectionError(f"The MCP server {self.label} was closed.")
            self._transport = transport
            return transport

    def _negotiate(self, transport: Transport) -> None:
        if self._protocol in ("auto", STATELESS_VERSION):
            _set_version(transport, STATELESS_VERSION)
            try:
                result = self._call(transport, "server/discover", None, STATELESS_VERSION,
                                    self.timeout, None)
            except MCPConnectionError:
                raise
            except MCPError as exc:
                if self._protocol == STATELESS_VERSION:
                    msg = (f"The MCP server {self.label} does not speak the stateless "
                           f"protocol {STATELESS_VERSION}: {exc}")
                    raise MCPError(msg, code=exc.code, data=exc.data) from exc
                result = None
            if result is not None and STATELESS_VERSION in (result.get("supportedVersions")
                                                            or ()):
                self._version = STATELESS_VERSION
                meta = result.get("_meta") or {}
                self.server_info = meta.get("io.modelcontextprotocol/serverInfo") or {}
                self.capabilities = result.get("capabilities") or {}
                self.instructions = result.get("instructions")
                return
            if self._protocol == STATELESS_VERSION:
                raise MCPError(f"The MCP server {self.label} does not offer protocol "
                               f"{STATELESS_VERSION} (it offers "
                               f"{(result or {}).get('supportedVersions')}).")
        self._handshake(transport)

    def _handshake(self, transport: Transport) -> None:
        wanted = HANDSHAKE_VERSIONS if self._protocol == "auto" else (self._protocol,)
        _set_version(transport, None)
        result = self._call(transport, "initialize", initialize_params(wanted[0]), None,
                            self.timeout, None)
        version = result.get("protocolVersion")
        if version not in wanted:
            spoken = ", ".join((STATELESS_VERSION, *HANDSHAKE_VERSIONS))
            msg = (f"The MCP server {self.label} speaks protocol version {version!r}, which "
                   f"piagent does not (it speaks {spoken}; protocol={self._protocol!r}).")
            raise MCPError(msg)
        self._version = version
        _set_version(transport, version)
        self.server_info = result.get("serverInfo") or {}
        self.capabilities = result.get("capabilities") or {}
        self.instructions = result.get("instructions")
        transport.notify(notification("notifications/initialized"))

    # --- requests ------------------------------------------------------------------------

    def request(self, method: str, params: dict[str, Any] | None = None, *,
                timeout: float | None = None, signal: AbortSignal | None = None,
                progress: ProgressFn | None = None) -> dict[str, Any]:
        """Send one request on the live connection; its ``result``, or ``MCPError``."""
        transport = self.transport()
        return self._call(transport, method, params, self._version,
                          self.timeout if timeout is None else timeout, signal, progress)

    def _call(self, transport: Transport, method: str, params: dict[str, Any] | None,
              version: str | None, timeout: float, signal: AbortSignal | None,
              progress: ProgressFn | None = None) -> dict[str, Any]:
        id_ = next(self._ids)
        token = None
        if progress is not None:
            token = f"piagent-{id_}"
            params = dict(params or {})
            params["_meta"] = {**(params.get("_meta") or {}), "progressToken": token}
            self._progress[token] = progress
        message = request(id_, method, params, version)
        try:
            answer = transport.send(message, timeout=timeout, signal=signal)
        except MCPConnectionError:
            raise
        except MCPError as exc:  # a timeout or an abort: the server may still be working
            self._cancel(transport, id_, str(exc))
            raise
        finally:
            if token is not None:
                self._progress.pop(token, None)
        if "error" in answer:
            error = answer["error"]
            code = error.get("code") if isinstance(error, dict) else None
            data = error.get("data") if isinstance(error, dict) else None
            raise MCPError(f"The MCP server {self.label} answered {method} with an error: "
                           f"{error_text(error)}", code=code, data=data)
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    def _cancel(self, transport: Transport, id_: int, reason: str) -> None:
        params: dict[str, Any] = {"requestId": id_, "reason": reason}
        try:
            transport.cancel(_with_envelope("notifications/cancelled", params, self._version))
        except MCPError:
            pass  # the connection is gone: nothing is running there any more

    # --- what the server sends on its own ------------------------------------------------

    def _on_message(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        raw = message.get("params")
        params: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if "id" in message:  # a request from the server
            self._answer_server(message)
        elif method == "notifications/progress":
            callback = self._progress.get(str(params.get("progressToken")))
            if callback is not None:
                callback(params)
        elif method == "notifications/tools/list_changed":
            self.tools_changed.set()
        elif method == "notifications/message":
            _log.debug("MCP server %s: %s", self.label, params.get("data"))

    def _answer_server(self, message: dict[str, Any]) -> None:
        transport = self._transport
        if transport is None:
            return
        if message.get("method") == "ping":
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"], "result": {}}
        else:
            reply = {"jsonrpc": "2.0", "id": message["id"],
                     "error": {"code": -32601, "message": f"piagent does not offer "
                                                          f"{message.get('method')}"}}
        try:
            transport.notify(reply)
        except MCPError:
            pass

    # --- closing -------------------------------------------------------------------------

    def close(self, timeout: float = 2.0) -> None:
        """Close the connection (and one being opened); never waits on ``_lock``."""
        deadline = time.monotonic() + timeout
        self._closed = True
        for transport in (self._connecting, self._transport):
            if transport is not None:
                transport.close(max(0.1, deadline - time.monotonic()))
        self._transport = None

def _set_version(transport: Transport, version: str | None) -> None:
    if hasattr(transport, "version"):
        transport.version = version


def _with_envelope(method: str, params: dict[str, Any], version: str | None) -> dict[str, Any]:
    if version == STATELESS_VERSION:
        message = request(0, method, params, version)
        del message["id"]
        return message
    return notification(method, params)
