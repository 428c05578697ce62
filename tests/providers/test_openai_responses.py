"""``openai-responses`` against a local server speaking Responses SSE.

Covers: the providers.md §4.4 stream (reasoning summary, text, function call, usage,
signatures, ``call|item`` ids); terminal events (incomplete → length or error, failed,
``error``); a stream without a terminal event; ``.done`` arguments that extend the deltas;
the request body (reasoning items replayed verbatim, messages with ids, function calls and
outputs, developer role, tools); the service-tier cost multiplier.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from piagent.messages import (
    SystemMessage,
    TextContent,
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
)
from piagent.models import Model, ModelCost
from piagent.providers import stream_simple
from piagent.stream import Context, StreamOptions
from tests.conftest import WAIT

from .sse_script import Reply, sse

FIXTURES = Path(__file__).parent / "fixtures"
KEY = "sk-responses-SECRET-0987654321"
TOOL = ToolDeclaration("get_weather", "Weather", {"type": "object"})


def _model(server, **kw) -> Model:
    return Model(id="gpt-5-mini", api="openai-responses", provider="openai",
                 base_url=server.url + "/v1", reasoning=True, **kw)


def _context(*messages) -> Context:
    return Context([SystemMessage(content="Be brief.", tools_added=[TOOL], timestamp=0),
                    UserMessage(content="Weather in Paris?"), *messages])


def _ev(kind, **data):
    return sse({"type": kind, **data}, event=kind)


def _run(server, body, **kw):
    server.add(Reply(body=body))
    stream = stream_simple(_model(server, **kw), _context(),
                           StreamOptions(api_key=KEY, reasoning="medium"))
    events = list(stream)
    return events, stream.result(WAIT)


def test_reference_stream(sse_server, no_piagent_threads):
    body = [(FIXTURES / "responses_reasoning_tool.sse").read_bytes()]
    events, message = _run(sse_server, body, cost=ModelCost(input=0.25, output=2.0,
                                                            cache_read=0.025))
    assert [e.type for e in events] == [
        "start", "thinking_start", "thinking_delta", "thinking_end",
        "text_start", "text_delta", "text_end", "toolcall_start", "toolcall_delta",
        "toolcall_delta", "toolcall_end", "done"]
    # the deltas add up to the final thinking: no trailing blank line after the summary
    assert [e.delta for e in events if e.type == "thinking_delta"] == [
        "Need the weather tool."]
    thinking, text, call = message.content
    assert thinking.thinking == "Need the weather tool."
    assert json.loads(thinking.thinking_signature)["encrypted_content"] == "gAAAAB-opaque"
    assert json.loads(text.text_signature) == {"v": 1, "id": "msg_1"}
    assert (call.id, call.name, call.arguments) == ("call_1|fc_1", "get_weather",
                                                    {"city": "Paris"})
    assert message.stop_reason == "toolUse"
    u = message.usage
    assert (u.input, u.output, u.cache_read, u.total_tokens) == (172, 90, 128, 390)
    assert u.cost.total == pytest.approx((172 * 0.25 + 90 * 2.0 + 128 * 0.025) / 1e6)
    request = sse_server.requests[0]
    assert request.path == "/v1/responses"
    sent = request.json
    assert sent["store"] is False and sent["stream"] is True
    assert sent["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert sent["include"] == ["reasoning.encrypted_content"]
    assert sent["input"] == [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}]
    # no ``strict`` without the model's compat saying the server knows it (pi-ai 1.4.0)
    assert sent["tools"] == [{"type": "function", "name": "get_weather", "description": "Weather",
                              "parameters": {"type": "object"}}]


def test_system_messages_fold_unless_the_compat_takes_them_mid_conversation():
    from piagent.providers import get_model
    from piagent.providers.openai_responses import build_responses_request

    messages = [SystemMessage(content="Base."), UserMessage(content="hi"),
                SystemMessage(content="Now in French."), UserMessage(content="ok")]
    model = get_model("openai", "gpt-4o-mini")
    folded = build_responses_request(model, messages, StreamOptions())["input"]
    assert folded[0] == {"role": "system", "content": "Base.\n\nNow in French."}
    assert [item["role"] for item in folded] == ["system", "user", "user"]
    on = dataclasses.replace(model, compat={"supportsMidConvoSystemMessages": True})
    kept = build_responses_request(on, messages, StreamOptions())["input"]
    assert [item["role"] for item in kept] == ["system", "user", "system", "user"]
    assert kept[2]["content"] == "Now in French."


def test_a_system_message_between_a_call_and_its_result_folds_before_the_transform(
        sse_server):
    """pi folds system messages before transformMessages: the call keeps its result and
    gets no synthetic "No result provided" one."""
    from piagent.messages import AssistantMessage, ToolCall

    model = _model(sse_server)
    call = AssistantMessage([ToolCall("c1", "get_weather", {"city": "Paris"})], api=model.api,
                            provider=model.provider, model=model.id, stop_reason="toolUse")
    context = Context([SystemMessage("Be brief."), UserMessage("Weather?"), call,
                       SystemMessage("Use Celsius."),
                       ToolResultMessage("c1", "get_weather", [TextContent("18C")])])
    sse_server.add(Reply(body=[(FIXTURES / "responses_reasoning_tool.sse").read_bytes()]))
    stream_simple(model, context, StreamOptions(api_key=KEY)).result(WAIT)
    sent = sse_server.requests[0].json["input"]
    assert [item.get("type", item.get("role")) for item in sent] == [
        "developer", "user", "function_call", "function_call_output"]
    assert sent[0]["content"] == "Be brief.\n\nUse Celsius."
    assert sent[3]["output"] == "18C"


def test_strict_only_with_the_compat_and_catalogue_models_have_it():
    from piagent.providers import get_model
    from piagent.providers.openai_responses import build_responses_request

    messages = _context().messages
    model = get_model("openai", "gpt-4o-mini", base_url="http://127.0.0.1:1/v1",
                      api="openai-responses")
    assert model.compat == {"supportsStrictMode": True}  # pi's catalogue entry
    body = build_responses_request(model, messages, StreamOptions())
    assert [t.get("strict") for t in body["tools"]] == [False]
    plain = dataclasses.replace(model, compat=None)
    assert "strict" not in build_responses_request(plain, messages, StreamOptions())["tools"][0]


def test_history_replays_items(sse_server):
    """The previous turn's reasoning item, message id and call ids go back verbatim."""
    sse_server.add(Reply(body=[(FIXTURES / "responses_reasoning_tool.sse").read_bytes()]))
    first = stream_simple(_model(sse_server), _context(), StreamOptions(api_key=KEY)).result(WAIT)
    result = ToolResultMessage("call_1|fc_1", "get_weather", [TextContent("Sunny")])
    sse_server.add(Reply(body=[_ev("response.completed", response={"status": "completed"})]))
    stream_simple(_model(sse_server), _context(first, result),
                  StreamOptions(api_key=KEY)).result(WAIT)
    items = sse_server.requests[1].json["input"][2:]
    assert items[0]["type"] == "reasoning" and items[0]["encrypted_content"] == "gAAAAB-opaque"
    assert items[1] == {"type": "message", "role": "assistant", "id": "msg_1",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": "Checking.",
                                     "annotations": []}]}
    # replayed with the status OpenAI returned it with (pi-ai 1.6, #12367)
    assert items[2] == {"type": "function_call", "call_id": "call_1", "id": "fc_1",
                        "name": "get_weather", "status": "completed",
                        "arguments": '{"city":"Paris"}'}
    assert items[3] == {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"}


def test_done_arguments_extend_deltas(sse_server):
    body = [_ev("response.output_item.added", output_index=0,
                item={"id": "fc_9", "type": "function_call", "call_id": "c9", "name": "f",
                      "arguments": ""}),
            _ev("response.function_call_arguments.delta", output_index=0, delta='{"a":'),
            _ev("response.function_call_arguments.done", output_index=0, arguments='{"a":1}'),
            _ev("response.output_item.done", output_index=0,
                item={"id": "fc_9", "type": "function_call", "call_id": "c9", "name": "f",
                      "arguments": '{"a":1}'}),
            _ev("response.completed", response={"status": "completed"})]
    events, message = _run(sse_server, body)
    assert [e.delta for e in events if e.type == "toolcall_delta"] == ['{"a":', "1}"]
    assert message.tool_calls[0].arguments == {"a": 1}


@pytest.mark.parametrize(("terminal", "stop", "error"), [
    (_ev("response.incomplete", response={
        "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}),
     "length", None),
    (_ev("response.incomplete", response={
        "status": "incomplete", "incomplete_details": {"reason": "content_filter"}}),
     "error", "Response incomplete: content_filter"),
    (_ev("response.failed", response={"status": "failed", "error": {
        "code": "server_error", "message": "The server had an error"}}),
     "error", "OpenAI Responses error: server_error: The server had an error"),
    (_ev("error", code="rate_limit_exceeded", message="Slow down", param=None),
     "error", "OpenAI Responses error: Error Code rate_limit_exceeded: Slow down"),
    (_ev("error", sequence_number=3, error={  # the live API nests the fields
        "type": "insufficient_quota", "code": "insufficient_quota",
        "message": "You exceeded your current quota", "param": None}),
     "error", "OpenAI Responses error: Error Code insufficient_quota: "
              "You exceeded your current quota"),
])
def test_terminal_events(sse_server, terminal, stop, error):
    body = [_ev("response.output_item.added", output_index=0,
                item={"id": "m", "type": "message", "content": []}),
            _ev("response.output_text.delta", output_index=0, delta="par"), terminal]
    _events, message = _run(sse_server, body)
    assert (message.stop_reason, message.error_message) == (stop, error)
    assert message.text == "par"


def test_stream_without_terminal_event(sse_server):
    body = [_ev("response.created", response={"status": "in_progress"})]
    _events, message = _run(sse_server, body)
    assert message.stop_reason == "error"
    assert message.error_message.startswith(
        "The OpenAI Responses stream ended before a terminal response event")


def test_flex_tier_halves_cost(sse_server):
    body = [_ev("response.completed", response={
        "status": "completed", "service_tier": "flex",
        "usage": {"input_tokens": 1_000_000, "output_tokens": 0, "total_tokens": 1_000_000}})]
    _events, message = _run(sse_server, body, cost=ModelCost(input=2.0))
    assert message.usage.cost.total == pytest.approx(1.0)


# --- prompt caching by session (pi-ai 1.6.1) ------------------------------------------------


def test_prompt_cache_key_retention_and_session_headers(sse_server):
    from piagent.providers.openai_responses import build_responses_request

    def body(compat=None, **options):
        model = Model(id="gpt-5-mini", api="openai-responses", provider="openai",
                      base_url="http://127.0.0.1:9/v1", compat=compat)
        return build_responses_request(model, [UserMessage(content="Hi")],
                                       StreamOptions(**options))

    assert body(session_id="k" * 80)["prompt_cache_key"] == "k" * 64
    assert "prompt_cache_key" not in body(session_id="s", cache_retention="none")
    assert "prompt_cache_key" not in body(compat={"promptCacheKeyMode": "disabled"},
                                          session_id="s")
    assert body(cache_retention="long")["prompt_cache_retention"] == "24h"
    assert "prompt_cache_retention" not in body(
        compat={"supportsLongCacheRetention": False}, cache_retention="long")
    explicit = {"supportsExplicitPromptCacheMode": True}
    assert body(compat=explicit, cache_retention="long")["prompt_cache_options"] == {
        "ttl": "30m"}
    assert body(compat=explicit, cache_retention="none")["prompt_cache_options"] == {
        "mode": "explicit"}
    assert "prompt_cache_retention" not in body(compat=explicit, cache_retention="long")
    # the session headers: OpenAI's session-id (pi-ai 1.6; 1.4.0 sent session_id)
    sse_server.add(Reply(body=[(FIXTURES / "responses_reasoning_tool.sse").read_bytes()]))
    stream_simple(_model(sse_server), _context(),
                  StreamOptions(api_key=KEY, session_id="s1")).result(WAIT)
    headers = {k.lower(): v for k, v in sse_server.requests[-1].headers.items()}
    assert (headers.get("session-id"), headers.get("x-client-request-id")) == ("s1", "s1")
    assert "session_id" not in headers and "x-session-id" not in headers


def test_tool_call_namespace_read_and_replayed_to_the_same_model(sse_server):
    """A dynamically loaded tool's call carries its ``namespace`` (pi-ai): kept on the
    ToolCall, replayed only to the model that gave it."""
    from piagent.providers.openai_responses import build_responses_request

    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "search",
            "namespace": "docs", "arguments": ""}
    done = {**item, "arguments": "{}", "status": "completed"}
    body = [_ev("response.created", response={"id": "resp_ns"}),
            _ev("response.output_item.added", output_index=0, item=item),
            _ev("response.function_call_arguments.delta", output_index=0, delta="{}"),
            _ev("response.output_item.done", output_index=0, item=done),
            _ev("response.completed", response={"id": "resp_ns", "status": "completed",
                                                 "usage": {"input_tokens": 5,
                                                           "output_tokens": 2}})]
    _, message = _run(sse_server, body)
    call = message.content[0]
    assert (call.name, call.namespace, message.response_id) == ("search", "docs", "resp_ns")
    history = [UserMessage(content="Find"), message]

    def replayed(model_id):
        model = Model(id=model_id, api="openai-responses", provider="openai",
                      base_url="http://127.0.0.1:9/v1")
        body = build_responses_request(model, history, StreamOptions())
        return next(i for i in body["input"] if i.get("type") == "function_call")

    assert replayed("gpt-5-mini")["namespace"] == "docs"
    assert "namespace" not in replayed("gpt-4o")


def test_reasoning_openai_withheld_is_a_diagnostic(sse_server):
    """pi-ai 1.6: the replayed reasoning OpenAI removed (``input_transformations``), except
    the ``turn_boundary`` removals every earlier turn reports, as a diagnostic."""
    removed = [{"type": "reasoning", "id": "rs_1", "action": "removed",
                "reason": "prefix_mismatch", "extra": 1},
               {"type": "reasoning", "id": "rs_0", "action": "removed",
                "reason": "turn_boundary"},
               {"type": "message", "id": "m", "action": "removed", "reason": "x"}]
    body = [_ev("response.completed", response={
        "id": "resp_t", "status": "completed", "input_transformations": removed,
        "usage": {"input_tokens": 5, "output_tokens": 2}})]
    _, message = _run(sse_server, body)
    (diagnostic,) = message.diagnostics or []
    assert diagnostic["type"] == "openai_input_transformations"
    assert diagnostic["details"] == {"transformations": [
        {"type": "reasoning", "id": "rs_1", "action": "removed", "reason": "prefix_mismatch"}]}
    _, plain = _run(sse_server, [_ev("response.completed", response={
        "id": "r", "status": "completed", "input_transformations": removed[1:]})])
    assert plain.diagnostics is None
