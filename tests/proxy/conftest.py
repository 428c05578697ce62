"""Fixtures for proxy tests: ``serve`` (a ``ProxyServer`` factory on 127.0.0.1:0) that
checks, at teardown, that no piagent thread outlives the test; ``capture`` (a
``CaptureServer``: a stand-in provider on another 127.0.0.1 port that records every
connection and every byte it is sent); ``TOKEN``, the servers'
bearer token; ``SCRIPTED_BASE_URLS``, what the scripted model may be sent to (the default
for ``serve``). ``WAIT`` and the proxy-free environment are the suite's (``tests/conftest.py``)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from piagent.proxy import ProxyApp, ProxyServer
from tests.conftest import WAIT, join_piagent_threads

TOKEN = "test-token-123"
SCRIPTED_BASE_URLS = {"scripted": "https://example.invalid"}
"""``allowed_base_urls`` for ``ScriptedStreamFn``'s model (its provider is not catalogued)."""


@pytest.fixture
def serve() -> Iterator[Callable[..., ProxyServer]]:
    """``serve(stream_fn, **ProxyApp kwargs)`` or ``serve(app=wsgi_app)``: a started server."""
    servers: list[ProxyServer] = []

    def start(stream_fn: Any = None, *, app: Any = None, **kwargs: Any) -> ProxyServer:
        if app is None:
            kwargs.setdefault("auth_tokens", [TOKEN])
            kwargs.setdefault("heartbeat_s", 0.05)
            kwargs.setdefault("allowed_base_urls", SCRIPTED_BASE_URLS)
            app = ProxyApp(stream_fn, **kwargs)
        server = ProxyServer(app).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()
    assert join_piagent_threads() == []


class CaptureServer:
    """A stand-in provider on 127.0.0.1:<free port>: counts every connection it accepts
    (``connections``, counted before a byte is read), keeps the bytes of each request
    (``requests``) and answers each ``400 {"error": {"message": "captured"}}`` (a status
    the providers do not retry). ``url`` is its base URL, ``http://127.0.0.1:<port>/v1``.

    One thread (``capture-server``) serves the connections one after another; ``close()``
    stops and joins it.
    """

    _ANSWER = (b'HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n'
               b'Content-Length: 33\r\nConnection: close\r\n\r\n'
               b'{"error":{"message":"captured"}}\n')

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        # guards connections and requests (written by the server thread, read by the test)
        self._lock = threading.Lock()
        self.connections = 0
        self.requests: list[bytes] = []
        self._closing = False  # set before the wake-up connection that ends accept()
        self._thread = threading.Thread(target=self._serve, name="capture-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            conn, _ = self._listener.accept()
            with conn:
                if self._closing:
                    return
                with self._lock:
                    self.connections += 1
                conn.settimeout(WAIT)
                data = self._read_request(conn)
                with self._lock:
                    self.requests.append(data)
                try:
                    conn.sendall(self._ANSWER)
                except OSError:
                    pass

    @staticmethod
    def _read_request(conn: socket.socket) -> bytes:
        """The request's head and its ``Content-Length`` body (whatever came before EOF)."""
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return data
                data += chunk
            head = data.partition(b"\r\n\r\n")[0].decode("latin-1").lower()
            length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")
                           if line.startswith("content-length:")), 0)
            while len(data.partition(b"\r\n\r\n")[2]) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        return data

    def close(self) -> None:
        self._closing = True
        socket.create_connection(("127.0.0.1", self.port), timeout=WAIT).close()
        self._thread.join(WAIT)
        self._listener.close()
        assert not self._thread.is_alive()


@pytest.fixture
def capture() -> Iterator[CaptureServer]:
    """A ``CaptureServer``, closed (its thread joined) after the test."""
    server = CaptureServer()
    yield server
    server.close()
