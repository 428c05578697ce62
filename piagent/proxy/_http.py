"""The HTTP side of ``ProxyServer``: a threaded ``wsgiref`` server that knows nothing of pi.

One thread per connection, up to ``max_connections`` (more get 503 on a short-lived thread
of their own). Each connection carries one request: its line and headers must arrive within
``header_timeout``; a verdict on the headers alone (the body's framing and declared size)
comes before any of the body is read; the whole body must arrive within ``body_timeout``
and is read before the application runs, so a slow client never holds the application.
Errors are answered ``{"error": reason}`` and the connection is closed after a bounded drain.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import socket
import sys
import threading
import time
import wsgiref.simple_server
from typing import IO, Any, cast

__all__ = ["HttpServer"]

_log = logging.getLogger(__name__)

RETRY_AFTER_S = 1
_LINGER_S = 1.0  # after the answer: how long unread request bytes are drained before close
_LINGER_BYTES = 1024 * 1024
_MAX_TRAILERS = 64
_request_ids = itertools.count(1)


class _DeadlineReader(io.RawIOBase):
    """The request socket as a raw stream whose reads fail once ``deadline`` has passed.

    The socket's timeout is set to the time left before each ``recv``, so a client that
    trickles one byte at a time cannot stretch the deadline. Used by one request thread.
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.deadline: float | None = None  # time.monotonic() value; None: no deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed")
            self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _SocketWriter(io.BufferedIOBase):
    """Writes with ``sendall`` (no partial writes), bounded by the socket's timeout."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sock.sendall(data)
        return len(data)


class _BadRequest(Exception):
    """The request cannot be served; carries the answer (status line and reason)."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _ServerHandler(wsgiref.simple_server.ServerHandler):
    """wsgiref's handler, logging through ``logging`` and quiet about clients that left."""

    def handle_error(self) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (TimeoutError, ConnectionError)):  # the client stopped reading
            _log.info("The proxy client went away while being answered: %s", exc)
            return
        _log.exception("The WSGI application failed")
        if not getattr(self, "headers_sent", False):
            self.result = self.error_output(getattr(self, "environ", {}), self.start_response)
            self.finish_response()


class _Handler(wsgiref.simple_server.WSGIRequestHandler):
    """One request per connection: headers and body read within their deadlines, the whole
    body read before the application runs (``Content-Length`` or chunked), then answered."""

    server: HttpServer

    def setup(self) -> None:
        self.connection = self.request
        self._reader = _DeadlineReader(self.request)
        self._reader.deadline = time.monotonic() + self.server.header_timeout
        self.rfile = io.BufferedReader(self._reader, 64 * 1024)
        self.wfile = _SocketWriter(self.request)

    def finish(self) -> None:
        self.rfile.close()
        self.wfile.close()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        _log.info("%s - %s", self.address_string(), format % args)

    def handle(self) -> None:
        if not self._read_head():
            return
        server = self.server
        try:
            length = self._header_verdict()
        except _BadRequest as bad:
            self._answer(bad.status, bad.reason)
            return
        if self._app_verdict():
            return
        self._reader.deadline = time.monotonic() + server.body_timeout
        try:
            body = self._read_body(length)
        except _BadRequest as bad:
            self._answer(bad.status, bad.reason)
            return
        except OSError as exc:
            _log.info("A proxy client went away while sending its body: %s", exc)
            return
        if body is None:
            return  # the client closed the connection before sending the whole body
        self._reader.deadline = None
        self.connection.settimeout(server.write_timeout)
        server.responding(self.request)
        self._run_app(body)

    def _read_head(self) -> bool:
        """Read the request line and headers within ``header_timeout``; False once answered
        (or the client left)."""
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                return False  # connected and left without a request
            if len(self.raw_requestline) > 65536:
                self._answer("414 URI Too Long", "The request line is longer than 65536 bytes.")
                return False
            return bool(self.parse_request())  # if not, http.server answered (400, 431, 505)
        except TimeoutError:
            self._answer("408 Request Timeout", (
                f"The request line and headers did not arrive within "
                f"{self.server.header_timeout:g} s (ProxyServer header_timeout); send them at "
                "once."))
            return False
        except OSError as exc:
            _log.info("A proxy client went away while sending its headers: %s", exc)
            return False

    def _header_verdict(self) -> int | None:
        """What the headers alone decide, before any of the body is read: the body's length
        (``None``: chunked), or ``_BadRequest`` (501, 400, or 413 for a declared length over
        the limit)."""
        server = self.server
        encoding = self.headers.get("Transfer-Encoding")
        length_header = self.headers.get("Content-Length")
        if encoding is not None:
            if [c.strip().lower() for c in encoding.split(",")] != ["chunked"]:
                raise _BadRequest("501 Not Implemented", (
                    f"Transfer-Encoding {encoding!r} is not supported; send the body "
                    "with Content-Length or Transfer-Encoding: chunked."))
            if length_header is not None:
                raise _BadRequest("400 Bad Request", (
                    "The request has both Transfer-Encoding and Content-Length; send "
                    "one of them."))
            return None
        if length_header is None:
            return 0
        if not length_header.strip().isdigit():
            raise _BadRequest("400 Bad Request", (
                f"Content-Length {length_header!r} is not a number of bytes."))
        length = int(length_header)
        if length > server.max_body_bytes:
            raise _BadRequest("413 Content Too Large", (
                f"Request body is {length} bytes; the limit is {server.max_body_bytes} "
                f"bytes ({server.max_body_source})."))
        return length

    def _app_verdict(self) -> bool:
        """Ask the application's ``header_verdict(environ)``, if it has one, before the body
        is read; True once it has answered (the connection then closes, its body unread)."""
        check = getattr(self.server.get_app(), "header_verdict", None)
        if check is None:
            return False
        environ = self.get_environ()
        if self.headers.get("Content-Type") is None:
            environ["CONTENT_TYPE"] = ""  # wsgiref would say text/plain
        verdict = check(environ)
        if verdict is None:
            return False
        status, reason, headers = verdict
        self._answer(status, reason, tuple(headers))
        return True

    def _read_body(self, length: int | None) -> bytes | None:
        """The whole body (``length`` bytes, or chunked when None), None if the client
        left, or ``_BadRequest`` (408; 400 or 413 for a chunked body)."""
        try:
            if length is None:
                return self._read_chunked()
            data = self.rfile.read(length) if length else b""
            return data if len(data) == length else None
        except TimeoutError as exc:
            raise _BadRequest("408 Request Timeout", (
                f"The request body did not arrive within {self.server.body_timeout:g} s "
                "(ProxyServer body_timeout); send it at once.")) from exc

    def _run_app(self, body: bytes) -> None:
        """Run the application on the body already read, answering on this connection."""
        environ = self.get_environ()
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ["CONTENT_LENGTH"] = str(len(body))
        if self.headers.get("Content-Type") is None:
            environ["CONTENT_TYPE"] = ""  # wsgiref would say text/plain
        app = self.server.get_app()
        if app is None:
            raise RuntimeError("ProxyServer has no application")  # set in its __init__
        handler = _ServerHandler(io.BytesIO(body), cast(IO[bytes], self.wfile),
                                 self.get_stderr(), environ, multithread=True)
        handler.request_handler = self  # type: ignore[attr-defined]  # wsgiref logs through it
        handler.run(app)

    def _read_chunked(self) -> bytes | None:
        limit = self.server.max_body_bytes
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            if not line:
                return None
            size_text = line.split(b";", 1)[0].strip()
            if not line.endswith(b"\n") or not size_text or \
                    any(c not in b"0123456789abcdefABCDEF" for c in size_text):
                raise _BadRequest("400 Bad Request", (
                    f"Malformed chunked body: bad chunk-size line {line[:40]!r}."))
            size = int(size_text, 16)
            if size == 0:
                break
            total += size
            if total > limit:
                raise _BadRequest("413 Content Too Large", (
                    f"Request body exceeds the limit of {limit} bytes "
                    f"({self.server.max_body_source})."))
            chunk = self.rfile.read(size)
            end = self.rfile.readline(3)
            if len(chunk) < size or not end:
                return None
            if end not in (b"\r\n", b"\n"):
                raise _BadRequest("400 Bad Request",
                                  "Malformed chunked body: a chunk is not followed by CRLF.")
            parts.append(chunk)
        for _ in range(_MAX_TRAILERS):  # trailer fields, ignored, up to the blank line
            line = self.rfile.readline(8192)
            if line in (b"\r\n", b"\n"):
                return b"".join(parts)
            if not line:
                return None
        raise _BadRequest("400 Bad Request",
                          f"Malformed chunked body: more than {_MAX_TRAILERS} trailer lines.")

    def _answer(self, status: str, reason: str,
                headers: tuple[tuple[str, str], ...] = ()) -> None:
        """Answer ``{"error": reason}`` and let the connection close (drained, then closed)."""
        _log.info("%s - answered %s: %s", self.address_string(), status, reason)
        self.connection.settimeout(self.server.write_timeout)
        try:
            self.wfile.write(_raw_answer(status, reason, headers))
        except OSError as exc:
            _log.info("Could not answer %s to a proxy client that went away: %s", status, exc)


def _raw_answer(status: str, reason: str, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    body = json.dumps({"error": reason}, ensure_ascii=False).encode("utf-8")
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json; charset=utf-8",
             f"Content-Length: {len(body)}", "Connection: close",
             *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Connection:
    """A connection being served: its request thread and what it is doing."""

    def __init__(self, thread: threading.Thread, phase: str) -> None:
        self.thread = thread
        self.phase = phase  # "reading", "responding" or "refusing"


class HttpServer(wsgiref.simple_server.WSGIServer):
    """``WSGIServer`` with one thread per connection, up to ``max_connections``.

    Connections past the limit get 503 (``Retry-After``) on a short-lived thread of their
    own (at most ``max_connections`` of those; past that they are closed at once).
    """

    def __init__(self, address: tuple[str, int], *, backlog: int, header_timeout: float,
                 body_timeout: float, write_timeout: float, max_connections: int,
                 max_body_bytes: int, max_body_source: str) -> None:
        self.request_queue_size = backlog
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.write_timeout = write_timeout
        self.max_connections = max_connections
        self.max_body_bytes = max_body_bytes
        self.max_body_source = max_body_source
        # guards _connections and _closing; owner: this server. _connections maps each open
        # connection's socket to its request thread (started in process_request, removed
        # by that thread when it ends, joined by ProxyServer.close()).
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, _Connection] = {}
        self._closing = False
        super().__init__(address, _Handler, bind_and_activate=False)
        try:
            self.server_bind()
            self.server_activate()
        except BaseException:
            self.server_close()
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            serving = sum(1 for c in self._connections.values() if c.phase != "refusing")
            refusing = len(self._connections) - serving
            if self._closing:
                phase = "closed"
            elif serving < self.max_connections:
                phase = "reading"
            elif refusing < self.max_connections:
                phase = "refusing"
            else:
                phase = "dropped"
            if phase in ("reading", "refusing"):
                kind = "request" if phase == "reading" else "refuse"
                # owner: this server; the thread removes its entry when it ends, and
                # ProxyServer.close() joins it (bounded)
                thread = threading.Thread(target=self._run, args=(request, client_address),
                                          name=f"piagent-proxy-{kind}-{next(_request_ids)}",
                                          daemon=True)
                self._connections[request] = _Connection(thread, phase)
        if phase == "closed" or phase == "dropped":
            _log.warning("The proxy server %s a connection from %s",
                         "is closing and dropped" if phase == "closed" else
                         f"has {self.max_connections} refusals under way and dropped",
                         client_address[0])
            request.close()
            return
        try:
            thread.start()
        except RuntimeError as exc:  # the interpreter could not start another thread
            with self._lock:
                del self._connections[request]
            request.close()  # the accept loop goes on: this client may retry
            _log.error("The proxy server dropped a connection from %s: %s",
                       client_address[0], exc)

    def _run(self, request: socket.socket, client_address: Any) -> None:
        try:
            with self._lock:
                refusing = self._connections[request].phase == "refusing"
            if refusing:
                request.settimeout(self.write_timeout)
                request.sendall(_raw_answer("503 Service Unavailable", (
                    f"The proxy server is serving its limit of {self.max_connections} "
                    "concurrent requests (ProxyServer max_connections); retry in "
                    f"{RETRY_AFTER_S} s."), (("Retry-After", str(RETRY_AFTER_S)),)))
            else:
                self.finish_request(request, client_address)
        except OSError as exc:
            _log.info("A proxy connection from %s failed: %s", client_address[0], exc)
        except Exception:  # this thread's top level: logged, the connection closed below
            _log.exception("The proxy server failed serving %s", client_address[0])
        finally:
            _linger_and_close(request)
            with self._lock:
                self._connections.pop(request, None)

    def responding(self, request: socket.socket) -> None:
        """The request was read; the application is answering it."""
        with self._lock:
            connection = self._connections.get(request)
            if connection is not None:
                connection.phase = "responding"

    def stop_accepting(self) -> None:
        with self._lock:
            self._closing = True

    def connections(self, *phases: str) -> list[tuple[socket.socket, threading.Thread]]:
        with self._lock:
            return [(sock, c.thread) for sock, c in self._connections.items()
                    if not phases or c.phase in phases]


def _linger_and_close(sock: socket.socket) -> None:
    """Send FIN, drain what the client still sends (bounded), then close.

    Closing a socket with unread data makes the kernel send RST, which can destroy the
    answer before the client reads it (a 413 or 503 answered before the body was read).
    """
    deadline = time.monotonic() + _LINGER_S
    drained = 0
    try:
        sock.shutdown(socket.SHUT_WR)
        while drained < _LINGER_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            chunk = sock.recv(64 * 1024)
            if not chunk:
                break
            drained += len(chunk)
    except OSError as exc:  # the client reset or went silent: close it all the same
        _log.debug("Lingering close of a proxy connection ended early: %s", exc)
    finally:
        sock.close()
