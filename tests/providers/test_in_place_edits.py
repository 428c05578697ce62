"""An in-place edit of an old tool result is in the very next request: on every adapter,
through the proxy, in each of three forms (issue 44, cause 1).

The transcript starts with an answered tool call whose result says ``ORIGINAL``; the first
prompt's request carries it (and fills the request caches); then the result is edited in
place and the next request must say ``[compacted]`` and nothing of ``ORIGINAL``:

* ``content_list_mutated``: ``transform_context`` replaces the content list's block in place;
* ``list_reassigned``: ``transform_context`` assigns a new content list to the same message;
* ``state_edited_between_prompts``: the application edits the block's text through
  ``agent.state.messages`` before the second prompt.

The caches run as in production here (``caches_on``; elsewhere the suite checks them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from piagent import Agent
from piagent.abort import AbortSignal
from piagent.messages import (
    AgentMessage,
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from piagent.models import Model
from piagent.proxy import ProxyApp, ProxyServer, proxy_stream_fn
from tests.conftest import WAIT, join_piagent_threads

from .sse_script import Reply, ScriptedServer, sse

pytestmark = pytest.mark.usefixtures("caches_on")

ORIGINAL = "ORIGINAL weather report: 21 degrees and sunny in Paris"
COMPACTED = "[compacted]"
KEY = "sk-in-place-SECRET-123"
PROXY_TOKEN = "in-place-proxy-token"


def _completions_text() -> list[Any]:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
    return [sse(chunk), b"data: [DONE]\n\n"]


def _responses_text() -> list[Any]:
    item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}]}
    events = [
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**item, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", "output_index": 0, "content_index": 0,
         "item_id": "msg_1", "part": {"type": "output_text", "text": "", "annotations": []}},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
         "item_id": "msg_1", "delta": "ok"},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {
            "id": "resp_1", "status": "completed",
            "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}}},
    ]
    return [sse(event, event=event["type"]) for event in events]


def _anthropic_text() -> list[Any]:
    def ev(name: str, data: dict[str, Any]) -> bytes:
        return sse({"type": name, **data}, event=name)

    return [ev("message_start", {"message": {"id": "m1", "type": "message",
                                             "role": "assistant", "content": [],
                                             "usage": {"input_tokens": 5, "output_tokens": 1}}}),
            ev("content_block_start", {"index": 0, "content_block": {"type": "text",
                                                                      "text": ""}}),
            ev("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                             "text": "ok"}}),
            ev("content_block_stop", {"index": 0}),
            ev("message_delta", {"delta": {"stop_reason": "end_turn"},
                                 "usage": {"output_tokens": 1}}),
            ev("message_stop", {})]


def _google_text() -> list[Any]:
    return [sse({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1,
                                   "totalTokenCount": 6}})]


# api -> (base URL path under the server, provider, the text reply's body)
ADAPTERS: dict[str, tuple[str, str, Callable[[], list[Any]]]] = {
    "openai-completions": ("/v1", "openai", _completions_text),
    "openai-responses": ("/v1", "openai", _responses_text),
    "anthropic-messages": ("", "anthropic", _anthropic_text),
    "google-generative-ai": ("/v1beta", "google", _google_text),
}


def _model(server: ScriptedServer, api: str) -> Model:
    path, provider, _ = ADAPTERS[api]
    return Model(id="model-x", api=api, provider=provider, base_url=server.url + path,
                 max_tokens=1000)


def _history(model: Model) -> list[AgentMessage]:
    call = ToolCall("call_1", "get_weather", {"city": "Paris"})
    return [
        UserMessage("Weather in Paris?"),
        AssistantMessage([call], api=model.api, provider=model.provider, model=model.id,
                         stop_reason="toolUse"),
        ToolResultMessage("call_1", "get_weather", [TextContent(ORIGINAL)]),
        AssistantMessage([TextContent("It is sunny.")], api=model.api,
                         provider=model.provider, model=model.id),
    ]


def _old_result(messages: list[AgentMessage]) -> ToolResultMessage:
    found = [m for m in messages if isinstance(m, ToolResultMessage)]
    assert found, "the transcript lost its tool result"
    return found[0]


FORMS = ("content_list_mutated", "list_reassigned", "state_edited_between_prompts")


@pytest.fixture
def proxy(sse_server: ScriptedServer) -> Iterator[ProxyServer]:
    allowed: dict[str, list[str]] = {}
    for path, provider, _ in ADAPTERS.values():
        allowed.setdefault(provider, []).append(sse_server.url + path)
    server = ProxyServer(ProxyApp(auth_tokens=[PROXY_TOKEN], get_api_key=lambda _: KEY,
                                  heartbeat_s=0.05, allowed_base_urls=allowed)).start()
    try:
        yield server
    finally:
        server.close()
        assert join_piagent_threads() == []


def _run(server: ScriptedServer, api: str, form: str, proxy: ProxyServer | None) -> None:
    model = _model(server, api)
    reply = ADAPTERS[api][2]
    edit = {"now": False}

    def transform(messages: list[AgentMessage], signal: AbortSignal) -> list[AgentMessage]:
        if edit["now"]:
            result = _old_result(messages)
            if form == "content_list_mutated":
                result.content[0] = TextContent(COMPACTED)
            elif form == "list_reassigned":
                result.content = [TextContent(COMPACTED)]
        return messages

    extra: dict[str, Any] = {}
    if proxy is not None:
        extra["stream_fn"] = proxy_stream_fn(proxy.url, PROXY_TOKEN)
    agent = Agent(model=model, messages=_history(model), api_key=KEY,
                  transform_context=transform, **extra)
    server.add(Reply(body=reply()))
    run = agent.prompt("And tomorrow?", timeout=WAIT)
    assert run.error_message is None
    first = server.requests[0].body.decode("utf-8")
    assert ORIGINAL in first and COMPACTED not in first

    if form == "state_edited_between_prompts":
        block = _old_result(agent.state.messages).content[0]
        assert isinstance(block, TextContent)
        block.text = COMPACTED
    else:
        edit["now"] = True
    server.add(Reply(body=reply()))
    run = agent.prompt("And the day after?", timeout=WAIT)
    assert run.error_message is None
    assert COMPACTED in _old_result(agent.state.messages).content[0].text  # type: ignore[union-attr]
    second = server.requests[1].body.decode("utf-8")
    json.loads(second)
    assert COMPACTED in second
    assert ORIGINAL not in second


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("api", list(ADAPTERS))
def test_an_in_place_edit_is_in_the_very_next_request(sse_server: ScriptedServer, api: str,
                                                      form: str) -> None:
    _run(sse_server, api, form, None)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("api", list(ADAPTERS))
def test_an_in_place_edit_is_in_the_very_next_request_through_the_proxy(
        sse_server: ScriptedServer, proxy: ProxyServer, api: str, form: str) -> None:
    _run(sse_server, api, form, proxy)
