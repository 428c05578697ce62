"""piagent.testing: the scripted stream function streams realistic events and records calls."""

from __future__ import annotations

import pytest

from piagent import AbortController, AssistantMessage, Context, StreamOptions, UserMessage
from piagent.testing import (
    ScriptedStreamFn,
    assistant_error,
    assistant_text,
    assistant_tool_calls,
)


def types(stream: object) -> list[str]:
    return [event.type for event in stream]  # type: ignore[attr-defined]


def test_text_streams_in_deltas_that_add_up() -> None:
    fn = ScriptedStreamFn([assistant_text("The quick brown fox jumps over the lazy dog")])
    events = list(fn(fn.model, Context([]), StreamOptions()))
    assert [e.type for e in events][:2] == ["start", "text_start"]
    assert [e.type for e in events][-2:] == ["text_end", "done"]
    deltas = [e.delta for e in events if e.type == "text_delta"]
    assert len(deltas) > 1 and "".join(deltas) == "The quick brown fox jumps over the lazy dog"


def test_tool_arguments_stream_as_json_deltas_with_partial_arguments() -> None:
    fn = ScriptedStreamFn([assistant_tool_calls(("write", {"path": "a.txt", "text": "x" * 40}))])
    events = list(fn(fn.model, Context([]), StreamOptions()))
    deltas = [e for e in events if e.type == "toolcall_delta"]
    assert len(deltas) > 2
    assert "".join(e.delta for e in deltas) == '{"path": "a.txt", "text": "' + "x" * 40 + '"}'
    assert deltas[1].partial.content[0].arguments["path"] == "a.txt"
    final = events[-1].message
    assert final.stop_reason == "toolUse" and final.content[0].id == "call_1"


def test_records_calls_and_streams_copies() -> None:
    response = assistant_text("same")
    fn = ScriptedStreamFn([response, response])
    context = Context([UserMessage("hi")])
    first = fn(fn.model, context, StreamOptions(session_id="s")).result()
    second = fn(fn.model, context, StreamOptions()).result()
    assert first == second and first is not second and first is not response
    assert fn.call_count == 2 and fn.calls[0].options.session_id == "s"
    assert fn.calls[0].context.messages == context.messages


def test_callable_responses_see_the_request() -> None:
    fn = ScriptedStreamFn([lambda ctx, opts: assistant_text(f"{len(ctx.messages)} messages")])
    assert fn(fn.model, Context([UserMessage("a"), UserMessage("b")]), StreamOptions()).result().text \
        == "2 messages"


def test_running_out_of_script_ends_with_an_error_message() -> None:
    fn = ScriptedStreamFn()
    stream = fn(fn.model, Context([]), StreamOptions())
    assert types(stream) == ["error"]
    result = stream.result()
    assert result.stop_reason == "error"
    assert "no scripted response left for request 1" in (result.error_message or "")


def test_a_raising_callable_becomes_an_error_message() -> None:
    def broken(ctx: Context, opts: StreamOptions) -> AssistantMessage:
        raise KeyError("missing")

    fn = ScriptedStreamFn([broken])
    result = fn(fn.model, Context([]), StreamOptions()).result()
    assert result.stop_reason == "error" and "KeyError" in (result.error_message or "")


def test_abort_mid_stream_ends_aborted_with_partial_content() -> None:
    controller = AbortController()
    fn = ScriptedStreamFn([assistant_text("one two three four five six seven eight nine ten")])
    stream = fn(fn.model, Context([]), StreamOptions(signal=controller.signal))
    seen = []
    deltas = []
    for event in stream:
        seen.append(event.type)
        if event.type == "text_delta":
            deltas.append(event.delta)
            controller.abort()
    assert seen == ["start", "text_start", "text_delta", "error"]
    result = stream.result()
    assert result.stop_reason == "aborted" and result.error_message == "Operation aborted"
    # exactly what the delivered events described, nothing of the next delta
    assert result.content[0].text == "".join(deltas) == "one two three "


def test_builders() -> None:
    assert assistant_error("bad").stop_reason == "error"
    aborted = assistant_error("stop", aborted=True)
    assert (aborted.stop_reason, aborted.error_message) == ("aborted", "stop")
    calls = assistant_tool_calls(("a", {}), ("b", {"x": 1}, "id-b"), text="thinking aloud")
    assert [c.id for c in calls.tool_calls] == ["call_1", "id-b"]
    assert calls.text == "thinking aloud"


@pytest.mark.parametrize("delay", [0.0, 0.001])
def test_chunk_delay_still_produces_every_event(delay: float) -> None:
    fn = ScriptedStreamFn([assistant_text("a b c")], chunk_delay=delay)
    assert types(fn(fn.model, Context([]), StreamOptions()))[-1] == "done"
