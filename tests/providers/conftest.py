"""Fixtures for provider tests: ``sse_server`` (a ``ScriptedServer``), proxy-free env,
``no_piagent_threads``. The server and its script helpers are documented in
``sse_script.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .sse_script import ScriptedServer, join_piagent_threads


@pytest.fixture
def sse_server() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
                 "http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_piagent_threads() -> Iterator[None]:
    yield
    assert join_piagent_threads() == []
