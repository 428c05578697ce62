"""``openai-completions`` against a local server speaking Chat Completions SSE.

Covers: the providers.md §3.5 stream byte for byte (events, tool-call argument deltas,
usage and cost); reasoning fields; interleaved and index-less tool calls; finish-reason
mapping and "ended without finish_reason"; in-stream errors (OpenAI, vLLM, OpenRouter,
Groq ``event: error``); OpenRouter comment keep-alives; the request body (system/developer
role, tools, history, compat flags, reasoning formats); API keys (option, env, missing,
local servers); abort mid-stream through ``stream_simple``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piagent.abort import AbortController
from piagent.messages import (
    AssistantMessage,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from piagent.models import Model, ModelCost
from piagent.providers import stream_simple
from piagent.providers.openai_completions import build_completions_request, get_compat
from piagent.stream import Context, StreamOptions
from tests.conftest import WAIT

from .sse_script import Reply, Stall, sse, sse_events

FIXTURES = Path(__file__).parent / "fixtures"
KEY = "sk-completions-SECRET-1234567890"
WEATHER = ToolDeclaration("get_weather", "Weather for a city",
                          {"type": "object", "properties": {"city": {"type": "string"}}})


def _model(server, **kw) -> Model:
    kw.setdefault("provider", "openai")
    return Model(id="gpt-4o-mini", api="openai-completions", base_url=server.url + "/v1", **kw)


def _context(*messages) -> Context:
    return Context([SystemMessage(content="Be brief.", tools_added=[WEATHER], timestamp=0),
                    UserMessage(content="Weather in Paris?"), *messages])


def _chunk(delta=None, finish=None, **extra):
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
    body.update(extra)
    return body


def _events_and_message(stream):
    events = list(stream)
    return events, stream.result(WAIT)


def test_reference_stream_tool_call(sse_server, no_piagent_threads):
    """The §3.5 stream gives pi's event sequence, arguments and usage."""
    sse_server.add(Reply(body=[(FIXTURES / "completions_tool_call.sse").read_bytes()]))
    model = _model(sse_server, cost=ModelCost(input=0.15, output=0.6, cache_read=0.075))
    events, message = _events_and_message(stream_simple(model, _context(),
                                                        StreamOptions(api_key=KEY)))
    assert [e.type for e in events] == [
        "start", "text_start", "text_delta", "toolcall_start", "toolcall_delta",
        "toolcall_delta", "toolcall_delta", "text_end", "toolcall_end", "done"]
    assert [e.delta for e in events if e.type == "toolcall_delta"] == [
        "", '{"city":', '"Paris"}']
    end = events[8]
    assert (end.tool_call.id, end.tool_call.name, end.tool_call.arguments) == (
        "call_abc123", "get_weather", {"city": "Paris"})
    assert events[-1].reason == "toolUse"
    assert message.text == "Checking the weather."
    assert (message.api, message.provider, message.model) == (
        "openai-completions", "openai", "gpt-4o-mini")
    u = message.usage
    assert (u.input, u.output, u.cache_read, u.cache_write, u.total_tokens) == (56, 25, 64, 0, 145)
    assert u.cost.total == pytest.approx((56 * 0.15 + 25 * 0.6 + 64 * 0.075) / 1e6)
    request = sse_server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    body = request.json
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Weather in Paris?"}]
    assert body["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": WEATHER.parameters, "strict": False}}]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning", "reasoning_text"])
def test_reasoning_fields_become_thinking(sse_server, field):
    sse_server.add(Reply(body=sse_events(
        _chunk({field: "Need the tool."}), _chunk({"content": "Hi"}), _chunk(finish="stop"),
        "[DONE]")))
    message = stream_simple(_model(sse_server, provider="vllm"), _context()).result(WAIT)
    thinking = message.content[0]
    assert isinstance(thinking, ThinkingContent)
    assert (thinking.thinking, thinking.thinking_signature) == ("Need the tool.", field)
    assert message.text == "Hi" and message.stop_reason == "stop"


def test_interleaved_parallel_tool_calls(sse_server):
    """Deltas for two calls interleave by index; each call keeps its own arguments."""
    def tc(index, args, **kw):
        return _chunk({"tool_calls": [{"index": index, "function": {"arguments": args}, **kw}]})
    sse_server.add(Reply(body=sse_events(
        tc(0, "", id="a", type="function"), tc(1, '{"city":"Be', id="b"),
        tc(0, '{"city":"Pa'), tc(1, 'rlin"}'), tc(0, 'ris"}'), _chunk(finish="tool_calls"))))
    # names arrive late in a separate delta for call a
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(WAIT)
    calls = message.tool_calls
    assert [(c.id, c.arguments) for c in calls] == [("a", {"city": "Paris"}),
                                                   ("b", {"city": "Berlin"})]
    assert message.stop_reason == "toolUse"


def test_ollama_whole_calls_without_index_and_stop_reason(sse_server):
    """Ollama-style: each call whole in one delta, no index, finish_reason "stop"."""
    calls = [{"id": "call_1", "function": {"name": "get_weather", "arguments": '{"city":"A"}'}},
             {"id": "call_2", "function": {"name": "get_weather", "arguments": '{"city":"B"}'}}]
    sse_server.add(Reply(body=sse_events(_chunk({"tool_calls": calls}), _chunk(finish="stop"))))
    model = Model(id="llama3.2", api="openai-completions", provider="ollama",
                  base_url=sse_server.url + "/v1")
    message = stream_simple(model, _context()).result(WAIT)
    assert [(c.id, c.name, c.arguments) for c in message.tool_calls] == [
        ("call_1", "get_weather", {"city": "A"}), ("call_2", "get_weather", {"city": "B"})]
    assert message.stop_reason == "toolUse"
    assert "Authorization" not in sse_server.requests[0].headers  # local: no key needed
    body = sse_server.requests[0].json
    assert "store" not in body
    assert "strict" not in body["tools"][0]["function"]


@pytest.mark.parametrize(("finish", "stop"), [("length", "length"), ("end", "stop")])
def test_finish_reasons(sse_server, finish, stop):
    sse_server.add(Reply(body=sse_events(_chunk({"content": "x"}), _chunk(finish=finish))))
    assert stream_simple(_model(sse_server), _context(),
                         StreamOptions(api_key=KEY)).result(WAIT).stop_reason == stop


def test_content_filter_is_an_error(sse_server):
    sse_server.add(Reply(body=sse_events(_chunk({"content": "x"}), _chunk(finish="content_filter"))))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(WAIT)
    assert (message.stop_reason, message.error_message) == (
        "error", "Provider finish_reason: content_filter")
    assert message.text == "x"


def test_stream_without_finish_reason_or_done(sse_server):
    sse_server.add(Reply(body=sse_events(_chunk({"content": "x"}))))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message.startswith("The OpenAI stream ended without finish_reason")


def test_done_without_finish_reason_is_a_stop(sse_server):
    # Snowflake Cortex sends [DONE] but never a finish_reason (tests/providers/recorded)
    sse_server.add(Reply(body=sse_events(_chunk({"content": "x"}), "[DONE]")))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(WAIT)
    assert (message.stop_reason, message.text, message.error_message) == ("stop", "x", None)


def test_finish_reason_optional_by_compat(sse_server):
    sse_server.add(Reply(body=sse_events(_chunk({"content": "x"}))))
    model = _model(sse_server, compat={"supportsFinishReason": False})
    assert stream_simple(model, _context(), StreamOptions(api_key=KEY)).result(WAIT).stop_reason == "stop"


@pytest.mark.parametrize(("payload", "event", "expected"), [
    ({"error": {"message": "Server overloaded", "type": "server_error"}}, None,
     "OpenAI stream error: Server overloaded (server_error)"),
    ({"object": "error", "message": "bad tool parser", "code": 400}, None,
     "OpenAI stream error: bad tool parser (400)"),
    ({"error": {"code": 502, "message": "Upstream failed", "metadata": {"raw": "timeout"}},
      "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}]}, None,
     "OpenAI stream error: Upstream failed (timeout) (502)"),
    ({"error": {"message": "groq boom"}}, "error", "OpenAI stream error: groq boom"),
])
def test_in_stream_errors(sse_server, payload, event, expected):
    sse_server.add(Reply(body=[sse(_chunk({"content": "x"})), sse(payload, event=event)]))
    message = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(WAIT)
    assert (message.stop_reason, message.error_message) == ("error", expected)


def test_openrouter_comments_and_usage_cache_write(sse_server):
    sse_server.add(Reply(body=[b": OPENROUTER PROCESSING\n\n", *sse_events(
        _chunk({"content": "ok"}), _chunk(finish="stop"),
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 5,
                                             "prompt_tokens_details": {"cached_tokens": 20,
                                                                       "cache_write_tokens": 30}}},
        "[DONE]")]))
    model = _model(sse_server, provider="openrouter")
    message = stream_simple(model, _context(), StreamOptions(api_key=KEY)).result(WAIT)
    u = message.usage
    assert (u.input, u.cache_read, u.cache_write, u.output, u.total_tokens) == (50, 20, 30, 5, 105)


def test_history_wire_format(sse_server):
    """Assistant text joined, tool calls as JSON strings, results as role tool."""
    assistant = AssistantMessage(
        content=[ThinkingContent("plan", "reasoning_content"), TextContent("Let me "),
                 TextContent("check."), ToolCall("call_1", "get_weather", {"city": "Paris"})],
        api="openai-completions", provider="openai", model="gpt-4o-mini", stop_reason="toolUse")
    result = ToolResultMessage("call_1", "get_weather", [TextContent("Sunny")])
    body = build_completions_request(_model(sse_server), _context(assistant, result).messages,
                                     StreamOptions())
    assert body["messages"][2:] == [
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "plan",
         "tool_calls": [{"id": "call_1", "type": "function", "function": {
             "name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}]


@pytest.mark.parametrize("with_result", [True, False])
def test_no_empty_tools_list_unless_the_compat_asks(with_result):
    """pi-ai 1.5.2+: a request without tools after tool calls sends no ``tools`` (vLLM 0.20+
    answers 400 to ``[]``); ``requiresToolsWithToolHistory`` sends ``[]`` for a history
    with a tool call, with or without its result."""
    call = AssistantMessage(content=[ToolCall("call_1", "get_weather", {"city": "Paris"})],
                            api="openai-completions", provider="vllm", model="m",
                            stop_reason="toolUse")
    history = [UserMessage(content="Weather?"), call]
    if with_result:
        history.append(ToolResultMessage("call_1", "get_weather", [TextContent("Sunny")]))
    history.append(UserMessage(content="Thanks"))
    url = "http://127.0.0.1:8000/v1"
    plain = Model(id="m", api="openai-completions", provider="vllm", base_url=url)
    assert "tools" not in build_completions_request(plain, history, StreamOptions())
    for key in ("requiresToolsWithToolHistory", "requires_tools_with_tool_history"):
        flagged = Model(id="m", api="openai-completions", provider="vllm", base_url=url,
                        compat={key: True})
        assert build_completions_request(flagged, history, StreamOptions())["tools"] == []
        # no tool history: nothing to declare, even with the flag
        assert "tools" not in build_completions_request(
            flagged, [UserMessage(content="Hi")], StreamOptions())


def test_mid_conversation_system_message_and_developer_role(sse_server):
    model = _model(sse_server, reasoning=True, provider="vllm",
                   compat={"supportsDeveloperRole": True, "supportsReasoningEffort": True,
                           "supportsMidConvoSystemMessages": True})
    messages = [*_context().messages, SystemMessage(content="Now answer in French.")]
    body = build_completions_request(model, messages, StreamOptions(reasoning="high"))
    assert [m["role"] for m in body["messages"]] == ["developer", "user", "developer"]
    assert body["messages"][2]["content"] == "Now answer in French."
    assert body["reasoning_effort"] == "high"
    # pi-ai 1.4.0's default (no compat): later system messages fold into the leading prompt
    collapsed = build_completions_request(_model(sse_server, provider="vllm"), messages,
                                          StreamOptions())
    assert collapsed["messages"] == [
        {"role": "system", "content": "Be brief.\n\nNow answer in French."},
        {"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize(("provider", "url", "level", "expected"), [
    ("openrouter", "https://openrouter.ai/api/v1", "low", {"reasoning": {"effort": "low"}}),
    ("openrouter", "https://openrouter.ai/api/v1", None, {"reasoning": {"effort": "none"}}),
    ("deepseek", "https://api.deepseek.com", "high", {"thinking": {"type": "enabled"}}),
    ("groq", "https://api.groq.com/openai/v1", "max", {"reasoning_effort": "high"}),
])
def test_reasoning_formats(provider, url, level, expected):
    model = Model(id="r1", api="openai-completions", provider=provider, base_url=url,
                  reasoning=True)
    body = build_completions_request(model, [UserMessage(content="hi")],
                                     StreamOptions(reasoning=level, max_tokens=100))
    for key, value in expected.items():
        assert body[key] == value
    field = "max_tokens" if provider == "deepseek" else "max_completion_tokens"
    assert body[field] == 100


def test_compat_override_snake_and_camel():
    model = Model(id="x", api="openai-completions", provider="openai",
                  base_url="https://api.openai.com/v1",
                  compat={"maxTokensField": "max_tokens", "requires_tool_result_name": True})
    compat = get_compat(model)
    assert compat.max_tokens_field == "max_tokens" and compat.requires_tool_result_name
    assert compat.supports_developer_role  # detected default kept


@pytest.mark.parametrize(("provider", "model_id", "base_url", "developer"), [
    ("openai", "gpt-5", "http://127.0.0.1:9/v1", True),
    ("custom", "gpt-5", "https://api.openai.com/v1", True),
    # pi-ai 1.4.0 sent developer to these two; 1.6 (pi #10741) and piagent send system
    ("openrouter", "openai/gpt-5", "https://openrouter.ai/api/v1", False),
    ("openrouter", "anthropic/claude-sonnet-4.5", "https://openrouter.ai/api/v1", False),
    ("groq", "openai/gpt-oss-120b", "https://api.groq.com/openai/v1", False),
])
def test_developer_role_only_on_openai_s_api(provider, model_id, base_url, developer):
    """The developer role is OpenAI's: other hosts' chat templates may reject it."""
    model = Model(id=model_id, api="openai-completions", provider=provider, base_url=base_url)
    assert get_compat(model).supports_developer_role is developer


def test_api_key_from_environment(sse_server, monkeypatch):
    monkeypatch.setenv("GROQ_API_KEY", KEY)
    sse_server.add(Reply(status=401, content_type="application/json",
                         body=[json.dumps({"error": {"message": f"bad key {KEY}"}}).encode()]))
    message = stream_simple(_model(sse_server, provider="groq"), _context()).result(WAIT)
    assert sse_server.requests[0].headers["Authorization"] == f"Bearer {KEY}"
    assert KEY not in message.error_message
    assert message.error_message.startswith("Groq API error (401): bad key [redacted]")


def test_missing_api_key_says_which_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = Model(id="gpt-4o", api="openai-completions", provider="openai",
                  base_url="https://api.openai.com/v1")
    message = stream_simple(model, _context()).result(WAIT)
    assert message.stop_reason == "error"
    assert message.error_message == ("No API key for OpenAI. Pass StreamOptions(api_key=...) "
                                     "or set OPENAI_API_KEY.")


def test_abort_mid_stream_keeps_partial(sse_server, no_piagent_threads):
    stall = Stall()
    sse_server.add(Reply(body=[sse(_chunk({"content": "Hel"})), stall, sse(_chunk(finish="stop"))]))
    controller = AbortController()
    stream = stream_simple(_model(sse_server), _context(),
                           StreamOptions(api_key=KEY, signal=controller.signal))
    it = iter(stream)
    assert [next(it).type for _ in range(3)] == ["start", "text_start", "text_delta"]
    assert stall.reached.wait(WAIT)
    controller.abort()
    assert [e.type for e in it] == ["error"]
    message = stream.result(WAIT)
    assert (message.stop_reason, message.text) == ("aborted", "Hel")


def test_errored_history_is_not_sent(sse_server):
    """An aborted assistant message is left out; its orphan call never reaches the wire."""
    broken = AssistantMessage(content=[ToolCall("x", "get_weather", {})], stop_reason="aborted",
                              usage=Usage())
    sse_server.add(Reply(body=sse_events(_chunk({"content": "x"}), _chunk(finish="stop"))))
    stream_simple(_model(sse_server), _context(broken), StreamOptions(api_key=KEY)).result(WAIT)
    body = sse_server.requests[0].json
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


# --- the connection after [DONE] ---------------------------------------------------------------


def _done_reply(*after) -> Reply:
    body = [sse(_chunk({"content": "hi"})), sse(_chunk({}, finish="stop")), b"data: [DONE]\n\n"]
    return Reply(body=[*body, *after])


def test_the_connection_is_reused_after_done(sse_server):
    sse_server.add(_done_reply(), _done_reply())
    for _ in range(2):
        message = stream_simple(_model(sse_server), _context(),
                                StreamOptions(api_key="k")).result(WAIT)
        assert message.stop_reason == "stop"
    assert sse_server.requests[0].peer == sse_server.requests[1].peer


@pytest.mark.parametrize("after", [[Stall()], [sse(_chunk({"content": "x"}))] * 40],
                         ids=["stays-open", "keeps-sending"])
def test_a_server_that_goes_on_after_done_loses_the_connection_not_the_answer(sse_server,
                                                                              after):
    sse_server.add(_done_reply(*after), _done_reply())
    for _ in range(2):
        message = stream_simple(_model(sse_server), _context(),
                                StreamOptions(api_key="k")).result(WAIT)
        assert message.stop_reason == "stop"
        assert [b.text for b in message.content] == ["hi"]
    assert sse_server.requests[0].peer != sse_server.requests[1].peer


def test_reasoning_details_open_thinking_where_they_arrive(sse_server):
    """An encrypted entry before the text: its thinking block comes first (as pi-ai's)."""
    encrypted = {"type": "reasoning.encrypted", "data": "enc==", "id": "r1", "format": "f",
                 "index": 0}
    sse_server.add(Reply(body=[*sse_events(
        _chunk({"content": "", "reasoning_details": [encrypted]}),
        _chunk({"content": "Hi"}), _chunk(finish="stop")), b"data: [DONE]\n\n"]))
    events, message = _events_and_message(stream_simple(
        _model(sse_server, provider="openrouter"), _context(), StreamOptions(api_key=KEY)))
    assert [(e.type, getattr(e, "content_index", None)) for e in events] == [
        ("start", None), ("thinking_start", 0), ("text_start", 1), ("text_delta", 1),
        ("thinking_end", 0), ("text_end", 1), ("done", None)]
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking_signature == json.dumps([encrypted],
                                                               separators=(",", ":"))


def test_reasoning_detail_fragments_join_into_one_entry(sse_server):
    """Streamed fragments of one text entry become one entry of the signature; an encrypted
    entry stays apart; a failed stream keeps them too."""
    frag = {"type": "reasoning.text", "text": "", "signature": "", "format": "a", "index": 0}
    sse_server.add(Reply(body=[*sse_events(
        _chunk({"reasoning_details": [frag]}),
        _chunk({"reasoning_details": [{**frag, "text": "Two and"}]}),
        _chunk({"reasoning_details": [{"type": "reasoning.text", "text": " two.",
                                       "signature": "sig", "index": 0}]}),
        _chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "x"}]}),
        _chunk({"content": "4"}), {"error": {"message": "cut", "code": 502}})]))
    _, message = _events_and_message(stream_simple(
        _model(sse_server, provider="openrouter"), _context(), StreamOptions(api_key=KEY)))
    assert message.stop_reason == "error"
    assert json.loads(message.content[0].thinking_signature or "") == [
        {"type": "reasoning.text", "text": "Two and two.", "signature": "sig", "format": "a",
         "index": 0},
        {"type": "reasoning.encrypted", "data": "x"}]


# --- OpenRouter's native finish reasons (pi-ai 1.6) -----------------------------------------


def _openrouter_run(server, *chunks, provider="openrouter"):
    server.add(Reply(body=[*sse_events(*chunks), b"data: [DONE]\n\n"]))
    model = _model(server, provider=provider)
    return stream_simple(model, _context(), StreamOptions(api_key="k")).result(WAIT)


def _native(finish, native, **extra):
    body = _chunk(finish=finish, **extra)
    body["choices"][0]["native_finish_reason"] = native
    return body


def test_openrouter_native_reason_recorded(sse_server):
    message = _openrouter_run(sse_server, _chunk({"content": "Hi"}), _native("stop", "STOP"))
    assert (message.stop_reason, message.raw_stop_reason) == ("stop", "stop.STOP")
    same = _openrouter_run(sse_server, _chunk({"content": "Hi"}), _native("stop", "stop"))
    assert (same.stop_reason, same.raw_stop_reason) == ("stop", "stop")  # the finish reason


def test_openrouter_empty_stop_with_a_failure_reason_is_an_error(sse_server):
    """A "stop" without visible output whose native reason is not a clean stop (Gemini's
    MALFORMED_RESPONSE after reasoning) fails, with a retryable text."""
    from piagent.providers import is_retryable_error

    message = _openrouter_run(sse_server, _chunk({"reasoning": "hmm"}),
                              _native("stop", "MALFORMED_RESPONSE"))
    assert message.stop_reason == "error"
    assert message.error_message == (
        "OpenRouter returned an empty response (native_finish_reason: MALFORMED_RESPONSE)")
    assert is_retryable_error(message)
    # a clean native reason ends an empty turn quietly (Claude's empty end_turn)
    quiet = _openrouter_run(sse_server, _chunk({"content": " "}), _native("stop", "end_turn"))
    assert quiet.stop_reason == "stop"


def test_openrouter_error_finish_names_the_native_reason(sse_server):
    message = _openrouter_run(sse_server, _chunk({"content": "Hi"}),
                              _native("error", "SERVICE_UNAVAILABLE"))
    assert message.error_message == (
        "Provider finish_reason: error (native_finish_reason: SERVICE_UNAVAILABLE)")


def test_native_reason_read_only_for_openrouter(sse_server):
    message = _openrouter_run(sse_server, _chunk({"reasoning": "hmm"}),
                              _native("stop", "MALFORMED_RESPONSE"), provider="openai")
    assert (message.stop_reason, message.raw_stop_reason) == ("stop", "stop")


# --- OpenRouter's billed cost: usage.cost.total_from_provider (pi-ai 1.6) --------------------


def _billed_run(server, usage, provider="openrouter"):
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, **usage}
    return _openrouter_run(server, _chunk({"content": "Hi"}), _chunk(finish="stop"),
                           _chunk(usage=usage, choices=[]), provider=provider)


@pytest.mark.parametrize(("reported", "total"), [
    ({"cost": 0.0123, "is_byok": False}, 0.0123),
    ({"cost": 0.001, "is_byok": True, "cost_details": {"upstream_inference_cost": 0.02}},
     0.021),
    ({"cost": 0.001, "is_byok": True, "cost_details": {
        "upstream_inference_cost": None, "upstream_inference_prompt_cost": 0.01,
        "upstream_inference_completions_cost": 0.005}}, 0.016),
])
def test_openrouter_billed_cost_is_the_total(sse_server, reported, total):
    from piagent.messages import usage_from_dict, usage_to_dict

    message = _billed_run(sse_server, reported)
    cost = message.usage.cost
    assert cost.total == pytest.approx(total) and cost.total_from_provider is True
    assert cost.input + cost.output != pytest.approx(total)  # not the catalogue's estimate
    data = usage_to_dict(message.usage)
    assert data["cost"]["totalFromProvider"] is True
    assert usage_from_dict(data).cost.total_from_provider is True


@pytest.mark.parametrize("reported", [
    {},  # no cost
    {"cost": 0.01},  # is_byok unknown: incomplete accounting
    {"cost": 0.001, "is_byok": True},  # BYOK without details
    {"cost": 0.001, "is_byok": True, "cost_details": {"upstream_inference_cost": None}},
    {"cost": -1, "is_byok": False},
])
def test_openrouter_incomplete_cost_keeps_the_estimate(sse_server, reported):
    from piagent.messages import usage_to_dict

    message = _billed_run(sse_server, reported)
    cost = message.usage.cost
    assert cost.total_from_provider is False
    assert cost.total == pytest.approx(cost.input + cost.output + cost.cache_read
                                       + cost.cache_write)
    assert "totalFromProvider" not in usage_to_dict(message.usage)["cost"]


def test_reported_cost_read_only_from_openrouter(sse_server):
    message = _billed_run(sse_server, {"cost": 5.0, "is_byok": False}, provider="openai")
    assert message.usage.cost.total_from_provider is False
    assert message.usage.cost.total != 5.0


def test_requires_non_null_assistant_content():
    """pi-ai 1.6's requiresNonNullAssistantContent: "" for a tool-call-only assistant turn."""
    from piagent.messages import AssistantMessage, ToolCall, ToolResultMessage

    call = AssistantMessage(content=[ToolCall("call_1", "get_weather", {"city": "Paris"})],
                            stop_reason="toolUse", api="openai-completions", provider="openai",
                            model="gpt-4o-mini")
    result = ToolResultMessage("call_1", "get_weather", [TextContent("Sunny")])
    messages = _context(call, result).messages
    for flag, content in ((None, None), (True, "")):
        compat = {"requiresNonNullAssistantContent": flag} if flag else None
        model = Model(id="gpt-4o-mini", api="openai-completions", provider="openai",
                      base_url="http://127.0.0.1:9/v1", compat=compat)
        body = build_completions_request(model, messages, StreamOptions(), get_compat(model))
        [assistant] = [m for m in body["messages"] if m["role"] == "assistant"]
        assert assistant["content"] == content


# --- prompt caching by session (pi-ai 1.6.1: promptCacheKeyMode, affinity headers) ----------


def _cache_body(base_url="https://api.openai.com/v1", provider="openai", compat=None,
                **options):
    model = Model(id="gpt-4o-mini", api="openai-completions", provider=provider,
                  base_url=base_url, compat=compat)
    return build_completions_request(model, [UserMessage(content="Hi")], StreamOptions(**options))


def test_prompt_cache_key_by_mode_and_retention():
    long_id = "s" * 70 + "\U0001f642"
    # "auto": api.openai.com, the session id cut to its first 64 characters
    assert _cache_body(session_id=long_id)["prompt_cache_key"] == "s" * 64
    assert "prompt_cache_key" not in _cache_body(session_id="s1", cache_retention="none")
    local = "http://127.0.0.1:8000/v1"
    assert "prompt_cache_key" not in _cache_body(local, session_id="s1")
    # "auto" with long retention: any server that keeps long caches, with the 24 h retention
    body = _cache_body(local, session_id="s1", cache_retention="long")
    assert (body["prompt_cache_key"], body["prompt_cache_retention"]) == ("s1", "24h")
    together = _cache_body("https://api.together.xyz/v1", "together", session_id="s1",
                           cache_retention="long")
    assert "prompt_cache_key" not in together and "prompt_cache_retention" not in together
    # the compat flag: "enabled" anywhere (a key cut by code points), "disabled" nowhere
    enabled = _cache_body(local, compat={"promptCacheKeyMode": "enabled"},
                          session_id="\U0001f642" * 70)
    assert enabled["prompt_cache_key"] == "\U0001f642" * 64
    assert "prompt_cache_key" not in _cache_body(
        compat={"prompt_cache_key_mode": "disabled"}, session_id="s1")
    assert "prompt_cache_retention" in _cache_body(cache_retention="long")  # no session
    assert "prompt_cache_key" not in _cache_body()


def test_session_affinity_headers_for_openrouter(sse_server):
    for provider, expected in (("openrouter", {"x-session-id": "s1"}), ("openai", {})):
        sse_server.add(Reply(body=[*sse_events(_chunk({"content": "Hi"}, "stop")),
                                   b"data: [DONE]\n\n"]))
        model = _model(sse_server, provider=provider)
        stream_simple(model, _context(), StreamOptions(api_key="k", session_id="s1")).result(WAIT)
        headers = {k.lower(): v for k, v in sse_server.requests[-1].headers.items()}
        names = ("x-session-id", "session_id", "x-client-request-id", "x-session-affinity")
        assert {k: headers[k] for k in names if k in headers} == expected
    compat = {"sendSessionAffinityHeaders": True}
    sse_server.add(Reply(body=[*sse_events(_chunk({"content": "Hi"}, "stop")),
                               b"data: [DONE]\n\n"]))
    stream_simple(_model(sse_server, compat=compat), _context(),
                  StreamOptions(api_key="k", session_id="s1")).result(WAIT)
    headers = {k.lower(): v for k, v in sse_server.requests[-1].headers.items()}
    assert (headers["session_id"], headers["x-client-request-id"],
            headers["x-session-affinity"]) == ("s1", "s1", "s1")
