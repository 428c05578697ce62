"""Aborting ``Agent`` runs: during the model stream (a listener aborts on the first update,
or a ``chunk_delay`` stream is aborted from the test thread), during a tool, during
``prepare_next_turn``; each ends with an "aborted" assistant message and ``agent_end``.
Queued input the run took but did not deliver goes back to the front of its queue, in
order; nothing is lost or duplicated. Ctrl-C (``_thread.interrupt_main``) while the main
thread waits in ``prompt()`` aborts the run, settles it, and re-raises.
"""

from __future__ import annotations

import _thread
import threading
from typing import Any

import pytest

from piagent import (
    AbortSignal,
    Agent,
    AgentEvent,
    AgentLoopTurnUpdate,
    AgentTurnContext,
    AssistantMessage,
    SystemMessage,
    ToolDeclaration,
)
from piagent.stream import AssistantMessageEventStream, ErrorEvent
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT, Recorder, piagent_threads, user

from .conftest import (
    GateTool,
    label,
    labels,
    make_agent,
    non_system,
    summary,
    texts,
)

pytestmark = pytest.mark.usefixtures("piagent_threads_back_to_baseline")



# --- during the stream ----------------------------------------------------------------


def test_a_listener_aborting_on_the_first_update_ends_the_run_aborted() -> None:
    agent, fn = make_agent([assistant_text("a long answer that never finishes streaming")])
    rec = Recorder(agent)

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_update":
            agent.abort()

    agent.subscribe(listener)
    run = agent.prompt("hi")
    aborted = run.messages[-1]
    assert isinstance(aborted, AssistantMessage) and aborted.stop_reason == "aborted"
    partial = label(aborted)
    assert summary(rec.events) == [
        ("agent_start",), ("turn_start",),
        ("message_start", "user", "hi"), ("message_end", "user", "hi"),
        ("message_start", "assistant"), ("message_update*", "assistant"),
        ("message_end", *partial),
        ("turn_end", *partial, ()),
        ("agent_end", (("user", "hi"), partial)),
    ]
    assert [e.type for e in rec.events].count("message_update") == 1
    assert run.signal.aborted
    assert run.error_message == agent.state.error_message == "Operation aborted"
    assert labels(agent.state.messages) == [("user", "hi"), partial]
    assert not agent.state.is_streaming and agent.state.streaming_message is None
    assert fn.call_count == 1


def test_aborting_a_slow_stream_from_another_thread_carries_the_reason() -> None:
    fn = ScriptedStreamFn([assistant_text("one two three four")], chunk_delay=WAIT)
    from piagent import Agent

    agent = Agent(model=fn.model, stream_fn=fn)
    streaming = threading.Event()
    agent.subscribe(lambda e, s: e.type == "message_start" and e.message.role == "assistant"
                    and streaming.set())  # type: ignore[union-attr]
    run = agent.prompt("hi", block=False)
    assert streaming.wait(WAIT)
    assert agent.state.streaming_message is not None
    agent.abort("user pressed stop")
    assert run.wait(WAIT)
    assert run.error_message == "user pressed stop"
    assert agent.state.error_message == "user pressed stop"
    assert labels(run.messages) == [("user", "hi"), ("assistant", "aborted:")]
    assert run.signal.reason == "user pressed stop"


def test_steering_queued_at_the_final_message_end_of_an_aborted_run_stays_queued() -> None:
    agent, fn = make_agent([assistant_text("done")])

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_end" and event.message.role == "assistant":  # type: ignore[union-attr]
            agent.steer("too late")
            agent.abort()

    agent.subscribe(listener)
    run = agent.prompt("hi")
    assert labels(run.messages) == [("user", "hi"), ("assistant", "stop:done")]
    assert texts(agent.peek_queued_messages()) == ["too late"]
    assert fn.call_count == 1


# --- during a tool --------------------------------------------------------------------


def test_abort_during_a_tool_lets_it_finish_and_makes_no_further_request() -> None:
    gate = GateTool(until_abort=True)
    agent, fn = make_agent([assistant_tool_calls(("read", {"path": "a"}), ("read", {"path": "b"})),
                            assistant_text("never")], tools=[gate.tool])
    rec = Recorder(agent)
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT) and gate.started("call_2").wait(WAIT)
    agent.steer("queued during the tool")
    agent.follow_up("follow-up during the tool")
    agent.abort()
    assert run.wait(WAIT)
    events = summary(rec.events)
    events[9:11] = sorted(events[9:11])  # both tools end on the abort, in either order
    assert events == [
        ("agent_start",), ("turn_start",),
        ("message_start", "user", "go"), ("message_end", "user", "go"),
        ("message_start", "assistant"), ("message_update*", "assistant"),
        ("message_end", "assistant", "toolUse:call:call_1|call:call_2"),
        ("tool_execution_start", "call_1"), ("tool_execution_start", "call_2"),
        ("tool_execution_end", "call_1"), ("tool_execution_end", "call_2"),
        ("message_start", "toolResult", "call_1:stopped"),
        ("message_end", "toolResult", "call_1:stopped"),
        ("message_start", "toolResult", "call_2:stopped"),
        ("message_end", "toolResult", "call_2:stopped"),
        ("turn_end", "assistant", "toolUse:call:call_1|call:call_2", ("call_1", "call_2")),
        ("turn_start",),
        ("message_start", "assistant"),
        ("message_end", "assistant", "aborted:"),
        ("turn_end", "assistant", "aborted:", ()),
        ("agent_end", (("user", "go"), ("assistant", "toolUse:call:call_1|call:call_2"),
                       ("toolResult", "call_1:stopped"), ("toolResult", "call_2:stopped"),
                       ("assistant", "aborted:"))),
    ]
    assert fn.call_count == 1
    # the queues were never polled once the signal fired: both messages are still there
    assert texts(agent.take_queued_messages(lambda m: True)) == [
        "queued during the tool", "follow-up during the tool"]


def test_abort_during_a_sequential_batch_answers_the_remaining_calls() -> None:
    """pi-agent-core 1.6.0 (#9986): the calls not yet run still start, end "Operation
    aborted" and get their result, so the transcript leaves no call unanswered."""
    gate = GateTool(until_abort=True)
    agent, fn = make_agent([assistant_tool_calls(("read", {"path": "a"}), ("read", {"path": "b"})),
                            assistant_text("never")], tools=[gate.tool],
                           tool_execution="sequential")
    rec = Recorder(agent)
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    agent.abort()
    assert run.wait(WAIT)
    assert not gate.started("call_2").is_set()
    assert summary(rec.events)[7:15] == [
        ("tool_execution_start", "call_1"), ("tool_execution_end", "call_1"),
        ("message_start", "toolResult", "call_1:stopped"),
        ("message_end", "toolResult", "call_1:stopped"),
        ("tool_execution_start", "call_2"), ("tool_execution_end", "call_2"),
        ("message_start", "toolResult", "call_2:Operation aborted"),
        ("message_end", "toolResult", "call_2:Operation aborted")]
    assert labels(agent.state.messages)[1:] == labels(run.messages) == [
        ("user", "go"), ("assistant", "toolUse:call:call_1|call:call_2"),
        ("toolResult", "call_1:stopped"), ("toolResult", "call_2:Operation aborted"),
        ("assistant", "aborted:")]
    assert fn.call_count == 1


def test_a_new_run_after_an_abort_starts_with_a_fresh_signal() -> None:
    gate = GateTool(until_abort=True)
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("fresh")],
                           tools=[gate.tool])
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    agent.abort()
    assert run.wait(WAIT)
    assert agent.state.error_message == "Operation aborted"
    second = agent.prompt("again")
    assert not second.signal.aborted
    assert agent.state.error_message is None
    assert labels(second.messages) == [("user", "again"), ("assistant", "stop:fresh")]


# --- during prepare_next_turn: queued input is restored -------------------------------


def _abort_in_prepare_next_turn(agent: Any, signals: list[AbortSignal],
                                before_abort: Any = None) -> None:
    def prepare_next_turn(ctx: AgentTurnContext, signal: AbortSignal
                          ) -> AgentLoopTurnUpdate | None:
        signals.append(signal)
        if before_abort is not None:
            before_abort()
        agent.abort()
        return None

    agent.prepare_next_turn = prepare_next_turn


def test_steering_drained_after_the_batch_goes_back_when_prepare_next_turn_aborts() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {"path": "a"}))], tools=[gate.tool])
    signals: list[AbortSignal] = []
    _abort_in_prepare_next_turn(agent, signals)
    rec = Recorder(agent)
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    agent.steer("s1")
    agent.steer("s2")
    agent.follow_up("f1")
    gate.release("call_1").set()
    assert run.wait(WAIT)
    assert signals == [run.signal]
    assert summary(rec.events)[-6:] == [
        ("turn_end", "assistant", "toolUse:call:call_1", ("call_1",)),
        ("turn_start",),
        ("message_start", "assistant"),
        ("message_end", "assistant", "aborted:"),
        ("turn_end", "assistant", "aborted:", ()),
        ("agent_end", (("user", "go"), ("assistant", "toolUse:call:call_1"),
                       ("toolResult", "call_1:a:ok"), ("assistant", "aborted:"))),
    ]
    assert fn.call_count == 1
    # s1 was taken after the batch but never delivered: it is back, in front of s2
    agent.steering_mode = "all"
    assert texts(agent.peek_queued_messages()) == ["s1", "s2"]

    # and the next run delivers each message exactly once
    agent.prepare_next_turn = None
    agent.steering_mode = "one-at-a-time"
    fn.set_responses([assistant_text("r1"), assistant_text("r2"), assistant_text("r3")])
    agent.continue_()
    assert texts(non_system(agent.state.messages)) == [
        "go", "toolUse:call:call_1", "call_1:a:ok", "aborted:",
        "s1", "stop:r1", "s2", "stop:r2", "f1", "stop:r3"]
    assert not agent.has_queued_messages()


def test_a_listener_sees_restored_steering_at_agent_end() -> None:
    gate = GateTool()
    gate.release("call_1").set()
    agent, fn = make_agent([assistant_tool_calls(("read", {}))], tools=[gate.tool])
    _abort_in_prepare_next_turn(agent, [])
    agent.subscribe(lambda e, s: e.type == "turn_end" and e.message.stop_reason == "toolUse"
                    and agent.steer("s1"))  # type: ignore[union-attr]
    at_end: list[list[str]] = []
    agent.subscribe(lambda e, s: e.type == "agent_end"
                    and at_end.append(texts(agent.peek_queued_messages())))
    agent.prompt("go")
    assert at_end == [["s1"]]


def test_follow_ups_taken_when_the_agent_would_stop_go_back_on_abort() -> None:
    agent, fn = make_agent([assistant_text("r1")])
    signals: list[AbortSignal] = []
    _abort_in_prepare_next_turn(agent, signals)
    agent.follow_up("f1")
    agent.follow_up("f2")
    run = agent.prompt("hi")
    assert labels(run.messages) == [("user", "hi"), ("assistant", "stop:r1"),
                                    ("assistant", "aborted:")]
    agent.follow_up_mode = "all"
    assert texts(agent.peek_queued_messages()) == ["f1", "f2"]
    assert fn.call_count == 1


def test_restored_messages_go_in_front_of_messages_queued_meanwhile_in_order() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {}))], tools=[gate.tool],
                           steering_mode="all")
    _abort_in_prepare_next_turn(agent, [], before_abort=lambda: agent.steer("queued later"))
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    for text in ("s1", "s2", "s3"):
        agent.steer(text)
    gate.release("call_1").set()
    assert run.wait(WAIT)
    assert texts(agent.peek_queued_messages()) == ["s1", "s2", "s3", "queued later"]
    assert [m for m in run.messages if label(m)[1] in ("s1", "s2", "s3")] == []


# --- Ctrl-C ---------------------------------------------------------------------------


def _interrupt_once_started(gate: GateTool) -> threading.Thread:
    """A helper thread that sends Ctrl-C to the main thread once the gated tool runs."""

    def interrupter() -> None:
        if gate.started("call_1").wait(WAIT):
            _thread.interrupt_main()

    helper = threading.Thread(target=interrupter, name="interrupter")
    helper.start()
    return helper


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_while_prompt_waits_aborts_the_run_and_reraises() -> None:
    baseline = threading.active_count()
    gate = GateTool(until_abort=True)
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("never")],
                           tools=[gate.tool])
    rec = Recorder(agent)

    helper = _interrupt_once_started(gate)
    with pytest.raises(KeyboardInterrupt):
        agent.prompt("go")
    helper.join(WAIT)
    assert not helper.is_alive()
    assert not agent.state.is_streaming and agent.signal is None
    assert gate.finished("call_1").is_set()
    assert rec.seen[-1].signal.aborted
    assert labels(non_system(agent.state.messages)) == [
        ("user", "go"), ("assistant", "toolUse:call:call_1"), ("toolResult", "call_1:stopped"),
        ("assistant", "aborted:")]
    assert rec.types()[-1] == "agent_end"
    assert fn.call_count == 1
    assert threading.active_count() == baseline
    assert piagent_threads() == []


@pytest.mark.usefixtures("sigint_raises")
def test_a_second_ctrl_c_stops_waiting_and_the_run_finishes_in_the_background() -> None:
    signals: list[AbortSignal] = []
    gate = GateTool(on_start=lambda call_id, signal: signals.append(signal))  # ignores aborts
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("never")],
                           tools=[gate.tool])

    def interrupter() -> None:
        if not gate.started("call_1").wait(WAIT):
            return
        _thread.interrupt_main()
        if signals[0].wait(WAIT):  # the first Ctrl-C aborted the run; the tool keeps going
            _thread.interrupt_main()

    helper = threading.Thread(target=interrupter, name="interrupter")
    helper.start()
    with pytest.raises(KeyboardInterrupt):
        agent.prompt("go")
    helper.join(WAIT)
    assert not helper.is_alive()
    assert signals[0].aborted
    assert agent.state.is_streaming  # still settling: the tool has not returned yet
    gate.release("call_1").set()
    assert agent.wait_for_idle(WAIT)
    assert labels(non_system(agent.state.messages)) == [
        ("user", "go"), ("assistant", "toolUse:call:call_1"), ("toolResult", "call_1::ok"),
        ("assistant", "aborted:")]


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_while_waiting_on_a_non_blocking_run() -> None:
    gate = GateTool(until_abort=True)
    agent, fn = make_agent([assistant_tool_calls(("read", {}))], tools=[gate.tool])
    rec = Recorder(agent)

    helper = _interrupt_once_started(gate)
    with pytest.raises(KeyboardInterrupt):
        # Ctrl-C may land in prompt() itself (it waits for the worker thread to start) or in
        # wait(); either way the run is aborted and settled before it propagates
        run = agent.prompt("go", block=False)
        run.wait()
    helper.join(WAIT)
    assert not helper.is_alive()
    assert rec.seen[-1].signal.aborted and rec.types()[-1] == "agent_end"
    assert not agent.state.is_streaming
    assert label(agent.state.messages[-1]) == ("assistant", "aborted:")


# --- delivery bookkeeping -------------------------------------------------------------


def test_one_message_object_queued_twice_is_restored_once_it_is_not_delivered() -> None:
    """Delivery is tracked per taking, not per object: the second taking goes back."""
    again = user("again")
    tool_turn = assistant_tool_calls(("read", {}))
    gate = GateTool()
    agent, fn = make_agent([tool_turn], tools=[gate.tool])
    gate.release("call_1").set()
    turns: list[AgentTurnContext] = []

    def prepare_next_turn(ctx: AgentTurnContext, signal: AbortSignal) -> None:
        turns.append(ctx)
        agent.abort()  # the second taking of `again` is pending: it is never delivered

    agent.prepare_next_turn = prepare_next_turn
    agent.steer(again)
    agent.steer(again)
    run = agent.prompt("go")
    # the initial poll delivered the first taking; the second went back to the queue
    assert [m for m in run.messages if m is again] == [again]
    assert [label(m)[1] for m in run.messages].count("again") == 1
    assert agent.peek_queued_messages() == [again]
    assert agent.peek_queued_messages()[0] is again


def test_a_queued_system_message_rewritten_by_the_tool_declarations_counts_as_delivered() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("r2")],
                           tools=[gate.tool])
    intent = SystemMessage(sections={"style": "Be terse."},
                           tools_added=[ToolDeclaration("not-runnable", "x", {})])
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    agent.steer(intent)
    gate.release("call_1").set()
    assert run.wait(WAIT)
    delivered = [m for m in run.messages if isinstance(m, SystemMessage)]
    assert len(delivered) == 1 and delivered[0] is not intent  # the loop rewrote it
    assert delivered[0].sections == {"style": "Be terse."} and delivered[0].tools_added is None
    assert not agent.has_queued_messages()  # delivered, so not restored
    assert agent.state.system_prompt.endswith("Be terse.")


# --- run.error_message after an abort: one shape (issue 49 item 6) -------------------------


@pytest.mark.parametrize("reason", ["user pressed stop", None])
def test_an_aborted_runs_error_message_is_the_reason_whatever_the_moment(
        reason: str | None) -> None:
    """Streaming (a provider says "Request was aborted: <reason>"), in a tool, or between
    turns: ``run.error_message`` is the reason given to ``abort()``, else "Operation
    aborted" (docs/errors.md). The message in the transcript keeps its own words."""
    expected = reason if reason is not None else "Operation aborted"
    holder: list[Any] = []

    def provider_abort(model: Any, context: Any, options: Any) -> AssistantMessageEventStream:
        holder[0].abort(reason)  # the provider's stream ends on the signal, in its words
        message = assistant_text("partial")
        message.stop_reason = "aborted"
        message.error_message = ("Request was aborted" if reason is None
                                 else f"Request was aborted: {reason}")
        stream = AssistantMessageEventStream()
        stream.push(ErrorEvent("aborted", message))
        stream.end()
        return stream

    agent = Agent(model=ScriptedStreamFn().model, stream_fn=provider_abort)
    holder.append(agent)
    streaming = agent.prompt("go")
    assert streaming.error_message == expected
    last = agent.state.messages[-1]
    assert isinstance(last, AssistantMessage) and last.error_message is not None
    assert last.error_message.startswith("Request was aborted")  # the provider's text, kept

    gate = GateTool(until_abort=True)
    agent, _ = make_agent([assistant_tool_calls(("read", {"path": "a"}))], tools=[gate.tool])
    in_tool = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    agent.abort(reason)
    assert in_tool.wait(WAIT)
    assert in_tool.error_message == expected
