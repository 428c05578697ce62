"""pi-ai's response timing: every AssistantMessageEventStream sets the final message's
duration_ms, whatever produces the events (pushed, pulled, scripted, the agent loop)."""

from __future__ import annotations

import threading
import time

from piagent import Agent, AssistantMessage, AssistantMessageEventStream, DoneEvent, ErrorEvent
from piagent.messages import TextContent, now_ms
from piagent.testing import ScriptedStreamFn, assistant_text

from ..conftest import WAIT


def _message(**kwargs: object) -> AssistantMessage:
    return AssistantMessage(content=[TextContent("ok")], api="a", provider="p", model="m",
                            **kwargs)  # type: ignore[arg-type]


def test_the_final_message_is_timed_with_a_monotonic_clock() -> None:
    before = time.perf_counter()
    stream = AssistantMessageEventStream()
    message = _message()  # the response starts after the stream was made
    stream.push(DoneEvent("stop", message))
    bound = (time.perf_counter() - before) * 1000
    assert isinstance(message.duration_ms, int)
    assert 0 <= message.duration_ms <= round(bound) + 1
    assert stream.result(WAIT) is message


def test_an_error_event_and_end_result_are_timed_too() -> None:
    stream = AssistantMessageEventStream()
    failed = _message(stop_reason="error", error_message="boom")
    stream.push(ErrorEvent("error", failed))
    assert isinstance(failed.duration_ms, int)
    ended = AssistantMessageEventStream()
    result = _message()
    ended.end(result)
    assert isinstance(result.duration_ms, int) and ended.result(WAIT) is result


def test_a_response_that_started_elsewhere_or_was_timed_stays_as_it_is() -> None:
    older = _message(timestamp=now_ms() - 60_000)  # e.g. a deferred result fetched later
    stream = AssistantMessageEventStream()
    stream.push(DoneEvent("stop", older))
    assert older.duration_ms is None
    timed = _message(duration_ms=1234)
    stream = AssistantMessageEventStream()
    stream.push(DoneEvent("stop", timed))
    assert timed.duration_ms == 1234


def test_nothing_is_timed_after_the_stream_ended() -> None:
    stream = AssistantMessageEventStream()
    first = _message()
    stream.push(DoneEvent("stop", first))
    late = _message()
    stream.push(DoneEvent("stop", late))
    stream.end(late)
    assert late.duration_ms is None and stream.result(WAIT) is first


def test_a_consumer_on_another_thread_sees_the_done_event_already_timed() -> None:
    stream = AssistantMessageEventStream()
    seen: list[int | None] = []
    reading = threading.Event()

    def consume() -> None:
        reading.set()
        seen.extend(e.message.duration_ms for e in stream if isinstance(e, DoneEvent))

    reader = threading.Thread(target=consume)
    reader.start()
    assert reading.wait(WAIT)
    stream.push(DoneEvent("stop", _message()))
    reader.join(WAIT)
    assert not reader.is_alive()
    assert len(seen) == 1 and isinstance(seen[0], int)


def test_scripted_responses_are_timed_when_they_start_at_the_request() -> None:
    built_before = assistant_text("Built before the request.")  # maybe in the same ms
    scripted = ScriptedStreamFn([
        lambda context, options: assistant_text("Built at the request."), built_before])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    agent.prompt("One")
    agent.prompt("Two")
    first, second = (m for m in agent.state.messages if isinstance(m, AssistantMessage))
    assert isinstance(first.duration_ms, int)  # pi-ai's rule, through the agent loop
    assert second.duration_ms is None  # played as made, before the request: never timed
    agent.prompt("Three")  # the script ran out: the error is made at the request
    last = agent.state.messages[-1]
    assert isinstance(last, AssistantMessage) and last.stop_reason == "error"
    assert isinstance(last.duration_ms, int)
