"""``Agent`` queues: ``steer``/``follow_up`` (a str becomes a user message), the two modes
(switchable live), ``clear_*``, ``has_queued_messages``, ``peek_queued_messages`` (steering
first), ``take_queued_messages`` (by identity), where queued messages land in a run, and
queueing from other threads, listeners and tools — up to 32 threads × 100 ``steer`` calls,
each message delivered exactly once and in its thread's order.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from piagent import AbortSignal, AgentEvent, TextContent, UserMessage
from piagent.stream import Context, StreamOptions
from piagent.testing import assistant_text, assistant_tool_calls
from tests.conftest import WAIT, user
from tests.tools.conftest import NO_PARAMS, make_tool, ok

from .conftest import (
    GateTool,
    label,
    labels,
    make_agent,
    non_system,
    quick_tool,
    summary,
    texts,
)

pytestmark = pytest.mark.usefixtures("piagent_threads_back_to_baseline")



# --- the queue API --------------------------------------------------------------------


def test_steer_and_follow_up_turn_a_str_into_a_user_message() -> None:
    agent, _ = make_agent()
    agent.steer("steer me")
    own = user("mine")
    agent.follow_up(own)
    steered, followed = agent.take_queued_messages(lambda m: True)
    assert isinstance(steered, UserMessage)
    assert steered.content == [TextContent("steer me")]
    assert steered.timestamp > 0
    assert followed is own


def test_peek_prefers_steering_and_follows_each_mode() -> None:
    agent, _ = make_agent()
    assert agent.peek_queued_messages() == []
    agent.follow_up("f1")
    agent.follow_up("f2")
    assert texts(agent.peek_queued_messages()) == ["f1"]
    agent.follow_up_mode = "all"
    assert texts(agent.peek_queued_messages()) == ["f1", "f2"]
    agent.steer("s1")
    agent.steer("s2")
    assert texts(agent.peek_queued_messages()) == ["s1"]
    agent.steering_mode = "all"
    assert agent.steering_mode == "all"
    assert texts(agent.peek_queued_messages()) == ["s1", "s2"]
    peeked = agent.peek_queued_messages()
    peeked.clear()  # a copy: the queue is untouched
    assert texts(agent.peek_queued_messages()) == ["s1", "s2"]


def test_clear_queues_and_has_queued_messages() -> None:
    agent, _ = make_agent()
    assert not agent.has_queued_messages()
    agent.steer("s")
    assert agent.has_queued_messages()
    agent.follow_up("f")
    agent.clear_steering_queue()
    assert texts(agent.peek_queued_messages()) == ["f"]
    agent.clear_follow_up_queue()
    assert not agent.has_queued_messages()
    agent.steer("s")
    agent.follow_up("f")
    agent.clear_all_queues()
    assert not agent.has_queued_messages()
    assert agent.peek_queued_messages() == []


def test_take_queued_messages_removes_matches_by_identity_steering_first() -> None:
    agent, _ = make_agent()
    twin_a = UserMessage(content=[TextContent("same")], timestamp=1)
    twin_b = UserMessage(content=[TextContent("same")], timestamp=1)
    assert twin_a == twin_b and twin_a is not twin_b
    agent.follow_up(twin_b)
    agent.follow_up("f-keep")
    agent.steer(twin_a)
    agent.steer("s-keep")
    agent.steer(twin_b)
    taken = agent.take_queued_messages(lambda m: m is twin_b)
    assert len(taken) == 2 and all(m is twin_b for m in taken)
    assert agent.take_queued_messages(lambda m: m is twin_b) == []
    rest = agent.take_queued_messages(lambda m: True)
    assert rest[0] is twin_a
    assert texts(rest) == ["same", "s-keep", "f-keep"]
    assert not agent.has_queued_messages()


def test_take_queued_messages_keeps_the_order_of_the_rest() -> None:
    agent, _ = make_agent()
    for text in ("s1", "x1", "s2", "x2", "s3"):
        agent.steer(text)
    taken = agent.take_queued_messages(lambda m: label(m)[1].startswith("x"))
    assert texts(taken) == ["x1", "x2"]
    agent.steering_mode = "all"
    assert texts(agent.peek_queued_messages()) == ["s1", "s2", "s3"]


# --- where queued messages land -------------------------------------------------------


def test_steering_without_tool_calls_still_makes_a_second_turn() -> None:
    agent, fn = make_agent([assistant_text("first"), assistant_text("second")])

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_start" and event.message.role == "assistant" and \
                fn.call_count == 1:  # type: ignore[union-attr]
            agent.steer("while streaming")

    agent.subscribe(listener)
    run = agent.prompt("hi")
    assert labels(run.messages) == [("user", "hi"), ("assistant", "stop:first"),
                                    ("user", "while streaming"), ("assistant", "stop:second")]


def test_one_at_a_time_steering_delivers_one_message_per_request() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {"path": "a"})), assistant_text("r2"),
                            assistant_text("r3")], tools=[gate.tool])
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    agent.steer("s1")
    agent.steer("s2")
    agent.follow_up("f1")
    fn.add_response(assistant_text("r4"))
    gate.release("call_1").set()
    assert run.wait(WAIT)
    assert labels(run.messages) == [
        ("user", "go"), ("assistant", "toolUse:call:call_1"), ("toolResult", "call_1:a:ok"),
        ("user", "s1"), ("assistant", "stop:r2"), ("user", "s2"), ("assistant", "stop:r3"),
        ("user", "f1"), ("assistant", "stop:r4")]
    assert fn.call_count == 4


def test_all_mode_steering_delivers_every_message_before_the_next_request() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {"path": "a"})), assistant_text("r2"),
                            assistant_text("r3")], tools=[gate.tool], steering_mode="all",
                           follow_up_mode="all")
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    for text in ("s1", "s2", "s3"):
        agent.steer(text)
    agent.follow_up("f1")
    agent.follow_up("f2")
    gate.release("call_1").set()
    assert run.wait(WAIT)
    assert texts(run.messages)[3:] == ["s1", "s2", "s3", "stop:r2", "f1", "f2", "stop:r3"]
    assert texts(fn.calls[1].context.messages)[-3:] == ["s1", "s2", "s3"]


def test_steering_mode_switches_live_during_a_run() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("r2"),
                            assistant_text("r3")], tools=[gate.tool])

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_end" and label(event.message) == ("user", "s1"):  # type: ignore[union-attr]
            agent.steering_mode = "all"

    agent.subscribe(listener)
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    for text in ("s1", "s2", "s3"):
        agent.steer(text)
    gate.release("call_1").set()
    assert run.wait(WAIT)
    assert texts(run.messages)[3:] == ["s1", "stop:r2", "s2", "s3", "stop:r3"]


def test_steer_and_follow_up_from_other_threads_while_tools_run() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {"path": "a"}), ("read", {"path": "b"})),
                            assistant_text("after steer"), assistant_text("after follow-up")],
                           tools=[gate.tool])
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT) and gate.started("call_2").wait(WAIT)
    helpers = [threading.Thread(target=agent.steer, args=("from thread",), name="steerer"),
               threading.Thread(target=agent.follow_up, args=("later",), name="follower")]
    for helper in helpers:
        helper.start()
    for helper in helpers:
        helper.join(WAIT)
        assert not helper.is_alive()
    assert texts(agent.peek_queued_messages()) == ["from thread"]
    gate.release("call_1").set()
    gate.release("call_2").set()
    assert run.wait(WAIT)
    assert labels(run.messages) == [
        ("user", "go"), ("assistant", "toolUse:call:call_1|call:call_2"),
        ("toolResult", "call_1:a:ok"), ("toolResult", "call_2:b:ok"),
        ("user", "from thread"), ("assistant", "stop:after steer"),
        ("user", "later"), ("assistant", "stop:after follow-up")]


def test_a_tool_can_steer_and_follow_up() -> None:
    def on_start(call_id: str, signal: AbortSignal) -> None:
        agent.steer(f"steer from {call_id}")
        agent.follow_up(f"follow-up from {call_id}")

    gate = GateTool(on_start=on_start)
    gate.release("call_1").set()
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("r2"),
                            assistant_text("r3")], tools=[gate.tool])
    run = agent.prompt("go")
    assert texts(run.messages)[3:] == [
        "steer from call_1", "stop:r2", "follow-up from call_1", "stop:r3"]


def test_follow_up_from_an_agent_end_listener_waits_for_the_next_run() -> None:
    agent, fn = make_agent([assistant_text("r1"), assistant_text("r2")])
    agent.subscribe(lambda e, s: e.type == "agent_end" and agent.follow_up("too late"))
    run = agent.prompt("hi")
    assert labels(run.messages) == [("user", "hi"), ("assistant", "stop:r1")]
    assert texts(agent.peek_queued_messages()) == ["too late"]
    agent.subscribe(lambda e, s: None)
    run = agent.continue_()  # assistant tail with a follow-up queued
    assert labels(run.messages) == [("user", "too late"), ("assistant", "stop:r2")]


# --- many threads ---------------------------------------------------------------------

THREADS = 32
PER_THREAD = 100
_STEERED = re.compile(r"^t\d+-\d+$")


def _steer_from_threads(agent: Any) -> None:
    """32 threads, released together, each steering 100 numbered messages."""
    barrier = threading.Barrier(THREADS, timeout=WAIT)

    def work(n: int) -> None:
        barrier.wait()
        for i in range(PER_THREAD):
            agent.steer(f"t{n}-{i}")

    threads = [threading.Thread(target=work, args=(n,), name=f"steerer-{n}")
               for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()


def _assert_each_delivered_once_in_order(texts: list[str]) -> None:
    steered = [t for t in texts if _STEERED.match(t)]
    assert len(steered) == THREADS * PER_THREAD
    assert len(set(steered)) == len(steered)
    for n in range(THREADS):
        mine = [int(t.split("-")[1]) for t in steered if t.startswith(f"t{n}-")]
        assert mine == list(range(PER_THREAD))


def test_many_threads_steering_during_a_run_deliver_each_message_once_in_order() -> None:
    """The run keeps taking turns (and draining) while the threads steer."""
    all_sent = threading.Event()
    tool = quick_tool("noop")

    def respond(context: Context, options: StreamOptions) -> Any:
        if all_sent.is_set():
            return assistant_text("finished")
        return assistant_tool_calls(("noop", {}))

    agent, fn = make_agent([respond] * 100_000, tools=[tool], steering_mode="all")
    run = agent.prompt("go", block=False)
    _steer_from_threads(agent)
    all_sent.set()
    assert run.wait(WAIT)
    assert not agent.has_queued_messages()
    delivered = texts(run.messages)
    _assert_each_delivered_once_in_order(delivered)
    assert delivered[-1] == "stop:finished"
    # every steering message reached the model, in the transcript's order
    last_context = texts(fn.calls[-1].context.messages)
    assert [t for t in last_context if _STEERED.match(t)] == [
        t for t in delivered if _STEERED.match(t)]


def test_many_threads_steering_before_continue_deliver_everything_in_one_prompt() -> None:
    agent, fn = make_agent([assistant_text("r1")], messages=[user("q"), assistant_text("a")],
                           steering_mode="all")
    _steer_from_threads(agent)
    run = agent.continue_()
    delivered = texts(run.messages)
    _assert_each_delivered_once_in_order(delivered)
    assert delivered[-1] == "stop:r1"
    assert fn.call_count == 1
    assert not agent.has_queued_messages()


def test_many_threads_steering_into_one_at_a_time_mode_lose_nothing() -> None:
    agent, _ = make_agent(messages=[user("q"), assistant_text("a")])
    _steer_from_threads(agent)
    taken = agent.take_queued_messages(lambda m: True)
    _assert_each_delivered_once_in_order(texts(taken))


def test_queued_messages_events_are_the_user_messages_themselves() -> None:
    agent, _ = make_agent([assistant_text("r1")], messages=[user("q"), assistant_text("a")])
    queued = user("queued")
    agent.steer(queued)
    run = agent.continue_()
    starts = [e for e in run.events() if e.type == "message_start"]
    assert starts[0].message is queued  # type: ignore[union-attr]
    assert run.messages[0] is queued
    assert summary(run.events())[:4] == [("agent_start",), ("turn_start",),
                                         ("message_start", "user", "queued"),
                                         ("message_end", "user", "queued")]
    assert labels(non_system(run.messages)) == [("user", "queued"), ("assistant", "stop:r1")]


# --- the read-only view of the queues (pi's steeringQueue / followUpQueue) ----------------


def test_the_queues_are_visible_read_only() -> None:
    agent, fn = make_agent([assistant_text("one"), assistant_text("two"),
                            assistant_text("three")], follow_up_mode="all")
    assert agent.steering_queue.messages == () and len(agent.follow_up_queue) == 0
    agent.steer("a")
    agent.steer("b")
    agent.follow_up("c")
    steering = agent.steering_queue
    assert [m.text for m in steering.messages] == ["a", "b"]  # type: ignore[attr-defined]
    assert isinstance(steering.messages, tuple) and len(steering) == 2
    assert steering.mode == "one-at-a-time" and agent.follow_up_queue.mode == "all"
    assert [m.text for m in agent.follow_up_queue.messages] == ["c"]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        agent.steering_queue = steering  # type: ignore[misc]
    with pytest.raises(AttributeError):
        steering.messages = ()  # type: ignore[misc]
    assert "'one-at-a-time'" in repr(steering)
    agent.prompt("go")  # one steering message per poll: "a", then "b"; then the follow-up
    assert agent.steering_queue.messages == () and agent.follow_up_queue.messages == ()
    assert fn.call_count == 3
    assert len(steering) == 0  # a view, not a copy: it follows the queue


def test_a_tool_sees_what_is_queued_while_it_runs() -> None:
    seen: list[tuple[str, ...]] = []

    def execute(*args: Any) -> Any:
        agent.steer("mid-batch")
        seen.append(tuple(m.text for m in agent.steering_queue.messages))  # type: ignore[attr-defined]
        return ok("done")

    agent, _ = make_agent([assistant_tool_calls(("noop", {})), assistant_text("ok")],
                          tools=[make_tool("noop", execute, parameters=NO_PARAMS)])
    agent.prompt("go")
    assert seen == [("mid-batch",)]
    assert agent.steering_queue.messages == ()  # delivered after the batch
