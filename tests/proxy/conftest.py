"""Fixtures for proxy tests: ``serve`` (a ``ProxyServer`` factory on 127.0.0.1:0), a
proxy-free environment, and a check that no piagent thread outlives a test."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from piagent.proxy import ProxyApp, ProxyServer

WAIT = 5.0
TOKEN = "test-token-123"


def join_piagent_threads() -> list[str]:
    """Join every ``piagent-*`` thread (bounded); return the names still alive."""
    for thread in threading.enumerate():
        if thread.name.startswith("piagent-"):
            thread.join(WAIT)
    return [t.name for t in threading.enumerate() if t.name.startswith("piagent-")]


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
                 "http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def serve() -> Iterator[Callable[..., ProxyServer]]:
    """``serve(stream_fn, **ProxyApp kwargs)`` or ``serve(app=wsgi_app)``: a started server."""
    servers: list[ProxyServer] = []

    def start(stream_fn: Any = None, *, app: Any = None, **kwargs: Any) -> ProxyServer:
        if app is None:
            kwargs.setdefault("auth_tokens", [TOKEN])
            kwargs.setdefault("heartbeat_s", 0.05)
            app = ProxyApp(stream_fn, **kwargs)
        server = ProxyServer(app).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()
    assert join_piagent_threads() == []
