"""``transform_messages`` and the system-message helpers (providers.md §2.5–§2.6)."""

from __future__ import annotations

import pytest

from piagent.messages import (
    AssistantMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from piagent.models import Model
from piagent.providers._transform import (
    leading_system_text,
    system_update_text,
    transform_messages,
)

MODEL = Model(id="m1", api="openai-completions", provider="p", base_url="http://x")


def _assistant(*content, model="m1", stop="toolUse"):
    return AssistantMessage(content=list(content), api="openai-completions", provider="p",
                            model=model, stop_reason=stop)


def _result(call_id, text="ok"):
    return ToolResultMessage(call_id, "t", [TextContent(text)])


def test_unchanged_transcript_keeps_objects():
    messages = [SystemMessage(content="s"), UserMessage(content="hi"),
                _assistant(ToolCall("a", "t", {})), _result("a"), _assistant(TextContent("done"))]
    out = transform_messages(messages, MODEL)
    assert all(x is y for x, y in zip(out, messages, strict=True))


def test_errored_and_aborted_assistants_are_dropped():
    messages = [UserMessage(content="hi"), _assistant(TextContent("x"), stop="error"),
                _assistant(TextContent("y"), stop="aborted"), UserMessage(content="again")]
    assert [m.role for m in transform_messages(messages, MODEL)] == ["user", "user"]


def test_orphan_tool_calls_get_synthetic_results():
    """Before the next user message, system message, assistant message, and at the end."""
    messages = [_assistant(ToolCall("a", "t", {}), ToolCall("b", "t", {})), _result("a"),
                UserMessage(content="next"),
                _assistant(ToolCall("c", "t", {})), SystemMessage(content="update"),
                _assistant(ToolCall("d", "t", {})), _assistant(ToolCall("e", "t", {}))]
    out = transform_messages(messages, MODEL)
    shape = [(m.role, getattr(m, "tool_call_id", None)) for m in out]
    assert shape == [("assistant", None), ("toolResult", "a"), ("toolResult", "b"),
                     ("user", None), ("assistant", None), ("toolResult", "c"),
                     ("system", None), ("assistant", None), ("toolResult", "d"),
                     ("assistant", None), ("toolResult", "e")]
    synthetic = out[2]
    assert (synthetic.is_error, synthetic.text, synthetic.tool_name) == (
        True, "No result provided", "t")


def test_other_model_thinking_is_dropped_and_ids_are_renamed():
    """pi-ai's transformMessages (1.4.0 and 1.6.1 alike): another model's thinking is dropped
    (its signatures are only valid for the model that made it, and readable thinking sent as
    text reads as part of the reply); ``foreign_thinking_as_text=True`` keeps it as text."""
    other = _assistant(ThinkingContent("I think", "sig"), ThinkingContent("", "x", redacted=True),
                       ThinkingContent("  "), TextContent("Hi", text_signature="ts"),
                       ToolCall("call|item", "t", {"a": 1}, thought_signature="s"), model="other")
    messages = [other, _result("call|item")]
    kept = transform_messages(messages, MODEL, lambda i: i.replace("|", "_"),
                              foreign_thinking_as_text=True)[0]
    assert [(type(b).__name__, getattr(b, "text", None)) for b in kept.content] == [
        ("TextContent", "I think"), ("TextContent", "Hi"), ("ToolCall", None)]
    out = transform_messages(messages, MODEL, lambda i: i.replace("|", "_"))
    assistant, result = out
    assert [(type(b).__name__, getattr(b, "text", None)) for b in assistant.content] == [
        ("TextContent", "Hi"), ("ToolCall", None)]
    assert assistant.content[0].text_signature is None
    call = assistant.content[1]
    assert (call.id, call.thought_signature, call.arguments) == ("call_item", None, {"a": 1})
    assert result.tool_call_id == "call_item"
    assert other.content[4].id == "call|item"  # the caller's message is untouched


def test_same_model_thinking_kept_and_empty_dropped():
    signed_empty = ThinkingContent("", "encrypted")
    message = _assistant(signed_empty, ThinkingContent(""), TextContent("x"), stop="stop")
    (out,) = transform_messages([message], MODEL)
    assert out.content == [signed_empty, TextContent("x")]


def test_images_become_placeholders_for_text_only_models():
    user = UserMessage(content=[TextContent("look"), ImageContent("AAA", "image/png"),
                                ImageContent("BBB", "image/png")])
    (out,) = transform_messages([user], MODEL)
    assert out.content == [TextContent("look"),
                           TextContent("(image omitted: model does not support images)")]
    vision = Model(id="m1", api="openai-completions", provider="p", base_url="http://x",
                   input=("text", "image"))
    assert transform_messages([user], vision)[0] is user


def test_system_helpers():
    messages = [SystemMessage(content="a"), SystemMessage(content="b", sections={"x": "X"}),
                UserMessage(content="hi")]
    assert leading_system_text(messages) == ("a\n\nb\n\nX", 2)
    assert leading_system_text([UserMessage(content="hi")]) == ("", 0)
    update = SystemMessage(content="more", sections={"rules": "R", "old": None})
    assert system_update_text(update) == ('more\n\nUpdated system prompt section "rules":\n\nR'
                                          '\n\nRemoved system prompt section "old".')
    assert system_update_text(SystemMessage(tools_removed=["t"])) == ""


@pytest.mark.usefixtures("caches_on")
def test_wire_cache_reuses_an_unchanged_message_and_sees_any_edit() -> None:
    import gc

    from piagent.messages import AssistantMessage, TextContent, ToolCall
    from piagent.providers._transform import WireCache

    cache = WireCache()
    builds: list[str] = []

    def build(message: AssistantMessage) -> str:
        builds.append(message.text)
        return message.text

    message = AssistantMessage([TextContent("a"), ToolCall("1", "t", {"x": [1]})])
    assert cache.get(message, "v1", build) == "a"
    assert cache.get(message, "v1", build) == "a"
    assert builds == ["a"]  # the second request reused the conversion
    assert cache.get(message, "v2", build) == "a"  # other settings: converted again
    message.content[0].text = "b"  # assigning a field is seen
    assert cache.get(message, "v2", build) == "b"
    message.content[0] = TextContent("c")  # so is replacing a block
    assert cache.get(message, "v2", build) == "c"
    assert builds == ["a", "a", "b", "c"]
    message.content[1].name = "renamed"  # any field of any block
    assert cache.get(message, "v2", build) == "c"
    message.content[1].arguments["x"].append(2)  # at any depth, in place
    assert cache.get(message, "v2", build) == "c"
    message.content[1].arguments["x"][1] = True  # an equal value of another type too
    assert cache.get(message, "v2", build) == "c"
    assert builds == ["a", "a", "b", "c", "c", "c", "c"]
    assert cache.get(message, "v2", build) == "c"
    assert len(builds) == 7  # unchanged again: reused
    # read through the fields: CPython gives an object whose __dict__ is read a dict for
    # good (one more object per tool call kept in every transcript)
    assert not any(isinstance(ref, dict) and "arguments" in ref
                   for ref in gc.get_referents(message.content[1]))
    del message
    gc.collect()
    assert len(cache._entries) == 0  # entries go away with their messages


def test_a_stray_result_does_not_answer_a_later_call_with_the_same_id() -> None:
    from piagent.messages import (
        AssistantMessage,
        SystemMessage,
        TextContent,
        ToolCall,
        ToolResultMessage as Result,
    )
    from piagent.models import Model
    from piagent.providers._transform import NO_RESULT_TEXT, transform_messages

    model = Model(id="m", api="openai-completions", provider="openai", base_url="http://x")

    def call() -> AssistantMessage:
        return AssistantMessage([ToolCall("X", "calc", {})], api=model.api,
                                provider=model.provider, model=model.id, stop_reason="toolUse")

    out = transform_messages([call(), SystemMessage("later"), Result("X", "calc",
                              [TextContent("late")]), call()], model)
    last = out[-1]
    assert isinstance(last, Result) and last.tool_call_id == "X"
    assert last.content[0].text == NO_RESULT_TEXT  # the second call still gets its result
