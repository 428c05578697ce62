"""``stream_anthropic`` against a real local server speaking the Messages API's SSE.

Covers: providers.md §5.3's example stream replayed (thinking + signature, text, tool_use
with ``input_json_delta`` reassembly, usage with cache tokens, cost); redacted thinking;
stop-reason mapping; cache-write usage and cost; each error kind (HTTP 4xx/5xx with the
provider's text and no API key, 529 retried, in-stream ``error`` events, malformed JSON,
no ``message_stop``, no stop reason, refusal, a connection cut mid-event, a non-SSE
answer, a missing key); abort while the stream stalls; and the request (URL, headers,
system prompt and ``cache_control`` placement, tools, tool results, images, thinking,
mid-conversation system messages, replay of thinking and redacted thinking).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from piagent.abort import AbortController
from piagent.messages import (
    AssistantMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
)
from piagent.models import Model, ModelCost
from piagent.providers import get_model, stream_simple
from piagent.providers.anthropic import build_anthropic_request, stream_anthropic
from piagent.stream import StreamOptions
from tests.conftest import WAIT

from .conftest import adapter_helpers
from .sse_script import CUT, Reply, ScriptedServer, Stall, sse

KEY = "sk-ant-test-SECRET-0123456789"
SONNET_COST = ModelCost(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)


def _model(server: ScriptedServer | None = None, **fields: object) -> Model:
    base = server.url if server is not None else "https://api.anthropic.com"
    values: dict[str, object] = {"id": "claude-sonnet-4-5", "api": "anthropic-messages",
                                 "provider": "anthropic", "base_url": base,
                                 "reasoning": True, "input": ("text", "image"),
                                 "cost": SONNET_COST, "max_tokens": 64000}
    values.update(fields)
    return Model(**values)  # type: ignore[arg-type]


def _ev(name: str, data: dict[str, object]) -> bytes:
    return sse({"type": name, **data}, event=name)


def _start(input_tokens: int = 50, cache_read: int = 1200, cache_write: int = 0) -> bytes:
    return _ev("message_start", {"message": {
        "id": "msg_01", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": cache_write,
                  "cache_read_input_tokens": cache_read, "output_tokens": 1}}})


def _block_start(index: int, block: dict[str, object]) -> bytes:
    return _ev("content_block_start", {"index": index, "content_block": block})


def _delta(index: int, delta: dict[str, object]) -> bytes:
    return _ev("content_block_delta", {"index": index, "delta": delta})


def _stop(index: int) -> bytes:
    return _ev("content_block_stop", {"index": index})


def _message_delta(stop_reason: str | None, output: int = 85, **usage: int) -> bytes:
    return _ev("message_delta", {"delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                 "usage": {"output_tokens": output, **usage}})


MESSAGE_STOP = _ev("message_stop", {})
PING = _ev("ping", {})


def _text_stream(text: str = "Hello", stop_reason: str = "end_turn") -> list[bytes]:
    return [_start(), _block_start(0, {"type": "text", "text": ""}),
            _delta(0, {"type": "text_delta", "text": text}), _stop(0),
            _message_delta(stop_reason, 5), MESSAGE_STOP]


# providers.md §5.3, byte for byte in content
EXAMPLE = [
    _start(),
    _block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
    PING,
    _delta(0, {"type": "thinking_delta",
               "thinking": "The user wants the weather; call the tool."}),
    _delta(0, {"type": "signature_delta", "signature": "EqQBCkgIARABGAIiQFakeSignature=="}),
    _stop(0),
    _block_start(1, {"type": "text", "text": ""}),
    _delta(1, {"type": "text_delta", "text": "Let me check."}),
    _stop(1),
    _block_start(2, {"type": "tool_use", "id": "toolu_01A", "name": "get_weather",
                     "input": {}}),
    _delta(2, {"type": "input_json_delta", "partial_json": ""}),
    _delta(2, {"type": "input_json_delta", "partial_json": "{\"city\": \"Pa"}),
    _delta(2, {"type": "input_json_delta", "partial_json": "ris\"}"}),
    _stop(2),
    _message_delta("tool_use", 85),
    MESSAGE_STOP,
]


_context, _stream, _result = adapter_helpers(stream_anthropic, _model, KEY, "What's the weather?")


# --- the example stream ---------------------------------------------------------------------


def test_example_stream_event_sequence_and_message(sse_server, no_piagent_threads):
    """§5.3 replays to pi's event sequence, with the signature, arguments and usage."""
    sse_server.add(Reply(body=EXAMPLE))
    stream = _stream(sse_server)
    events = list(stream)
    assert [e.type for e in events] == [
        "start", "thinking_start", "thinking_delta", "thinking_end",
        "text_start", "text_delta", "text_end",
        "toolcall_start", "toolcall_delta", "toolcall_delta", "toolcall_delta", "toolcall_end",
        "done"]
    assert [getattr(e, "content_index", None) for e in events] == [
        None, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, None]
    message = stream.result(WAIT)
    assert events[-1].reason == "toolUse"
    assert message.stop_reason == "toolUse"
    assert message.error_message is None
    assert (message.api, message.provider, message.model) == (
        "anthropic-messages", "anthropic", "claude-sonnet-4-5")
    assert message.content == [
        ThinkingContent("The user wants the weather; call the tool.",
                        thinking_signature="EqQBCkgIARABGAIiQFakeSignature=="),
        TextContent("Let me check."),
        ToolCall(id="toolu_01A", name="get_weather", arguments={"city": "Paris"}),
    ]
    assert events[3].content == "The user wants the weather; call the tool."
    assert events[11].tool_call == ToolCall("toolu_01A", "get_weather", {"city": "Paris"})
    usage = message.usage
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write,
            usage.total_tokens) == (50, 85, 1200, 0, 1335)
    assert usage.cost.input == pytest.approx(50 * 3.0 / 1e6)
    assert usage.cost.output == pytest.approx(85 * 15.0 / 1e6)
    assert usage.cost.cache_read == pytest.approx(1200 * 0.3 / 1e6)
    assert usage.cost.total == pytest.approx((150 + 1275 + 360) / 1e6)


def test_tool_arguments_are_parsed_while_streaming(sse_server):
    """The middle input_json_delta already shows the partial argument object."""
    stalls = [Stall() for _ in range(3)]
    body: list[object] = [*EXAMPLE[:10]]
    for stall, delta in zip(stalls, EXAMPLE[10:13], strict=True):
        body += [delta, stall]
    body += EXAMPLE[13:]
    sse_server.add(Reply(body=body))
    seen = []
    for event in _stream(sse_server):
        if event.type == "toolcall_delta":
            arguments = event.partial.content[event.content_index].arguments
            seen.append((event.delta, dict(arguments)))
            stalls[len(seen) - 1].release.set()  # the next delta comes only after we looked
    assert seen == [("", {}), ('{"city": "Pa', {"city": "Pa"}), ('ris"}', {"city": "Paris"})]


def test_redacted_thinking(sse_server):
    """A redacted_thinking block keeps its data as the signature, with placeholder text."""
    body = [_start(), _block_start(0, {"type": "redacted_thinking", "data": "EmwKAhgBFake"}),
            _stop(0), _block_start(1, {"type": "text", "text": ""}),
            _delta(1, {"type": "text_delta", "text": "Done."}), _stop(1),
            _message_delta("end_turn", 7), MESSAGE_STOP]
    sse_server.add(Reply(body=body))
    stream = _stream(sse_server)
    types = [e.type for e in stream]
    assert types == ["start", "thinking_start", "thinking_end", "text_start", "text_delta",
                     "text_end", "done"]
    message = stream.result(WAIT)
    assert message.content == [
        ThinkingContent("[Reasoning redacted]", thinking_signature="EmwKAhgBFake", redacted=True),
        TextContent("Done.")]


@pytest.mark.parametrize(("wire", "ours"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("pause_turn", "stop"),
    ("max_tokens", "length"), ("tool_use", "toolUse")])
def test_stop_reasons(sse_server, wire, ours):
    message = _result(sse_server, _text_stream(stop_reason=wire))
    assert message.stop_reason == ours
    assert message.text == "Hello"


def test_cache_write_usage_and_message_delta_overrides(sse_server):
    """Cache writes are counted and priced; message_delta fields overwrite when present."""
    body = [_start(input_tokens=10, cache_read=0, cache_write=0),
            _block_start(0, {"type": "text", "text": ""}),
            _delta(0, {"type": "text_delta", "text": "x"}), _stop(0),
            _message_delta("end_turn", 20, input_tokens=12, cache_creation_input_tokens=3000),
            MESSAGE_STOP]
    usage = _result(sse_server, body).usage
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write,
            usage.total_tokens) == (12, 20, 0, 3000, 3032)
    assert usage.cost.cache_write == pytest.approx(3000 * 3.75 / 1e6)


def test_one_hour_cache_writes_thinking_tokens_and_the_response_record(sse_server):
    """pi-ai 1.6: the 1-hour part of the cache writes (``cache_creation``) is kept and priced
    at twice the input price; ``output_tokens_details.thinking_tokens`` is the reasoning part
    of the output; the message records the response's id, the answering model (another
    snapshot than the requested id) and the raw stop reason."""
    start = _ev("message_start", {"message": {
        "id": "msg_1h", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": None,
        "usage": {"input_tokens": 10, "cache_creation_input_tokens": 3000,
                  "cache_read_input_tokens": 0, "output_tokens": 1,
                  "cache_creation": {"ephemeral_5m_input_tokens": 1000,
                                     "ephemeral_1h_input_tokens": 2000}}}})
    delta = _ev("message_delta", {
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 20, "output_tokens_details": {"thinking_tokens": 12}}})
    body = [start, _block_start(0, {"type": "text", "text": ""}),
            _delta(0, {"type": "text_delta", "text": "x"}), _stop(0), delta, MESSAGE_STOP]
    message = _result(sse_server, body)
    usage = message.usage
    assert (usage.cache_write, usage.cache_write_1h, usage.reasoning) == (3000, 2000, 12)
    assert usage.cost.cache_write == pytest.approx((1000 * 3.75 + 2000 * 3.0 * 2) / 1e6)
    assert (message.response_id, message.response_model, message.raw_stop_reason) == (
        "msg_1h", "claude-sonnet-4-5-20250929", "end_turn")
    plain = _result(sse_server, _text_stream())
    assert (plain.usage.cache_write_1h, plain.usage.reasoning) == (None, None)


def test_split_writes_reassemble(sse_server):
    """Events split mid-line, mid-UTF-8 and across CRLF boundaries still parse."""
    raw = b"".join(_text_stream("h\u00e9llo \u2705"))
    cut = raw.index("\u2705".encode()) + 1
    pieces: list[object] = [raw[:7], raw[7:cut], raw[cut:]]
    assert _result(sse_server, pieces).text == "h\u00e9llo \u2705"


# --- errors -------------------------------------------------------------------------------


def test_http_400_has_the_provider_text_and_no_key(sse_server):
    body = json.dumps({"type": "error", "error": {
        "type": "invalid_request_error",
        "message": f"prompt is too long: 210000 tokens > 200000 maximum (key {KEY})"},
        "request_id": "req_1"}).encode()
    sse_server.add(Reply(status=400, content_type="application/json", body=[body]))
    stream = _stream(sse_server)
    assert [e.type for e in stream] == ["error"]
    message = stream.result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "Anthropic API error (400, invalid_request_error): prompt is too long: 210000 tokens")
    assert KEY not in message.error_message
    assert len(sse_server.requests) == 1


def test_http_401_is_not_retried_and_names_the_fix(sse_server):
    body = b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'
    sse_server.add(Reply(status=401, content_type="application/json", body=[body]))
    message = _stream(sse_server).result(WAIT)
    assert "authentication_error" in message.error_message
    assert "invalid x-api-key" in message.error_message
    assert "Check the API key" in message.error_message
    assert len(sse_server.requests) == 1


def test_529_overloaded_is_retried(sse_server):
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    sse_server.add(Reply(status=529, headers={"retry-after": "0"},
                         content_type="application/json", body=[body]),
                   Reply(body=_text_stream("after retry")))
    message = _stream(sse_server).result(WAIT)
    assert message.text == "after retry"
    assert message.stop_reason == "stop"
    assert len(sse_server.requests) == 2


def test_529_after_retries_reports_overloaded(sse_server):
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    for _ in range(3):  # the first attempt and the shared default of two retries
        sse_server.add(Reply(status=529, headers={"retry-after-ms": "1"},
                             content_type="application/json", body=[body]))
    message = _stream(sse_server).result(WAIT)
    assert len(sse_server.requests) == 3
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "Anthropic API error (529, overloaded_error): Overloaded")


def test_in_stream_error_event(sse_server):
    """An ``event: error`` after a 200 ends with its type and message, content kept."""
    body = [_start(), _block_start(0, {"type": "text", "text": ""}),
            _delta(0, {"type": "text_delta", "text": "Partial"}),
            _ev("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})]
    sse_server.add(Reply(body=body))
    stream = _stream(sse_server)
    assert [e.type for e in stream] == ["start", "text_start", "text_delta", "error"]
    message = stream.result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message == "Anthropic stream error (overloaded_error): Overloaded"
    assert message.text == "Partial"
    assert message.usage.input == 50  # message_start's usage survives the error
    assert message.usage.cost.input == pytest.approx(50 * 3.0 / 1e6)


def test_malformed_data_json(sse_server):
    body = [_start(), b"event: content_block_start\ndata: {not json\n\n", MESSAGE_STOP]
    message = _result(sse_server, body)
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "Anthropic sent an event whose data is not valid JSON")


def test_stream_without_message_stop(sse_server):
    sse_server.add(Reply(body=_text_stream()[:-1]))
    stream = _stream(sse_server)
    assert [e.type for e in stream][-2:] == ["text_end", "error"]
    message = stream.result(WAIT)
    assert message.error_message == "Anthropic stream ended before message_stop. Retry the request."
    assert message.text == "Hello"


def test_empty_stream(sse_server):
    message = _result(sse_server, [PING])
    assert message.error_message == ("Anthropic stream ended before message_start. "
                                     "Retry the request.")


def test_stream_without_stop_reason(sse_server):
    body = [*_text_stream()[:4], _message_delta(None, 5), MESSAGE_STOP]
    message = _result(sse_server, body)
    assert message.error_message == ("Anthropic stream ended without a stop reason. "
                                     "Retry the request.")


def test_refusal_is_an_error(sse_server):
    message = _result(sse_server, _text_stream(stop_reason="refusal"))
    assert message.stop_reason == "error"
    assert message.error_message == "The model refused to complete the request"


def test_unknown_stop_reason_is_an_error(sse_server):
    message = _result(sse_server, _text_stream(stop_reason="model_context_window_exceeded"))
    assert message.stop_reason == "error"
    assert message.error_message == "Unhandled stop reason: model_context_window_exceeded"


def test_connection_cut_mid_event(sse_server):
    body = [*_text_stream()[:3], b'event: content_block_delta\ndata: {"type":"content_bl', CUT]
    message = _result(sse_server, body)
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "The connection to Anthropic broke in the middle of the response")
    assert message.text == "Hello"


def test_connection_cut_mid_event_close_delimited(sse_server):
    body = [*_text_stream()[:3], b'event: content_block_delta\ndata: {"type":"content_bl']
    message = _result(sse_server, body, chunked=False)
    assert message.error_message.startswith(
        "The Anthropic stream was cut off in the middle of an event")


def test_non_sse_content_type(sse_server):
    body = b'{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}]}'
    message = _result(sse_server, [body], content_type="application/json")
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "Anthropic answered with Content-Type 'application/json' instead of an event stream")


def test_missing_api_key(monkeypatch):
    """No key for a remote server: an error naming the variable, and no request."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    model = _model(base_url="https://api.anthropic.invalid")
    message = stream_anthropic(model, _context(), StreamOptions()).result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message == ("No API key for Anthropic. Pass StreamOptions(api_key=...) "
                                     "or set ANTHROPIC_API_KEY.")


def test_local_server_needs_no_key(sse_server, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    sse_server.add(Reply(body=_text_stream()))
    message = stream_anthropic(_model(sse_server), _context(), StreamOptions()).result(WAIT)
    assert message.text == "Hello"
    assert "x-api-key" not in {k.lower() for k in sse_server.requests[0].headers}


def test_api_key_from_environment_is_redacted(sse_server, monkeypatch):
    """The env key is sent as x-api-key and never echoed in an error message."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-SECRET-key-42")
    body = b'{"type":"error","error":{"type":"permission_error","message":"key env-SECRET-key-42"}}'
    sse_server.add(Reply(status=403, content_type="application/json", body=[body]))
    message = stream_anthropic(_model(sse_server), _context(), StreamOptions()).result(WAIT)
    assert sse_server.requests[0].headers["x-api-key"] == "env-SECRET-key-42"
    assert "env-SECRET-key-42" not in message.error_message
    assert "[redacted]" in message.error_message


def test_model_none():
    message = stream_anthropic(None, _context(), StreamOptions()).result(WAIT)
    assert message.stop_reason == "error"
    assert "Pass a model" in message.error_message


# --- abort --------------------------------------------------------------------------------


def test_abort_during_stalled_stream(sse_server, no_piagent_threads):
    """An abort while the server holds the stream ends it "aborted" with content kept."""
    stall = Stall()
    body = [*_text_stream("partial")[:3], stall, *_text_stream()[3:]]
    sse_server.add(Reply(body=body))
    controller = AbortController()
    stream = _stream(sse_server, signal=controller.signal)
    it = iter(stream)
    assert [next(it).type for _ in range(3)] == ["start", "text_start", "text_delta"]
    assert stall.reached.wait(WAIT)
    controller.abort()
    assert [e.type for e in it] == ["error"]
    message = stream.result(WAIT)
    assert (message.stop_reason, message.error_message) == ("aborted", "Request was aborted")
    assert message.text == "partial"
    assert message.usage.input == 50


# --- the request --------------------------------------------------------------------------


WEATHER = ToolDeclaration("get_weather", "Weather for a city.", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def test_request_url_headers_and_body(sse_server):
    """System prompt on top with cache_control, tools with input_schema, last user block
    cached, key and version headers."""
    sse_server.add(Reply(body=_text_stream()))
    context = _context(SystemMessage(content="You are terse.", tools_added=[WEATHER]),
                       UserMessage(content="Weather in Paris?"))
    _stream(sse_server, context, max_tokens=1000, temperature=0.2,
            headers={"x-extra": "1"}).result(WAIT)
    request = sse_server.requests[0]
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["x-extra"] == "1"
    assert request.headers["Accept"] == "text/event-stream"
    assert request.json == {
        "model": "claude-sonnet-4-5",
        "stream": True,
        "max_tokens": 1000,
        "system": [{"type": "text", "text": "You are terse.",
                    "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Weather in Paris?",
             "cache_control": {"type": "ephemeral"}}]}],
        # pi's tool definition: eager_input_streaming, and input_schema's type, properties
        # and required (always present)
        "tools": [{"name": "get_weather", "description": "Weather for a city.",
                   "eager_input_streaming": True,
                   "input_schema": {"type": "object",
                                    "properties": WEATHER.parameters["properties"],
                                    "required": WEATHER.parameters["required"]},
                   "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "disabled"},  # a reasoning model with thinking off says so
        "temperature": 0.2,
    }


def _history() -> list[object]:
    """A same-model transcript: thinking, redacted thinking, two tool calls, two results."""
    assistant = AssistantMessage(
        content=[ThinkingContent("plan", thinking_signature="sig1"),
                 ThinkingContent("[Reasoning redacted]", thinking_signature="opaque",
                                 redacted=True),
                 TextContent("Checking."),
                 TextContent("  "),
                 ToolCall("toolu_1", "get_weather", {"city": "Paris"}),
                 ToolCall("toolu_2", "get_weather", {"city": "Berlin"})],
        api="anthropic-messages", provider="anthropic", model="claude-sonnet-4-5",
        stop_reason="toolUse")
    return [
        SystemMessage(content="Be brief.", tools_added=[WEATHER]),
        UserMessage(content=[TextContent("Compare these."), TextContent(""),
                             ImageContent(data="iVBORw0KGgo=", mime_type="image/png")]),
        assistant,
        ToolResultMessage("toolu_1", "get_weather", [TextContent("18C")]),
        ToolResultMessage("toolu_2", "get_weather",
                          [ImageContent(data="R0lGOD=", mime_type="image/gif")], is_error=True),
    ]


def test_request_replays_history(sse_server):
    """Thinking with signatures, redacted thinking, tool_use, merged tool results, images."""
    sse_server.add(Reply(body=_text_stream()))
    _stream(sse_server, _context(*_history())).result(WAIT)
    messages = sse_server.requests[0].json["messages"]
    assert messages == [
        {"role": "user", "content": [
            {"type": "text", "text": "Compare these."},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "plan", "signature": "sig1"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
             "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather",
             "input": {"city": "Berlin"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C",
             "is_error": False},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "cache_control": {"type": "ephemeral"},
             "content": [{"type": "text", "text": "(see attached image)"},
                         {"type": "image", "source": {"type": "base64",
                                                      "media_type": "image/gif",
                                                      "data": "R0lGOD="}}]}]},
    ]


def test_request_from_another_model_and_orphans():
    """Other-model thinking is dropped (as pi-ai's transformMessages does), ids are
    sanitised, orphan calls get a result, errored turns are skipped."""
    other = AssistantMessage(
        content=[ThinkingContent("reasoning", thinking_signature="gpt-sig"),
                 ToolCall("call|abc.def", "get_weather", {"city": "Rome"})],
        api="openai-responses", provider="openai", model="gpt-5", stop_reason="toolUse")
    failed = AssistantMessage(content=[TextContent("half")], api="anthropic-messages",
                              provider="anthropic", model="claude-sonnet-4-5",
                              stop_reason="error", error_message="boom")
    body = build_anthropic_request(_model(), [UserMessage(content="go"), other, failed,
                                              UserMessage(content="again")],
                                   StreamOptions(cache_retention="none"))
    assert body["messages"] == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_abc_def", "name": "get_weather",
             "input": {"city": "Rome"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_abc_def",
                                      "content": "No result provided", "is_error": True}]},
        {"role": "user", "content": "again"},
    ]
    assert "system" not in body and "tools" not in body


def test_mid_conversation_system_messages_fold_or_go_native():
    """Without ``supportsMidConvoSystemMessages`` (pi-ai 1.4.0's default) every system
    message folds into the leading prompt; with it a later one is a native system message."""
    messages = [SystemMessage(content="Base."), UserMessage(content="hi"),
                AssistantMessage(content=[TextContent("hello")], api="anthropic-messages",
                                 provider="anthropic", model="claude-sonnet-4-5"),
                SystemMessage(content="Now answer in French."), UserMessage(content="ok")]
    folded = build_anthropic_request(_model(), messages, StreamOptions(cache_retention="none"))
    assert folded["system"] == [{"type": "text", "text": "Base.\n\nNow answer in French."}]
    assert [m["content"] for m in folded["messages"]] == ["hi", [
        {"type": "text", "text": "hello"}], "ok"]
    model = _model(compat={"supportsMidConvoSystemMessages": True})
    body = build_anthropic_request(model, messages, StreamOptions(cache_retention="none"))
    assert body["system"] == [{"type": "text", "text": "Base."}]
    # a native system message, held back until the next assistant message (none here: at
    # the end), as pi-ai 1.4.0 sends it
    assert body["messages"][2:] == [
        {"role": "user", "content": "ok"},
        {"role": "system", "content": [{"type": "text", "text": "Now answer in French."}]}]


def test_cache_retention_long_and_none():
    """"long" adds a 1h ttl (unless the compat's supportsLongCacheRetention is false, as in
    pi-ai: a proxy in front of Anthropic gets it too); "none" sends no cache_control."""
    messages = [SystemMessage(content="S", tools_added=[WEATHER]), UserMessage(content="u")]
    long = build_anthropic_request(_model(), messages, StreamOptions(cache_retention="long"))
    assert long["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert long["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert long["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral",
                                                                     "ttl": "1h"}
    proxy = _model(base_url="https://proxy.example.invalid")
    assert build_anthropic_request(proxy, messages, StreamOptions(cache_retention="long"))[
        "system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    short = _model(base_url="https://proxy.example.invalid",
                   compat={"supportsLongCacheRetention": False})
    assert build_anthropic_request(short, messages, StreamOptions(cache_retention="long"))[
        "system"][0]["cache_control"] == {"type": "ephemeral"}
    none = build_anthropic_request(_model(), messages, StreamOptions(cache_retention="none"))
    assert "cache_control" not in json.dumps(none)


def test_budget_thinking_request(sse_server):
    """Budget thinking adds budget_tokens on top of max_tokens and drops temperature."""
    sse_server.add(Reply(body=_text_stream()))
    _stream(sse_server, reasoning="medium", max_tokens=4000, temperature=0.5).result(WAIT)
    request = sse_server.requests[0]
    body = request.json
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8192, "display": "summarized"}
    assert body["max_tokens"] == 12192
    assert "temperature" not in body
    assert request.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


def test_budget_thinking_respects_custom_budgets_and_model_limit():
    model = _model(max_tokens=10000)
    body = build_anthropic_request(model, [UserMessage(content="u")], StreamOptions(
        reasoning="low", thinking_budgets={"low": 3000}, max_tokens=2000))
    assert (body["max_tokens"], body["thinking"]["budget_tokens"]) == (5000, 3000)
    capped = build_anthropic_request(model, [UserMessage(content="u")],
                                     StreamOptions(reasoning="high"))
    # 16384 does not fit in 10000: the budget shrinks to leave 1024 tokens for the answer
    assert (capped["max_tokens"], capped["thinking"]["budget_tokens"]) == (10000, 8976)


def test_adaptive_thinking_for_newer_models():
    model = _model(id="claude-opus-4-6")
    body = build_anthropic_request(model, [UserMessage(content="u")],
                                   StreamOptions(reasoning="xhigh"))
    assert body["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert body["output_config"] == {"effort": "max"}
    sonnet = build_anthropic_request(_model(id="claude-sonnet-4-6"), [UserMessage(content="u")],
                                     StreamOptions(reasoning="low"))
    assert sonnet["output_config"] == {"effort": "low"}


def test_no_thinking_without_reasoning_or_on_non_reasoning_models():
    off = build_anthropic_request(_model(), [UserMessage(content="u")], StreamOptions())
    assert off["thinking"] == {"type": "disabled"}  # a reasoning model is told (as pi)
    assert off["max_tokens"] == 64000
    plain = build_anthropic_request(_model(reasoning=False), [UserMessage(content="u")],
                                    StreamOptions(reasoning="high", temperature=1.0))
    assert "thinking" not in plain
    assert plain["temperature"] == 1.0


def test_metadata_user_id():
    body = build_anthropic_request(_model(), [UserMessage(content="u")],
                                   StreamOptions(metadata={"user_id": "u-1", "other": 2}))
    assert body["metadata"] == {"user_id": "u-1"}


def test_images_dropped_for_text_only_models():
    model = _model(input=("text",))
    body = build_anthropic_request(model, [UserMessage(content=[
        TextContent("look"), ImageContent("AAAA", "image/png")])],
        StreamOptions(cache_retention="none"))
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "text", "text": "(image omitted: model does not support images)"}]}]


def test_stream_simple_dispatches_a_catalogue_model(sse_server):
    """The catalogue's model, pointed at the local server, goes through stream_simple."""
    model = replace(get_model("anthropic", "claude-sonnet-4-5"), base_url=sse_server.url)
    sse_server.add(Reply(body=EXAMPLE))
    message = stream_simple(model, _context(), StreamOptions(api_key=KEY)).result(WAIT)
    assert message.stop_reason == "toolUse"
    assert message.usage.cost.total == pytest.approx((150 + 1275 + 360) / 1e6)


def test_crlf_line_endings(sse_server):
    """The same stream with CRLF line endings parses identically."""
    sse_server.add(Reply(body=[chunk.replace(b"\n", b"\r\n") for chunk in EXAMPLE]))
    message = _stream(sse_server).result(WAIT)
    assert message.stop_reason == "toolUse"
    assert message.content[0].thinking_signature == "EqQBCkgIARABGAIiQFakeSignature=="
    assert message.tool_calls[0].arguments == {"city": "Paris"}


def test_sequential_requests_reuse_the_connection(sse_server):
    sse_server.add(Reply(body=_text_stream("one")), Reply(body=_text_stream("two")))
    assert _stream(sse_server).result(WAIT).text == "one"
    assert _stream(sse_server).result(WAIT).text == "two"
    assert sse_server.requests[0].peer == sse_server.requests[1].peer


def test_server_holding_the_stream_open_after_message_stop(sse_server):
    """The message is complete at message_stop, even if the server never closes."""
    sse_server.add(Reply(body=[*_text_stream("held"), Stall()]))
    message = _stream(sse_server).result(WAIT)
    assert (message.stop_reason, message.text) == ("stop", "held")
