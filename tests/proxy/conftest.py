"""Fixtures for proxy tests: ``serve`` (a ``ProxyServer`` factory on 127.0.0.1:0) that
checks, at teardown, that no piagent thread outlives the test; ``TOKEN``, the servers'
bearer token; ``SCRIPTED_BASE_URLS``, what the scripted model may be sent to (the default
for ``serve``). ``WAIT`` and the proxy-free environment are the suite's (``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from piagent.proxy import ProxyApp, ProxyServer
from tests.conftest import join_piagent_threads

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
