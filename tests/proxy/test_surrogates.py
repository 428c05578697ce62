"""Half an emoji through the proxy, both ways (issue 43 part 4).

* ``ProxyApp`` in front of a model that splits every astral character between two chunks
  (the real ``openai-completions`` adapter against a local server): every frame the proxy
  writes is UTF-8, every event ``stream_proxy`` gives holds no lone surrogate, and the
  final message is the model's text.
* A proxy server that sends the halves as they come (pi's server: ``JSON.stringify`` writes
  a lone surrogate as ``"\\ud83d"``), deltas and a final tool call alike: ``stream_proxy``
  holds a high half back until its low one comes, and removes what stays unpaired.
* A context with lone surrogates (what a user typed, a tool's result): the client's request
  body is UTF-8 with them removed; a pi client that sends them escaped gets them removed
  from the upstream request.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from hypothesis import given, settings

from piagent.messages import TextContent, ToolResultMessage, UserMessage, message_to_dict
from piagent.models import Model
from piagent.providers import stream_simple
from piagent.proxy import ProxyStreamOptions, stream_proxy
from piagent.proxy._protocol import context_to_dict, model_to_dict
from piagent.stream import Context, StreamOptions
from tests.conftest import ASTRAL_TEXT, WAIT, assert_utf8, every_prefix, utf16_units
from tests.providers.sse_script import Reply, ScriptedServer, completions_body

from .conftest import TOKEN

ONCE = settings(max_examples=25, deadline=None)
MODEL = Model(id="m", api="openai-completions", provider="openai",
              base_url="https://api.openai.com/v1")


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedServer]:
    scripted = ScriptedServer()
    yield scripted
    scripted.close()


@pytest.fixture
def proxy(serve: Any, upstream: ScriptedServer) -> Any:
    """A proxy whose stream function is the real adapter, sent to the local model server."""
    def stream_fn(model: Model, context: Context, options: StreamOptions) -> Any:
        local = dataclasses.replace(model, base_url=upstream.url + "/v1")
        return stream_simple(local, context, dataclasses.replace(options, api_key="k"))
    return serve(stream_fn)


def _upstream_answers(upstream: ScriptedServer, text: str) -> tuple[str, str]:
    """The model server's next reply holds ``text`` split between chunks; what the user
    types: every code-unit prefix of ``text`` joined, and that cleaned (``every_prefix``)."""
    upstream.add(Reply(body=completions_body(text)))
    return every_prefix(text)


def _for_astral_texts(check: Callable[[str], None]) -> None:
    """``check(text)`` for ``ONCE``'s examples of ``ASTRAL_TEXT``."""
    @ONCE
    @given(text=ASTRAL_TEXT)
    def each(text: str) -> None:
        check(text)

    each()


def _checked(stream: Any, text: str) -> list[Any]:
    """The events, each checked as it arrives: no lone surrogate, partial values prefixes."""
    events = []
    for event in stream:
        message = (event.message if event.type == "done" else event.error
                   if event.type == "error" else event.partial)
        assert_utf8(message_to_dict(message), f"{event.type}'s message")
        assert_utf8(getattr(event, "delta", ""), f"{event.type}'s delta")
        for block in message.content:
            value = (block.arguments.get("a", "") if block.type == "toolCall" else
                     block.text if block.type == "text" else block.thinking)
            assert text.startswith(value), (event.type, value)
        events.append(event)
    return events


def test_a_split_pair_behind_the_proxy_arrives_whole(proxy: Any, upstream: ScriptedServer) -> None:
    _for_astral_texts(lambda text: _round_trip(proxy, upstream, text))


def _round_trip(server: Any, upstream: ScriptedServer, text: str) -> None:
    typed, clean = _upstream_answers(upstream, text)
    context = Context([UserMessage(typed)])
    stream = stream_proxy(MODEL, context,
                          ProxyStreamOptions(proxy_url=server.url, auth_token=TOKEN))
    _checked(stream, text)
    message = stream.result(WAIT)
    assert message.stop_reason == "toolUse", message.error_message
    assert [message.content[0].thinking, message.content[1].text] == [text, text]
    assert [c.arguments for c in message.content[2:]] == [{"a": text}, {"a": text}]
    # the client's request and the proxy's upstream request carry the user's text, cleaned
    sent = upstream.requests[-1].json["messages"]
    assert sent[-1]["content"] == clean


def _proxy_events(*events: dict[str, Any]) -> list[bytes]:
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]  # "\ud83d" escaped


def test_stream_proxy_makes_a_servers_halves_whole(serve: Any) -> None:
    answer: dict[str, list[bytes]] = {}  # the frames of the current example, its request body

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        answer["body"] = [environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))]
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        return answer["frames"]

    server = serve(app=app)

    _for_astral_texts(lambda text: _halves_from_the_server(server, answer, text))


def _halves_from_the_server(server: Any, answer: dict[str, list[bytes]], text: str) -> None:
    units = utf16_units(text)
    typed, clean = every_prefix(text)
    answer["frames"] = _proxy_events(
        {"type": "start"},
        {"type": "thinking_start", "contentIndex": 0},
        *({"type": "thinking_delta", "contentIndex": 0, "delta": u} for u in units),
        {"type": "thinking_end", "contentIndex": 0},
        {"type": "text_start", "contentIndex": 1},
        *({"type": "text_delta", "contentIndex": 1, "delta": u} for u in units),
        {"type": "text_end", "contentIndex": 1},
        {"type": "toolcall_start", "contentIndex": 2, "id": "call_1", "toolName": "echo"},
        *({"type": "toolcall_delta", "contentIndex": 2, "delta": c}
          for c in json.dumps({"a": text})),
        {"type": "toolcall_end", "contentIndex": 2,
         "toolCall": {"type": "toolCall", "id": "call_1", "name": "echo",
                      "arguments": {"a": text, "b": typed}}},
        {"type": "done", "reason": "toolUse",
         "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0,
                   "totalTokens": 2, "cost": {"input": 0, "output": 0, "cacheRead": 0,
                                              "cacheWrite": 0, "total": 0}}})
    context = Context([UserMessage(typed),
                       ToolResultMessage("call_0", "echo", [TextContent(typed)], None)])
    stream = stream_proxy(MODEL, context,
                          ProxyStreamOptions(proxy_url=server.url, auth_token=TOKEN))
    events = _checked(stream, text)
    message = stream.result(WAIT)
    assert message.stop_reason == "toolUse", message.error_message
    assert [message.content[0].thinking, message.content[1].text] == [text, text]
    assert message.content[2].arguments == {"a": text, "b": clean}  # the server's, cleaned
    assert "".join(e.delta for e in events if e.type == "text_delta") == text
    sent = json.loads(answer["body"][0].decode("utf-8"))["context"]["messages"]
    assert [sent[0]["content"], sent[1]["content"][0]["text"]] == [clean, clean]


def test_a_pi_clients_escaped_halves_leave_the_proxy_removed(proxy: Any, upstream: ScriptedServer) -> None:
    _for_astral_texts(lambda text: _escaped_halves_to_the_server(proxy, upstream, text))


def _escaped_halves_to_the_server(server: Any, upstream: ScriptedServer, text: str) -> None:
    typed, clean = _upstream_answers(upstream, text)
    envelope = {"model": model_to_dict(MODEL),
                "context": context_to_dict(Context([UserMessage(typed)])),
                "options": {}}
    body = json.dumps(envelope).encode()  # ascii: what JSON.stringify sends for a half
    with requests.post(server.url + "/api/stream", data=body, stream=True, timeout=WAIT,
                       headers={"Authorization": f"Bearer {TOKEN}",
                                "Content-Type": "application/json"}) as response:
        assert response.status_code == 200
        frames = [line for line in response.iter_lines() if line.startswith(b"data: ")]
    events = [json.loads(line[6:].decode("utf-8")) for line in frames]
    for event in events:
        assert_utf8(event, f"the proxy's {event['type']} frame")
    assert events[-1]["type"] == "done", events[-1]
    assert upstream.requests[-1].json["messages"][-1]["content"] == clean
