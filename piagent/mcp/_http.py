"""The streamable HTTP transport: each message a ``POST``, answered as JSON or as SSE.

Blocking ``requests`` calls on the caller's thread; an abort shuts the response's socket
down, which wakes the read. A stream that ends before its answer is resumed with a ``GET``
carrying ``Last-Event-ID``, after the ``retry`` delay the server asked for.
"""

from __future__ import annotations

import functools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import requests
import sseclient

from ..abort import AbortSignal
from ._errors import MCPConnectionError, MCPError, MCPTimeoutError, aborted_error
from ._protocol import http_headers

__all__ = ["HeadersArg", "HttpTransport"]

HeadersArg = Mapping[str, str] | Callable[[], Mapping[str, str]] | None
"""Extra headers (auth): a mapping, or a callable evaluated for every request."""

_CONNECT_TIMEOUT_S = 10.0
_CLOSE_TIMEOUT_S = 1.0


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
        try:
            response = self._post(message, deadline, signal)
            try:
                return self._answer(response, message, deadline, signal)
            finally:
                response.close()
        except MCPTimeoutError as exc:
            msg = (f"The MCP server {self.label} did not answer {message['method']} within "
                   f"{timeout:g} s.")
            raise MCPTimeoutError(msg) from exc

    def notify(self, message: dict[str, Any]) -> None:
        response = self._post(message, time.monotonic() + _CONNECT_TIMEOUT_S, None)
        response.close()

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

    def _post(self, message: dict[str, Any], deadline: float,
              signal: AbortSignal | None) -> requests.Response:
        if self._closed:
            raise MCPConnectionError(f"The MCP server {self.label} was closed.")
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        headers = self._headers(message, "application/json, text/event-stream")
        return self._request("POST", headers, body, deadline, signal)

    def _request(self, method: str, headers: Mapping[str, str], body: bytes | None,
                 deadline: float, signal: AbortSignal | None) -> requests.Response:
        left = deadline - time.monotonic()
        if left <= 0:
            raise MCPTimeoutError(f"The MCP server {self.label} did not answer in time.")
        if signal is not None and signal.is_set():
            raise aborted_error(signal)
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
        session_id = response.headers.get("Mcp-Session-Id")
        if session_id:
            with self._lock:
                self._session_id = session_id
        return response

    def _answer(self, response: requests.Response, message: dict[str, Any], deadline: float,
                signal: AbortSignal | None) -> dict[str, Any]:
        status = response.status_code
        ctype = response.headers.get("Content-Type", "")
        if status == 404 and "Mcp-Session-Id" in self._headers(None, ""):
            self.reset_session()
            raise MCPConnectionError(f"The MCP server {self.label} ended the session (404).")
        if "text/event-stream" in ctype and status < 400:
            return self._stream(response, message, deadline, signal)
        text = response.text
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
                signal: AbortSignal | None) -> dict[str, Any]:
        """Read SSE until the answer to ``message``; resume a stream the server closed early."""
        last_id: str | None = None
        retry_ms: int | None = None
        while True:
            unregister = (signal.on_abort(functools.partial(_shut, response))
                          if signal is not None else None)
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
                if unregister is not None:
                    unregister()
                response.close()
            if signal is not None and signal.is_set():
                raise aborted_error(signal)
            if time.monotonic() > deadline:
                raise MCPTimeoutError(f"The MCP server {self.label} did not answer "
                                      f"{message['method']} in time.")
            if last_id is None:
                raise MCPConnectionError(f"The MCP server {self.label} closed the stream "
                                         f"before answering {message['method']}.")
            response = self._resume(last_id, retry_ms, deadline, signal)

    def _resume(self, last_id: str, retry_ms: int | None, deadline: float,
                signal: AbortSignal | None) -> requests.Response:
        delay = min((retry_ms or 0) / 1000, max(0.0, deadline - time.monotonic()))
        if delay > 0:
            waiter = signal if signal is not None else threading.Event()
            if waiter.wait(delay):
                raise aborted_error(signal)
        headers = self._headers(None, "text/event-stream")
        headers["Last-Event-ID"] = last_id
        return self._request("GET", headers, None, deadline, signal)

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


def _shut(response: requests.Response) -> None:
    """Shut the response's socket down: wakes a read blocked in another thread."""
    try:
        sock = response.raw.connection.sock  # type: ignore[union-attr]
        sock.shutdown(socket.SHUT_RDWR)
    except (AttributeError, OSError):
        pass


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if "Connection refused" in text or "ECONNREFUSED" in text:
        return "connection refused (is the server running?)"
    return text[:300] or type(exc).__name__

