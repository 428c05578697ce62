"""Half an emoji never leaves a provider adapter (issue 43 part 4).

A server that splits ``"\\ud83d\\ude00"`` between two chunks (each SSE payload its own JSON,
so each half decodes to a lone surrogate) in a text delta, a thinking delta or a tool call's
argument JSON (escaped once or twice): every event's delta and partial message hold no lone
surrogate (a partial value ends before an unpaired high surrogate; it comes back with the
next chunk), and the final message is the model's text. For every prefix of text with astral
characters, through the real ``openai-completions`` adapter and through ``MessageBuilder``
with any split.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from piagent.messages import UserMessage, message_to_dict
from piagent.models import Model
from piagent.providers import stream_simple
from piagent.providers.kit import MessageBuilder
from piagent.stream import AssistantMessageEventStream, Context, StreamOptions
from tests.conftest import ASTRAL_TEXT, WAIT, assert_utf8, js_sanitized, utf16_units

from .sse_script import Reply, ScriptedServer, completions_body

MODEL = Model(id="m", api="test-api", provider="test", base_url="http://127.0.0.1:9")


def check_partial(event: Any, text: str) -> None:
    """The event holds no lone surrogate, and every partial value is a prefix of ``text``."""
    assert_utf8(message_to_dict(event.partial), f"{event.type}'s partial message")
    assert_utf8(getattr(event, "delta", ""), f"{event.type}'s delta")
    for block in event.partial.content:
        value = getattr(block, "text", None) or getattr(block, "thinking", None)
        if value is None and block.type == "toolCall":
            value = block.arguments.get("a", "")
        assert text.startswith(value or ""), (event.type, value, text)


@pytest.fixture(scope="module")
def server() -> Any:
    scripted = ScriptedServer()
    yield scripted
    scripted.close()


@settings(max_examples=40, deadline=None)
@given(text=ASTRAL_TEXT)
def test_a_split_pair_through_openai_completions_never_leaves_half(server: ScriptedServer,
                                                                   text: str) -> None:
    server.add(Reply(body=completions_body(text)))
    model = Model(id="m", api="openai-completions", provider="openai",
                  base_url=server.url + "/v1")
    stream = stream_simple(model, Context([UserMessage("hi")]), StreamOptions(api_key="k"))
    events = []
    for event in stream:  # pulled here: each partial is checked as it stands at its event
        if event.type not in ("done", "error"):
            check_partial(event, text)
        events.append(event)
    message = stream.result(WAIT)
    assert message.stop_reason == "toolUse", message.error_message
    assert [b.type for b in message.content] == ["thinking", "text", "toolCall", "toolCall"]
    assert message.content[0].thinking == text
    assert message.content[1].text == text
    assert message.content[2].arguments == {"a": text}
    assert message.content[3].arguments == {"a": text}
    ends = [e for e in events if e.type.endswith("_end")]
    assert [getattr(e, "content", None) for e in ends[:2]] == [text, text]
    # the deltas add up to the text: a held-back half came with the next one
    assert "".join(e.delta for e in events if e.type == "text_delta") == text


@settings(max_examples=200, deadline=None)
@given(ASTRAL_TEXT, st.data())
def test_any_split_of_text_and_thinking_deltas_is_made_whole(text: str,
                                                             data: st.DataObject) -> None:
    units = utf16_units(text)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(units)), max_size=5)))
    bounds = [0, *cuts, len(units)]
    pieces = ["".join(units[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    stream = AssistantMessageEventStream()
    out = MessageBuilder(MODEL, stream, api="test-api")
    out.start()
    thinking, said = out.open_thinking(), out.open_text()
    for piece, end in zip(pieces, bounds[1:], strict=True):
        out.add_thinking(thinking, piece)
        out.add_text(said, piece)
        # what has arrived, without the high half that waits for its low one
        assert out.block(said).text == js_sanitized("".join(units[:end]))
    out.close_open_blocks()
    out.finish("stop")
    for event in list(stream)[:-1]:
        check_partial(event, text)
    assert [b.text if b.type == "text" else b.thinking for b in stream.result(WAIT).content] \
        == [text, text]


def test_an_unpaired_half_at_the_end_or_between_deltas_is_removed() -> None:
    stream = AssistantMessageEventStream()
    out = MessageBuilder(MODEL, stream, api="test-api")
    out.start()
    index = out.open_text()
    # a high half, then other text: no longer a pair, as in pi-ai's sanitizeSurrogates
    for piece in ["a\ud83d", "b", "\ude00c", "\ud83d", "", "\ude00", "d\ud83d"]:
        out.add_text(index, piece)
    out.close_block(index)
    call = out.open_tool_call("call_1", "echo", '{"a": "x\\ud83d", "b": "\\ude00')
    out.close_block(call)
    out.finish("stop")
    events = list(stream)
    for event in events:
        assert_utf8(message_to_dict(event.partial if hasattr(event, "partial")
                                    else event.message))
    assert [e.delta for e in events if e.type == "text_delta"] == \
        ["a", "b", "c", "", "", "\U0001f600", "d"]
    assert stream.result(WAIT).content[0].text == "abc\U0001f600d"
    assert stream.result(WAIT).content[1].arguments == {"a": "x", "b": ""}


@settings(max_examples=300, deadline=None)
@given(ASTRAL_TEXT, st.booleans(), st.data())
def test_any_split_of_tool_arguments_never_leaves_half(text: str, escaped: bool,
                                                       data: st.DataObject) -> None:
    """Escaped (``\\ud83d\\ude00``, a cut anywhere in the twelve characters) or not (a cut
    between the two code units, as a decoder hands them over), every partial argument value
    is a prefix of the text and the final ones are the text."""
    arguments = {"a": text, "b": [text, 1]}
    source = json.dumps(arguments, ensure_ascii=escaped)
    pieces = list(source) if escaped else utf16_units(source)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(pieces)), max_size=8)))
    bounds = [0, *cuts, len(pieces)]
    stream = AssistantMessageEventStream()
    out = MessageBuilder(MODEL, stream, api="test-api")
    out.start()
    index = out.open_tool_call("call_1", "echo")
    for a, b in zip(bounds, bounds[1:], strict=False):
        out.add_tool_arguments(index, "".join(pieces[a:b]))
        partial = out.block(index).arguments
        assert_utf8(partial, "the partial arguments")
        assert text.startswith(partial.get("a", ""))
        assert text.startswith((partial.get("b") or [""])[0])
    out.close_block(index)
    out.finish("toolUse")
    deltas = [e.delta for e in stream if e.type == "toolcall_delta"]
    assert_utf8(deltas, "the deltas")
    assert "".join(deltas) == json.dumps(arguments, ensure_ascii=escaped)
    assert stream.result(WAIT).content[0].arguments == arguments
