"""``stream_google`` against a real local server speaking Gemini's ``alt=sse`` stream.

Covers: providers.md §6.5's example stream replayed (thought part, text, two whole
function calls with generated ids and a thought signature, usage, cost); the bare JSON
error tail; cached-token usage; finish-reason mapping (MAX_TOKENS, SAFETY, none at all,
a blocked prompt); HTTP errors with Google's body (no API key in the message, the key
in ``x-goog-api-key`` and never in the URL), a 429 whose ``retryDelay`` exceeds the cap;
malformed JSON, a connection cut mid-event, a non-SSE answer, a missing key; abort while
the stream stalls; and the request (``systemInstruction``, ``contents`` roles and merging,
function declarations, function responses, images, thought signatures, thinking config).
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
from piagent.providers.google import build_google_request, stream_google
from piagent.stream import StreamOptions
from tests.conftest import WAIT

from .conftest import adapter_helpers
from .sse_script import CUT, Reply, ScriptedServer, Stall, sse

KEY = "AIzaTest-SECRET-0123456789"
FLASH_COST = ModelCost(input=0.3, output=2.5, cache_read=0.075)


def _model(server: ScriptedServer | None = None, **fields: object) -> Model:
    base = (server.url + "/v1beta" if server is not None
            else "https://generativelanguage.googleapis.com/v1beta")
    values: dict[str, object] = {"id": "gemini-2.5-flash", "api": "google-generative-ai",
                                 "provider": "google", "base_url": base, "reasoning": True,
                                 "input": ("text", "image"), "cost": FLASH_COST,
                                 "max_tokens": 65536}
    values.update(fields)
    return Model(**values)  # type: ignore[arg-type]


def _chunk(parts: list[dict[str, object]] | None = None, finish: str | None = None,
           **usage: int) -> bytes:
    candidate: dict[str, object] = {"content": {"parts": parts or [], "role": "model"},
                                    "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return sse({"candidates": [candidate], "usageMetadata": usage,
                "modelVersion": "gemini-2.5-flash", "responseId": "resp-abc"})


# providers.md §6.5, byte for byte in content
EXAMPLE = [
    _chunk([{"text": "**Planning** I need the weather for two cities.", "thought": True}],
           promptTokenCount=120, totalTokenCount=150, thoughtsTokenCount=30),
    _chunk([{"text": "I'll check both cities."}], promptTokenCount=120,
           candidatesTokenCount=6, totalTokenCount=156, thoughtsTokenCount=30),
    _chunk([{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
             "thoughtSignature": "CiQB0e2KbFakeSig=="},
            {"functionCall": {"name": "get_weather", "args": {"city": "Berlin"}}}],
           finish="STOP", promptTokenCount=120, candidatesTokenCount=40, totalTokenCount=190,
           thoughtsTokenCount=30, cachedContentTokenCount=0),
]
ERROR_TAIL = (b'{\n  "error": {\n    "code": 503,\n    "message": "The model is overloaded. '
              b'Please try again later.",\n    "status": "UNAVAILABLE"\n  }\n}\n')


def _text(text: str = "Hello", finish: str = "STOP") -> list[bytes]:
    return [_chunk([{"text": text}], finish=finish, promptTokenCount=10,
                   candidatesTokenCount=2, totalTokenCount=12)]


_context, _stream, _result = adapter_helpers(stream_google, _model, KEY, 'Weather?')


# --- the example stream ---------------------------------------------------------------------


def test_example_stream_event_sequence_and_message(sse_server, no_piagent_threads):
    """§6.5 replays to pi's sequence: blocks close when the kind changes, calls are whole."""
    sse_server.add(Reply(body=EXAMPLE))
    stream = _stream(sse_server)
    events = list(stream)
    assert [(e.type, getattr(e, "content_index", None)) for e in events] == [
        ("start", None),
        ("thinking_start", 0), ("thinking_delta", 0), ("thinking_end", 0),
        ("text_start", 1), ("text_delta", 1), ("text_end", 1),
        ("toolcall_start", 2), ("toolcall_delta", 2), ("toolcall_end", 2),
        ("toolcall_start", 3), ("toolcall_delta", 3), ("toolcall_end", 3),
        ("done", None)]
    assert events[8].delta == '{"city":"Paris"}'  # pi-ai's JSON.stringify
    message = stream.result(WAIT)
    assert events[-1].reason == "toolUse"
    assert message.stop_reason == "toolUse"
    assert (message.api, message.provider, message.model) == (
        "google-generative-ai", "google", "gemini-2.5-flash")
    thinking, text, paris, berlin = message.content
    assert thinking == ThinkingContent("**Planning** I need the weather for two cities.")
    assert text == TextContent("I'll check both cities.")
    assert (paris.name, paris.arguments, paris.thought_signature) == (
        "get_weather", {"city": "Paris"}, "CiQB0e2KbFakeSig==")
    assert (berlin.name, berlin.arguments, berlin.thought_signature) == (
        "get_weather", {"city": "Berlin"}, None)
    assert paris.id.startswith("get_weather_") and berlin.id.startswith("get_weather_")
    assert paris.id != berlin.id
    usage = message.usage
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write,
            usage.total_tokens) == (120, 70, 0, 0, 190)
    assert usage.cost.total == pytest.approx((120 * 0.3 + 70 * 2.5) / 1e6)


def test_request_url_and_key_header(sse_server):
    sse_server.add(Reply(body=_text()))
    _stream(sse_server).result(WAIT)
    request = sse_server.requests[0]
    assert request.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert request.headers["x-goog-api-key"] == KEY
    assert KEY not in request.path


def test_thought_signatures_stay_on_their_blocks(sse_server):
    """A signature on a text part (even an empty trailing one) is kept on that block."""
    body = [_chunk([{"text": "think", "thought": True, "thoughtSignature": "AAAA"}]),
            _chunk([{"text": "ans"}]),
            _chunk([{"text": "", "thoughtSignature": "QkJCQg=="}], finish="STOP")]
    message = _result(sse_server, body)
    assert message.content == [ThinkingContent("think", thinking_signature="AAAA"),
                               TextContent("ans", text_signature="QkJCQg==")]
    assert message.stop_reason == "stop"


def test_provided_call_ids_are_kept_unless_duplicated(sse_server):
    body = [_chunk([{"functionCall": {"id": "c1", "name": "a", "args": {}}},
                    {"functionCall": {"id": "c1", "name": "b", "args": {"x": 1}}}],
                   finish="STOP")]
    first, second = _result(sse_server, body).tool_calls
    assert first.id == "c1"
    assert second.id.startswith("b_") and second.arguments == {"x": 1}


def test_cached_tokens_are_subtracted_from_input(sse_server):
    body = [_chunk([{"text": "x"}], finish="STOP", promptTokenCount=1000,
                   cachedContentTokenCount=800, candidatesTokenCount=5, thoughtsTokenCount=7,
                   totalTokenCount=1012)]
    usage = _result(sse_server, body).usage
    assert (usage.input, usage.output, usage.cache_read, usage.total_tokens) == (
        200, 12, 800, 1012)
    assert usage.cost.cache_read == pytest.approx(800 * 0.075 / 1e6)


def test_max_tokens_is_length(sse_server):
    message = _result(sse_server, _text("cut", finish="MAX_TOKENS"))
    assert (message.stop_reason, message.text) == ("length", "cut")


def test_continuation_is_length(sse_server):
    """CONTINUATION (the per-request token limit, with a continuation token piagent does not
    use) ends the turn as "length", as pi-ai 1.6 reads it."""
    message = _result(sse_server, _text("cut", finish="CONTINUATION"))
    assert (message.stop_reason, message.text, message.error_message) == ("length", "cut", None)


def test_split_writes_reassemble(sse_server):
    raw = b"".join(_text("h\u00e9llo \u2705"))
    cut = raw.index("\u2705".encode()) + 2
    assert _result(sse_server, [raw[:9], raw[9:cut], raw[cut:]]).text == "h\u00e9llo \u2705"


# --- errors ---------------------------------------------------------------------------------


def test_bare_json_error_tail(sse_server):
    """The error Gemini appends without SSE framing becomes the message; content kept."""
    message = _result(sse_server, [EXAMPLE[0], ERROR_TAIL])
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "Google API error (503, UNAVAILABLE): The model is overloaded. Please try again later.")
    assert message.content == [
        ThinkingContent("**Planning** I need the weather for two cities.")]
    assert message.usage.input == 120


def test_non_json_tail(sse_server):
    """Text after the last event that is neither SSE nor JSON is quoted in the message."""
    message = _result(sse_server, [EXAMPLE[0], b"<html>502 Bad Gateway</html>\n"])
    assert message.error_message == (
        "Google stream ended without a finish reason; it ended with text that is not an "
        "event: '<html>502 Bad Gateway</html>'")


def test_error_object_in_a_data_event(sse_server):
    body = [sse({"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}})]
    message = _result(sse_server, body)
    assert message.error_message.startswith("Google API error (500, INTERNAL): Internal error")


@pytest.mark.parametrize("reason", ["SAFETY", "RECITATION", "MALFORMED_FUNCTION_CALL", "OTHER"])
def test_error_finish_reasons(sse_server, reason):
    message = _result(sse_server, _text("partial", finish=reason))
    assert message.stop_reason == "error"
    assert message.error_message == f"Provider stopped with: {reason}"
    assert message.text == "partial"


def test_stream_without_finish_reason(sse_server):
    sse_server.add(Reply(body=EXAMPLE[:2]))
    stream = _stream(sse_server)
    assert [e.type for e in stream][-2:] == ["text_end", "error"]
    message = stream.result(WAIT)
    assert message.error_message == ("Google stream ended without a finish reason. "
                                     "Retry the request.")
    assert message.text == "I'll check both cities."


def test_blocked_prompt(sse_server):
    body = [sse({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                 "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}})]
    message = _result(sse_server, body)
    assert message.stop_reason == "error"
    assert message.error_message == "Google prompt blocked: PROHIBITED_CONTENT"
    # pi-ai 1.6: Google's explanation and the safety ratings that decided it
    feedback = {"blockReason": "SAFETY", "blockReasonMessage": "The prompt was blocked",
                "safetyRatings": [{"category": "HARM_CATEGORY_HARASSMENT",
                                   "probability": "HIGH"},
                                  {"category": "HARM_CATEGORY_HATE_SPEECH"}]}
    message = _result(sse_server, [sse({"promptFeedback": feedback})])
    assert message.error_message == (
        "Google prompt blocked: SAFETY. The prompt was blocked. Safety ratings: "
        "HARM_CATEGORY_HARASSMENT (HIGH), HARM_CATEGORY_HATE_SPEECH")


def test_http_error_has_google_text_and_no_key(sse_server):
    body = json.dumps({"error": {"code": 400, "message": f"API key not valid: {KEY}",
                                 "status": "INVALID_ARGUMENT"}}).encode()
    sse_server.add(Reply(status=400, content_type="application/json", body=[body]))
    message = _stream(sse_server).result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "Google API error (400, INVALID_ARGUMENT): API key not valid: [redacted]")
    assert KEY not in message.error_message
    assert len(sse_server.requests) == 1


def test_429_with_long_retry_delay_fails_fast(sse_server):
    """Google's delay lives in the body (RetryInfo); above the cap it is not waited for."""
    body = json.dumps({"error": {
        "code": 429, "message": "Quota exceeded. Please retry in 34.07s.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                     "retryDelay": "34s"}]}}).encode()
    sse_server.add(Reply(status=429, content_type="application/json", body=[body]))
    message = _stream(sse_server, max_retry_delay_ms=1000).result(WAIT)
    assert message.error_message.startswith("Server requested 34s retry delay (max: 1s). "
                                            "Google API error (429, RESOURCE_EXHAUSTED)")
    assert len(sse_server.requests) == 1


def test_503_is_retried(sse_server):
    body = b'{"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}'
    sse_server.add(Reply(status=503, headers={"retry-after": "0"},
                         content_type="application/json", body=[body]),
                   Reply(body=_text("ok")))
    assert _stream(sse_server).result(WAIT).text == "ok"
    assert len(sse_server.requests) == 2


def test_malformed_data_json(sse_server):
    message = _result(sse_server, [b"data: {\"candidates\": [\n\n", *_text()])
    assert message.error_message.startswith("Google sent an event whose data is not valid JSON")


def test_connection_cut_mid_event(sse_server):
    body = [EXAMPLE[0], b'data: {"candidates": [{"content": {"par', CUT]
    message = _result(sse_server, body)
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "The connection to Google broke in the middle of the response")
    assert message.content[0].thinking.startswith("**Planning**")


def test_connection_cut_mid_event_close_delimited(sse_server):
    body = [EXAMPLE[0], b'data: {"candidates": [{"content": {"par']
    message = _result(sse_server, body, chunked=False)
    assert message.error_message.startswith(
        "The Google stream was cut off in the middle of an event")


def test_non_sse_content_type(sse_server):
    message = _result(sse_server, [b'[{"candidates": []}]'], content_type="application/json")
    assert message.error_message.startswith(
        "Google answered with Content-Type 'application/json' instead of an event stream")


def test_missing_api_key(monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    message = stream_google(_model(), _context(), StreamOptions()).result(WAIT)
    assert message.stop_reason == "error"
    assert "GEMINI_API_KEY or GOOGLE_API_KEY" in message.error_message


@pytest.mark.parametrize("variable", ["GEMINI_API_KEY", "GOOGLE_API_KEY"])
def test_api_key_from_environment(sse_server, monkeypatch, variable):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv(variable, "env-SECRET-gkey")
    body = (b'{"error":{"code":403,"message":"denied for env-SECRET-gkey",'
            b'"status":"PERMISSION_DENIED"}}')
    sse_server.add(Reply(status=403, content_type="application/json", body=[body]))
    message = stream_google(_model(sse_server), _context(), StreamOptions()).result(WAIT)
    assert sse_server.requests[0].headers["x-goog-api-key"] == "env-SECRET-gkey"
    assert "env-SECRET-gkey" not in message.error_message


# --- abort --------------------------------------------------------------------------------


def test_abort_during_stalled_stream(sse_server, no_piagent_threads):
    stall = Stall()
    sse_server.add(Reply(body=[EXAMPLE[0], EXAMPLE[1], stall, EXAMPLE[2]]))
    controller = AbortController()
    stream = _stream(sse_server, signal=controller.signal)
    it = iter(stream)
    seen = [next(it).type for _ in range(6)]
    assert seen == ["start", "thinking_start", "thinking_delta", "thinking_end", "text_start",
                    "text_delta"]
    assert stall.reached.wait(WAIT)
    controller.abort("stop button")
    assert [e.type for e in it] == ["error"]
    message = stream.result(WAIT)
    assert message.stop_reason == "aborted"
    assert message.error_message == "Request was aborted: stop button"
    assert message.text == "I'll check both cities."
    assert message.usage.output == 36


# --- the request --------------------------------------------------------------------------


WEATHER = ToolDeclaration("get_weather", "Weather for a city.", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def test_request_body_shape(sse_server):
    sse_server.add(Reply(body=_text()))
    context = _context(SystemMessage(content="Be brief.", tools_added=[WEATHER]),
                       UserMessage(content="Weather in Paris?"))
    _stream(sse_server, context, temperature=0.3, max_tokens=500).result(WAIT)
    assert sse_server.requests[0].json == {
        "contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}], "role": "user"},
        "tools": [{"functionDeclarations": [{
            "name": "get_weather", "description": "Weather for a city.",
            "parametersJsonSchema": WEATHER.parameters}]}],
        "generationConfig": {"temperature": 0.3, "maxOutputTokens": 500,
                             "thinkingConfig": {"thinkingBudget": 0}},
    }


def _history(model_id: str = "gemini-2.5-flash") -> list[object]:
    assistant = AssistantMessage(
        content=[ThinkingContent("plan", thinking_signature="c2lnMQ=="),
                 TextContent("Checking.", text_signature="not base64!"),
                 ToolCall("c1", "get_weather", {"city": "Paris"},
                          thought_signature="c2lnMg=="),
                 ToolCall("c2", "get_weather", {"city": "Berlin"})],
        api="google-generative-ai", provider="google", model=model_id, stop_reason="toolUse")
    return [
        SystemMessage(content="Be brief.", tools_added=[WEATHER]),
        UserMessage(content=[TextContent("Compare."),
                             ImageContent(data="iVBORw0KGgo=", mime_type="image/png")]),
        assistant,
        ToolResultMessage("c1", "get_weather", [TextContent("18C")]),
        ToolResultMessage("c2", "get_weather", [TextContent("no data"),
                                                ImageContent("R0lGOD=", "image/gif")],
                          is_error=True),
        SystemMessage(content="Use Celsius."),
        UserMessage(content="And now?"),
    ]


def test_request_replays_history_for_gemini_2():
    """Thought parts and valid signatures replay; the results share one user turn, their
    image follows in a turn of its own, and the next user message is a turn of its own (as
    pi-ai 1.4.0); a later system message folds into systemInstruction (Gemini has no
    mid-conversation system messages)."""
    body = build_google_request(_model(), _history(), StreamOptions())
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief.\n\nUse Celsius."}],
                                         "role": "user"}
    assert body["contents"] == [
        {"role": "user", "parts": [
            {"text": "Compare."},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}]},
        {"role": "model", "parts": [
            {"thought": True, "text": "plan", "thoughtSignature": "c2lnMQ=="},
            {"text": "Checking."},
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
             "thoughtSignature": "c2lnMg=="},
            {"functionCall": {"name": "get_weather", "args": {"city": "Berlin"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"output": "18C"}}},
            {"functionResponse": {"name": "get_weather", "response": {"error": "no data"}}}]},
        {"role": "user", "parts": [
            {"text": "Tool result image:"},
            {"inlineData": {"mimeType": "image/gif", "data": "R0lGOD="}}]},
        {"role": "user", "parts": [{"text": "And now?"}]},
    ]


def test_request_for_gemini_3_sends_ids_nested_images_and_signature_sentinel():
    model = _model(id="gemini-3-pro-preview")
    body = build_google_request(model, _history("gemini-3-pro-preview"), StreamOptions())
    model_parts = body["contents"][1]["parts"]
    assert model_parts[2] == {"functionCall": {"name": "get_weather", "args": {"city": "Paris"},
                                               "id": "c1"}, "thoughtSignature": "c2lnMg=="}
    assert "thoughtSignature" not in model_parts[3]  # a parallel call: only the first is signed
    results = body["contents"][2]["parts"]
    assert results[1] == {"functionResponse": {
        "name": "get_weather", "response": {"error": "no data"}, "id": "c2",
        "parts": [{"inlineData": {"mimeType": "image/gif", "data": "R0lGOD="}}]}}


def test_unsigned_calls_for_gemini_3_carry_the_sentinel():
    """Calls from another provider have no signature; Gemini 3 gets the skip sentinel."""
    other = AssistantMessage(content=[ToolCall("toolu_1", "get_weather", {"city": "Rome"})],
                             api="anthropic-messages", provider="anthropic",
                             model="claude-sonnet-4-5", stop_reason="toolUse")
    body = build_google_request(_model(id="gemini-3-flash-preview"), [
        UserMessage(content="go"), other,
        ToolResultMessage("toolu_1", "get_weather", [TextContent("sunny")])], StreamOptions())
    assert body["contents"][1]["parts"] == [{
        "functionCall": {"name": "get_weather", "args": {"city": "Rome"}, "id": "toolu_1"},
        "thoughtSignature": "skip_thought_signature_validator"}]
    assert body["contents"][2]["parts"][0]["functionResponse"]["id"] == "toolu_1"


def test_request_from_another_model_and_orphans():
    """Other-model thinking is dropped (as pi-ai's transformMessages does), signatures
    stripped; orphan calls get a result."""
    other = AssistantMessage(
        content=[ThinkingContent("hmm", thinking_signature="x"),
                 ToolCall("toolu_1", "get_weather", {"city": "Rome"}, thought_signature="QQ==")],
        api="anthropic-messages", provider="anthropic", model="claude-sonnet-4-5",
        stop_reason="toolUse")
    body = build_google_request(_model(), [UserMessage(content="go"), other,
                                           UserMessage(content="next")], StreamOptions())
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather",
                                  "response": {"error": "No result provided"}}}]},
        {"role": "user", "parts": [{"text": "next"}]},
    ]
    assert "systemInstruction" not in body and "tools" not in body


@pytest.mark.parametrize(("model_id", "level", "expected"), [
    ("gemini-2.5-flash", "medium", {"includeThoughts": True, "thinkingBudget": 8192}),
    ("gemini-2.5-pro", "high", {"includeThoughts": True, "thinkingBudget": 32768}),
    ("gemini-2.5-pro", None, {"thinkingBudget": 0}),  # pi-ai 1.6.1 sends it too
    ("gemini-2.5-flash-lite", "minimal", {"includeThoughts": True, "thinkingBudget": 512}),
    ("gemini-2.5-flash", "max", {"includeThoughts": True, "thinkingBudget": 24576}),
    ("deep-research-max-preview-04-2026", "medium",  # no table: dynamic
     {"includeThoughts": True, "thinkingBudget": -1}),
    ("gemini-3.1-pro-preview", "minimal", {"includeThoughts": True, "thinkingLevel": "LOW"}),
    ("gemini-3.1-pro-preview", None, {"thinkingLevel": "LOW"}),
    ("gemini-3-flash-preview", "medium", {"includeThoughts": True, "thinkingLevel": "MEDIUM"}),
    ("gemini-3-flash-preview", None, {"thinkingLevel": "MINIMAL"}),
    ("gemini-4-argon", None, {"thinkingLevel": "LOW"}),
    ("gemini-4-neon", "xhigh", {"includeThoughts": True, "thinkingLevel": "XHIGH"}),
    ("gemini-flash-lite-latest", "medium", {"includeThoughts": True, "thinkingLevel": "MEDIUM"}),
    ("gemma-4-31b-it", "medium", {"includeThoughts": True, "thinkingLevel": "HIGH"}),
])
def test_thinking_config(model_id, level, expected):
    """pi-ai 1.6.1's thinking config of the catalogued model (its thinkingLevelMap)."""
    model = replace(get_model("google", model_id), base_url=_model().base_url)
    body = build_google_request(model, [UserMessage(content="u")],
                                StreamOptions(reasoning=level))
    assert body.get("generationConfig", {}).get("thinkingConfig") == expected


def test_thinking_level_map_value_outside_google_s_levels_is_refused():
    model = _model(id="gemini-3-flash-preview", thinking_level_map={"medium": "turbo"})
    with pytest.raises(ValueError, match=r"medium -> turbo.*thinking_level_map"):
        build_google_request(model, [UserMessage(content="u")], StreamOptions(reasoning="medium"))


def test_same_model_unsigned_call_is_replayed_unsigned():
    """A call of the same model without a signature goes as it is (pi-ai 1.6.1)."""
    own = AssistantMessage(content=[ToolCall("c1", "get_weather", {"city": "Rome"})],
                           api="google-generative-ai", provider="google",
                           model="gemini-3-flash-preview", stop_reason="toolUse")
    body = build_google_request(_model(id="gemini-3-flash-preview"), [
        UserMessage(content="go"), own,
        ToolResultMessage("c1", "get_weather", [TextContent("sunny")])], StreamOptions())
    assert body["contents"][1]["parts"] == [{
        "functionCall": {"name": "get_weather", "args": {"city": "Rome"}, "id": "c1"}}]


def test_thinking_budget_override_and_non_reasoning_model():
    body = build_google_request(_model(), [UserMessage(content="u")],
                                StreamOptions(reasoning="low", thinking_budgets={"low": 1000}))
    assert body["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 1000
    plain = build_google_request(_model(id="gemini-2.0-flash", reasoning=False),
                                 [UserMessage(content="u")], StreamOptions(reasoning="high"))
    # no thinking config; the output limit is always sent (pi's clamped max tokens)
    assert plain["generationConfig"] == {"maxOutputTokens": 65536}


def test_stream_simple_dispatches_a_catalogue_model(sse_server):
    """The catalogue's model, pointed at the local server, goes through stream_simple."""
    model = replace(get_model("google", "gemini-2.5-flash"), base_url=sse_server.url + "/v1beta")
    sse_server.add(Reply(body=EXAMPLE))
    message = stream_simple(model, _context(), StreamOptions(api_key=KEY)).result(WAIT)
    assert message.stop_reason == "toolUse"
    assert [c.arguments for c in message.tool_calls] == [{"city": "Paris"}, {"city": "Berlin"}]


def test_sequential_requests_reuse_the_connection(sse_server):
    sse_server.add(Reply(body=_text("one")), Reply(body=_text("two")))
    assert _stream(sse_server).result(WAIT).text == "one"
    assert _stream(sse_server).result(WAIT).text == "two"
    assert sse_server.requests[0].peer == sse_server.requests[1].peer


def test_const_is_sent_as_a_one_value_enum(sse_server):
    """Gemini ignores ``const`` in ``parametersJsonSchema``: string and number consts go as
    one-value enums (pi-ai 1.6); a property named "const", a boolean const and a const
    beside an enum stay as they are, and the declaration itself is not changed."""
    schema = {"type": "object", "properties": {
        "kind": {"const": "circle"},
        "const": {"type": "integer", "const": 3},  # a property named "const"
        "flag": {"const": True},
        "both": {"const": "a", "enum": ["a", "b"]},
        "shape": {"anyOf": [{"const": 1.5}, {"type": "array", "items": {"const": "x"}}]},
    }, "$defs": {"Unit": {"const": "cm"}}}
    original = json.loads(json.dumps(schema))
    tool = ToolDeclaration("draw", "Draw.", schema)
    sse_server.add(Reply(body=_text()))
    context = _context(SystemMessage(content="Be brief.", tools_added=[tool]),
                       UserMessage(content="Draw"))
    _stream(sse_server, context).result(WAIT)
    sent = sse_server.requests[0].json["tools"][0]["functionDeclarations"][0]
    assert sent["parametersJsonSchema"] == {"type": "object", "properties": {
        "kind": {"enum": ["circle"]},
        "const": {"type": "integer", "enum": [3]},
        "flag": {"const": True},
        "both": {"const": "a", "enum": ["a", "b"]},
        "shape": {"anyOf": [{"enum": [1.5]}, {"type": "array", "items": {"enum": ["x"]}}]},
    }, "$defs": {"Unit": {"enum": ["cm"]}}}
    assert schema == original
    # without a const the declaration's own schema object is sent (no copy per request)
    from piagent.providers.google import _const_as_enum

    assert _const_as_enum(WEATHER.parameters) is WEATHER.parameters


def test_tool_result_images_inside_the_response_without_a_version_in_the_id():
    """pi-ai 1.6.1 nests the images in the function response for Gemini 3 and later and for
    an id that names no Gemini version (gemini-flash-latest, Gemma 4)."""
    result = ToolResultMessage("c1", "get_weather", [ImageContent("R0lGOD=", "image/gif")])
    for model_id, nested in (("gemini-flash-lite-latest", True), ("gemma-4-31b-it", True),
                             ("gemini-2.5-flash", False)):
        body = build_google_request(_model(id=model_id), [UserMessage(content="go"), result],
                                    StreamOptions())
        response = body["contents"][1]["parts"][0]["functionResponse"]
        assert ("parts" in response) is nested, model_id
        assert len(body["contents"]) == (2 if nested else 3), model_id
