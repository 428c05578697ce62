"""``Agent`` basics: construction, the default ``convert_to_llm``, hooks as attributes, the
event reducer and ``AgentState``, listeners (order, signal, barrier, unsubscribe),
``prompt()`` input and return modes, ``continue_()``'s three branches, ``stream()``,
``AgentBusyError``, ``reset()``, ``abort()`` when idle, ``wait_for_idle`` and ``signal``.

Queues are in ``test_agent_queues.py``, aborts and Ctrl-C in ``test_agent_abort.py``,
failures, concurrency and the seed's 25-step trace in ``test_agent_threading.py``.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from piagent import (
    RUN_SETTLED,
    AbortSignal,
    Agent,
    AgentBusyError,
    AgentEvent,
    AgentRun,
    AssistantMessage,
    ImageContent,
    Model,
    SystemMessage,
    TextContent,
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
    reset_default_stream_fn,
    set_default_stream_fn,
)
from piagent.agent import default_convert_to_llm
from piagent.loop import PrepareRequestContext, RequestUpdate
from piagent.messages import now_ms
from piagent.stream import Context, StreamOptions
from piagent.testing import assistant_error, assistant_text, assistant_tool_calls
from tests.conftest import WAIT, Recorder, piagent_threads, user

from .conftest import (
    GateTool,
    label,
    labels,
    make_agent,
    non_system,
    quick_tool,
    summary,
)

BUSY_PROMPT = ("Agent is already processing a prompt. Use steer() or follow_up() to queue "
               "messages, or wait for completion.")
BUSY_CONTINUE = "Agent is already processing. Wait for completion before continuing."
BUSY_RESET = "Agent is already processing. Wait for completion before resetting."


pytestmark = pytest.mark.usefixtures("piagent_threads_back_to_baseline")


@dataclass
class Note:
    """An application message the model never sees."""

    text: str
    timestamp: int = field(default_factory=now_ms)
    role: ClassVar[str] = "note"


# --- construction ---------------------------------------------------------------------


def test_constructor_puts_the_system_prompt_and_tools_first_with_timestamp_zero() -> None:
    read = quick_tool("read")
    earlier = [user("hello"), assistant_text("hi")]
    agent = Agent(system_prompt="You are helpful.", tools=[read], messages=earlier)
    head, *rest = agent.state.messages
    assert head == SystemMessage(content="You are helpful.", tools_added=[
        ToolDeclaration("read", "Returns at once.", {"type": "object", "properties": {}})],
        timestamp=0)
    assert rest == earlier
    assert agent.state.system_prompt == "You are helpful."
    assert agent.state.tools == [read]


def test_constructor_keeps_a_transcript_that_already_starts_with_a_system_message() -> None:
    existing = [SystemMessage(content="Old prompt.", timestamp=5), user("hello")]
    agent = Agent(system_prompt="New prompt.", tools=[quick_tool()], messages=existing)
    assert agent.state.messages == existing
    assert agent.state.system_prompt == "Old prompt."


def test_constructor_adds_no_system_message_without_prompt_or_tools() -> None:
    agent = Agent(messages=[user("hello")])
    assert labels(agent.state.messages) == [("user", "hello")]
    assert Agent().state.messages == []
    assert Agent(system_prompt="Be brief.").state.messages == [
        SystemMessage(content="Be brief.", timestamp=0)]


def test_constructor_copies_the_given_lists() -> None:
    tools = [quick_tool()]
    messages: list[Any] = [user("hello")]
    agent = Agent(tools=tools, messages=messages)
    tools.append(quick_tool("other"))
    messages.append(user("later"))
    assert [t.name for t in agent.state.tools] == ["noop"]
    assert labels(non_system(agent.state.messages)) == [("user", "hello")]


def test_constructor_defaults() -> None:
    agent = Agent()
    assert agent.steering_mode == "one-at-a-time"
    assert agent.follow_up_mode == "one-at-a-time"
    assert agent.tool_execution == "parallel"
    assert agent.state.thinking_level == "off"
    assert agent.state.model is None
    assert agent.state.is_streaming is False
    assert agent.state.streaming_message is None
    assert agent.state.pending_tool_calls == frozenset()
    assert agent.state.error_message is None
    assert agent.signal is None
    assert agent.convert_to_llm is default_convert_to_llm


def test_constructor_rejects_an_unknown_queue_mode() -> None:
    with pytest.raises(ValueError, match="steering_mode must be 'one-at-a-time' or 'all'"):
        Agent(steering_mode="some")  # type: ignore[arg-type]
    agent = Agent()
    with pytest.raises(ValueError, match="follow_up_mode"):
        agent.follow_up_mode = "batch"  # type: ignore[assignment]
    assert agent.follow_up_mode == "one-at-a-time"


# --- convert_to_llm and hooks ---------------------------------------------------------


def test_default_convert_to_llm_keeps_the_four_llm_roles_and_drops_custom_ones() -> None:
    system = SystemMessage(content="s")
    question = user("q")
    answer = assistant_text("a")
    result = ToolResultMessage(tool_call_id="c", tool_name="t", content=[TextContent("r")])
    note = Note("n")
    assert default_convert_to_llm([system, note, question, answer, result, note]) == [
        system, question, answer, result]


def test_default_convert_to_llm_returns_a_new_list_whatever_it_is_given() -> None:
    transcript = [SystemMessage(content="s"), user("q"), assistant_text("a")]
    kept = default_convert_to_llm(transcript)  # every message kept: the quick path
    assert kept == transcript and kept is not transcript
    kept.append(user("later"))
    assert len(transcript) == 3  # the hook's answer is its own list
    # a tuple or a generator is read once, as before
    assert default_convert_to_llm(tuple(transcript)) == transcript  # type: ignore[arg-type]
    assert default_convert_to_llm(m for m in [*transcript, Note("n")]) == transcript  # type: ignore[arg-type]


def test_the_model_never_sees_custom_messages_by_default() -> None:
    agent, fn = make_agent([assistant_text("ok")], system_prompt="S",
                           messages=[Note("private"), user("earlier")])
    agent.prompt("now")
    assert labels(fn.calls[0].context.messages) == [
        ("system", "S"), ("user", "earlier"), ("user", "now")]
    assert isinstance(agent.state.messages[1], Note)  # still in the transcript


def test_hooks_are_public_attributes_replaced_between_runs() -> None:
    calls: list[str] = []
    agent, fn = make_agent([assistant_text("one"), assistant_text("two"),
                            assistant_text("three")])

    def first_transform(messages: list[Any], signal: AbortSignal) -> list[Any]:
        calls.append("first")
        return messages

    def second_transform(messages: list[Any], signal: AbortSignal) -> list[Any]:
        calls.append("second")
        return [*messages, user("added by the hook")]

    agent.transform_context = first_transform
    agent.prompt("a")
    agent.transform_context = second_transform
    previous = agent.convert_to_llm
    agent.convert_to_llm = lambda messages: [m for m in previous(messages)
                                             if m.role != "assistant"]
    agent.prompt("b")
    agent.transform_context = None
    agent.convert_to_llm = default_convert_to_llm

    other = make_agent([assistant_text("from the other fn")])[1]
    agent.stream_fn = other
    agent.prompt("c")

    assert calls == ["first", "second"]
    assert labels(fn.calls[1].context.messages) == [
        ("user", "a"), ("user", "b"), ("user", "added by the hook")]
    assert fn.call_count == 2 and other.call_count == 1
    assert labels(other.calls[0].context.messages)[-1] == ("user", "c")
    assert label(agent.state.messages[-1]) == ("assistant", "stop:from the other fn")


def test_options_are_forwarded_to_the_stream_function() -> None:
    agent, fn = make_agent([assistant_text("ok")], thinking_level="high", session_id="sess-1",
                           max_tokens=100, temperature=0.5, api_key="key-1")
    agent.prompt("hi")
    options = fn.calls[0].options
    assert (options.reasoning, options.session_id, options.max_tokens, options.temperature,
            options.api_key) == ("high", "sess-1", 100, 0.5, "key-1")
    assert options.signal is not None and options.signal.aborted is False
    assert fn.calls[0].model is fn.model
    assert agent.state.messages[-1].thinking_level == "high"  # type: ignore[union-attr]


def test_prepare_request_and_the_model_are_read_when_a_run_starts() -> None:
    agent, fn = make_agent([assistant_text("one"), assistant_text("two")])
    seen: list[Any] = []

    def prepare_request(ctx: PrepareRequestContext, signal: AbortSignal) -> RequestUpdate | None:
        seen.append(ctx.model)
        return None

    agent.prepare_request = prepare_request
    agent.prompt("a")
    other = Model(id="other", api="scripted", provider="scripted",
                  base_url="https://example.invalid")
    agent.state.model = other
    agent.prompt("b")
    assert seen == [fn.model, other]
    assert [c.model for c in fn.calls] == [fn.model, other]


def test_state_changed_during_a_run_applies_from_the_next_run() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("same run"),
                            assistant_text("next run")], tools=[gate.tool])
    other = Model(id="other", api="scripted", provider="scripted",
                  base_url="https://example.invalid")
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    agent.state.tools = []
    agent.state.model = other
    agent.state.thinking_level = "high"
    gate.release("call_1").set()
    assert run.wait(WAIT)
    agent.prompt("again")
    assert [c.model for c in fn.calls] == [fn.model, fn.model, other]
    assert [c.options.reasoning for c in fn.calls] == [None, None, "high"]
    removals = [[m.tools_removed for m in c.context.messages if isinstance(m, SystemMessage)
                 and m.tools_removed] for c in fn.calls]
    assert removals == [[], [], [["read"]]]


def test_two_readers_of_one_run_each_get_every_event() -> None:
    gate = GateTool()
    agent, _ = make_agent([assistant_tool_calls(("read", {})), assistant_text("ok")],
                          tools=[gate.tool])
    run = agent.prompt("go", block=False)
    seen: dict[str, list[str]] = {}

    def read(name: str) -> None:
        seen[name] = [e.type for e in run.events()]

    readers = [threading.Thread(target=read, args=(n,), name=f"reader-{n}") for n in "ab"]
    for reader in readers:
        reader.start()
    assert gate.started("call_1").wait(WAIT)
    gate.release("call_1").set()
    for reader in readers:
        reader.join(WAIT)
        assert not reader.is_alive()
    assert run.done
    assert seen["a"] == seen["b"] == [e.type for e in run.events()]
    assert seen["a"][0] == "agent_start" and seen["a"][-1] == "agent_end"


# --- the reducer and AgentState -------------------------------------------------------


def test_message_end_appends_to_the_transcript_before_listeners_run() -> None:
    agent, _ = make_agent([assistant_text("hello there")])
    rec = Recorder(agent)
    agent.prompt("hi")
    for seen in rec.seen:
        event = seen.event
        if event.type == "message_start":
            assert all(m is not event.message for m in seen.messages)  # type: ignore[union-attr]
        if event.type == "message_end":
            assert seen.messages[-1] is event.message  # type: ignore[union-attr]
    assert labels(agent.state.messages) == [("user", "hi"), ("assistant", "stop:hello there")]


def test_streaming_message_follows_message_start_update_and_end() -> None:
    agent, _ = make_agent([assistant_text("one two three four five six seven")])
    rec = Recorder(agent)
    agent.prompt("hi")
    streaming = [(s.event.type, s.streaming is not None and label(s.streaming)[0])
                 for s in rec.seen]
    # while the assistant message streams, state.streaming_message is the event's message
    for seen in rec.seen:
        if seen.event.type in ("message_start", "message_update"):
            assert seen.streaming is seen.event.message  # type: ignore[union-attr]
        else:
            assert seen.streaming is None
    updates = [s for s in streaming if s[0] == "message_update"]
    assert len(updates) >= 3
    assert agent.state.streaming_message is None
    assert [s.is_streaming for s in rec.seen] == [True] * len(rec.seen)
    assert agent.state.is_streaming is False


def test_pending_tool_calls_is_a_new_frozenset_per_change() -> None:
    gate = GateTool()
    agent, _ = make_agent([assistant_tool_calls(("read", {"path": "a"}), ("read", {"path": "b"})),
                           assistant_text("done")], tools=[gate.tool])
    rec = Recorder(agent)
    b_ended = threading.Event()
    agent.subscribe(lambda e, s: e.type == "tool_execution_end" and b_ended.set())
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT) and gate.started("call_2").wait(WAIT)
    gate.release("call_2").set()
    assert b_ended.wait(WAIT)
    gate.release("call_1").set()
    assert run.wait(WAIT)
    changes = [(s.event.type, s.pending) for s in rec.seen if s.event.type.startswith("tool_")]
    assert [(kind, sorted(p)) for kind, p in changes] == [
        ("tool_execution_start", ["call_1"]),
        ("tool_execution_start", ["call_1", "call_2"]),
        ("tool_execution_end", ["call_1"]),
        ("tool_execution_end", []),
    ]
    sets = [p for _, p in changes]
    assert all(isinstance(p, frozenset) for p in sets)
    assert len({id(p) for p in sets}) == len(sets)  # a new object for each change
    assert sorted(sets[1]) == ["call_1", "call_2"]  # a snapshot a listener kept never changes
    assert agent.state.pending_tool_calls == frozenset()


def test_error_message_comes_from_turn_end_and_clears_when_a_run_starts() -> None:
    agent, fn = make_agent([assistant_error("rate limited"), assistant_text("fine")])
    rec = Recorder(agent)
    run = agent.prompt("hi")
    assert run.error_message == "rate limited"
    assert agent.state.error_message == "rate limited"
    rec.unsubscribe()
    seen_error: list[str | None] = []
    agent.subscribe(lambda event, signal: seen_error.append(agent.state.error_message))
    run = agent.prompt("again")
    assert run.error_message is None
    assert seen_error == [None] * len(seen_error)  # cleared when the run started
    assert agent.state.error_message is None
    assert fn.call_count == 2


def test_error_message_is_set_by_the_turn_end_reducer() -> None:
    agent, _ = make_agent([assistant_error("rate limited")])
    observed: list[tuple[str, str | None]] = []
    agent.subscribe(lambda e, s: observed.append((e.type, agent.state.error_message)))
    agent.prompt("hi")
    before_turn_end = [err for kind, err in observed[:observed.index(("turn_end", "rate limited"))]]
    assert before_turn_end == [None] * len(before_turn_end)
    assert observed[-2:] == [("turn_end", "rate limited"), ("agent_end", "rate limited")]


def test_messages_and_tools_assignment_copies_the_list() -> None:
    agent = Agent()
    messages: list[Any] = [user("a")]
    agent.state.messages = messages
    messages.append(user("b"))
    assert agent.state.messages is not messages
    assert labels(agent.state.messages) == [("user", "a")]
    agent.state.messages.append(user("c"))  # the getter is the live list
    assert labels(agent.state.messages) == [("user", "a"), ("user", "c")]

    tools = [quick_tool("x")]
    agent.state.tools = tools
    tools.append(quick_tool("y"))
    assert agent.state.tools is not tools
    assert [t.name for t in agent.state.tools] == ["x"]
    agent.state.tools = (t for t in [quick_tool("z")])  # any iterable
    assert [t.name for t in agent.state.tools] == ["z"]


def test_system_prompt_is_replayed_from_the_transcript_and_read_only() -> None:
    agent = Agent(system_prompt="Base.")
    agent.state.messages.append(SystemMessage(content="More.", timestamp=1))
    assert agent.state.system_prompt == "Base.\n\nMore."
    agent.state.messages.append(SystemMessage(sections={"style": "Be terse."}, timestamp=2))
    assert agent.state.system_prompt == "Base.\n\nMore.\n\nBe terse."
    with pytest.raises(AttributeError):
        agent.state.system_prompt = "x"  # type: ignore[misc]


def test_a_tools_change_between_runs_is_declared_to_the_model() -> None:
    agent, fn = make_agent([assistant_text("one"), assistant_text("two")],
                           system_prompt="S", tools=[quick_tool("first")])
    agent.prompt("a")
    agent.state.tools = [quick_tool("second")]
    agent.prompt("b")
    declared = [m for m in fn.calls[1].context.messages if isinstance(m, SystemMessage)]
    assert [([t.name for t in m.tools_added or []], m.tools_removed) for m in declared] == [
        (["first"], None), (["second"], ["first"])]
    assert agent.state.messages[0].tools_added[0].name == "first"  # type: ignore[union-attr]


# --- listeners ------------------------------------------------------------------------


def test_listeners_run_in_subscription_order_with_the_runs_signal() -> None:
    agent, _ = make_agent([assistant_text("ok")])
    order: list[tuple[str, str]] = []
    signals: list[AbortSignal] = []
    agent_signals: list[Any] = []

    def make(name: str) -> Any:
        def listener(event: AgentEvent, signal: AbortSignal) -> None:
            order.append((name, event.type))
            signals.append(signal)
            agent_signals.append(agent.signal)
        return listener

    for name in ("a", "b", "c"):
        agent.subscribe(make(name))
    run = agent.prompt("hi")
    types = [e.type for e in run.events()]
    assert order == [(name, t) for t in types for name in ("a", "b", "c")]
    assert all(s is run.signal for s in signals)
    assert all(s is run.signal for s in agent_signals)
    assert agent.signal is None


def test_each_run_gets_a_new_signal() -> None:
    agent, _ = make_agent([assistant_text("one"), assistant_text("two")])
    first, second = agent.prompt("a"), agent.prompt("b")
    assert first.signal is not second.signal
    assert not first.signal.aborted and not second.signal.aborted


def test_a_listener_is_a_barrier_for_the_loop() -> None:
    log: list[str] = []

    def respond(context: Context, options: StreamOptions) -> AssistantMessage:
        log.append("model called")
        return assistant_text("ok")

    agent, _ = make_agent([respond])

    def slow_listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "message_end" and event.message.role == "user":  # type: ignore[union-attr]
            log.append("listener entered")
            done = threading.Event()
            helper = threading.Thread(target=done.set, name="helper")
            helper.start()
            assert done.wait(WAIT)  # the listener blocks on another thread's work
            helper.join(WAIT)
            log.append("listener left")

    agent.subscribe(slow_listener)
    agent.prompt("hi")
    assert log == ["listener entered", "listener left", "model called"]


def test_a_tool_start_listener_reads_the_assistant_message_from_state() -> None:
    gate = GateTool()
    gate.release("call_1").set()
    agent, _ = make_agent([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")],
                          tools=[gate.tool])
    tails: list[tuple[str, str]] = []

    def listener(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "tool_execution_start":
            tails.append(label(agent.state.messages[-1]))

    agent.subscribe(listener)
    agent.prompt("go")
    assert tails == [("assistant", "toolUse:call:call_1")]


def test_unsubscribe_stops_events_and_is_idempotent() -> None:
    agent, _ = make_agent([assistant_text("one"), assistant_text("two")])
    rec = Recorder(agent)
    other = Recorder(agent)
    agent.prompt("a")
    count = len(rec.events)
    rec.unsubscribe()
    rec.unsubscribe()
    agent.prompt("b")
    assert len(rec.events) == count
    assert len(other.events) == 2 * count


def test_a_listener_can_unsubscribe_itself_from_inside() -> None:
    agent, _ = make_agent([assistant_text("one")])
    got: list[str] = []
    unsubscribe: list[Any] = []

    def once(event: AgentEvent, signal: AbortSignal) -> None:
        got.append(event.type)
        unsubscribe[0]()

    unsubscribe.append(agent.subscribe(once))
    after = Recorder(agent)
    run = agent.prompt("hi")
    assert got == ["agent_start"]
    assert after.types() == [e.type for e in run.events()]  # the next listener missed nothing


def test_a_listener_can_unsubscribe_a_later_listener_from_inside() -> None:
    agent, _ = make_agent([assistant_text("one")])
    later: list[str] = []
    unsubscribe_later: list[Any] = []

    def first(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "turn_start":
            unsubscribe_later[0]()

    agent.subscribe(first)
    unsubscribe_later.append(agent.subscribe(lambda e, s: later.append(e.type)))
    agent.prompt("hi")
    # the listeners of an event are fixed when it is emitted; later events skip it
    assert later == ["agent_start", "turn_start"]


def test_a_listener_can_subscribe_another_listener_from_inside() -> None:
    agent, _ = make_agent([assistant_text("one")])
    late_events: list[str] = []

    def subscriber(event: AgentEvent, signal: AbortSignal) -> None:
        if event.type == "turn_start":
            agent.subscribe(lambda e, s: late_events.append(e.type))

    agent.subscribe(subscriber)
    run = agent.prompt("hi")
    types = [e.type for e in run.events()]
    assert late_events == types[types.index("turn_start") + 1:]


# --- prompt() -------------------------------------------------------------------------


def test_prompt_str_with_images_becomes_one_user_message() -> None:
    agent, fn = make_agent([assistant_text("a cat")])
    image = ImageContent(data="aGVsbG8=", mime_type="image/png")
    run = agent.prompt("What is this?", [image])
    prompt = run.messages[0]
    assert isinstance(prompt, UserMessage)
    assert prompt.content == [TextContent("What is this?"), image]
    assert fn.calls[0].context.messages == [prompt]


def test_prompt_accepts_a_message_or_a_list_of_messages() -> None:
    agent, fn = make_agent([assistant_text("one"), assistant_text("two")])
    single = user("single")
    run = agent.prompt(single)
    assert run.messages[0] is single
    pair = [user("first"), Note("aside")]
    run = agent.prompt(pair)
    assert run.messages[:2] == pair
    assert labels(run.messages) == [("user", "first"), ("note", ""), ("assistant", "stop:two")]
    assert labels(fn.calls[1].context.messages)[-1] == ("user", "first")
    assert labels(non_system(agent.state.messages)) == [
        ("user", "single"), ("assistant", "stop:one"),
        ("user", "first"), ("note", ""), ("assistant", "stop:two")]


def test_prompt_returns_a_settled_run_by_default() -> None:
    agent, _ = make_agent([assistant_text("hello")])
    rec = Recorder(agent)
    run = agent.prompt("hi")
    assert isinstance(run, AgentRun)
    assert run.done and run.wait(0) and agent.wait_for_idle(0)
    assert labels(run.messages) == [("user", "hi"), ("assistant", "stop:hello")]
    assert run.error_message is None
    assert list(run.events()) == rec.events
    assert summary(run.events()) == [
        ("agent_start",), ("turn_start",),
        ("message_start", "user", "hi"), ("message_end", "user", "hi"),
        ("message_start", "assistant"), ("message_update*", "assistant"),
        ("message_end", "assistant", "stop:hello"),
        ("turn_end", "assistant", "stop:hello", ()),
        ("agent_end", (("user", "hi"), ("assistant", "stop:hello"))),
    ]
    assert rec.events[-1].messages == run.messages  # type: ignore[attr-defined]


def test_prompt_non_blocking_returns_at_once_and_events_stream_live() -> None:
    gate = GateTool()
    agent, _ = make_agent([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")],
                          tools=[gate.tool])
    run = agent.prompt("go", block=False)
    assert not run.done
    assert agent.state.is_streaming
    seen: list[str] = []
    for event in run.events():
        seen.append(event.type)
        if event.type == "tool_execution_start":
            assert gate.started("call_1").wait(WAIT)
            assert not run.done and not gate.finished("call_1").is_set()
            gate.release("call_1").set()
    assert seen[-1] == "agent_end"
    assert run.wait(WAIT) and run.done
    assert not agent.state.is_streaming
    assert labels(run.messages) == [("user", "go"), ("assistant", "toolUse:call:call_1"),
                                    ("toolResult", "call_1:a:ok"), ("assistant", "stop:ok")]
    assert list(run.events()) == [e for e in run.events()]  # replayable after the end


def test_run_wait_with_a_timeout_returns_false_while_running() -> None:
    gate = GateTool()
    agent, _ = make_agent([assistant_tool_calls(("read", {})), assistant_text("ok")],
                          tools=[gate.tool])
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    assert run.wait(0.01) is False
    assert agent.wait_for_idle(0.01) is False
    gate.release("call_1").set()
    assert agent.wait_for_idle(WAIT) is True
    assert run.done and agent.wait_for_idle() is True


def test_prompt_timeout_aborts_the_run_and_raises_timeout_error() -> None:
    gate = GateTool(until_abort=True)
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("never")],
                           tools=[gate.tool])
    rec = Recorder(agent)
    with pytest.raises(TimeoutError, match="did not finish within 0.2 seconds"):
        agent.prompt("go", timeout=0.2)
    assert gate.finished("call_1").is_set()
    assert not agent.state.is_streaming and agent.signal is None
    assert rec.seen[-1].signal.aborted
    assert summary(rec.events)[-6:] == [
        ("turn_end", "assistant", "toolUse:call:call_1", ("call_1",)),
        ("turn_start",),
        ("message_start", "assistant"),
        ("message_end", "assistant", "aborted:"),
        ("turn_end", "assistant", "aborted:", ()),
        ("agent_end", (("user", "go"), ("assistant", "toolUse:call:call_1"),
                       ("toolResult", "call_1:stopped"), ("assistant", "aborted:"))),
    ]
    assert labels(non_system(agent.state.messages)) == [
        ("user", "go"), ("assistant", "toolUse:call:call_1"),
        ("toolResult", "call_1:stopped"), ("assistant", "aborted:")]
    assert agent.state.error_message == "Operation aborted"
    assert fn.call_count == 1
    assert piagent_threads() == []


def test_continue_timeout_raises_timeout_error_too() -> None:
    gate = GateTool(until_abort=True)
    agent, _ = make_agent([assistant_tool_calls(("read", {}))], tools=[gate.tool],
                          messages=[user("go")])
    with pytest.raises(TimeoutError):
        agent.continue_(timeout=0.1)
    assert not agent.state.is_streaming
    assert label(agent.state.messages[-1]) == ("assistant", "aborted:")


# --- continue_() ----------------------------------------------------------------------


def test_continue_from_a_user_tail_continues_the_transcript() -> None:
    agent, fn = make_agent([assistant_text("answer")], messages=[user("question")])
    rec = Recorder(agent)
    run = agent.continue_()
    assert summary(rec.events) == [
        ("agent_start",), ("turn_start",),
        ("message_start", "assistant"), ("message_update*", "assistant"),
        ("message_end", "assistant", "stop:answer"),
        ("turn_end", "assistant", "stop:answer", ()),
        ("agent_end", (("assistant", "stop:answer"),)),
    ]
    assert labels(run.messages) == [("assistant", "stop:answer")]
    assert labels(fn.calls[0].context.messages) == [("user", "question")]
    # the loop worked on a copy: the transcript grew once, through the reducer
    assert labels(agent.state.messages) == [("user", "question"), ("assistant", "stop:answer")]


def test_continue_from_a_tool_result_tail_continues() -> None:
    call = assistant_tool_calls(("read", {}))
    result = ToolResultMessage(tool_call_id="call_1", tool_name="read",
                               content=[TextContent("data")])
    agent, fn = make_agent([assistant_text("used it")], messages=[user("q"), call, result])
    agent.continue_()
    assert labels(fn.calls[0].context.messages)[-1] == ("toolResult", "call_1:data")
    assert label(agent.state.messages[-1]) == ("assistant", "stop:used it")


def test_continue_from_a_user_tail_polls_steering_first_and_follow_ups_at_the_end() -> None:
    agent, fn = make_agent([assistant_text("one"), assistant_text("two")],
                           messages=[user("question")])
    agent.follow_up("later")
    agent.steer("now")
    agent.continue_()
    assert labels(fn.calls[0].context.messages) == [("user", "question"), ("user", "now")]
    assert labels(non_system(agent.state.messages)) == [
        ("user", "question"), ("user", "now"), ("assistant", "stop:one"),
        ("user", "later"), ("assistant", "stop:two")]


def test_continue_from_an_assistant_tail_runs_queued_steering_one_per_request() -> None:
    agent, fn = make_agent([assistant_text("r1"), assistant_text("r2"), assistant_text("r3")],
                           messages=[user("q"), assistant_text("a")])
    for text in ("s1", "s2", "s3"):
        agent.steer(text)
    rec = Recorder(agent)
    run = agent.continue_()
    assert labels(run.messages) == [
        ("user", "s1"), ("assistant", "stop:r1"), ("user", "s2"), ("assistant", "stop:r2"),
        ("user", "s3"), ("assistant", "stop:r3")]
    assert [labels(c.context.messages)[-1] for c in fn.calls] == [
        ("user", "s1"), ("user", "s2"), ("user", "s3")]
    assert summary(rec.events)[:4] == [("agent_start",), ("turn_start",),
                                       ("message_start", "user", "s1"),
                                       ("message_end", "user", "s1")]
    assert not agent.has_queued_messages()


def test_continue_from_an_assistant_tail_in_all_mode_sends_every_steering_message() -> None:
    agent, fn = make_agent([assistant_text("r1")], messages=[user("q"), assistant_text("a")],
                           steering_mode="all")
    agent.steer("s1")
    agent.steer("s2")
    agent.follow_up("f1")
    agent.follow_up_mode = "all"
    fn.add_response(assistant_text("r2"))
    agent.continue_()
    assert labels(non_system(agent.state.messages))[2:] == [
        ("user", "s1"), ("user", "s2"), ("assistant", "stop:r1"),
        ("user", "f1"), ("assistant", "stop:r2")]


def test_continue_from_an_assistant_tail_runs_follow_ups_when_no_steering() -> None:
    agent, fn = make_agent([assistant_text("r1"), assistant_text("r2")],
                           messages=[user("q"), assistant_text("a")])
    agent.follow_up("f1")
    agent.follow_up("f2")
    run = agent.continue_()
    assert labels(run.messages) == [("user", "f1"), ("assistant", "stop:r1"),
                                    ("user", "f2"), ("assistant", "stop:r2")]


def test_continue_from_an_assistant_tail_with_nothing_queued_raises() -> None:
    agent, fn = make_agent(messages=[user("q"), assistant_text("a")])
    rec = Recorder(agent)
    with pytest.raises(ValueError, match=r"^Cannot continue from message role: assistant$"):
        agent.continue_()
    assert rec.events == [] and fn.call_count == 0
    assert not agent.state.is_streaming and agent.signal is None


@pytest.mark.parametrize("messages", [[], [SystemMessage(content="s")],
                                      [SystemMessage(content="s"), SystemMessage(content="t")]])
def test_continue_with_no_conversation_raises_and_leaves_the_queues(messages: list[Any]) -> None:
    agent, fn = make_agent(messages=messages)
    agent.steer("s")
    agent.follow_up("f")
    with pytest.raises(ValueError, match=r"^No messages to continue from$"):
        agent.continue_()
    assert labels(agent.peek_queued_messages()) == [("user", "s")]
    assert [label(m) for m in agent.take_queued_messages(lambda m: True)] == [
        ("user", "s"), ("user", "f")]
    assert fn.call_count == 0 and not agent.state.is_streaming


def test_continue_from_a_system_prompt_only_agent_raises() -> None:
    agent = Agent(system_prompt="S", tools=[quick_tool()])
    with pytest.raises(ValueError, match="No messages to continue from"):
        agent.continue_()


# --- stream() -------------------------------------------------------------------------


def test_stream_yields_events_live() -> None:
    gate = GateTool()
    agent, _ = make_agent([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")],
                          tools=[gate.tool])
    rec = Recorder(agent)
    got: list[AgentEvent] = []
    with agent.stream("go") as events:
        for event in events:
            got.append(event)
            if event.type == "tool_execution_start":
                assert not gate.finished("call_1").is_set()
                gate.release("call_1").set()
    assert got == rec.events
    assert got[-1].type == "agent_end"
    assert label(agent.state.messages[-1]) == ("assistant", "stop:ok")
    assert events.run.done and not events.run.signal.aborted


def test_stream_closed_before_iterating_aborts_the_run() -> None:
    gate = GateTool(until_abort=True)
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("never")],
                           tools=[gate.tool])
    events = agent.stream("go")
    assert gate.started("call_1").wait(WAIT)
    events.close()
    assert events.run.done and events.run.signal.aborted
    assert not agent.state.is_streaming
    assert labels(non_system(agent.state.messages)) == [
        ("user", "go"), ("assistant", "toolUse:call:call_1"), ("toolResult", "call_1:stopped"),
        ("assistant", "aborted:")]
    assert fn.call_count == 1
    assert [e.type for e in events][-1] == "agent_end"  # the buffered events remain readable


def test_stream_left_early_with_closing_aborts_the_run() -> None:
    gate = GateTool(until_abort=True)
    agent, _ = make_agent([assistant_tool_calls(("read", {})), assistant_text("never")],
                          tools=[gate.tool])
    with contextlib.closing(agent.stream("go")) as events:
        for event in events:
            if event.type == "tool_execution_start":
                break
    assert events.run.done and events.run.signal.aborted
    assert not agent.state.is_streaming
    # the tool saw the abort, or never started: either way the batch has its result
    assert [label(m)[0] for m in non_system(agent.state.messages)] == [
        "user", "assistant", "toolResult", "assistant"]
    assert label(agent.state.messages[-1]) == ("assistant", "aborted:")


def test_stream_raises_busy_at_the_call() -> None:
    gate = GateTool()
    agent, _ = make_agent([assistant_tool_calls(("read", {})), assistant_text("ok")],
                          tools=[gate.tool])
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    with pytest.raises(AgentBusyError) as info:
        agent.stream("again")
    assert str(info.value) == BUSY_PROMPT
    gate.release("call_1").set()
    assert run.wait(WAIT)
    assert not run.signal.aborted


# --- busy, reset, abort, idle ---------------------------------------------------------


def test_busy_errors_while_running_carry_the_exact_messages() -> None:
    gate = GateTool()
    agent, fn = make_agent([assistant_tool_calls(("read", {})), assistant_text("ok")],
                           tools=[gate.tool])
    agent.follow_up("queued")
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    before = list(agent.state.messages)
    with pytest.raises(AgentBusyError) as prompt_error:
        agent.prompt("again")
    with pytest.raises(AgentBusyError) as continue_error:
        agent.continue_()
    with pytest.raises(AgentBusyError) as reset_error:
        agent.reset()
    assert (str(prompt_error.value), str(continue_error.value), str(reset_error.value)) == (
        BUSY_PROMPT, BUSY_CONTINUE, BUSY_RESET)
    assert isinstance(prompt_error.value, RuntimeError)
    assert agent.state.messages == before  # reset changed nothing
    assert agent.has_queued_messages()
    fn.add_response(assistant_text("follow-up answer"))
    gate.release("call_1").set()
    assert run.wait(WAIT)
    assert labels(run.messages)[-2:] == [("user", "queued"), ("assistant", "stop:follow-up answer")]


def test_reset_keeps_the_replayed_system_message_and_clears_everything_else() -> None:
    agent, _ = make_agent([assistant_error("boom")], system_prompt="Base.",
                          tools=[quick_tool("read")])
    agent.state.messages.append(SystemMessage(content="More.", timestamp=7))
    agent.prompt("hi")
    agent.steer("s")
    agent.follow_up("f")
    assert agent.state.error_message == "boom"
    agent.reset()
    assert agent.state.messages == [SystemMessage(
        content="Base.\n\nMore.", tools_added=[ToolDeclaration(
            "read", "Returns at once.", {"type": "object", "properties": {}})], timestamp=0)]
    assert agent.state.system_prompt == "Base.\n\nMore."
    assert agent.state.error_message is None
    assert agent.state.pending_tool_calls == frozenset()
    assert agent.state.streaming_message is None
    assert not agent.has_queued_messages()
    assert agent.peek_queued_messages() == []


def test_reset_without_system_messages_empties_the_transcript() -> None:
    agent, _ = make_agent([assistant_text("ok")])
    agent.prompt("hi")
    agent.reset()
    assert agent.state.messages == []


def test_abort_and_wait_for_idle_when_idle_do_nothing() -> None:
    agent, _ = make_agent([assistant_text("ok")])
    agent.abort()
    agent.abort("reason")
    assert agent.wait_for_idle() is True
    assert agent.wait_for_idle(0) is True
    assert agent.signal is None
    run = agent.prompt("hi")  # an earlier abort does not leak into the next run
    assert not run.signal.aborted
    assert label(run.messages[-1]) == ("assistant", "stop:ok")
    run.abort()  # aborting a finished run is harmless
    assert label(agent.state.messages[-1]) == ("assistant", "stop:ok")


def test_signal_is_the_active_runs_signal() -> None:
    gate = GateTool()
    agent, _ = make_agent([assistant_tool_calls(("read", {})), assistant_text("ok")],
                          tools=[gate.tool])
    run = agent.prompt("go", block=False)
    assert gate.started("call_1").wait(WAIT)
    assert agent.signal is run.signal
    gate.release("call_1").set()
    assert agent.wait_for_idle(WAIT)
    assert agent.signal is None


def test_the_default_stream_function_is_used_when_none_is_given() -> None:
    agent, fn = make_agent([assistant_text("from the default")])
    agent.stream_fn = None
    set_default_stream_fn(fn)
    try:
        agent.prompt("hi")
    finally:
        reset_default_stream_fn()
    assert fn.call_count == 1
    assert label(agent.state.messages[-1]) == ("assistant", "stop:from the default")


def test_a_missing_default_stream_function_fails_the_run_with_its_error() -> None:
    agent = Agent()
    set_default_stream_fn(None)
    try:
        run = agent.prompt("hi")
    finally:
        reset_default_stream_fn()
    assert run.error_message is not None and "No default stream function" in run.error_message
    assert label(agent.state.messages[-1]) == ("assistant", "error:")


def test_stream_poll_returns_none_while_nothing_happens_then_the_events() -> None:
    release = threading.Event()

    def wait_for_release(signal: Any) -> str:
        assert release.wait(WAIT)
        return "done"

    from piagent import tool as make_tool

    gate = make_tool(wait_for_release, name="gate", description="Wait.")
    agent, _ = make_agent([assistant_tool_calls(("gate", {})), assistant_text("end")],
                          tools=[gate])
    events = agent.stream("go")
    seen: list[str] = []
    while True:
        event = events.poll(0.01)
        if event is None:
            if not release.is_set():
                assert seen[-1] == "tool_execution_start"  # idle: the tool is waiting
                release.set()
            continue
        assert event is not RUN_SETTLED
        seen.append(event.type)
        if event.type == "agent_end":
            break
    assert events.poll(WAIT) is RUN_SETTLED  # the run settles right after agent_end
    assert events.poll(0.01) is RUN_SETTLED
    assert seen[0] == "agent_start" and "tool_execution_end" in seen
