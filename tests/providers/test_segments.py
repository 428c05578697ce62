"""SegmentCache: converting a transcript segment by segment (reusing old segments) gives
exactly the wire messages of converting it whole, for any transcript."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

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
from piagent.models import Model
from piagent.providers._compat import fold_system_messages
from piagent.providers._keep import SHORT_TRANSCRIPT
from piagent.providers._transform import transform_messages
from piagent.providers.openai_completions import (
    _convert,
    _normalize_id,
    _wire_messages,
    get_compat,
)

MODEL = Model(id="m1", api="openai-completions", provider="openai", base_url="http://x/v1",
              input=("text", "image"))
TEXT_ONLY = Model(id="m1", api="openai-completions", provider="mistral",
                  base_url="https://api.mistral.ai/v1")

ids = st.sampled_from(["call_1", "call_2", "call_3", "x" * 50])
texts = st.sampled_from(["", "hello", "a longer answer"])


@st.composite
def assistant(draw: Any) -> AssistantMessage:
    content: list[Any] = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["text", "thinking", "call"]))
        if kind == "text":
            content.append(TextContent(draw(texts)))
        elif kind == "thinking":
            content.append(ThinkingContent(draw(texts), draw(st.none() | st.just("sig"))))
        else:
            content.append(ToolCall(draw(ids), "calc", {"n": draw(st.integers(0, 3))}))
    same = draw(st.booleans())
    return AssistantMessage(content, api="openai-completions" if same else "anthropic-messages",
                            provider="openai" if same else "anthropic",
                            model="m1" if same else "claude",
                            stop_reason=draw(st.sampled_from(["stop", "toolUse", "error"])))


def result(draw_id: str, image: bool) -> ToolResultMessage:
    content: list[Any] = [TextContent("out")]
    if image:
        content.append(ImageContent("AAAA", "image/png"))
    return ToolResultMessage(draw_id, "calc", content)


messages = st.one_of(
    assistant(),
    st.builds(result, ids, st.booleans()),
    st.builds(UserMessage, st.sampled_from(["q", "another question"])),
    st.builds(lambda image: UserMessage([TextContent("look"), ImageContent("BB", "image/png")])
              if image else UserMessage("plain"), st.booleans()),
    st.builds(lambda n: SystemMessage(content=f"update {n}", sections={"s": str(n)},
                                      tools_added=[ToolDeclaration(f"t{n}", "d", {})]),
              st.integers(0, 2)),
)
transcripts = st.lists(messages, max_size=14).map(
    lambda rest: [SystemMessage("You are a test.", timestamp=0), *rest])


@contextlib.contextmanager
def counted_conversions() -> Iterator[list[int]]:
    """The length of every part the Chat Completions adapter transforms (so converts) while
    the block runs, in order."""
    import piagent.providers.openai_completions as oc

    converted: list[int] = []
    original = oc.transform_messages

    def counting(part: Any, *args: Any) -> Any:
        converted.append(len(part))
        return original(part, *args)

    oc.transform_messages = counting  # type: ignore[assignment]
    try:
        yield converted
    finally:
        oc.transform_messages = original  # type: ignore[assignment]


def whole(model: Model, transcript: list[Any]) -> list[dict[str, Any]]:
    """The whole transcript converted at once: later system messages folded first (pi's
    resolveTranscript, before transformMessages), then transformed and converted."""
    compat = get_compat(model)
    folded = fold_system_messages(model, transcript, compat.supports_mid_convo_system_messages)
    return _wire_messages(model, transform_messages(folded, model, _normalize_id(model)),
                          compat)


@settings(max_examples=300, deadline=None)
@given(transcripts, st.sampled_from([MODEL, TEXT_ONLY]))
def test_segmented_conversion_equals_whole_conversion(transcript: list[Any], model: Model) -> None:
    compat = get_compat(model)
    # grow the transcript one message at a time, as a conversation does, so that earlier
    # requests leave segments in the cache for the later ones to reuse
    for end in range(1, len(transcript) + 1):
        assert _convert(model, transcript[:end], compat) == whole(model, transcript[:end])
    assert _convert(model, transcript, compat) == whole(model, transcript)


@pytest.mark.usefixtures("caches_on")
def test_old_segments_are_reused_not_converted_again() -> None:
    history: list[Any] = [SystemMessage("sys", timestamp=0)]
    compat = get_compat(MODEL)
    for k in range(20):
        history.append(UserMessage(f"q{k}"))
        history.append(AssistantMessage([ToolCall(f"c{k}", "calc", {})], api=MODEL.api,
                                        provider=MODEL.provider, model=MODEL.id,
                                        stop_reason="toolUse"))
        history.append(ToolResultMessage(f"c{k}", "calc", [TextContent("ok")]))
    _convert(MODEL, history, compat)
    with counted_conversions() as converted:
        history.append(UserMessage("one more"))
        assert _convert(MODEL, history, compat) == whole(MODEL, history)
    assert converted == [1]  # only the new message: the whole old transcript was reused


def test_new_messages_after_a_kept_conversion_skip_the_per_message_cache() -> None:
    import piagent.providers.openai_completions as oc

    compat = get_compat(MODEL)
    history: list[Any] = [SystemMessage("sys", timestamp=0), UserMessage("q")]
    _convert(MODEL, history, compat)  # the conversation's conversion is kept from here
    reply = AssistantMessage([ToolCall("c1", "calc", {"n": 1})], api=MODEL.api,
                             provider=MODEL.provider, model=MODEL.id, stop_reason="toolUse")
    history += [reply, ToolResultMessage("c1", "calc", [TextContent("ok")])]
    converted = _convert(MODEL, history, compat)
    assert oc._ASSISTANT_WIRE._entries.get(reply) is None  # the kept conversion holds it
    assert converted == whole(MODEL, history)  # (which converts through the cache)
    # another conversation (a new first message, a new reply): no kept prefix; the segment
    # cache keeps its conversion, so nothing is kept message by message either
    other = dataclasses.replace(reply)
    again = [SystemMessage("another", timestamp=0), history[1], other, history[3]]
    converted = _convert(MODEL, again, compat)
    assert oc._ASSISTANT_WIRE._entries.get(other) is None
    assert converted == whole(MODEL, again)
    history.append(UserMessage("more"))
    assert _convert(MODEL, history, compat) == whole(MODEL, history)


ANTHROPIC = Model(id="claude-x", api="anthropic-messages", provider="anthropic",
                  base_url="https://api.anthropic.com", input=("text", "image"))


# with the compat on, later system messages stay in place (native system messages)
ANTHROPIC_MID = dataclasses.replace(ANTHROPIC, compat={"supportsMidConvoSystemMessages": True})


def anthropic_whole(model: Model, transcript: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    from piagent.providers._transform import leading_system_text
    from piagent.providers.anthropic import _convert_messages, _normalize_tool_call_id

    transformed = transform_messages(transcript, model, _normalize_tool_call_id)
    prompt, leading = leading_system_text(transformed)
    return prompt, _convert_messages(transformed[leading:])


@settings(max_examples=300, deadline=None)
@given(transcripts, st.sampled_from([ANTHROPIC, ANTHROPIC_MID]))
def test_anthropic_segmented_conversion_equals_whole(transcript: list[Any],
                                                      model: Model) -> None:
    """As ``build_anthropic_request`` calls it: later system messages folded first (unless
    the model's compat takes them mid-conversation)."""
    from piagent.providers._transform import leading_prompt
    from piagent.providers.anthropic import _convert, _normalize_tool_call_id

    for end in range(1, len(transcript) + 1):
        part = fold_system_messages(model, transcript[:end])
        prompt, messages = anthropic_whole(model, part)
        assert _convert(model, part) == messages
        assert leading_prompt(part, model, _normalize_tool_call_id) == prompt


def test_anthropic_cache_breakpoint_is_not_left_on_reused_messages() -> None:
    from piagent.providers.anthropic import build_anthropic_request
    from piagent.stream import StreamOptions

    history: list[Any] = [SystemMessage("sys", timestamp=0), UserMessage("first question")]
    build_anthropic_request(ANTHROPIC, history, StreamOptions())
    history += [AssistantMessage([TextContent("answer")], api=ANTHROPIC.api,
                                 provider=ANTHROPIC.provider, model=ANTHROPIC.id),
                UserMessage("second question")]
    body = build_anthropic_request(ANTHROPIC, history, StreamOptions())
    marked = [m for m in body["messages"]
              if any("cache_control" in block for block in m["content"])]
    assert marked == [body["messages"][-1]]  # only the last user message, once


@pytest.mark.usefixtures("caches_on")
def test_a_conversation_is_reused_while_other_conversations_are_converted() -> None:
    """The cache finds a conversation by its first message and keeps it while that message
    lives: other agents' requests in between, however many, do not push it out."""
    compat = get_compat(MODEL)

    def transcript(tag: str) -> list[Any]:
        out: list[Any] = [SystemMessage(f"sys {tag}", timestamp=0)]
        while len(out) < SHORT_TRANSCRIPT:  # long enough to be cached (_keep.py)
            out.append(UserMessage(f"q {tag}"))
            out.append(AssistantMessage([TextContent("a")], api=MODEL.api,
                                        provider=MODEL.provider, model=MODEL.id,
                                        stop_reason="stop"))
        return out

    mine = transcript("mine")
    _convert(MODEL, mine, compat)
    others = [transcript(str(i)) for i in range(50)]  # more than any fixed size would keep
    for _ in range(3):  # 150 conversions of other conversations
        for other in others:
            other.append(UserMessage("more"))
            _convert(MODEL, other, compat)
    with counted_conversions() as converted:
        mine.append(UserMessage("next"))
        assert _convert(MODEL, mine, compat) == whole(MODEL, mine)
    assert converted == [1]


def test_compat_is_detected_once_per_model_settings() -> None:
    model = Model(id="m", api="openai-completions", provider="deepseek",
                  base_url="https://api.deepseek.com/v1")
    first = get_compat(model)
    assert get_compat(Model(id="m", api="openai-completions", provider="deepseek",
                            base_url="https://api.deepseek.com/v1")) is first
    assert first.max_tokens_field == "max_tokens"
    model.compat = {"maxTokensField": "max_completion_tokens"}
    changed = get_compat(model)
    assert changed is not first and changed.max_tokens_field == "max_completion_tokens"
    assert get_compat(model) is changed
    model.compat = {"reasoningEffortMap": {"high": "max"}}  # a dict value: no cache, still right
    assert get_compat(model).reasoning_effort_map == {"high": "max"}
    assert get_compat(model) == get_compat(model)


def test_a_conversation_leaves_the_cache_when_its_first_message_is_collected() -> None:
    """The cache keeps the transcript after the first message, not the first message itself:
    dropping a conversation drops its entry (nothing of it stays for the collector to walk)."""
    import gc
    import weakref

    from piagent.providers._transform import SegmentCache

    cache = SegmentCache()
    transcripts = [[SystemMessage(f"sys {i}", timestamp=0), UserMessage("q")]
                   for i in range(20)]
    for transcript in transcripts:
        assert _convert(MODEL, transcript, get_compat(MODEL)) == whole(MODEL, transcript)
        cache.convert(transcript, "v", lambda part: [id(m) for m in part], lambda part: False)
    last = weakref.ref(transcripts[-1][1])
    assert len(cache._kept) == 20
    del transcripts, transcript
    gc.collect()
    assert len(cache._kept) == 0
    assert last() is None  # the rest of the transcript went with the entry


def test_conversations_converted_at_once_on_many_threads_each_get_their_own() -> None:
    """Eight threads grow and convert eight conversations at the same time (one shared
    cache, no lock on its entries): every conversion equals converting the whole."""
    import threading

    compat = get_compat(MODEL)
    start = threading.Barrier(8)
    wrong: list[str] = []

    def converse(tag: int) -> None:
        transcript: list[Any] = [SystemMessage(f"sys {tag}", timestamp=0)]
        start.wait(30)
        for turn in range(40):
            transcript.append(UserMessage(f"q{tag}.{turn}"))
            transcript.append(AssistantMessage([ToolCall(f"c{turn}", "calc", {"n": tag})],
                                               api=MODEL.api, provider=MODEL.provider,
                                               model=MODEL.id, stop_reason="toolUse"))
            transcript.append(ToolResultMessage(f"c{turn}", "calc", [TextContent(str(tag))]))
            if _convert(MODEL, transcript, compat) != whole(MODEL, transcript):
                wrong.append(f"conversation {tag}, turn {turn}")

    threads = [threading.Thread(target=converse, args=(tag,)) for tag in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert wrong == []


@pytest.mark.usefixtures("caches_on")
def test_a_short_transcript_is_converted_afresh_and_kept_from_its_20th_message() -> None:
    """Under ``SHORT_TRANSCRIPT`` messages a request is converted and encoded without the
    caches and leaves nothing in them (cheaper than checking and keeping); from then on the
    conversation is kept, and its next request converts only what is new."""
    import piagent.providers.openai_completions as oc

    compat = get_compat(MODEL)
    conversation: list[Any] = [SystemMessage("sys", timestamp=0)]
    kept_before = len(oc._SEGMENTS._kept), len(oc._BODIES._kept)
    with counted_conversions() as converted:
        while len(conversation) < SHORT_TRANSCRIPT + 2:
            conversation.append(UserMessage(f"q{len(conversation)}"))
            converted.clear()
            wire = _convert(MODEL, conversation, compat)
            body = oc._BODIES.encode({"model": MODEL.id, "messages": wire}, "messages",
                                     conversation[0])
            assert wire == whole(MODEL, conversation)
            assert json.loads(body)["messages"] == wire
            kept = len(oc._SEGMENTS._kept) - kept_before[0], len(oc._BODIES._kept) - kept_before[1]
            if len(conversation) < SHORT_TRANSCRIPT:
                assert kept == (0, 0)
                assert sum(converted) == len(conversation)  # all of it, every time
            else:
                assert kept == (1, 1)
                if len(conversation) > SHORT_TRANSCRIPT:
                    assert converted == [1]  # only the new message
