"""Fixtures for provider tests: ``sse_server`` (a ``ScriptedServer``). The server and its
script helpers are documented in ``sse_script.py``; the proxy-free environment,
``no_piagent_threads`` and ``WAIT`` are the whole suite's (``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .sse_script import ScriptedServer


@pytest.fixture
def sse_server() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    try:
        yield server
    finally:
        server.close()
