"""pi-ai 1.6.1's per-model Anthropic features (providers/_anthropic_features.py): managed
effort markers, native tool changes with the deferred placeholder, server-side fallbacks,
and their betas."""

from __future__ import annotations

from dataclasses import replace

import pytest

from piagent.messages import (
    AssistantMessage,
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
from piagent.providers.anthropic import build_anthropic_headers, build_anthropic_request
from piagent.stream import Context, StreamOptions
from tests.conftest import WAIT

from .sse_script import Reply, sse

WEATHER = ToolDeclaration("weather", "Weather", {"type": "object", "properties": {}})
TIME = ToolDeclaration("time", "Time", {"type": "object", "properties": {}})
MANAGED = {"forceAdaptiveThinking": True, "supportsMidConvoEffort": True}
PLACEHOLDER = {"name": "__pi_deferred_placeholder__",
               "description": "Reserved placeholder. Never available. Never call this.",
               "input_schema": {"type": "object", "properties": {}, "required": []},
               "defer_loading": True}


def _model(**fields: object) -> Model:
    values: dict[str, object] = {"id": "claude-x", "api": "anthropic-messages",
                                 "provider": "anthropic", "base_url": "http://127.0.0.1:9",
                                 "reasoning": True, "max_tokens": 64000}
    values.update(fields)
    return Model(**values)  # type: ignore[arg-type]


def _marker(effort: str) -> dict[str, object]:
    return {"role": "system", "content": [], "output_config": {"effort": effort}}


def _betas(model: Model, body: dict[str, object]) -> str | None:
    return build_anthropic_headers(model, StreamOptions(), "k", body).get("anthropic-beta")


def test_managed_effort_markers():
    """The level in markers (before an earlier answer of the provider that recorded one, and
    at the end); adaptive thinking with block_binding and the top-level effort low; no
    temperature."""
    model = _model(compat=MANAGED)
    earlier = AssistantMessage(content=[TextContent("hi")], api="anthropic-messages",
                               provider="anthropic", model="claude-old",
                               provider_thinking_level="max")
    other = AssistantMessage(content=[TextContent("yo")], api="openai-responses",
                             provider="openai", model="gpt", provider_thinking_level="low")
    messages = [UserMessage(content="a"), earlier, UserMessage(content="b"), other,
                UserMessage(content="c")]
    body = build_anthropic_request(model, messages,
                                   StreamOptions(reasoning="medium", temperature=0.5))
    assert body["thinking"] == {"type": "adaptive", "display": "summarized",
                                "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    assert body["output_config"] == {"effort": "low"}
    assert "temperature" not in body
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "system", "assistant", "user", "assistant", "user", "system"]
    assert body["messages"][1] == _marker("max")
    assert body["messages"][-1] == _marker("medium")
    assert body["messages"][-2]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert _betas(model, body) == ("mid-conversation-output-config-2026-07-01,"
                                   "thinking-binding-controls-2026-08-01")


def test_managed_effort_with_thinking_off():
    """Off: thinking disabled and no markers, unless the model cannot stop thinking
    ("off": null), which keeps markers at the default level high."""
    off = build_anthropic_request(_model(compat=MANAGED), [UserMessage(content="a")],
                                  StreamOptions())
    assert off["thinking"] == {"type": "disabled"} and len(off["messages"]) == 1
    always = build_anthropic_request(_model(compat=MANAGED, thinking_level_map={"off": None}),
                                     [UserMessage(content="a")], StreamOptions())
    assert always["messages"][-1] == _marker("high")
    assert always["output_config"] == {"effort": "low"}


def test_streamed_answer_records_its_level(sse_server):
    model = _model(base_url=sse_server.url, compat=MANAGED)
    start = {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}}
    sse_server.add(Reply(body=[
        sse(start, event="message_start"),
        sse({"type": "content_block_start", "index": 0,
             "content_block": {"type": "text", "text": ""}}, event="content_block_start"),
        sse({"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": "ok"}}, event="content_block_delta"),
        sse({"type": "content_block_stop", "index": 0}, event="content_block_stop"),
        sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
             "usage": {"output_tokens": 2}}, event="message_delta"),
        sse({"type": "message_stop"}, event="message_stop")]))
    message = stream_simple(model, Context([UserMessage(content="a")]),
                            StreamOptions(api_key="k", reasoning="low")).result(WAIT)
    assert message.stop_reason == "stop", message.error_message
    assert message.provider_thinking_level == "low"
    assert sse_server.requests[0].json["messages"][-1] == _marker("low")


def test_native_tool_changes():
    """The leading tools plus the deferred placeholder stay the tool list; a later system
    message adds and removes tools with tool_addition / tool_removal blocks (a redefined
    tool is not removed)."""
    model = _model(compat={"supportsMidConvoSystemMessages": True,
                           "supportsMidConvoToolChanges": True})
    call = AssistantMessage(content=[ToolCall("c1", "weather", {})], api="anthropic-messages",
                            provider="anthropic", model="claude-x", stop_reason="toolUse")
    messages = [SystemMessage(content="Be brief.", tools_added=[WEATHER]),
                UserMessage(content="go"), call,
                ToolResultMessage("c1", "weather", [TextContent("sunny")]),
                SystemMessage(content="", tools_added=[TIME, WEATHER],
                              tools_removed=["weather", "old"])]
    body = build_anthropic_request(model, messages, StreamOptions())
    assert [t["name"] for t in body["tools"]] == ["weather", "__pi_deferred_placeholder__"]
    assert body["tools"][-1] == PLACEHOLDER
    assert body["tools"][0]["cache_control"] == {"type": "ephemeral"}
    system = body["messages"][-1]
    assert system["role"] == "system"
    assert [b["type"] for b in system["content"]] == ["tool_removal", "tool_addition",
                                                      "tool_addition"]
    assert system["content"][0]["tool"] == {"type": "tool_reference", "name": "old"}
    definition = system["content"][1]["tool"]
    assert definition["type"] == "tool_definition" and definition["definition"]["name"] == "time"
    assert "cache_control" not in definition["definition"]
    assert system["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert _betas(model, body) == "inline-tools-2026-09-15"
    # without tools in the leading system message: the current tools, no placeholder
    plain = build_anthropic_request(model, messages[1:], StreamOptions())
    assert [t["name"] for t in plain["tools"]] == ["time", "weather"]


def test_fallbacks_and_temperature():
    model = _model(compat={"allowedFallbackModels": [
        {"provider": "anthropic", "model": "claude-a"}, {"provider": "anthropic",
                                                          "model": "claude-b"}],
        "supportsTemperature": False})
    body = build_anthropic_request(model, [UserMessage(content="a")],
                                   StreamOptions(temperature=0.3))
    assert body["fallbacks"] == [{"model": "claude-a"}, {"model": "claude-b"}]
    assert "temperature" not in body  # supportsTemperature: false
    assert _betas(model, body) == "server-side-fallback-2026-07-01"


def test_catalogue_models():
    fable = replace(get_model("anthropic", "claude-fable-5"), base_url="http://127.0.0.1:9")
    body = build_anthropic_request(fable, [SystemMessage(content="s", tools_added=[WEATHER]),
                                           UserMessage(content="a")], StreamOptions())
    assert body["fallbacks"] == [{"model": "claude-opus-4-8"}, {"model": "claude-opus-5"}]
    assert body["tools"][-1] == PLACEHOLDER


def test_unsigned_thinking_with_allow_empty_signature():
    """allowEmptySignature: the model's unsigned thinking replays as thinking with an empty
    signature (pi-ai 1.6.1), else as text."""
    thought = AssistantMessage(content=[ThinkingContent("hmm"), TextContent("ok")],
                               api="anthropic-messages", provider="anthropic", model="claude-x")
    messages = [UserMessage(content="a"), thought, UserMessage(content="b")]
    allowed = build_anthropic_request(_model(compat={"allowEmptySignature": True}), messages,
                                      StreamOptions())
    assert allowed["messages"][1]["content"][0] == {"type": "thinking", "thinking": "hmm",
                                                    "signature": ""}
    plain = build_anthropic_request(_model(), messages, StreamOptions())
    assert plain["messages"][1]["content"][0] == {"type": "text", "text": "hmm"}


def test_an_answer_from_a_fallback_model_is_priced_at_its_cost(sse_server):
    """The response names the fallback model that answered: its prices (pi-ai 1.6.1)."""
    model = _model(base_url=sse_server.url, cost=ModelCost(input=1.0, output=1.0),
                   compat={"allowedFallbackModels": [
                       {"provider": "anthropic", "model": "claude-b",
                        "cost": {"input": 10, "output": 20, "cacheRead": 0, "cacheWrite": 0}}]})
    for answered_by, expected in (("claude-b", 10 * 100 + 20 * 2), ("claude-x", 100 + 2)):
        start = {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": answered_by,
            "content": [], "usage": {"input_tokens": 100, "output_tokens": 1}}}
        sse_server.add(Reply(body=[
            sse(start, event="message_start"),
            sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                 "usage": {"output_tokens": 2}}, event="message_delta"),
            sse({"type": "message_stop"}, event="message_stop")]))
        message = stream_simple(model, Context([UserMessage(content="a")]),
                                StreamOptions(api_key="k")).result(WAIT)
        assert message.stop_reason == "stop", message.error_message
        assert message.usage.cost.total * 1e6 == pytest.approx(expected), answered_by
        assert message.model == "claude-x"
