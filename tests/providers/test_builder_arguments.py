"""MessageBuilder's tool-call arguments: parsed as they stream, the final ones at
``toolcall_end``, for any split of the JSON into fragments (empty fragments included)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings, strategies as st

from piagent.messages import sanitize_surrogates_in
from piagent.models import Model
from piagent.providers.kit import MessageBuilder
from piagent.stream import AssistantMessageEventStream, StreamingJsonParser

MODEL = Model(id="m", api="test-api", provider="test", base_url="http://127.0.0.1:9")
values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=4), values, max_size=4), st.data())
def test_arguments_follow_every_fragment_and_end_complete(arguments: dict[str, Any],
                                                          data: st.DataObject) -> None:
    text = json.dumps(arguments)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    bounds = [0, *cuts, len(text)]
    fragments = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]  # "" included
    stream = AssistantMessageEventStream()
    out = MessageBuilder(MODEL, stream, api="test-api")
    out.start()
    index = out.open_tool_call("call_1", "calc")
    seen = ""
    for fragment in fragments:
        out.add_tool_arguments(index, fragment)
        seen += fragment
        # pi-ai 1.6.1's streaming parse of the text so far read in one piece (it keeps an open
        # string's trailing whitespace, which parse_streaming_json trims), without the
        # unpaired surrogates of an escape pair cut in two
        whole = StreamingJsonParser()
        whole.append(seen)
        snapshot = whole.snapshot()
        expected = snapshot.value if snapshot is not None and snapshot.is_object else {}
        assert out.block(index).arguments == sanitize_surrogates_in(expected)
    out.close_block(index)
    out.finish("toolUse")
    events = list(stream)
    deltas = [e for e in events if e.type == "toolcall_delta"]
    assert [e.delta for e in deltas] == fragments  # an empty fragment is still an event
    end = next(e for e in events if e.type == "toolcall_end")
    assert end.tool_call.arguments == arguments
    assert stream.result(5).content[0].arguments == arguments


def test_replaced_arguments_win_at_the_end() -> None:
    stream = AssistantMessageEventStream()
    out = MessageBuilder(MODEL, stream, api="test-api")
    out.start()
    index = out.open_tool_call("call_1", "calc", '{"a": 1')
    out.add_tool_arguments(index, ', "b": 2}')
    assert out.block(index).arguments == {"a": 1, "b": 2}
    out.replace_tool_arguments(index, '{"c": 3}')
    out.close_block(index)
    out.finish("toolUse")
    assert stream.result(5).content[0].arguments == {"c": 3}
