"""``HttpClient``: the pool of ``requests`` sessions of one provider adapter."""

from __future__ import annotations

import os
import threading
import urllib.parse
from collections.abc import Callable

import requests
import requests.utils

from ..stream import runs_in_progress, when_no_runs
from ._sockets import new_session

__all__ = ["HttpClient"]

_IDLE_SESSIONS = 4  # idle sessions kept once no request is in flight and no run going on
_MAX_IDLE_SESSIONS = 4096  # at most, while some are (each holds a connection: an fd)
_URLS = 256  # URLs (and origins) whose environment is kept


class HttpClient:
    """The sessions of one provider adapter: connections are reused across requests.

    A ``requests.Session`` is not documented as thread-safe, so each request checks one
    out of a pool and returns it afterwards; concurrent requests use different sessions
    and sequential ones reuse the same connections. While requests are in flight or runs of
    the loop go on (``piagent.stream.runs_in_progress``), the pool keeps as many idle
    sessions as were ever in use at once (at most 4,096), so a thousand conversations in
    one process reuse their connections rather than open one per request. Once neither
    is, the idle sessions beyond the 4 latest used are closed: a process whose load has
    passed does not hold a connection (a file descriptor, a socket on the server) per
    conversation it once ran.

    Thread safety: every method may be called from any thread.
    """

    def __init__(self, name: str, session_factory: Callable[[], requests.Session] = new_session):
        self.name = name
        self._session_factory = session_factory
        # guards _idle, _out, _keep, _environment and _by_url
        self._idle_lock = threading.Lock()
        self._idle: list[requests.Session] = []
        self._out = 0  # sessions checked out now
        self._keep = _IDLE_SESSIONS  # idle sessions kept while some are out: the most ever out
        # by origin, and by URL (so a request does not split its URL): each bounded by _URLS
        self._environment: dict[str, tuple[dict[str, str], bool | str]] = {}
        self._by_url: dict[str, tuple[dict[str, str], bool | str]] = {}
        when_no_runs(self.close_surplus)  # held weakly: goes with the client

    def environment(self, url: str) -> tuple[dict[str, str], bool | str]:
        """Proxies and TLS verification for ``url`` from the environment, as requests would
        read them with ``trust_env`` (``HTTPS_PROXY``, ``NO_PROXY``, ``REQUESTS_CA_BUNDLE``,
        ``CURL_CA_BUNDLE``); read once per origin (of the latest 256), kept per URL."""
        with self._idle_lock:
            cached = self._by_url.get(url)
        if cached is not None:
            return cached
        parts = urllib.parse.urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        with self._idle_lock:
            cached = self._environment.get(origin)
        if cached is None:
            proxies = dict(requests.utils.get_environ_proxies(url))
            verify: bool | str = (os.environ.get("REQUESTS_CA_BUNDLE")
                                  or os.environ.get("CURL_CA_BUNDLE") or True)
            if parts.scheme == "http" and all(key == "no" for key in proxies):
                verify = True  # no TLS to verify; a bundle path would be stat()ed per request
            cached = (proxies, verify)
        with self._idle_lock:
            if len(self._environment) >= _URLS and origin not in self._environment:
                self._environment.clear()  # past _URLS origins: read again
            cached = self._environment.setdefault(origin, cached)
            if len(self._by_url) >= _URLS:
                self._by_url.clear()
            self._by_url[url] = cached
        return cached

    def checkout(self) -> requests.Session:
        """An idle session, or a new one."""
        with self._idle_lock:
            self._out += 1
            if self._out > self._keep:
                self._keep = min(self._out, _MAX_IDLE_SESSIONS)
            if self._idle:
                return self._idle.pop()
        try:
            return self._session_factory()
        except BaseException:
            with self._idle_lock:
                self._out -= 1
            raise

    def checkin(self, session: requests.Session) -> None:
        """Give a session back for reuse (closed if the pool is full, or if it was the last
        request in flight and no run goes on: then only the 4 latest used are kept)."""
        with self._idle_lock:
            self._out -= 1
            kept = len(self._idle) < self._keep
            if kept:
                self._idle.append(session)
            surplus = self._out == 0 and len(self._idle) > _IDLE_SESSIONS
        if not kept:
            session.close()
        if surplus and not runs_in_progress():
            self.close_surplus()

    def close_surplus(self) -> None:
        """Close the idle sessions beyond the 4 latest used if no request is in flight (the
        last run to end calls it; so does the last request back when no run goes on)."""
        with self._idle_lock:
            if self._out or len(self._idle) <= _IDLE_SESSIONS:
                return
            surplus = self._idle[:-_IDLE_SESSIONS]  # the latest used are popped first
            del self._idle[:-_IDLE_SESSIONS]
        for session in surplus:  # outside the lock: closing a socket may block
            session.close()

    def close(self) -> None:
        """Close every idle session (in-flight ones close when they come back)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for session in idle:
            session.close()

