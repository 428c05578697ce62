"""A run's kept events (``AgentRun.events()``): kept as values in one flat list, no object
per event; a message_update whose message copy has the same field values as the update
kept whole before it is kept as its kind and values; all read back equal to the events the
listeners got."""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
from typing import Any, get_args

import pytest

from piagent import (
    Agent,
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    DoneEvent,
    MessageUpdateEvent,
    StartEvent,
    StreamOptions,
    TextContent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
)
from piagent.agent._eventlog import _FIRST_CLASS, _KINDS, _UPDATE, EventLog, _same_fields
from piagent.events import AgentEvent, AgentStartEvent, TurnStartEvent, event_to_dict
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
    codes = _codes(run._record.events)
    small = [code for code in codes if code < _FIRST_CLASS]
    updates = [e for e in seen if e.type == "message_update"]
    assert len(small) >= len(updates) - 4  # all but an update or two per message
    # no event object is kept, nor an update's assistant event: only what they held
    # (messages, tool results, arguments...)
    kept = gc.get_referents(run._record.events._flat)
    assert not any(isinstance(value, (*_EVENT_CLASSES, *_KINDS)) for value in kept)


_EVENT_CLASSES = get_args(AgentEvent)


def _codes(log: EventLog) -> list[int]:
    """Each event's code in the log's flat list."""
    starts = [0, *log._ends[:-1]]
    return [log._flat[start] for start in starts]


def test_negative_indexes_and_the_end_read_as_a_list_s() -> None:
    log = EventLog()
    first, second = AgentStartEvent(), TurnStartEvent()
    log.append(first)
    log.append(second)
    assert log[-1] == second and log[-2] == first and log[0] == first and len(log) == 2
    with pytest.raises(IndexError):
        log[2]


class _Mine(TurnStartEvent):
    """A subclass: kept as it is, the very object."""


def test_an_event_of_another_class_is_kept_as_it_is() -> None:
    log = EventLog()
    mine = _Mine()
    log.append(mine)
    assert log[0] is mine


def test_same_fields_looks_at_every_field_of_the_message() -> None:
    """``_same_fields`` lists AssistantMessage's fields by hand: each one must count."""
    base = AssistantMessage(content=[TextContent("x")], api="a", provider="p", model="m")
    for field in dataclasses.fields(AssistantMessage):
        other = copy.copy(base)
        assert _same_fields(other, base)
        setattr(other, field.name, object())  # a distinct value in this one field
        assert not _same_fields(other, base), field.name


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
    assert [code < _FIRST_CLASS for code in _codes(run._record.events)
            if code < _FIRST_CLASS or code == _UPDATE] == [
        False, True, True, False, True, True]


def test_updates_without_a_partial_message_are_kept_whole_and_read_back() -> None:
    """An update whose assistant event has no partial message (a stream function's slip)
    is never taken for one like the last kept whole: nothing to compare with yet, or the
    comparison was reset by an update of another kind."""
    log = EventLog()
    copy_ = AssistantMessage(content=[TextContent("a")])
    first = MessageUpdateEvent(copy_, TextDeltaEvent(0, "a", None))  # type: ignore[arg-type]
    log.append_update(first)
    mine = MessageUpdateEvent(copy_, _MarkedDelta(0, "b", None))  # type: ignore[arg-type]
    log.append_update(mine)  # another kind: kept as it is, the comparison reset
    again = MessageUpdateEvent(copy_, TextDeltaEvent(0, "c", None))  # type: ignore[arg-type]
    log.append_update(again)
    back: list[Any] = list(log)
    assert back == [first, mine, again]
    assert back[1].assistant_message_event is mine.assistant_message_event  # kept as it was
    assert back[2].assistant_message_event.partial is None


@dataclasses.dataclass(slots=True)
class _MarkedDelta(TextDeltaEvent):
    mark: str = "x"
