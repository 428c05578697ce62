"""Messages: pi's JSON keys, exact round trips (property-based), dispatch on role/type."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

import pytest
from freezegun import freeze_time
from hypothesis import given, settings, strategies as st

from piagent import (
    AssistantMessage,
    Cost,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    UnknownMessageTypeError,
    Usage,
    UserMessage,
    message_from_dict,
    message_to_dict,
    messages_from_json,
    messages_to_json,
    register_message_type,
)

# --- exact JSON keys -------------------------------------------------------------------


def test_assistant_message_uses_pi_keys() -> None:
    message = AssistantMessage(
        content=[TextContent("hi", text_signature="sig"), ThinkingContent("hmm", "ts", True),
                 ToolCall("call_1", "read", {"path": "a.txt"}, thought_signature="th")],
        api="openai-completions", provider="openai", model="gpt-4o",
        usage=Usage(1, 2, 3, 4, 10, Cost(0.1, 0.2, 0.3, 0.4, 1.0)), stop_reason="toolUse",
        error_message="e", thinking_level="high", timestamp=123)
    assert message_to_dict(message) == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "hi", "textSignature": "sig"},
            {"type": "thinking", "thinking": "hmm", "thinkingSignature": "ts", "redacted": True},
            {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "a.txt"},
             "thoughtSignature": "th"},
        ],
        "api": "openai-completions", "provider": "openai", "model": "gpt-4o",
        "usage": {"input": 1, "output": 2, "cacheRead": 3, "cacheWrite": 4, "totalTokens": 10,
                  "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0.3, "cacheWrite": 0.4,
                           "total": 1.0}},
        "stopReason": "toolUse", "errorMessage": "e", "thinkingLevel": "high", "timestamp": 123,
    }


def test_tool_result_and_user_and_system_use_pi_keys() -> None:
    result = ToolResultMessage("call_1", "read", [TextContent("x"), ImageContent("AAA", "image/png")],
                               details={"n": 1}, is_error=True, duration_ms=7, timestamp=5)
    assert message_to_dict(result) == {
        "role": "toolResult", "toolCallId": "call_1", "toolName": "read",
        "content": [{"type": "text", "text": "x"},
                    {"type": "image", "data": "AAA", "mimeType": "image/png"}],
        "details": {"n": 1}, "isError": True, "durationMs": 7, "timestamp": 5}
    assert message_to_dict(UserMessage("hello", timestamp=9)) == {
        "role": "user", "content": "hello", "timestamp": 9}
    system = SystemMessage("base", sections={"a": "1", "b": None},
                           tools_added=[ToolDeclaration("read", "Read", {"type": "object"})],
                           tools_removed=["old"], timestamp=0)
    assert message_to_dict(system) == {
        "role": "system", "content": "base", "sections": {"a": "1", "b": None},
        "toolsAdded": [{"name": "read", "description": "Read", "parameters": {"type": "object"}}],
        "toolsRemoved": [{"name": "old"}], "timestamp": 0}


def test_tools_removed_loads_from_both_forms() -> None:
    for removed in (["a", "b"], [{"name": "a"}, {"name": "b"}]):
        loaded = message_from_dict({"role": "system", "content": "", "toolsRemoved": removed,
                                    "timestamp": 1})
        assert loaded.tools_removed == ["a", "b"]


def test_optional_fields_are_left_out() -> None:
    data = message_to_dict(AssistantMessage(timestamp=1))
    assert "errorMessage" not in data and "thinkingLevel" not in data
    assert "details" not in message_to_dict(ToolResultMessage(timestamp=1))


def test_timestamp_defaults_to_now_in_epoch_ms() -> None:
    with freeze_time("2026-01-02 03:04:05.678"):
        assert UserMessage("x").timestamp == 1767323045678
        assert AssistantMessage().timestamp == 1767323045678


# --- dispatch ----------------------------------------------------------------------------


def test_decoding_dispatches_on_role_not_shape() -> None:
    # a user message shaped like an assistant one is still a user message
    loaded = message_from_dict({"role": "user", "content": [], "stopReason": "stop",
                                "timestamp": 1})
    assert isinstance(loaded, UserMessage)


def test_unknown_role_and_type_raise_clear_errors() -> None:
    with pytest.raises(UnknownMessageTypeError, match="register_message_type"):
        message_from_dict({"role": "nope", "timestamp": 1})
    with pytest.raises(UnknownMessageTypeError, match="'video'"):
        message_from_dict({"role": "user", "content": [{"type": "video"}], "timestamp": 1})


class Level(enum.Enum):
    LOW = "low"
    HIGH = "high"


@dataclasses.dataclass
class Artifact:
    title: str
    body_text: str = ""
    level: Level = Level.LOW
    tags: list[str] = dataclasses.field(default_factory=list)
    timestamp: int = 0
    role: str = "artifact"


def test_registered_application_message_round_trips() -> None:
    register_message_type("artifact", Artifact)
    message = Artifact("Plan", "step 1", Level.HIGH, ["a"], 42)
    data = message_to_dict(message)
    assert data["role"] == "artifact" and data["bodyText"] == "step 1"
    assert message_from_dict(json.loads(json.dumps(data))) == message


def test_unregistered_application_message_cannot_be_serialised() -> None:
    @dataclasses.dataclass
    class Secret:
        role: str = "secret"

    with pytest.raises(UnknownMessageTypeError, match="register_message_type"):
        message_to_dict(Secret())


def test_standard_roles_cannot_be_registered() -> None:
    with pytest.raises(ValueError, match="standard message role"):
        register_message_type("user", Artifact)


def test_assistant_helpers() -> None:
    message = AssistantMessage([TextContent("a"), ToolCall("1", "t", {}), TextContent("b")])
    assert message.text == "ab"
    assert [c.id for c in message.tool_calls] == ["1"]


# --- property-based round trip -----------------------------------------------------------

text = st.text(max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8)
json_objects = st.dictionaries(text, json_values, max_size=4)
maybe_text = st.none() | text
stamps = st.integers(0, 2**41)
money = st.floats(0, 1000, allow_nan=False)

# what a later pi might add: keys no attribute knows, kept in each object's ``extra``
extras = st.dictionaries(text.map(lambda k: f"later{k}"), json_values, max_size=2)
maybe_int = st.none() | st.integers(0, 10**6)

texts = st.builds(TextContent, text, maybe_text, extra=extras)
images = st.builds(ImageContent, text, st.sampled_from(["image/png", "image/jpeg"]), extra=extras)
thinking = st.builds(ThinkingContent, text, maybe_text, st.booleans(), extra=extras)
calls = st.builds(ToolCall, text, text, json_objects, maybe_text, namespace=maybe_text,
                  arguments_error=maybe_text, extra=extras)
usages = st.builds(Usage, st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6),
                   st.integers(0, 10**6), st.integers(0, 10**7),
                   st.builds(Cost, money, money, money, money, money, extra=extras),
                   cache_write_1h=maybe_int, reasoning=maybe_int, extra=extras)
declarations = st.builds(
    ToolDeclaration, text, text, json_objects, extra=extras,
    constrained_sampling=st.sampled_from([None, False, {"type": "json_schema", "strict": "prefer"}]))
diagnostics = st.lists(st.fixed_dictionaries({"type": text, "timestamp": stamps},
                                             optional={"details": json_objects}), max_size=2)
deferred = st.fixed_dictionaries({"provider": text, "modelId": text, "api": text, "id": text},
                                 optional={"pollAfterMs": st.integers(0, 10**6)})
nested = st.fixed_dictionaries({"calls": st.lists(st.fixed_dictionaries(
    {"id": text, "name": text, "status": st.sampled_from(["ok", "error", "unfinished"])},
    optional={"arguments": json_objects, "durationMs": st.integers(0, 10**6)}), max_size=2),
    "complete": st.booleans()})

messages = st.one_of(
    st.builds(SystemMessage, text | st.lists(texts, max_size=2),
              st.none() | st.dictionaries(text, maybe_text, max_size=3),
              st.none() | st.lists(declarations, max_size=2), st.none() | st.lists(text, max_size=2),
              stamps, extra=extras),
    st.builds(UserMessage, text | st.lists(texts | images, max_size=3), stamps, extra=extras),
    st.builds(AssistantMessage, st.lists(texts | thinking | calls, max_size=4), text, text, text,
              usages, st.sampled_from(["stop", "length", "toolUse", "error", "aborted",
                                       "deferred"]),
              maybe_text, st.none() | st.sampled_from(["off", "low", "high"]), stamps,
              duration_ms=maybe_int, response_model=maybe_text, response_id=maybe_text,
              provider_thinking_level=maybe_text, raw_stop_reason=maybe_text,
              end_turn=st.none() | st.booleans(), diagnostics=st.none() | diagnostics,
              deferred=st.none() | deferred, extra=extras),
    st.builds(ToolResultMessage, text, text, st.lists(texts | images, max_size=3), json_values,
              st.none() | usages, st.booleans(), maybe_int, stamps,
              nested_calls=st.none() | nested, extra=extras),
)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_every_message_round_trips_exactly(message: Any) -> None:
    assert message_from_dict(json.loads(json.dumps(message_to_dict(message)))) == message


@settings(max_examples=50, deadline=None)
@given(st.lists(messages, max_size=6))
def test_transcripts_round_trip_through_json(transcript: list[Any]) -> None:
    assert messages_from_json(messages_to_json(transcript)) == transcript


def test_messages_from_json_rejects_non_arrays() -> None:
    with pytest.raises(ValueError, match="JSON array"):
        messages_from_json('{"role": "user"}')


def test_usage_counts_beyond_2_53_round_trip_exactly() -> None:
    from piagent.messages import Usage, usage_from_dict, usage_to_dict

    big = 2**60 + 1  # not representable as a float
    usage = Usage(input=big, output=big + 2, cache_read=3, cache_write=4, total_tokens=2 * big)
    again = usage_from_dict(json.loads(json.dumps(usage_to_dict(usage))))
    assert (again.input, again.output, again.total_tokens) == (big, big + 2, 2 * big)
    assert usage_from_dict({"input": True, "output": "7", "cacheRead": 2.0}).input == 0
    assert usage_from_dict({"output": "7", "cacheRead": 2.0}).cache_read == 2


# --- lossless: what pi (or a later pi) writes comes back as written ------------------------


def test_unknown_keys_survive_at_every_level() -> None:
    later = {"addedLater": {"kept": True}}
    usage = {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 3,
             "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0,
                      **later}, **later}
    transcript = [
        {"role": "system", "content": "s", "toolsAdded": [
            {"name": "read", "description": "", "parameters": {}, **later}], "timestamp": 1,
         **later},
        {"role": "user", "content": [{"type": "text", "text": "hi", **later},
                                     {"type": "image", "data": "", "mimeType": "image/png",
                                      **later}], "timestamp": 2, **later},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", **later},
            {"type": "toolCall", "id": "c", "name": "read", "arguments": {}, **later}],
         "api": "a", "provider": "p", "model": "m", "usage": usage, "stopReason": "toolUse",
         "timestamp": 3, **later},
        {"role": "toolResult", "toolCallId": "c", "toolName": "read", "content": [],
         "isError": False, "timestamp": 4, **later},
    ]
    loaded = messages_from_json(json.dumps(transcript))
    assert all(m.extra == later for m in loaded)  # type: ignore[union-attr]
    assert loaded[1].content[0].extra == later  # type: ignore[union-attr,index]
    assert json.loads(messages_to_json(loaded)) == transcript
    # unknown keys are written after the known ones
    assert list(message_to_dict(loaded[3]))[-1] == "addedLater"


def test_explicit_null_and_false_are_kept_and_attributes_win() -> None:
    data = {"role": "toolResult", "toolCallId": "c", "toolName": "t", "content": [],
            "details": None, "isError": False, "timestamp": 1}
    message = message_from_dict(data)
    assert isinstance(message, ToolResultMessage)
    assert message.details is None and message.extra == {"details": None}
    assert message_to_dict(message) == data
    message.details = {"now": 1}  # the attribute wins over the kept null
    assert message_to_dict(message)["details"] == {"now": 1}
    block = message_from_dict({"role": "assistant", "content": [
        {"type": "thinking", "thinking": "x", "redacted": False}], "endTurn": False})
    assert isinstance(block, AssistantMessage) and block.end_turn is False
    assert message_to_dict(block)["content"][0] == {"type": "thinking", "thinking": "x",
                                                    "redacted": False}
    assert message_to_dict(block)["endTurn"] is False


def test_pi_1_4_fields_are_typed_attributes() -> None:
    message = message_from_dict({
        "role": "assistant", "content": [{"type": "toolCall", "id": "c", "name": "read",
                                          "arguments": {}, "namespace": "fs",
                                          "argumentsError": "bad JSON"}],
        "api": "a", "provider": "p", "model": "m", "responseModel": "m-2026",
        "responseId": "r1", "providerThinkingLevel": "medium", "rawStopReason": "end_turn",
        "endTurn": True, "durationMs": 12, "stopReason": "toolUse", "timestamp": 5,
        "usage": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 4, "cacheWrite1h": 3,
                  "reasoning": 1, "totalTokens": 7, "cost": {}}})
    assert isinstance(message, AssistantMessage) and message.extra == {}
    call = message.tool_calls[0]
    assert (call.namespace, call.arguments_error) == ("fs", "bad JSON")
    assert (message.response_model, message.response_id, message.provider_thinking_level,
            message.raw_stop_reason, message.end_turn, message.duration_ms) == (
        "m-2026", "r1", "medium", "end_turn", True, 12)
    assert (message.usage.cache_write_1h, message.usage.reasoning) == (3, 1)


def test_system_text_blocks_read_as_pi_reads_them() -> None:
    from piagent import get_current_system_prompt

    data = {"role": "system", "content": [{"type": "text", "text": "One."},
                                          {"type": "text", "text": "Two."}], "timestamp": 0}
    message = message_from_dict(data)
    assert isinstance(message, SystemMessage)
    assert message.text == "One.\nTwo."  # pi's contentText joins with a newline
    assert get_current_system_prompt([message]) == "One.\nTwo."
    assert message_to_dict(message) == data


def test_to_tool_declaration_keeps_constrained_sampling() -> None:
    from piagent import to_tool_declaration

    declaration = ToolDeclaration("read", "", {"type": "object"}, constrained_sampling=False)
    assert to_tool_declaration(declaration).constrained_sampling is False
