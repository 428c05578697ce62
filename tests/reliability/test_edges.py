"""The remaining edge cases of issue #15, each fixed and kept fixed.

* Usage counts above 2**53 survive every JSON round trip exactly (never through a float):
  the messages' JSON, agent events, the session stores, the proxy's wire form, and a
  provider's own usage fields.
* A provider stream its consumer abandons closes its socket as soon as the last reference
  goes, without the cyclic garbage collector (the stream no longer sits in a cycle with
  its producer and builder), and no ``ResourceWarning: unclosed socket`` is raised.
"""

from __future__ import annotations

import gc
import json
import warnings
import weakref
from pathlib import Path

import pytest

from piagent import (
    AbortController,
    Agent,
    AssistantMessage,
    Context,
    Model,
    StreamOptions,
    TextContent,
    Usage,
    UserMessage,
    event_to_dict,
    message_from_dict,
    message_to_dict,
    messages_from_json,
    messages_to_json,
)
from piagent.providers import stream_simple
from piagent.proxy import ProxyApp, ProxyServer, ProxyStreamOptions, stream_proxy
from piagent.sessions import JsonlStore, MemoryStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text
from tests.conftest import WAIT, piagent_threads

from .conftest import FIGURES
from .faultserver import APIS, FAULTS, PROVIDER, Fault, FaultServer, Writer, good, sse

BIG = 2**53 + 1  # the first integer a float cannot hold
HUGE = 2**70 + 3


def big_usage() -> Usage:
    return Usage(input=BIG, output=HUGE, cache_read=BIG + 2, cache_write=2**64 - 1,
                 total_tokens=BIG + HUGE + BIG + 2 + 2**64 - 1)


def big_message() -> AssistantMessage:
    return AssistantMessage(content=[TextContent("hi")], api="a", provider="p", model="m",
                            usage=big_usage(), stop_reason="stop", timestamp=1)


def assert_big(usage: Usage) -> None:
    expected = big_usage()
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write,
            usage.total_tokens) == (expected.input, expected.output, expected.cache_read,
                                    expected.cache_write, expected.total_tokens)
    assert all(type(v) is int for v in (usage.input, usage.output, usage.cache_read,
                                         usage.cache_write, usage.total_tokens))


# --- usage above 2**53 -----------------------------------------------------------------------


def test_big_usage_survives_the_messages_json() -> None:
    text = messages_to_json([big_message()])
    assert str(BIG) in text and str(HUGE) in text  # written as integers, not 9.007e15
    (back,) = messages_from_json(text)
    assert_big(back.usage)
    assert_big(message_from_dict(json.loads(json.dumps(message_to_dict(big_message())))).usage)


def test_big_usage_survives_an_agent_event_as_json() -> None:
    scripted = ScriptedStreamFn([big_message()])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    seen: list[dict[str, object]] = []
    agent.subscribe(lambda event, signal: seen.append(event_to_dict(event)))
    agent.prompt("hi", timeout=WAIT)
    ends = [json.loads(json.dumps(e)) for e in seen if e["type"] == "message_end"]
    assistant = message_from_dict(ends[-1]["message"])
    assert_big(assistant.usage)


@pytest.mark.parametrize("store_kind", ["memory", "sqlite", "jsonl"])
def test_big_usage_survives_a_session_store(store_kind: str, tmp_path: Path) -> None:
    if store_kind == "memory":
        store: MemoryStore | SQLiteStore | JsonlStore = MemoryStore()
    elif store_kind == "sqlite":
        store = SQLiteStore(str(tmp_path / "s.db"))
    else:
        store = JsonlStore(str(tmp_path))
    try:
        store.append("s1", [UserMessage(content="hi"), big_message()])
        loaded = store.load("s1")
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
    assert isinstance(loaded[1], AssistantMessage)
    assert_big(loaded[1].usage)


def test_big_usage_survives_the_proxy() -> None:
    scripted = ScriptedStreamFn([big_message()])
    app = ProxyApp(stream_fn=scripted, auth_tokens=["tok-123456"],
                   allowed_base_urls={"scripted": scripted.model.base_url})
    with ProxyServer(app) as server:
        server.start()
        options = ProxyStreamOptions(proxy_url=server.url, auth_token="tok-123456")
        message = stream_proxy(scripted.model, Context([UserMessage(content="hi")]),
                               options).result(WAIT)
    assert message.stop_reason == "stop", message.error_message
    assert_big(message.usage)


def _usage_fault(w: Writer, api: str, hit: int) -> None:
    events = good(api)
    if api == "openai-completions":
        events[-2] = sse({"id": "c1", "choices": [], "usage": {
            "prompt_tokens": BIG, "completion_tokens": HUGE, "total_tokens": BIG + HUGE}})
    elif api == "openai-responses":
        events[-1] = sse({"type": "response.completed", "response": {
            "id": "r1", "status": "completed", "usage": {
                "input_tokens": BIG, "output_tokens": HUGE, "total_tokens": BIG + HUGE}}},
            event="response.completed")
    elif api == "anthropic-messages":
        events[-2] = sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                          "usage": {"input_tokens": BIG, "output_tokens": HUGE}},
                         event="message_delta")
    else:
        text = json.loads(events[-1][len(b"data: "):])
        text["usageMetadata"] = {"promptTokenCount": BIG, "candidatesTokenCount": HUGE,
                                 "totalTokenCount": BIG + HUGE}
        events[-1] = sse(text)
    w.head()
    w.body(events)


@pytest.mark.parametrize("api", APIS)
def test_big_usage_from_a_provider_is_exact(api: str) -> None:
    faults = {"usage": Fault("usage", _usage_fault, "ok")}
    with FaultServer(faults) as server:
        model = Model(id="m", api=api, provider=PROVIDER[api],
                      base_url=server.base_url("usage", api))
        message = stream_simple(model, Context([UserMessage(content="hi")]),
                                StreamOptions(api_key="k")).result(WAIT)
    assert message.stop_reason == "stop", message.error_message
    assert message.usage.input == BIG
    assert message.usage.output == HUGE
    (back,) = messages_from_json(messages_to_json([message]))
    assert (back.usage.input, back.usage.output) == (BIG, HUGE)


# --- an abandoned stream closes its socket at once -------------------------------------------


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("with_signal", [False, True], ids=["no-signal", "signal"])
def test_an_abandoned_stream_closes_its_socket_without_the_gc(
        no_gc: None, api: str, with_signal: bool) -> None:
    controller = AbortController()  # kept alive: a live signal must not keep the stream
    with FaultServer(FAULTS) as server, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        model = Model(id="m", api=api, provider=PROVIDER[api],
                      base_url=server.base_url("stall-mid-stream", api))
        options = StreamOptions(api_key="k", signal=controller.signal if with_signal else None)
        stream = stream_simple(model, Context([UserMessage(content="hi")]), options)
        events = iter(stream)
        assert next(events).type == "start"  # the response is open, the body half read
        assert server.stalled("stall-mid-stream", api).wait(WAIT)
        alive = weakref.ref(stream)
        del events, stream  # the consumer walks away; the GC stays off
        assert alive() is None, "the abandoned stream is still referenced (a cycle)"
        assert server.client_closed("stall-mid-stream", api).wait(WAIT), \
            "the socket stayed open after the stream's last reference went"
        gc.collect()  # anything still in a cycle would warn now
    unclosed = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == [], [str(w.message) for w in unclosed]
    assert piagent_threads() == []
    FIGURES.add("edges.abandoned_streams")


def test_an_abandoned_scripted_stream_is_freed_without_the_gc(no_gc: None) -> None:
    scripted = ScriptedStreamFn([assistant_text("a long answer " * 20)])
    stream = scripted(scripted.model, Context([UserMessage(content="hi")]), StreamOptions())
    events = iter(stream)
    next(events)
    alive = weakref.ref(stream)
    del events, stream
    assert alive() is None
