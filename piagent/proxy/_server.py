"""``ProxyServer`` and ``serve_proxy``: a WSGI application served on the standard library's
threads, with deadlines, a bound on concurrent requests and a bounded ``close()``.

The server knows nothing of pi: any WSGI application works; ``ProxyApp`` is the usual one.
The connections themselves are handled in ``_http``.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from ._http import HttpServer

__all__ = ["ProxyServer", "serve_proxy"]

_log = logging.getLogger(__name__)

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_WRITE_TIMEOUT_S = 60.0
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_CLOSE_TIMEOUT_S = 5.0
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024  # when the app names none (ProxyApp's default too)


def _positive(name: str, value: Any, kind: type = float) -> None:
    ok = isinstance(value, (int, float) if kind is float else int) and \
        not isinstance(value, bool) and value > 0 and value == value and value != float("inf")
    if not ok:
        accepted = "a positive, finite number of seconds" if kind is float else \
            "a positive int"
        msg = f"{name} must be {accepted}, got {value!r}."
        raise ValueError(msg)


class ProxyServer:
    """A WSGI application served by the standard library on its own threads.

    ``ProxyServer(app, host="127.0.0.1", port=0)`` binds at once (port 0 picks a free
    port; see ``.url``). ``start()`` serves on a background thread (``piagent-proxy-serve``),
    ``serve_forever()`` on the calling thread. ``close()`` stops serving, aborts streams in
    flight (when the app has a ``close()``, as ``ProxyApp`` does), closes the connections
    still open and joins every thread, all within its ``timeout``. Use it as a context
    manager. For production, gunicorn or your web framework also work (docs/proxy.md).

    Args:
        header_timeout: seconds from accepting a connection until the request line and
            headers must have arrived; then 408.
        body_timeout: seconds from the end of the headers until the whole body
            (``Content-Length`` or chunked) must have arrived; then 408. The body is read
            before the application runs, so a slow client never holds it.
        write_timeout: a write to the client that makes no progress for this long drops
            the client (one that stopped reading); the stream is aborted.
        max_connections: requests served at once; more get 503 with ``Retry-After``.
        max_body_bytes: larger bodies get 413; default: the app's ``max_body_bytes`` (as
            ``ProxyApp`` has), else 16 MiB.
        backlog: the listen queue (default ``socket.SOMAXCONN``), so a burst of clients
            waits to be accepted instead of being reset.

    Thread safety: ``close()`` may be called from any thread but the one serving.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]], host: str = "127.0.0.1",
                 port: int = 0, *, header_timeout: float = DEFAULT_HEADER_TIMEOUT_S,
                 body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
                 write_timeout: float = DEFAULT_WRITE_TIMEOUT_S,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 max_body_bytes: int | None = None,
                 backlog: int = socket.SOMAXCONN) -> None:
        _positive("header_timeout", header_timeout)
        _positive("body_timeout", body_timeout)
        _positive("write_timeout", write_timeout)
        _positive("max_connections", max_connections, int)
        _positive("backlog", backlog, int)
        source = "ProxyServer max_body_bytes"
        if max_body_bytes is None:
            app_limit = getattr(app, "max_body_bytes", None)
            if isinstance(app_limit, int) and not isinstance(app_limit, bool) and app_limit > 0:
                max_body_bytes = app_limit
                source = f"{type(app).__name__} max_body_bytes"
            else:
                max_body_bytes = DEFAULT_MAX_BODY_BYTES
        _positive("max_body_bytes", max_body_bytes, int)
        self.app = app
        self._server = HttpServer((host, port), backlog=backlog, header_timeout=header_timeout,
                               body_timeout=body_timeout, write_timeout=write_timeout,
                               max_connections=max_connections,
                               max_body_bytes=max_body_bytes, max_body_source=source)
        self._server.set_app(app)
        self._thread: threading.Thread | None = None
        # guards _state: "new" -> "serving" -> "stopped" / "closed"
        self._state_lock = threading.Lock()
        self._state = "new"
        self._stop = threading.Event()  # set by close(): the accept loop ends
        self._stopped = threading.Event()  # set when the accept loop has ended

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8787`` (the proxy_url for clients)."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    @property
    def backlog(self) -> int:
        """The listen queue length given to ``listen()``."""
        return int(self._server.request_queue_size)

    def serve_forever(self) -> None:
        """Serve on the calling thread until ``close()`` (or KeyboardInterrupt).

        Returns at once if ``close()`` was already called; raises ``RuntimeError`` if the
        server is already serving.
        """
        with self._state_lock:
            if self._state == "closed":
                return
            if self._state != "new":
                msg = "ProxyServer.serve_forever: the server is already serving; serve it once."
                raise RuntimeError(msg)
            self._state = "serving"
        listener = self._server.socket
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(listener, selectors.EVENT_READ)
                listener.setblocking(False)
                while not self._stop.is_set():
                    if not selector.select(0.05):
                        continue
                    try:
                        request, address = listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue  # another wake-up took it, or the client left
                    except OSError as exc:
                        if self._stop.is_set():
                            break
                        _log.warning("The proxy server could not accept a connection: %s", exc)
                        continue
                    request.setblocking(True)
                    self._server.process_request(request, address)
        finally:
            self._stopped.set()

    def start(self) -> ProxyServer:
        """Serve on a background thread; returns ``self``."""
        if self._thread is None:
            # owner: this ProxyServer; joined in close()
            self._thread = threading.Thread(target=self.serve_forever,
                                            name="piagent-proxy-serve", daemon=True)
            self._thread.start()
        return self

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Stop accepting, abort live streams, close stuck connections; within ``timeout``.

        In order: the listening socket is closed; the app's ``close()`` aborts the streams
        in flight (their clients get an ``aborted`` error event); connections still sending
        their request are shut down at once; streams that have not ended by half the
        timeout have their connections shut down; every thread is joined until the
        deadline. A thread still alive then (a stream function that ignores its abort
        signal) is logged and left; ``close()`` returns all the same.
        Call it from another thread than the one in ``serve_forever`` (or after that
        returned). Idempotent.
        """
        _positive("timeout", timeout)
        deadline = time.monotonic() + timeout
        with self._state_lock:
            serving = self._state == "serving"
            self._state = "closed"
        self._stop.set()
        self._server.stop_accepting()
        if serving:
            self._stopped.wait(max(0.0, deadline - time.monotonic()))
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        self._server.server_close()  # the listening socket
        close_app = getattr(self.app, "close", None)
        if callable(close_app):
            close_app()
        for sock, _ in self._server.connections("reading", "refusing"):
            _shutdown(sock)
        half = time.monotonic() + max(0.0, deadline - time.monotonic()) / 2
        for _, thread in self._server.connections("responding"):
            thread.join(max(0.0, half - time.monotonic()))
        for sock, _ in self._server.connections():
            _shutdown(sock)
        for _, thread in self._server.connections():
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [thread.name for _, thread in self._server.connections()]
        if left:
            _log.warning("ProxyServer.close() gave up after %.1f s on threads %s (a stream "
                         "function that ignores its abort signal?)", timeout, ", ".join(left))

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _shutdown(sock: socket.socket) -> None:
    """Wake the request thread blocked on ``sock``; that thread closes it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError as exc:  # already closed by its thread, or never connected
        _log.debug("shutdown of a proxy connection: %s", exc)


def serve_proxy(app: Callable[..., Iterable[bytes]], host: str = "127.0.0.1",
                port: int = 8787, *, ready: Callable[[str], None] | None = None,
                close_timeout: float = DEFAULT_CLOSE_TIMEOUT_S,
                **limits: Any) -> None:
    """Serve ``app`` (usually a ``ProxyApp``) on the calling thread; for ``piagent proxy``.

    ``ready(url)`` is called once the socket is bound (the CLI prints the URL there).
    ``limits`` are ``ProxyServer``'s keyword arguments (``header_timeout``,
    ``body_timeout``, ``write_timeout``, ``max_connections``, ``max_body_bytes``,
    ``backlog``). On KeyboardInterrupt the server shuts down (``close(close_timeout)``:
    live streams aborted, stuck connections closed, threads joined, all within
    ``close_timeout`` seconds) and the KeyboardInterrupt propagates to the caller.
    ``OSError`` from binding (port in use, permission) propagates unchanged.
    """
    _positive("close_timeout", close_timeout)
    server = ProxyServer(app, host, port, **limits)
    try:
        if ready is not None:
            ready(server.url)
        server.serve_forever()
    finally:
        server.close(close_timeout)
