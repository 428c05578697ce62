"""Abortable sockets: each request reports its socket so an abort can shut it down.

Shutting a socket down (not closing the response) is what wakes a read blocked in another
thread (providers.md §8.3). ``new_session()`` builds the ``requests.Session`` whose
connections report their socket to the calling thread's tracker (set by ``ProviderCall``
around ``session.post``).
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import requests
import requests.adapters
import urllib3.connection
import urllib3.connectionpool
import urllib3.response

__all__ = ["SocketTracker", "current", "new_session"]


class SocketTracker:
    """The socket of one in-flight request, so an abort can shut it down from any thread.

    Shutting the socket down (not closing the response) is what wakes a read blocked in
    another thread (providers.md §8.3). Detached once the request is over, so an abort that
    arrives late never touches a connection the pool has since handed to another request.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _sock and _shut
        self._sock: socket.socket | None = None
        self._shut = False

    def attach(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self._shut and sock is not None:
                _shutdown_quietly(sock)

    def set_timeout(self, seconds: float) -> bool:
        """Set the attached socket's timeout; False when no socket is attached."""
        with self._lock:
            sock = self._sock
        if sock is None:
            return False
        try:
            sock.settimeout(seconds)
        except OSError:
            return False  # closed meanwhile
        return True

    def detach(self) -> None:
        with self._lock:
            self._sock = None

    def shutdown(self) -> None:
        with self._lock:
            self._shut = True
            if self._sock is not None:
                _shutdown_quietly(self._sock)


def _shutdown_quietly(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected: nothing left to wake


# The tracker of the request the current thread is making; read by the connection classes
# below, which only run inside ``session.post`` on that same thread.
current = threading.local()


class _TrackedHTTPConnection(urllib3.connection.HTTPConnection):
    def getresponse(self) -> urllib3.response.HTTPResponse:  # type: ignore[override]
        tracker: SocketTracker | None = getattr(current, "tracker", None)
        if tracker is not None:
            tracker.attach(self.sock)
        return super().getresponse()


class _TrackedHTTPSConnection(urllib3.connection.HTTPSConnection):
    def getresponse(self) -> urllib3.response.HTTPResponse:  # type: ignore[override]
        tracker: SocketTracker | None = getattr(current, "tracker", None)
        if tracker is not None:
            tracker.attach(self.sock)
        return super().getresponse()


class _TrackedHTTPPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class _TrackingAdapter(requests.adapters.HTTPAdapter):
    """An ``HTTPAdapter`` whose connections report their socket to the current tracker."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _TrackedHTTPPool,
            "https": _TrackedHTTPSPool,
        }


def new_session() -> requests.Session:
    session = requests.Session()
    # The environment (proxies, CA bundle) is read once per origin by HttpClient.environment:
    # requests re-reads os.environ on every request, which costs more than a whole turn.
    session.trust_env = False
    adapter = _TrackingAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session

