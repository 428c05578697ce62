"""EventStream and AssistantMessageEventStream: ordering, completion, results, threads."""

from __future__ import annotations

import threading

import pytest

from piagent import (
    AssistantMessage,
    AssistantMessageEventStream,
    DoneEvent,
    ErrorEvent,
    EventStream,
    StartEvent,
    StreamFnError,
    get_default_stream_fn,
    reset_default_stream_fn,
    set_default_stream_fn,
)
from piagent.testing import ScriptedStreamFn


def test_push_then_iterate_yields_all_events_and_stops_at_completion() -> None:
    stream = AssistantMessageEventStream()
    final = AssistantMessage(stop_reason="stop")
    start = StartEvent(AssistantMessage())
    stream.push(start)
    stream.push(DoneEvent("stop", final))
    stream.push(StartEvent(AssistantMessage()))  # ignored once done
    assert list(stream) == [start, DoneEvent("stop", final)]
    assert stream.result() is final
    assert list(stream) == []  # a finished stream iterates empty


def test_error_event_is_terminal_and_its_message_is_the_result() -> None:
    stream = AssistantMessageEventStream()
    failed = AssistantMessage(stop_reason="error", error_message="bad")
    stream.push(ErrorEvent("error", failed))
    assert stream.result(0) is failed


def test_consumer_on_another_thread_receives_events_in_order() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: e == -1, lambda e: e * 2)
    received: list[int] = []
    consumer = threading.Thread(target=lambda: received.extend(stream))
    consumer.start()
    for i in range(1000):
        stream.push(i)
    stream.push(-1)
    consumer.join(5)
    assert received == [*range(1000), -1]
    assert stream.result() == -2


def test_end_with_result_and_result_timeout() -> None:
    stream: EventStream[int, str] = EventStream(lambda e: False, str)
    with pytest.raises(TimeoutError):
        stream.result(timeout=0.01)
    stream.push(1)
    stream.end("done")
    assert list(stream) == [1]
    assert stream.result() == "done"


def test_fail_raises_from_iteration_and_result_after_queued_events() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: False, int)
    stream.push(1)
    stream.fail(ValueError("broken"))
    iterator = iter(stream)
    assert next(iterator) == 1
    with pytest.raises(ValueError, match="broken"):
        next(iterator)
    with pytest.raises(ValueError, match="broken"):
        stream.result()


def test_default_stream_fn_is_stream_simple_and_can_be_removed() -> None:
    from piagent.providers import stream_simple

    assert get_default_stream_fn() is stream_simple
    scripted = ScriptedStreamFn()
    try:
        set_default_stream_fn(scripted)
        assert get_default_stream_fn() is scripted
        set_default_stream_fn(None)
        with pytest.raises(StreamFnError) as info:
            get_default_stream_fn()
        assert str(info.value) == ("No default stream function configured. Pass stream_fn "
                                   "explicitly or call set_default_stream_fn().")
    finally:
        reset_default_stream_fn()
    assert get_default_stream_fn() is stream_simple
