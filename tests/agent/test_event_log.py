"""A run's kept events (``AgentRun.events()``): a message_update whose message copy has the
same field values as the update kept whole before it is kept as a small tuple the garbage
collector stops tracking, and read back equal to the event the listeners got."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest

from piagent import (
    Agent,
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    DoneEvent,
    StartEvent,
    StreamOptions,
    TextContent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
)
from piagent.agent._eventlog import _DELTAS
from piagent.events import event_to_dict
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.tools.conftest import make_tool

pytestmark = pytest.mark.usefixtures("no_thread_leak")


def _json(events: Any) -> list[str]:
    return [json.dumps(event_to_dict(e), sort_keys=True) for e in events]


def test_read_back_equal_to_what_the_listeners_got_and_the_deltas_kept_small() -> None:
    fn = ScriptedStreamFn([
        assistant_tool_calls(("read", {"path": "a.txt"}), ("read", {"path": "b.txt"})),
        assistant_text("one two three four five six seven eight"),
    ])
    agent = Agent(stream_fn=fn, model=fn.model, tools=[make_tool()])
    seen: list[Any] = []
    agent.subscribe(lambda event, signal: seen.append(event))
    run = agent.prompt("go")
    back = list(run.events())
    assert back == seen and _json(back) == _json(seen)
    assert [run._next_event(i, 0) for i in range(len(seen))] == seen
    items = run._record.events._items
    small = [item for item in items if type(item) is tuple]
    updates = [e for e in seen if e.type == "message_update"]
    assert len(small) >= len(updates) - 4  # all but an update or two per message
    gc.collect()
    deltas = [item for item in small if item[0] < _DELTAS]  # text, thinking, tool-call deltas
    assert deltas and not any(gc.is_tracked(item) for item in deltas)


def test_a_field_that_changes_mid_stream_is_read_back_as_it_was() -> None:
    """``response_id`` is set on the streaming message between two deltas (by a listener,
    on the loop's thread): the updates before it read back without it, the ones after with
    it (a new copy kept whole)."""

    def stream_fn(model: Any, context: Context, options: StreamOptions) -> Any:
        stream = AssistantMessageEventStream()
        partial = AssistantMessage(content=[TextContent("")], api="x", provider="x",
                                   model="m", stop_reason="stop")
        stream.push(StartEvent(partial))
        stream.push(TextStartEvent(0, partial))
        for piece in "abcd":
            stream.push(TextDeltaEvent(0, piece, partial))
        stream.push(TextEndEvent(0, "abcd", partial))
        stream.push(DoneEvent("stop", partial))
        stream.end(partial)
        return stream

    agent = Agent(stream_fn=stream_fn)
    seen: list[Any] = []

    def listener(event: Any, signal: Any) -> None:
        seen.append(event)
        inner = getattr(event, "assistant_message_event", None)
        if inner is not None and getattr(inner, "delta", None) == "b":
            inner.partial.response_id = "r1"

    agent.subscribe(listener)
    run = agent.prompt("go")
    back = [e for e in run.events() if e.type == "message_update"]
    assert back == [e for e in seen if e.type == "message_update"]
    assert [e.message.response_id for e in back] == [None, None, None, "r1", "r1", "r1"]
    assert [type(item) is tuple for item in run._record.events._items
            if type(item) is tuple or item.type == "message_update"] == [
        False, True, True, False, True, True]
