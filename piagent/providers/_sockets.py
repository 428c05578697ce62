"""Abortable sockets: each request reports its socket so an abort can shut it down.

Shutting a socket down (not closing the response) is what wakes a read blocked in another
thread (docs/providers.md, "Abort"). ``new_session()`` builds the ``requests.Session`` whose
connections report their socket to the calling thread's tracker (set by ``ProviderCall``
around ``post``).

``post`` is ``session.post(..., stream=True, allow_redirects=False)`` without
``prepare_request`` and ``merge_environment_settings`` on every turn (~90 us): a
``new_session`` session keeps the request prepared once per (URL, headers) and sends a copy
with the new body; any session setting those steps would read (auth, params, proxies,
hooks, ``trust_env``, changed headers) takes ``session.post`` instead.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import requests
import requests.adapters
import requests.cookies
import requests.structures
import urllib3.connection
import urllib3.connectionpool
import urllib3.response

__all__ = ["SocketTracker", "current", "new_session", "post"]


class SocketTracker:
    """The socket of one in-flight request, so an abort can shut it down from any thread.

    Shutting the socket down (not closing the response) is what wakes a read blocked in
    another thread (docs/providers.md, "Abort"). Detached once the request is over, so an abort that
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


if TYPE_CHECKING:
    _HeadersBase = requests.structures.CaseInsensitiveDict[str | bytes]
else:
    _HeadersBase = requests.structures.CaseInsensitiveDict


class _Headers(_HeadersBase):
    """Session headers that count their changes (kept prepared requests have them merged)."""

    version = 0

    def __setitem__(self, key: str, value: str | bytes) -> None:
        super().__setitem__(key, value)
        self.version += 1

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.version += 1


_PREPARED_LIMIT = 16  # prepared requests kept per session (one per endpoint and key in use)
_NO_HOOKS: dict[str, list[Any]] = {"response": []}  # requests' default_hooks()


class _Session(requests.Session):
    """``new_session``'s session: keeps a prepared request per (URL, headers) for ``post``.

    Thread safety: one request at a time, like any ``requests.Session`` (``HttpClient``
    checks it out to one caller), so ``prepared`` needs no lock.
    """

    def __init__(self) -> None:
        super().__init__()
        self.headers = _Headers(self.headers)
        # (url, headers items) -> (the prepared request, where its Cookie header goes, the
        # session headers' version when it was prepared)
        self.prepared: dict[tuple[str, tuple[tuple[str, str | None], ...]],
                            tuple[requests.PreparedRequest, int, int]] = {}


def new_session() -> requests.Session:
    session = _Session()
    # The environment (proxies, CA bundle) is read once per origin by HttpClient.environment:
    # requests re-reads os.environ on every request, which costs more than a whole turn.
    session.trust_env = False
    adapter = _TrackingAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def post(session: requests.Session, url: str, body: bytes,
         headers: Mapping[str, str | None], *, timeout: tuple[float, float],
         proxies: dict[str, str], verify: bool | str) -> requests.Response:
    """``session.post(url, data=body, headers=headers, stream=True, timeout=timeout,
    proxies=proxies, verify=verify, allow_redirects=False)``: the same request on the wire."""
    session_headers = session.headers
    if (type(session) is not _Session or type(session_headers) is not _Headers
            or session.auth is not None or session.params or session.proxies
            or session.trust_env or session.hooks != _NO_HOOKS):
        return session.post(url, data=body, headers=headers, stream=True, timeout=timeout,
                            proxies=proxies, verify=verify, allow_redirects=False)
    key = (url, tuple(headers.items()))
    kept = session.prepared.get(key)
    if kept is None or kept[2] != session_headers.version:
        kept = session.prepared[key] = _prepare(session, url, headers)
    prepared = kept[0].copy()
    if body:
        prepared.body = body
        prepared.headers["Content-Length"] = str(len(body))
    if session.cookies:  # set by an earlier response: sent as session.post sends them
        _add_cookies(session, prepared, kept[1])
    return session.send(prepared, stream=True, timeout=timeout, proxies=proxies,
                        verify=verify, allow_redirects=False)


def _prepare(session: _Session, url: str,
             headers: Mapping[str, str | None]) -> tuple[requests.PreparedRequest, int, int]:
    """What ``session.post`` prepares, less the body (Content-Length "0") and the cookies;
    with how many headers precede where the Cookie header goes, and the headers' version."""
    if len(session.prepared) >= _PREPARED_LIMIT:
        session.prepared.clear()
    assert isinstance(session.headers, _Headers)
    version = session.headers.version
    jar, session.cookies = session.cookies, requests.cookies.RequestsCookieJar()
    try:
        prepared = session.prepare_request(requests.Request("POST", url, headers=headers,
                                                            data=b""))
    finally:
        session.cookies = jar
    # PreparedRequest.prepare sets the Cookie header after the merged headers (session's,
    # then the request's, less None values), before Content-Length and an Authorization
    # made from credentials in the URL
    merged = {k.lower(): v for k, v in (*session.headers.items(), *headers.items())}
    return prepared, sum(v is not None for v in merged.values()), version


def _add_cookies(session: requests.Session, prepared: requests.PreparedRequest,
                 cookie_at: int) -> None:
    had_cookie = "Cookie" in prepared.headers
    jar = requests.cookies.merge_cookies(  # type: ignore[no-untyped-call]
        requests.cookies.RequestsCookieJar(), session.cookies)
    prepared.prepare_cookies(jar)
    if not had_cookie and "Cookie" in prepared.headers:
        items = list(prepared.headers.items())
        items.insert(cookie_at, items.pop())
        prepared.headers = requests.structures.CaseInsensitiveDict(items)
