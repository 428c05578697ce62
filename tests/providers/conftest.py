"""Fixtures for provider tests: ``sse_server`` (a ``ScriptedServer``) and ``other_server``
(a second one: another origin). The server and its
script helpers are documented in ``sse_script.py``; the proxy-free environment,
``no_piagent_threads`` and ``WAIT`` are the whole suite's (``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .sse_script import ScriptedServer


def _scripted_server() -> Iterator[ScriptedServer]:
    server = ScriptedServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def sse_server() -> Iterator[ScriptedServer]:
    yield from _scripted_server()


@pytest.fixture
def other_server() -> Iterator[ScriptedServer]:
    yield from _scripted_server()
