"""``Agent`` under threads: the seed's 25-step trace (two parallel reads, b first, a steer
from the test thread, the tool thread or a listener while both run), failure handling (the
seed's handleRunFailure: a raising listener, ``convert_to_llm``, ``transform_context``,
``prepare_request``, ``prepare_next_turn`` or stream function), a listener raising while
parallel tools run, one agent shared by many threads, and threads back to baseline.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from piagent import (
    AbortSignal,
    Agent,
    AgentBusyError,
    AgentEvent,
    AssistantMessage,
    SystemMessage,
)
from piagent.stream import Context, StreamOptions
from piagent.testing import (
    ScriptedStreamFn,
    assistant_error,
    assistant_text,
    assistant_tool_calls,
)
from tests.conftest import WAIT, Recorder, piagent_threads, user, wait_until

from .conftest import (
    GateTool,
    label,
    labels,
    make_agent,
    non_system,
    summary,
)

BUSY_PROMPT = ("Agent is already processing a prompt. Use steer() or follow_up() to queue "
               "messages, or wait for completion.")


pytestmark = pytest.mark.usefixtures("piagent_threads_back_to_baseline")


# --- the seed's 25-step trace ---------------------------------------------------------

PROMPT = "Đọc a.txt và b.txt rồi tóm tắt"
STEER = "Chỉ tóm tắt a.txt thôi"
TWO_READS = "toolUse:call:call_1|call:call_2"
USER = ("user", PROMPT)
ASSISTANT_1 = ("assistant", TWO_READS)
RESULT_1 = ("toolResult", "call_1:a.txt:ok")
RESULT_2 = ("toolResult", "call_2:b.txt:ok")
STEERED = ("user", STEER)
ASSISTANT_2 = ("assistant", "stop:a.txt chứa …")

TRACE = [
    ("agent_start",),                                          # 1
    ("turn_start",),                                           # 2
    ("message_start", *USER),                                  # 3
    ("message_end", *USER),                                    # 4
    ("message_start", "assistant"),                            # 5
    ("message_update*", "assistant"),                          # 6-7
    ("message_end", *ASSISTANT_1),                             # 8
    ("tool_execution_start", "call_1"),                        # 9
    ("tool_execution_start", "call_2"),                        # 10
    ("tool_execution_end", "call_2"),                          # 11: completion order
    ("tool_execution_end", "call_1"),                          # 12
    ("message_start", *RESULT_1),                              # 13: source order
    ("message_end", *RESULT_1),                                # 14
    ("message_start", *RESULT_2),                              # 15
    ("message_end", *RESULT_2),                                # 16
    ("turn_end", *ASSISTANT_1, ("call_1", "call_2")),          # 17
    ("turn_start",),                                           # 18
    ("message_start", *STEERED),                               # 19
    ("message_end", *STEERED),                                 # 20
    ("message_start", "assistant"),                            # 21
    ("message_update*", "assistant"),                          # 22
    ("message_end", *ASSISTANT_2),                             # 23
    ("turn_end", *ASSISTANT_2, ()),                            # 24
    ("agent_end", (USER, ASSISTANT_1, RESULT_1, RESULT_2, STEERED, ASSISTANT_2)),  # 25
]


@pytest.mark.parametrize("steer_from", ["test thread", "tool thread", "listener"])
def test_the_seeds_25_step_trace(steer_from: str) -> None:
    """A prompt, two parallel reads (b finishes first) and a steer while both run."""
    def on_start(call_id: str, signal: AbortSignal) -> None:
        if steer_from == "tool thread" and call_id == "call_2":
            agent.steer(STEER)

    gate = GateTool(on_start=on_start)
    agent, fn = make_agent([
        assistant_tool_calls(("read", {"path": "a.txt"}), ("read", {"path": "b.txt"})),
        assistant_text("a.txt chứa …")], system_prompt="You are helpful.", tools=[gate.tool])
    rec = Recorder(agent)
    b_ended = threading.Event()
    tails: list[tuple[str, str]] = []

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "tool_execution_start":
            tails.append(label(agent.state.messages[-1]))
            if steer_from == "listener" and event.tool_call_id == "call_2":  # type: ignore[union-attr]
                agent.steer(STEER)
        if event.type == "tool_execution_end" and event.tool_call_id == "call_2":  # type: ignore[union-attr]
            b_ended.set()

    agent.subscribe(listener)
    run = agent.prompt(PROMPT, block=False)
    assert gate.started("call_1").wait(WAIT) and gate.started("call_2").wait(WAIT)
    if steer_from == "test thread":
        agent.steer(STEER)
    assert agent.state.pending_tool_calls == {"call_1", "call_2"}
    assert [label(m) for m in agent.peek_queued_messages()] == [STEERED]
    gate.release("call_2").set()
    assert b_ended.wait(WAIT)
    assert not gate.finished("call_1").is_set()
    gate.release("call_1").set()
    assert run.wait(WAIT)

    assert summary(rec.events) == TRACE
    # the state the listeners saw after each reducer step
    pending = [sorted(s.pending) for s in rec.seen if s.event.type.startswith("tool_execution")]
    assert pending == [["call_1"], ["call_1", "call_2"], ["call_1"], []]
    assert tails == [ASSISTANT_1, ASSISTANT_1]  # event 9: state already has event 8's message
    grown = [len(s.messages) for s in rec.seen if s.event.type == "message_end"]
    assert grown == [2, 3, 4, 5, 6, 7]  # one message per message_end, after the system one
    assert all(s.is_streaming for s in rec.seen)
    assert all(s.signal is run.signal for s in rec.seen)
    # the model saw the two results, then the new instruction
    assert labels(fn.calls[1].context.messages) == [
        ("system", "You are helpful."), USER, ASSISTANT_1, RESULT_1, RESULT_2, STEERED]
    assert labels(agent.state.messages) == [
        ("system", "You are helpful."), USER, ASSISTANT_1, RESULT_1, RESULT_2, STEERED,
        ASSISTANT_2]
    assert labels(run.messages) == [USER, ASSISTANT_1, RESULT_1, RESULT_2, STEERED, ASSISTANT_2]
    assert fn.call_count == 2
    assert not agent.state.is_streaming and not agent.has_queued_messages()
    assert piagent_threads() == []


def test_a_follow_up_instead_of_the_steer_makes_a_third_turn() -> None:
    gate = GateTool()
    agent, fn = make_agent([
        assistant_tool_calls(("read", {"path": "a.txt"}), ("read", {"path": "b.txt"})),
        assistant_text("both"), assistant_text("a.txt chứa …")], tools=[gate.tool])
    run = agent.prompt(PROMPT, block=False)
    assert gate.started("call_1").wait(WAIT) and gate.started("call_2").wait(WAIT)
    agent.follow_up(STEER)
    gate.release("call_1").set()
    gate.release("call_2").set()
    assert run.wait(WAIT)
    assert labels(run.messages) == [USER, ASSISTANT_1, RESULT_1, RESULT_2,
                                    ("assistant", "stop:both"), STEERED, ASSISTANT_2]


# --- failure handling (handleRunFailure) ----------------------------------------------


def _failure_tail(stop_reason: str = "error") -> list[tuple[Any, ...]]:
    synthetic = ("assistant", f"{stop_reason}:")
    return [("message_start", "assistant"), ("message_end", *synthetic),
            ("turn_end", *synthetic, ())]


def _assert_failed(agent: Agent, run: Any, rec: Recorder, error: str,
                   stop_reason: str = "error") -> AssistantMessage:
    assert run.done and not agent.state.is_streaming
    synthetic = run.messages[-1]
    assert isinstance(synthetic, AssistantMessage)
    assert (synthetic.stop_reason, synthetic.error_message) == (stop_reason, error)
    assert synthetic.content[0].text == ""  # type: ignore[union-attr]
    assert agent.state.messages[-1] is synthetic
    assert agent.state.error_message == error
    assert run.error_message == error
    assert rec.types().count("agent_end") == 1
    agent_end = rec.events[-1]
    assert agent_end.type == "agent_end"
    assert agent_end.messages == run.messages  # type: ignore[attr-defined]
    return synthetic


def test_a_raising_listener_fails_the_run_with_a_synthetic_error_message() -> None:
    agent, fn = make_agent([assistant_text("hello")])
    rec = Recorder(agent)

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_end" and event.message.role == "assistant" \
                and event.message.stop_reason == "stop":  # type: ignore[union-attr]
            raise RuntimeError("listener broke")

    agent.subscribe(listener)
    run = agent.prompt("hi", timeout=WAIT)  # returns normally
    _assert_failed(agent, run, rec, "RuntimeError: listener broke")
    assert summary(rec.events) == [
        ("agent_start",), ("turn_start",),
        ("message_start", "user", "hi"), ("message_end", "user", "hi"),
        ("message_start", "assistant"), ("message_update*", "assistant"),
        ("message_end", "assistant", "stop:hello"),
        *_failure_tail(),
        ("agent_end", (("user", "hi"), ("assistant", "stop:hello"), ("assistant", "error:"))),
    ]
    assert labels(agent.state.messages) == [("user", "hi"), ("assistant", "stop:hello"),
                                            ("assistant", "error:")]


def test_a_listener_raising_at_agent_end_closes_the_run_again_the_seeds_way() -> None:
    """handleRunFailure runs after the loop's own agent_end: a second agent_end follows."""
    agent, fn = make_agent([assistant_text("hello")])
    rec = Recorder(agent)
    raised: list[int] = []

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "agent_end" and not raised:
            raised.append(1)
            raise RuntimeError("saving the session failed")

    agent.subscribe(listener)
    run = agent.prompt("hi", timeout=WAIT)
    assert summary(rec.events)[-5:] == [
        ("agent_end", (("user", "hi"), ("assistant", "stop:hello"))),
        *_failure_tail(),
        ("agent_end", (("user", "hi"), ("assistant", "stop:hello"), ("assistant", "error:")))]
    assert agent.state.error_message == "RuntimeError: saving the session failed"
    assert run.done and not agent.state.is_streaming


def test_a_listener_raising_on_every_event_still_ends_the_run() -> None:
    agent, fn = make_agent([assistant_text("hello")])
    rec = Recorder(agent)

    def broken(event: AgentEvent, signal: AbortSignal) -> None:
        raise ValueError(f"cannot handle {event.type}")

    agent.subscribe(broken)
    run = agent.prompt("hi")
    _assert_failed(agent, run, rec, "ValueError: cannot handle agent_start")
    # the prompt is recorded even so (the transcript keeps the user's input)
    assert summary(rec.events) == [
        ("agent_start",), ("message_start", "user", "hi"), ("message_end", "user", "hi"),
        *_failure_tail(), ("agent_end", (("user", "hi"), ("assistant", "error:")))]
    assert [m.role for m in agent.state.messages] == ["user", "assistant"]
    assert fn.call_count == 0


def _hook_failure(hook: str) -> tuple[Agent, ScriptedStreamFn]:
    agent, fn = make_agent([assistant_text("never")])

    def boom(*args: Any) -> Any:
        raise RuntimeError(f"{hook} broke")

    setattr(agent, hook, boom)
    return agent, fn


@pytest.mark.parametrize("hook", ["convert_to_llm", "transform_context", "prepare_request",
                                  "get_api_key"])
def test_a_raising_hook_before_the_request_fails_the_run(hook: str) -> None:
    agent, fn = _hook_failure(hook)
    rec = Recorder(agent)
    agent.steer("steered")
    run = agent.prompt("hi", timeout=WAIT)
    _assert_failed(agent, run, rec, f"RuntimeError: {hook} broke")
    assert summary(rec.events) == [
        ("agent_start",), ("turn_start",),
        ("message_start", "user", "hi"), ("message_end", "user", "hi"),
        ("message_start", "user", "steered"), ("message_end", "user", "steered"),
        *_failure_tail(),
        ("agent_end", (("user", "hi"), ("user", "steered"), ("assistant", "error:"))),
    ]
    assert fn.call_count == 0
    assert not agent.has_queued_messages()  # the steer was delivered, so it is not restored


def test_a_raising_finish_turn_fails_the_run_after_the_response() -> None:
    agent, fn = _hook_failure("finish_turn")
    rec = Recorder(agent)
    run = agent.prompt("hi", timeout=WAIT)
    _assert_failed(agent, run, rec, "RuntimeError: finish_turn broke")
    assert summary(rec.events)[-5:] == [
        ("message_end", "assistant", "stop:never"), *_failure_tail(),
        ("agent_end", (("user", "hi"), ("assistant", "stop:never"), ("assistant", "error:")))]


def test_a_raising_hook_after_an_abort_gives_an_aborted_message() -> None:
    agent, fn = make_agent([assistant_text("never")])
    rec = Recorder(agent)

    def convert(messages: list[Any]) -> list[Any]:
        agent.abort()
        raise RuntimeError("gave up")

    agent.convert_to_llm = convert
    run = agent.prompt("hi")
    _assert_failed(agent, run, rec, "RuntimeError: gave up", stop_reason="aborted")


def test_a_stream_function_that_raises_fails_the_run() -> None:
    def broken_stream_fn(model: Any, context: Context, options: StreamOptions) -> Any:
        raise ConnectionError("socket closed")

    agent = Agent(stream_fn=broken_stream_fn)
    rec = Recorder(agent)
    run = agent.prompt("hi")
    synthetic = _assert_failed(agent, run, rec, "ConnectionError: socket closed")
    assert (synthetic.api, synthetic.provider, synthetic.model) == ("", "", "")
    assert summary(rec.events)[-4:] == [
        *_failure_tail(),
        ("agent_end", (("user", "hi"), ("assistant", "error:")))]


def test_the_synthetic_message_names_the_model() -> None:
    fn = ScriptedStreamFn()
    agent = Agent(model=fn.model, stream_fn=lambda *a: (_ for _ in ()).throw(KeyError()))
    rec = Recorder(agent)
    run = agent.prompt("hi")
    synthetic = _assert_failed(agent, run, rec, "KeyError")
    assert (synthetic.api, synthetic.provider, synthetic.model) == (
        "scripted", "scripted", "scripted")


def test_a_raising_prepare_next_turn_restores_the_steering_it_never_delivered() -> None:
    gate = GateTool()
    gate.release("call_1").set()
    agent, fn = make_agent([assistant_tool_calls(("read", {}))], tools=[gate.tool])
    agent.subscribe(lambda e, s: e.type == "turn_end" and e.message.stop_reason == "toolUse"
                    and (agent.steer("s1"), agent.steer("s2")))  # type: ignore[union-attr]

    def prepare_next_turn(ctx: Any, signal: AbortSignal) -> None:
        raise RuntimeError("compaction failed")

    agent.prepare_next_turn = prepare_next_turn
    rec = Recorder(agent)
    run = agent.prompt("go")
    _assert_failed(agent, run, rec, "RuntimeError: compaction failed")
    agent.steering_mode = "all"
    assert [label(m)[1] for m in agent.peek_queued_messages()] == ["s1", "s2"]


def test_queued_prompts_are_recorded_even_when_a_listener_fails_on_one() -> None:
    agent, fn = make_agent([assistant_text("never")], messages=[user("q"), assistant_text("a")])

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_start" and label(event.message) == ("user", "s2"):  # type: ignore[union-attr]
            raise RuntimeError("ui crashed")

    rec = Recorder(agent)
    agent.subscribe(listener)
    agent.steering_mode = "all"
    for text in ("s1", "s2", "s3"):
        agent.steer(text)
    run = agent.continue_(timeout=WAIT)  # the assistant tail: the steering is run as a prompt
    _assert_failed(agent, run, rec, "RuntimeError: ui crashed")
    # the prompts are recorded as after an agent_start failure: s2 (its start failed, its
    # end is still sent) and s3 reach the transcript once each, so nothing is queued again
    assert labels(run.messages) == [("user", "s1"), ("user", "s2"), ("user", "s3"),
                                    ("assistant", "error:")]
    assert agent.peek_queued_messages() == []
    assert fn.call_count == 0


def test_a_listener_raising_during_parallel_tools_waits_for_the_running_tools() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {"path": "a"}), ("read", {"path": "b"})),
                            assistant_text("never")], tools=[gate.tool])
    raised = threading.Event()
    a_done_at_end: list[bool] = []

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "tool_execution_end" and event.tool_call_id == "call_2":  # type: ignore[union-attr]
            raised.set()
            raise RuntimeError("ui crashed")
        if event.type == "agent_end":
            a_done_at_end.append(gate.finished("call_1").is_set())

    rec = Recorder(agent)
    agent.subscribe(listener)
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT) and gate.started("call_2").wait(WAIT)
    gate.release("call_2").set()
    assert raised.wait(WAIT)
    assert not run.done  # the run waits for call_1
    assert agent.state.is_streaming
    gate.release("call_1").set()
    assert run.wait(WAIT)
    assert a_done_at_end == [True]
    _assert_failed(agent, run, rec, "RuntimeError: ui crashed")
    assert summary(rec.events)[7:] == [
        ("tool_execution_start", "call_1"), ("tool_execution_start", "call_2"),
        ("tool_execution_end", "call_2"),
        ("tool_execution_end", "call_1"),  # the running sibling still ends, as pi's does
        # both calls ran: their results are recorded, in source order, before the failure
        ("message_start", "toolResult", "call_1:a:ok"), ("message_end", "toolResult", "call_1:a:ok"),
        ("message_start", "toolResult", "call_2:b:ok"), ("message_end", "toolResult", "call_2:b:ok"),
        *_failure_tail(),
        ("agent_end", (("user", "go"), ("assistant", "toolUse:call:call_1|call:call_2"),
                       ("toolResult", "call_1:a:ok"), ("toolResult", "call_2:b:ok"),
                       ("assistant", "error:")))]
    assert [m.role for m in agent.state.messages] == [
        "system", "user", "assistant", "toolResult", "toolResult", "assistant"]
    assert fn.call_count == 1
    assert agent.state.pending_tool_calls == frozenset()
    assert piagent_threads() == []


def test_the_agent_works_again_after_a_failed_run() -> None:
    agent, fn = make_agent([assistant_text("ok")])
    agent.convert_to_llm = lambda messages: 1 / 0  # type: ignore[assignment,return-value]
    agent.prompt("hi")
    assert agent.state.error_message == "ZeroDivisionError: division by zero"
    from piagent.agent import default_convert_to_llm

    agent.convert_to_llm = default_convert_to_llm
    run = agent.prompt("again")
    assert run.error_message is None and agent.state.error_message is None
    assert labels(non_system(agent.state.messages)) == [
        ("user", "hi"), ("assistant", "error:"), ("user", "again"), ("assistant", "stop:ok")]


# --- one agent, many threads ----------------------------------------------------------


def test_concurrent_prompts_run_exactly_one_the_others_are_busy() -> None:
    release = threading.Event()
    entered = threading.Event()

    def respond(context: Context, options: StreamOptions) -> AssistantMessage:
        entered.set()
        assert release.wait(WAIT)
        return assistant_text("the winner")

    agent, fn = make_agent([respond, respond])
    n = 16
    barrier = threading.Barrier(n, timeout=WAIT)
    lock = threading.Lock()
    outcomes: list[Any] = []
    busy_count = [0]
    all_busy = threading.Event()

    def caller(i: int) -> None:
        barrier.wait()
        try:
            run = agent.prompt(f"prompt {i}")
        except AgentBusyError as exc:
            with lock:
                outcomes.append(str(exc))
                busy_count[0] += 1
                if busy_count[0] == n - 1:
                    all_busy.set()
        else:
            with lock:
                outcomes.append(run)

    threads = [threading.Thread(target=caller, args=(i,), name=f"caller-{i}") for i in range(n)]
    for thread in threads:
        thread.start()
    assert all_busy.wait(WAIT)  # every other caller was refused while the winner runs
    assert entered.wait(WAIT)
    release.set()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    runs = [o for o in outcomes if not isinstance(o, str)]
    assert len(runs) == 1 and len(outcomes) == n
    assert [o for o in outcomes if isinstance(o, str)] == [BUSY_PROMPT] * (n - 1)
    assert fn.call_count == 1
    assert [label(m)[0] for m in non_system(agent.state.messages)] == ["user", "assistant"]
    assert label(agent.state.messages[-1]) == ("assistant", "stop:the winner")


def test_threads_steer_follow_up_and_read_state_while_a_run_goes_on() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("r2"),
                            assistant_text("r3")], tools=[gate.tool], steering_mode="all",
                           follow_up_mode="all")
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    barrier = threading.Barrier(8, timeout=WAIT)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            for j in range(20):
                (agent.steer if i % 2 else agent.follow_up)(f"w{i}-{j}")
                assert agent.state.is_streaming
                assert agent.has_queued_messages()
                list(agent.state.messages)
                agent.peek_queued_messages()
                with pytest.raises(AgentBusyError):
                    agent.continue_()
        except BaseException as exc:  # reported below, on the test thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), name=f"worker-{i}") for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert errors == []
    gate.release("call_1").set()
    assert run.wait(WAIT)
    texts = [label(m)[1] for m in run.messages]
    steered = [t for t in texts[3:texts.index("stop:r2")]]
    followed = [t for t in texts[texts.index("stop:r2") + 1:texts.index("stop:r3")]]
    assert sorted(steered) == sorted(f"w{i}-{j}" for i in range(1, 8, 2) for j in range(20))
    assert sorted(followed) == sorted(f"w{i}-{j}" for i in range(0, 8, 2) for j in range(20))
    for i in range(8):
        mine = [t for t in steered + followed if t.startswith(f"w{i}-")]
        assert mine == [f"w{i}-{j}" for j in range(20)]


def test_thread_count_is_back_to_baseline_after_each_kind_of_run() -> None:
    baseline = threading.active_count()
    gate = GateTool()
    for call_id in ("call_1", "call_2"):
        gate.release(call_id).set()
    two_reads = assistant_tool_calls(("read", {"path": "a"}), ("read", {"path": "b"}))
    agent, fn = make_agent([two_reads, assistant_text("one"), assistant_text("two"),
                            assistant_error("boom"), two_reads], tools=[gate.tool])
    agent.prompt("parallel")
    assert threading.active_count() == baseline and piagent_threads() == []
    agent.tool_execution = "sequential"
    agent.steer("s")
    agent.continue_()
    assert threading.active_count() == baseline and piagent_threads() == []
    agent.prompt("error")
    assert threading.active_count() == baseline and piagent_threads() == []
    with agent.stream("streamed") as events:
        assert [e.type for e in events][-1] == "agent_end"
    assert threading.active_count() == baseline and piagent_threads() == []
    assert isinstance(agent.state.messages[0], SystemMessage)


def test_the_end_of_the_event_iteration_is_the_end_of_the_run() -> None:
    """Once ``stream()`` (or ``run.events()``) is exhausted, the run has settled.

    A race reproducer: a tiny switch interval makes the reader wake between the last event
    and the worker's exit, so a regression fails on nearly every run of this test.
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        late = 0
        for _ in range(300):
            agent, _ = make_agent([assistant_text("ok")])
            events = agent.stream("hi")
            for _event in events:
                pass
            if not events.run.done or piagent_threads():
                late += 1
            assert events.run.wait(WAIT)
    finally:
        sys.setswitchinterval(previous)
    assert late == 0


def test_waiting_from_several_threads_at_once() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("ok")],
                           tools=[gate.tool])
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    results: list[bool] = []
    lock = threading.Lock()
    ready = threading.Barrier(5, timeout=WAIT)

    def waiter(i: int) -> None:
        ready.wait()
        ok = run.wait(WAIT) if i % 2 else agent.wait_for_idle(WAIT)
        with lock:
            results.append(ok and run.done and not agent.state.is_streaming)

    threads = [threading.Thread(target=waiter, args=(i,), name=f"waiter-{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    ready.wait()
    gate.release("call_1").set()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert results == [True] * 4
    assert run.wait(0)


@pytest.mark.parametrize("execution", ["parallel", "sequential"])
def test_a_listener_failing_on_a_tool_result_keeps_every_executed_result(execution: str) -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {"path": "a"}), ("read", {"path": "b"})),
                            assistant_text("never")], tools=[gate.tool])
    agent.tool_execution = execution  # type: ignore[assignment]
    gate.release("call_1").set()
    gate.release("call_2").set()

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_end" and getattr(event.message, "role", "") == "toolResult":  # type: ignore[union-attr]
            raise RuntimeError("ui crashed")

    agent.subscribe(listener)
    run = agent.prompt("go")
    assert run.done and agent.state.error_message is not None
    assert "ui crashed" in agent.state.error_message
    results = [m for m in agent.state.messages if m.role == "toolResult"]
    expected = ["call_1"] if execution == "sequential" else ["call_1", "call_2"]
    assert [m.tool_call_id for m in results] == expected  # type: ignore[union-attr]
    assert piagent_threads() == []


def test_a_message_update_wakes_a_reader_waiting_for_the_next_event() -> None:
    # the emit path records a message_update itself: a reader blocked in stream() (off the
    # main thread, where waits are woken, not sliced) must be woken by it, not only by
    # whatever kind of event comes next
    from piagent import Model, TextContent
    from piagent.stream import (
        AssistantMessageEventStream,
        DoneEvent,
        StartEvent,
        TextDeltaEvent,
        TextEndEvent,
    )

    update_seen = threading.Event()  # set by the reader
    runs: list[Any] = []  # the reader's run, for the producer to see it waiting
    released: list[bool] = []
    producers: list[threading.Thread] = []
    model = Model(id="m", api="openai-completions", provider="local", base_url="http://x/v1")

    def stream_fn(model: Any, context: Context, options: StreamOptions | None
                  ) -> AssistantMessageEventStream:
        stream = AssistantMessageEventStream()
        message = AssistantMessage(content=[TextContent("")], api=model.api,
                                   provider=model.provider, model=model.id)

        def produce() -> None:
            stream.push(StartEvent(message))
            # the update only once the reader waits for the event after message_start
            wait_until(lambda: bool(runs) and runs[0]._record.readers == 1
                       and runs[0]._record.events[-1].type == "message_start",
                       "the reader to wait after the assistant's message_start",
                       wake=reader.join)
            message.content[0].text = "hel"  # type: ignore[union-attr]
            stream.push(TextDeltaEvent(0, "hel", message))
            released.append(update_seen.wait(WAIT))  # nothing more until the reader has it
            message.content[0].text = "hello"  # type: ignore[union-attr]
            stream.push(TextEndEvent(0, "hello", message))
            stream.push(DoneEvent("stop", message))

        producer = threading.Thread(target=produce, name="test-producer")
        producers.append(producer)
        producer.start()
        return stream

    agent = Agent(model=model, stream_fn=stream_fn)

    def read() -> None:
        with agent.stream("hi") as events:
            runs.append(events.run)
            for event in events:
                if event.type == "message_update" and not update_seen.is_set():
                    update_seen.set()

    reader = threading.Thread(target=read, name="test-reader")
    reader.start()
    reader.join(2 * WAIT)
    assert not reader.is_alive()
    for producer in producers:
        producer.join(WAIT)
    assert released == [True]  # the update reached the waiting reader while the model waited
    assert agent.state.messages[-1].content[0].text == "hello"  # type: ignore[union-attr]
