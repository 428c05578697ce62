"""The streamable HTTP transport: each message a ``POST``, answered as JSON or as SSE.

Blocking ``requests`` calls on the caller's thread. An abort must wake that thread wherever
it waits: for the response's headers (a server answering ``application/json`` sends none
until its answer is ready), in a JSON body or in an SSE stream. So each request with a
signal carries a ``_Watch``; the connection hands it its socket just before it waits for
the headers, and the abort shuts that socket down, which wakes the read at once. The
connection is then dropped, so a late answer is never read. A stream that ends before its
answer is resumed with a ``GET`` carrying ``Last-Event-ID``, after the ``retry`` delay the
server asked for.
"""

from __future__ import annotations

import contextvars
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import requests
import sseclient
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager
from urllib3.response import HTTPResponse

from ..abort import AbortSignal
from ._errors import MCPConnectionError, MCPError, MCPTimeoutError, aborted_error
from ._protocol import http_headers

__all__ = ["HeadersArg", "HttpTransport"]

HeadersArg = Mapping[str, str] | Callable[[], Mapping[str, str]] | None
"""Extra headers (auth): a mapping, or a callable evaluated for every request."""

_CONNECT_TIMEOUT_S = 10.0
_CLOSE_TIMEOUT_S = 1.0
_CANCEL_TIMEOUT_S = 0.5  # notifications/cancelled: sent, then waited for this long at most


class HttpTransport:
    """One server URL. ``send`` may be called from any number of threads at once."""

    def __init__(self, url: str, *, headers: HeadersArg, label: str, verify: bool | str,
                 on_message: Callable[[dict[str, Any]], None]) -> None:
        self.url = url
        self.label = label
        self.version: str | None = None  # the negotiated protocol revision (set by the client)
        self._extra = headers
        self._verify = verify
        self._on_message = on_message
        self._http = requests.Session()  # requests' pool is safe for concurrent requests
        adapter = _WatchedAdapter()
        self._http.mount("http://", adapter)
        self._http.mount("https://", adapter)
        self._lock = threading.Lock()  # guards _session_id and _closed
        self._session_id: str | None = None  # a handshake server's Mcp-Session-Id
        self._closed = False

    @property
    def alive(self) -> bool:
        return not self._closed

    def reset_session(self) -> None:
        """Forget the handshake session (the server said it expired): the next one starts anew."""
        with self._lock:
            self._session_id = None

    # --- requests ------------------------------------------------------------------------

    def send(self, message: dict[str, Any], *, timeout: float,
             signal: AbortSignal | None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        watch = _Watch() if signal is not None else None
        unregister = (signal.on_abort(watch.abort)
                      if signal is not None and watch is not None else None)
        try:
            response = self._post(message, deadline, signal, watch)
            try:
                return self._answer(response, message, deadline, signal, watch)
            finally:
                if watch is not None:
                    watch.detach()  # before the connection can go back to the pool
                response.close()
        except MCPTimeoutError as exc:
            msg = (f"The MCP server {self.label} did not answer {message['method']} within "
                   f"{timeout:g} s.")
            raise MCPTimeoutError(msg) from exc
        except MCPError as exc:
            if signal is not None and signal.is_set():
                raise aborted_error(signal) from exc  # the shut socket's error, whatever it was
            raise
        finally:
            if unregister is not None:
                unregister()

    def notify(self, message: dict[str, Any], timeout: float = _CONNECT_TIMEOUT_S) -> None:
        response = self._post(message, time.monotonic() + timeout, None, None)
        response.close()

    def cancel(self, message: dict[str, Any]) -> None:
        """Send ``notifications/cancelled``; waits for the server's acceptance briefly."""
        try:
            self.notify(message, _CANCEL_TIMEOUT_S)
        except MCPTimeoutError:
            pass  # the notification was sent; a hung server need not hold up the abort

    def _headers(self, message: dict[str, Any] | None, accept: str) -> dict[str, str]:
        headers = {"Accept": accept}
        if message is not None:
            headers["Content-Type"] = "application/json"
            headers.update(http_headers(message, self.version))
        elif self.version is not None:
            headers["MCP-Protocol-Version"] = self.version
        with self._lock:
            if self._session_id is not None:
                headers["Mcp-Session-Id"] = self._session_id
        extra = self._extra() if callable(self._extra) else self._extra
        if extra:
            headers.update(extra)
        return headers

    def _post(self, message: dict[str, Any], deadline: float, signal: AbortSignal | None,
              watch: _Watch | None) -> requests.Response:
        if self._closed:
            raise MCPConnectionError(f"The MCP server {self.label} was closed.")
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        headers = self._headers(message, "application/json, text/event-stream")
        return self._request("POST", headers, body, deadline, signal, watch)

    def _request(self, method: str, headers: Mapping[str, str], body: bytes | None,
                 deadline: float, signal: AbortSignal | None,
                 watch: _Watch | None) -> requests.Response:
        left = deadline - time.monotonic()
        if left <= 0:
            raise MCPTimeoutError(f"The MCP server {self.label} did not answer in time.")
        if signal is not None and signal.is_set():
            raise aborted_error(signal)
        token = _WATCH.set(watch)
        try:
            response = self._http.request(method, self.url, data=body, headers=headers,
                                          stream=True, verify=self._verify,
                                          timeout=(min(left, _CONNECT_TIMEOUT_S), left))
        except requests.Timeout as exc:
            raise MCPTimeoutError(f"The MCP server {self.label} did not answer within "
                                  f"the timeout.") from exc
        except requests.RequestException as exc:
            raise MCPConnectionError(f"Could not reach the MCP server at {self.url}: "
                                     f"{_reason(exc)}") from exc
        finally:
            _WATCH.reset(token)
        session_id = response.headers.get("Mcp-Session-Id")
        if session_id:
            with self._lock:
                self._session_id = session_id
        return response

    def _answer(self, response: requests.Response, message: dict[str, Any], deadline: float,
                signal: AbortSignal | None, watch: _Watch | None) -> dict[str, Any]:
        status = response.status_code
        ctype = response.headers.get("Content-Type", "")
        if status == 404 and "Mcp-Session-Id" in self._headers(None, ""):
            self.reset_session()
            raise MCPConnectionError(f"The MCP server {self.label} ended the session (404).")
        if "text/event-stream" in ctype and status < 400:
            return self._stream(response, message, deadline, signal, watch)
        try:
            text = response.text
        except (requests.RequestException, OSError) as exc:
            raise MCPConnectionError(f"The answer from the MCP server {self.label} broke: "
                                     f"{_reason(exc)}") from exc
        try:
            data = json.loads(text) if text else None
        except ValueError:
            data = None
        answer = _find_answer(data, message["id"], self._on_message)
        if answer is not None:
            return answer
        if status >= 400:
            raise MCPError(f"The MCP server {self.label} answered HTTP {status}: "
                           f"{text[:300].strip() or response.reason}")
        raise MCPError(f"The MCP server {self.label} sent no answer to {message['method']} "
                       f"(HTTP {status}, {ctype or 'no content type'}).")

    def _stream(self, response: requests.Response, message: dict[str, Any], deadline: float,
                signal: AbortSignal | None, watch: _Watch | None) -> dict[str, Any]:
        """Read SSE until the answer to ``message``; resume a stream the server closed early."""
        last_id: str | None = None
        retry_ms: int | None = None
        while True:
            try:
                for event in _events(response):
                    if event.id:
                        last_id = event.id
                    if event.retry is not None:
                        retry_ms = _int(event.retry)
                    if not event.data.strip():
                        continue  # a priming event
                    answer = _find_answer(_json(event.data), message["id"], self._on_message)
                    if answer is not None:
                        return answer
                    if time.monotonic() > deadline:
                        break
            except (requests.RequestException, OSError, ValueError) as exc:
                if signal is not None and signal.is_set():
                    raise aborted_error(signal) from exc
                raise MCPConnectionError(f"The stream from the MCP server {self.label} "
                                         f"broke: {_reason(exc)}") from exc
            finally:
                response.close()
            if signal is not None and signal.is_set():
                raise aborted_error(signal)
            if time.monotonic() > deadline:
                raise MCPTimeoutError(f"The MCP server {self.label} did not answer "
                                      f"{message['method']} in time.")
            if last_id is None:
                raise MCPConnectionError(f"The MCP server {self.label} closed the stream "
                                         f"before answering {message['method']}.")
            response = self._resume(last_id, retry_ms, deadline, signal, watch)

    def _resume(self, last_id: str, retry_ms: int | None, deadline: float,
                signal: AbortSignal | None, watch: _Watch | None) -> requests.Response:
        delay = min((retry_ms or 0) / 1000, max(0.0, deadline - time.monotonic()))
        if delay > 0:
            waiter = signal if signal is not None else threading.Event()
            if waiter.wait(delay):
                raise aborted_error(signal)
        headers = self._headers(None, "text/event-stream")
        headers["Last-Event-ID"] = last_id
        return self._request("GET", headers, None, deadline, signal, watch)

    # --- closing -------------------------------------------------------------------------

    def close(self, timeout: float = 2.0) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            session_id = self._session_id
        if session_id is not None:  # a handshake session: tell the server it is over
            try:
                headers = self._headers(None, "application/json")
                self._http.delete(self.url, headers=headers, verify=self._verify,
                                  timeout=min(timeout, _CLOSE_TIMEOUT_S))
            except requests.RequestException:
                pass  # the server is gone or hung: nothing to tell it
        self._http.close()


def _events(response: requests.Response) -> Iterator[Any]:
    return iter(sseclient.SSEClient(response.iter_content(chunk_size=None)).events())


def _int(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _find_answer(data: Any, id_: Any,
                 on_message: Callable[[dict[str, Any]], None]) -> dict[str, Any] | None:
    """The response to request ``id_`` in a message or batch; hand the rest to ``on_message``."""
    items = data if isinstance(data, list) else [data]
    answer = None
    for item in items:
        if not isinstance(item, dict):
            continue
        if "method" not in item and item.get("id") == id_:
            answer = item
        elif "method" in item:
            on_message(item)
    return answer


# --- reaching a blocked read on abort ----------------------------------------------------

class _Watch:
    """The socket one call's request reads from, shut down when the call's signal fires.

    ``attach`` runs on the calling thread (in the connection, before it waits for the
    headers), ``abort`` on the aborting thread, ``detach`` when the call is over: after it,
    the socket (which may go back to the pool) is never touched.
    """

    __slots__ = ("_lock", "_sock", "_aborted", "_done")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _sock, _aborted and _done
        self._sock: socket.socket | None = None
        self._aborted = False
        self._done = False

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            if self._done or sock is None:
                return
            self._sock = sock
            if self._aborted:
                _shutdown(sock)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            if self._sock is not None and not self._done:
                _shutdown(self._sock)

    def detach(self) -> None:
        with self._lock:
            self._done = True
            self._sock = None


_WATCH: contextvars.ContextVar[_Watch | None] = contextvars.ContextVar("piagent_mcp_watch",
                                                                       default=None)
"""The watch of the request this thread is sending (set around ``requests``' call only)."""


def _shutdown(sock: socket.socket) -> None:
    """Shut the socket down: wakes a read blocked in another thread."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _WatchedHTTPConnection(HTTPConnection):
    def getresponse(self) -> HTTPResponse:  # type: ignore[override]  # as urllib3 does
        watch = _WATCH.get()
        if watch is not None:
            watch.attach(self.sock)
        return super().getresponse()


class _WatchedHTTPSConnection(HTTPSConnection):
    def getresponse(self) -> HTTPResponse:  # type: ignore[override]  # as urllib3 does
        watch = _WATCH.get()
        if watch is not None:
            watch.attach(self.sock)
        return super().getresponse()


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_PLAIN_POOLS = {"http": HTTPConnectionPool, "https": HTTPSConnectionPool}


def _watched(manager: PoolManager) -> PoolManager:
    """``manager`` with watched pools; one with pools of its own (SOCKS) is left as it is."""
    if manager.pool_classes_by_scheme == _PLAIN_POOLS:
        manager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}
    return manager


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter whose connections hand their socket to the request's ``_Watch``."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        _watched(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> PoolManager:
        return _watched(super().proxy_manager_for(proxy, **proxy_kwargs))


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if "Connection refused" in text or "ECONNREFUSED" in text:
        return "connection refused (is the server running?)"
    return text[:300] or type(exc).__name__

