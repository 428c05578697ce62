"""EventStream and AssistantMessageEventStream: ordering, completion, results, threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator

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


# --- pull mode: events a pulled producer yields are handed over directly when nothing is
# queued, and queued behind whatever another thread pushed ------------------------------

def _pulled(steps: list[int | None], *, on_finish: list[str] | None = None
            ) -> EventStream[int, int]:
    stream: EventStream[int, int] = EventStream(
        lambda e: e < 0, lambda e: -e,
        on_finish=None if on_finish is None else lambda: on_finish.append("finished"))
    stream.pull_from(iter(steps))
    return stream


def test_pulled_events_in_order_with_result_done_and_on_finish_at_the_completing_one() -> None:
    finished: list[str] = []
    stream = _pulled([1, None, 2, 3, -7, 4], on_finish=finished)
    seen: list[tuple[int, bool, bool, list[str]]] = []
    for event in stream:
        seen.append((event, stream.done, stream.has_result(), list(finished)))
    assert seen == [(1, False, False, []), (2, False, False, []), (3, False, False, []),
                    (-7, True, True, ["finished"])]
    assert stream.result(0) == 7
    assert list(stream) == []
    assert finished == ["finished"]


def test_result_before_iteration_queues_the_pulled_events() -> None:
    stream = _pulled([1, 2, -3, 4])
    assert stream.result(0) == 3
    assert stream.done
    assert list(stream) == [1, 2, -3]


def test_pulled_producer_ending_without_a_completing_event_ends_the_stream() -> None:
    stream = _pulled([1, 2])
    assert list(stream) == [1, 2]
    assert stream.done
    assert not stream.has_result()
    with pytest.raises(TimeoutError):
        stream.result(0)


def test_pulled_producer_raising_fails_the_stream_after_its_events() -> None:
    def steps() -> Iterator[int]:
        yield 1
        raise ValueError("broken")

    stream: EventStream[int, int] = EventStream(lambda e: e < 0, int)
    stream.pull_from(steps())
    iterator = iter(stream)
    assert next(iterator) == 1
    with pytest.raises(ValueError, match="broken"):
        next(iterator)
    with pytest.raises(ValueError, match="broken"):
        stream.result(0)


def _push_from_another_thread(stream: EventStream[int, int], event: int) -> None:
    pusher = threading.Thread(target=stream.push, args=(event,))
    pusher.start()
    pusher.join(5)
    assert not pusher.is_alive()


def test_an_event_pushed_from_another_thread_during_a_step_goes_before_the_yielded_one() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: e < 0, lambda e: -e)

    def steps() -> Iterator[int]:
        yield 1
        _push_from_another_thread(stream, 10)  # while the consumer is inside this step
        yield 2
        yield 3
        yield -4

    stream.pull_from(steps())
    assert list(stream) == [1, 10, 2, 3, -4]
    assert stream.result(0) == 4


def test_a_completing_push_from_another_thread_during_a_step_ends_the_stream_at_once() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: e < 0, lambda e: -e)
    finished = threading.Event()

    def steps() -> Iterator[int]:
        try:
            yield 1
            _push_from_another_thread(stream, -9)  # an abort's final event
            yield 2  # dropped: the stream is done
            yield -3
        finally:
            finished.set()

    stream.pull_from(steps())
    iterator = iter(stream)
    assert next(iterator) == 1
    assert not stream.done
    assert next(iterator) == -9
    assert stream.done
    assert finished.is_set()  # the producer was run to its end before the end was handed over
    assert list(iterator) == []
    assert stream.result(0) == 9


def test_a_push_from_another_thread_while_the_consumer_waits_between_steps() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: e < 0, lambda e: -e)
    first_read = threading.Event()

    def steps() -> Iterator[int]:
        yield 1
        assert first_read.wait(5)
        yield 2
        yield -3

    stream.pull_from(steps())
    iterator = iter(stream)
    assert next(iterator) == 1
    _push_from_another_thread(stream, 5)  # queued before the next step runs
    first_read.set()
    assert list(iterator) == [5, 2, -3]


# --- step_events: a step's own events, handed over without the queue ------------------------

def _appending(stream: EventStream[int, int], *events: int) -> None:
    """What a producer does: the step's list while iteration runs it, else ``push``."""
    handed = stream.step_events
    if handed is not None:
        handed.extend(events)
    else:
        for event in events:
            stream.push(event)


def test_step_events_reach_the_consumer_in_order_before_what_the_step_pushed() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: e < 0, lambda e: -e)
    inside: list[bool] = []

    def steps() -> Iterator[int | None]:
        _appending(stream, 1, 2)
        yield 3  # after the step's appended events
        _appending(stream, 4)
        stream.push(5)  # pushed in the same step: after what it appended
        yield None
        _appending(stream, 6)
        stream.push(-7)  # the completing event, pushed: after the step's events
        inside.append(stream.step_events is not None)
        yield None

    assert stream.step_events is None
    stream.pull_from(steps())
    assert list(stream) == [1, 2, 3, 4, 5, 6, -7]
    assert stream.result(0) == 7
    assert inside == [True]
    assert stream.step_events is None  # only while a step runs


def test_step_events_go_before_an_abort_pushed_from_another_thread_during_the_step() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: e < 0, lambda e: -e)

    def steps() -> Iterator[int | None]:
        _appending(stream, 1)
        _push_from_another_thread(stream, -9)  # the abort's final event, while stepping
        yield None
        yield 2  # dropped: the stream is done
        yield -3

    stream.pull_from(steps())
    assert list(stream) == [1, -9]
    assert stream.result(0) == 9


def test_a_producer_that_stops_after_step_events_without_ending_ends_the_stream() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: e < 0, lambda e: -e)

    def steps() -> Iterator[int | None]:
        _appending(stream, 1)
        yield None
        _appending(stream, 2, 3)  # the last step: then the producer returns

    stream.pull_from(steps())
    done = threading.Event()
    seen: list[int] = []

    def consume() -> None:
        seen.extend(stream)
        done.set()

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert done.wait(5), "iteration must end: the producer ended without a final event"
    consumer.join(5)
    assert seen == [1, 2, 3]
    assert stream.done


def test_result_queues_step_events_for_a_later_iteration() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: e < 0, lambda e: -e)

    def steps() -> Iterator[int | None]:
        _appending(stream, 1, 2)
        yield None
        _appending(stream, 3)
        yield -4

    stream.pull_from(steps())
    assert stream.result(0) == 4
    assert list(stream) == [1, 2, 3, -4]


def test_step_events_is_none_while_result_runs_a_step() -> None:
    stream: EventStream[int, int] = EventStream(lambda e: e < 0, lambda e: -e)
    seen: list[object] = []

    def steps() -> Iterator[int | None]:
        seen.append(stream.step_events)
        yield 1
        seen.append(stream.step_events)
        yield -2

    stream.pull_from(steps())
    assert stream.result(0) == 2
    assert seen == [None, None]
