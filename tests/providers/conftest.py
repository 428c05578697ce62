"""Fixtures for provider tests: ``sse_server`` (a ``ScriptedServer``) and ``other_server``
(a second one: another origin); ``caches_on`` (the request caches as in production, for
tests that count conversions: the suite otherwise runs them in check mode). The server and its
script helpers are documented in ``sse_script.py``; the proxy-free environment,
``no_piagent_threads`` and ``WAIT`` are the whole suite's (``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from piagent.messages import AssistantMessage, UserMessage
from piagent.providers._keep import set_cache_mode
from piagent.stream import AssistantMessageEventStream, Context, StreamOptions
from tests.conftest import WAIT

from .sse_script import Reply, ScriptedServer


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


@pytest.fixture
def caches_on() -> Iterator[None]:
    previous = set_cache_mode("on")
    try:
        yield
    finally:
        set_cache_mode(previous)


def adapter_helpers(stream_fn: Callable[..., AssistantMessageEventStream],
                    make_model: Callable[[ScriptedServer], Any], key: str, question: str
                    ) -> tuple[Callable[..., Context], Callable[..., AssistantMessageEventStream],
                               Callable[..., AssistantMessage]]:
    """An adapter test file's three helpers: ``context(*messages)`` (``question`` when none),
    ``stream(server, context=None, model=None, **options)`` and ``result(server, body,
    **reply)`` (one scripted reply, the final message)."""

    def context(*messages: object) -> Context:
        return Context(messages=list(messages) or [UserMessage(content=question)])  # type: ignore[arg-type]

    def stream(server: ScriptedServer, context_: Context | None = None, model: Any = None,
               **options: object) -> AssistantMessageEventStream:
        opts = StreamOptions(api_key=key, **options)  # type: ignore[arg-type]
        return stream_fn(model or make_model(server), context_ or context(), opts)

    def result(server: ScriptedServer, body: list[object], **reply: object) -> AssistantMessage:
        server.add(Reply(body=body, **reply))  # type: ignore[arg-type]
        return stream(server).result(WAIT)

    return context, stream, result
