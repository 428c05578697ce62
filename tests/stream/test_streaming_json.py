"""StreamingJsonParser: pi-ai 1.6.1's partial tool arguments, piece by piece (recorded)."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

from hypothesis import given, settings, strategies as st

from piagent.messages import AssistantMessage, ToolCall, sanitize_surrogates_in
from piagent.models import Model
from piagent.providers.kit import MessageBuilder
from piagent.stream import AssistantMessageEventStream, StreamingJsonParser, parse_streaming_json

from .record_streaming_json import RECORDING


def _partials(pieces: list[str]) -> list[Any]:
    """pi-ai's ToolCallArgumentsStream.append: the partial arguments after each piece."""
    parser, last, arguments, out = StreamingJsonParser(), None, {}, []
    for piece in pieces:
        parser.append(piece)
        snapshot = parser.snapshot()
        if snapshot is not last:
            last = snapshot
            arguments = snapshot.value if snapshot is not None and snapshot.is_object else {}
        out.append(arguments)
    return out


def _same(ours: Any, pi: Any) -> bool:
    """Equal as JSON values, key order included (numbers by value: 1e3 is 1000.0 here)."""
    if isinstance(pi, dict):
        return isinstance(ours, dict) and list(ours) == list(pi) and all(
            _same(ours[k], pi[k]) for k in pi)
    if isinstance(pi, list):
        return isinstance(ours, list) and len(ours) == len(pi) and all(
            _same(a, b) for a, b in zip(ours, pi, strict=True))
    if isinstance(pi, (int, float)) and not isinstance(pi, bool):
        return isinstance(ours, (int, float)) and not isinstance(ours, bool) and (
            ours == pi or float(ours) == float(pi))  # JavaScript's numbers are doubles
    return type(ours) is type(pi) and ours == pi


def test_partial_values_are_pi_ai_1_6_1s() -> None:
    recorded = json.loads(RECORDING.read_text())
    assert len(recorded["cases"]) > 100
    for pieces, changes in zip(recorded["cases"], recorded["changes"], strict=True):
        ours = _partials(pieces)
        for index, pi_json in changes:
            assert _same(ours[index], json.loads(pi_json)), ("".join(pieces), index)


def _builder() -> tuple[MessageBuilder, AssistantMessageEventStream]:
    model = Model(id="m", api="openai-completions", provider="openai", base_url="http://x")
    stream = AssistantMessageEventStream()
    return MessageBuilder(model, stream, api="openai-completions"), stream


def test_builder_shows_pi_ai_1_6_1s_partials_then_parses_the_whole_text() -> None:
    """At each toolcall_delta the partial arguments are 1.6.1's (an open string keeps its
    trailing spaces, an invalid escape shows as text: 1.4.0 trimmed and hid them); at the end,
    one parse of the whole text."""
    out, stream = _builder()
    out.start()
    index = out.open_tool_call("call_1", "write")
    seen = []
    for fragment in ['{"path": "C:\\\\d\\q', '  ', '", "n": 1', "2}"]:
        out.add_tool_arguments(index, fragment)
        partial = out.message.content[index]
        seen.append(copy.deepcopy(partial))
    assert [c.arguments for c in seen] == [
        {"path": "C:\\d\\q"}, {"path": "C:\\d\\q  "}, {"path": "C:\\d\\q  ", "n": 1},
        {"path": "C:\\d\\q  ", "n": 12}]
    # a partial block copies, pickles and compares as the ToolCall it stands for
    assert type(seen[0]) is ToolCall
    live = out.message.content[index]
    assert live == ToolCall("call_1", "write", {"path": "C:\\d\\q  ", "n": 12})
    assert type(pickle.loads(pickle.dumps(live))) is ToolCall
    out.close_block(index)
    out.finish("toolUse")
    message = stream.result(5.0)
    assert isinstance(message, AssistantMessage)
    assert type(message.content[0]) is ToolCall
    assert message.content[0].arguments == {"path": "C:\\d\\q  ", "n": 12}


def test_a_large_argument_is_read_once_and_built_when_read() -> None:
    """10-character fragments of a 200 KB string: the partial value is the text so far
    whenever it is read, and the final arguments are the whole."""
    out, stream = _builder()
    out.start()
    index = out.open_tool_call("call_1", "write")
    text = json.dumps({"content": "line \\ \"q\" é 😀\n" * 12_000})
    for k in range(0, len(text), 10):
        out.add_tool_arguments(index, text[k:k + 10])
        if k % 40_000 == 0:
            shown = out.message.content[index].arguments
            assert json.dumps(shown)[:-2] in text or shown == {}
    out.close_block(index)
    out.finish("toolUse")
    assert stream.result(5.0).content[0].arguments == json.loads(text)


def test_builder_reads_when_read_and_shows_what_pi_shows_then() -> None:
    """Read after every fragment or only now and then (the parser catches up, spending
    pi's copy credit as if it had taken every snapshot): pi-ai 1.6.1's partial each time,
    without unpaired surrogates."""
    recorded = json.loads(RECORDING.read_text())
    for every in (1, 2, 3, 5, 8):
        for pieces, changes in zip(recorded["cases"], recorded["changes"], strict=True):
            pi_after, current = [], None
            changed = dict(changes)
            for i in range(len(pieces)):
                current = changed.get(i, current)
                pi_after.append(current)
            out, _ = _builder()
            out.start()
            index = out.open_tool_call("call_1", "f")
            for i, piece in enumerate(pieces):
                out.add_tool_arguments(index, piece)
                if i % every == every - 1:
                    shown = out.message.content[index].arguments
                    # lone surrogates are the builder's to remove (tests/providers)
                    expected = sanitize_surrogates_in(json.loads(pi_after[i]))
                    assert _same(shown, expected), ("".join(pieces), i)


_JSONISH = st.lists(st.sampled_from(list('{}[]":,\\ unltrefa0123456789.-eE+x\n\t\u00e9')
                                    + ["\\u", "\\ud83d", "\\ude00", "😀"]),
                    max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=_JSONISH, cuts=st.lists(st.integers(0, 60), max_size=8),
       reads=st.lists(st.booleans(), max_size=10))
def test_never_raises_and_ends_with_the_whole_parse(text: str, cuts: list[int],
                                                    reads: list[bool]) -> None:
    """Any text, cut anywhere, read or not after each piece: no exception, a dict shown,
    and the final arguments are ``parse_streaming_json`` of the whole text."""
    points = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in zip(points, points[1:], strict=False)]
    out, stream = _builder()
    out.start()
    index = out.open_tool_call("call_1", "f")
    for k, piece in enumerate(pieces):
        out.add_tool_arguments(index, piece)
        if k < len(reads) and reads[k]:
            assert isinstance(out.message.content[index].arguments, dict)
    out.close_block(index)
    out.finish("toolUse")
    final = stream.result(5.0).content[0]
    assert type(final) is ToolCall
    assert final.arguments == sanitize_surrogates_in(parse_streaming_json(text)) or \
        final.arguments != final.arguments  # NaN
