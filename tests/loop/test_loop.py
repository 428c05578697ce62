"""The low-level loop, step by step: the seed's trace, hook order, scheduling and streams."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest

from piagent import (
    AbortSignal,
    AgentContext,
    AgentEvent,
    AgentLoopConfig,
    AgentLoopError,
    AgentLoopTurnUpdate,
    AgentToolResult,
    AgentTurnContext,
    AssistantMessage,
    AssistantMessageEventStream,
    Context,
    DoneEvent,
    Model,
    PrepareRequestContext,
    RequestUpdate,
    StartEvent,
    StreamOptions,
    SystemMessage,
    TextContent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    agent_loop,
    agent_loop_continue,
    run_agent_loop,
    run_agent_loop_continue,
)
from piagent.testing import ScriptedStreamFn, assistant_error, assistant_text, assistant_tool_calls
from tests.conftest import Recorder, user
from tests.tools.conftest import make_tool

from .conftest import context_for, make_config

pytestmark = pytest.mark.usefixtures("no_thread_leak")



# --- helpers ---------------------------------------------------------------------------


def row(event: Any) -> tuple[Any, ...]:
    """The key fields of an event, for whole-sequence comparisons."""
    kind = event.type
    if kind in ("message_start", "message_end"):
        message = event.message
        if message.role == "toolResult":
            return (kind, "toolResult", message.tool_call_id)
        return (kind, message.role)
    if kind.startswith("tool_execution_"):
        return (kind, event.tool_call_id)
    if kind == "turn_end":
        return (kind, tuple(r.tool_call_id for r in event.tool_results))
    if kind == "agent_end":
        return (kind, tuple(m.role for m in event.messages))
    return (kind,)


def rows(events: list[Any]) -> list[tuple[Any, ...]]:
    """``row`` of each event; a run of message_updates becomes one row of its kinds."""
    out: list[tuple[Any, ...]] = []
    for event in events:
        if event.type == "message_update":
            kind = event.assistant_message_event.type
            if out and out[-1][0] == "message_update":
                kinds = out[-1][1]
                if kinds[-1] != kind:
                    out[-1] = ("message_update", (*kinds, kind))
            else:
                out.append(("message_update", (kind,)))
        else:
            out.append(row(event))
    return out


def queue_getter(queue: list[Any]) -> Callable[[], list[Any]]:
    """A one-at-a-time queue drain, like the Agent's."""
    def drain() -> list[Any]:
        return [queue.pop(0)] if queue else []
    return drain


def texts(messages: list[Any]) -> list[str]:
    """A compact view of a request's transcript: role plus first text."""
    out = []
    for m in messages:
        if isinstance(m, ToolResultMessage):
            out.append(f"toolResult:{m.tool_call_id}")
        elif isinstance(m, UserMessage):
            content = m.content if isinstance(m.content, str) else m.content[0].text  # type: ignore[union-attr]
            out.append(f"user:{content}")
        elif isinstance(m, AssistantMessage):
            out.append(f"assistant:{m.stop_reason}")
        else:
            out.append(m.role)
    return out


# --- the seed's 25-step trace -----------------------------------------------------------


def test_trace_matches_the_seed_event_by_event() -> None:
    """Two parallel reads, b finishing first, a steer queued while both run."""
    b_ended = threading.Event()
    steer = user("Only summarise a.txt")
    steering: list[Any] = []

    def read(tool_call_id: str, params: Any, signal: AbortSignal,
             on_update: Callable[[Any], None]) -> AgentToolResult:
        if params["path"] == "a.txt":
            assert b_ended.wait(5)
        else:
            steering.append(steer)  # the user types while both tools run
        return AgentToolResult(content=[TextContent(f"contents of {params['path']}")])

    def listener(event: AgentEvent) -> None:
        if event.type == "tool_execution_end" and event.tool_call_id == "call_2":
            b_ended.set()

    tool = make_tool(execute=read)
    context = context_for(tool)
    fn = ScriptedStreamFn([
        assistant_tool_calls(("read", {"path": "a.txt"}), ("read", {"path": "b.txt"})),
        assistant_text("a.txt says hello"),
    ])
    rec = Recorder(on_event=listener)
    prompt = user("Read a.txt and b.txt, then summarise")

    result = run_agent_loop([prompt], context, make_config(
        fn, get_steering_messages=queue_getter(steering)), rec, stream_fn=fn)

    assert rows(rec.events) == [
        ("agent_start",),                                                  # 1
        ("turn_start",),                                                   # 2
        ("message_start", "user"), ("message_end", "user"),                # 3, 4
        ("message_start", "assistant"),                                    # 5
        ("message_update", ("toolcall_start", "toolcall_delta", "toolcall_end",
                            "toolcall_start", "toolcall_delta", "toolcall_end")),  # 6, 7
        ("message_end", "assistant"),                                      # 8
        ("tool_execution_start", "call_1"), ("tool_execution_start", "call_2"),  # 9, 10
        ("tool_execution_end", "call_2"), ("tool_execution_end", "call_1"),      # 11, 12
        ("message_start", "toolResult", "call_1"), ("message_end", "toolResult", "call_1"),
        ("message_start", "toolResult", "call_2"), ("message_end", "toolResult", "call_2"),
        ("turn_end", ("call_1", "call_2")),                                # 17
        ("turn_start",),                                                   # 18
        ("message_start", "user"), ("message_end", "user"),                # 19, 20
        ("message_start", "assistant"),                                    # 21
        ("message_update", ("text_start", "text_delta", "text_end")),      # 22
        ("message_end", "assistant"),                                      # 23
        ("turn_end", ()),                                                  # 24
        ("agent_end", ("user", "assistant", "toolResult", "toolResult", "user", "assistant")),
    ]
    ends = [e.message for e in rec.of("message_end")]
    agent_end = rec.of("agent_end")[0]
    assert agent_end.messages == ends and all(a is b for a, b in zip(agent_end.messages, ends, strict=True))
    assert result == agent_end.messages
    assert ends[0] is prompt and ends[4] is steer
    assert [m.stop_reason for m in ends if isinstance(m, AssistantMessage)] == ["toolUse", "stop"]
    assert [m.content[0].text for m in ends if isinstance(m, ToolResultMessage)] == [
        "contents of a.txt", "contents of b.txt"]
    turn_1_end = rec.of("turn_end")[0]
    assert turn_1_end.message is ends[1] and turn_1_end.tool_results == ends[2:4]
    # the model sees both results, then the new instruction
    assert texts(fn.calls[1].context.messages) == [
        "system", "user:Read a.txt and b.txt, then summarise", "assistant:toolUse",
        "toolResult:call_1", "toolResult:call_2", "user:Only summarise a.txt"]
    assert len(context.messages) == 1  # the caller's transcript is untouched


def test_sequential_trace_runs_each_call_start_to_result() -> None:
    """The seed: in sequential mode events 9-16 become start, end, result per call."""
    fn = ScriptedStreamFn([
        assistant_tool_calls(("read", {"path": "a.txt"}), ("read", {"path": "b.txt"})),
        assistant_text("done"),
    ])
    rec = Recorder()
    run_agent_loop([user("go")], context_for(make_tool()),
                   make_config(fn, tool_execution="sequential"), rec, stream_fn=fn)
    tool_rows = [r for r in rows(rec.events)
                 if r[0].startswith("tool_") or (len(r) == 3 and r[1] == "toolResult")]
    assert tool_rows == [
        ("tool_execution_start", "call_1"), ("tool_execution_end", "call_1"),
        ("message_start", "toolResult", "call_1"), ("message_end", "toolResult", "call_1"),
        ("tool_execution_start", "call_2"), ("tool_execution_end", "call_2"),
        ("message_start", "toolResult", "call_2"), ("message_end", "toolResult", "call_2"),
    ]


# --- the order of hooks and events ------------------------------------------------------


def test_hooks_and_events_run_in_the_loop_order() -> None:
    """Every hook at its step: polls, preparation, request building, tools, turn end."""
    log: list[str] = []
    lock = threading.Lock()

    def note(entry: str) -> None:
        with lock:
            log.append(entry)

    def hook(name: str, value: Any = None) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            note(name)
            return args[0] if value == "first-arg" else value
        return call

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        note("execute")
        return AgentToolResult(content=[TextContent("ok")])

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("hi")])

    def stream_fn(model: Any, context: Context, options: StreamOptions) -> Any:
        note("stream_fn")
        return fn(model, context, options)

    def emit(event: AgentEvent) -> None:
        if event.type != "message_update":
            note(event.type)

    config = make_config(
        fn, get_steering_messages=hook("get_steering_messages", []),
        get_follow_up_messages=hook("get_follow_up_messages", []),
        prepare_next_turn=hook("prepare_next_turn"), prepare_request=hook("prepare_request"),
        transform_context=hook("transform_context", "first-arg"),
        convert_to_llm=hook("convert_to_llm", "first-arg"), get_api_key=hook("get_api_key"),
        before_tool_call=hook("before_tool_call"), after_tool_call=hook("after_tool_call"),
        finish_turn=hook("finish_turn"))
    run_agent_loop([user("go")], context_for(make_tool(execute=execute)), config, emit,
                   stream_fn=stream_fn)

    request = ["prepare_request", "transform_context", "convert_to_llm", "get_api_key",
               "stream_fn", "message_start", "message_end"]
    assert log == [
        "agent_start", "turn_start", "message_start", "message_end",
        "get_steering_messages",                      # the initial poll
        *request,
        "tool_execution_start", "before_tool_call", "execute", "after_tool_call",
        "tool_execution_end", "message_start", "message_end",
        "finish_turn", "turn_end",                    # finish_turn comes before turn_end
        "get_steering_messages",                      # after the turn
        "prepare_next_turn", "get_steering_messages",  # re-poll: the first poll was empty
        "turn_start",
        *request,
        "finish_turn", "turn_end",
        "get_steering_messages", "get_follow_up_messages",  # the agent would stop
        "agent_end",
    ]


def test_initial_steering_is_injected_before_the_first_request() -> None:
    fn = ScriptedStreamFn([assistant_text("hi")])
    steering = [user("typed while waiting")]
    rec = Recorder()
    run_agent_loop([user("go")], AgentContext(), make_config(
        fn, get_steering_messages=queue_getter(steering)), rec, stream_fn=fn)
    assert rows(rec.events) == [
        ("agent_start",), ("turn_start",), ("message_start", "user"), ("message_end", "user"),
        ("message_start", "user"), ("message_end", "user"),
        ("message_start", "assistant"), ("message_update", ("text_start", "text_delta",
                                                            "text_end")),
        ("message_end", "assistant"), ("turn_end", ()),
        ("agent_end", ("user", "user", "assistant")),
    ]
    assert texts(fn.calls[0].context.messages) == ["user:go", "user:typed while waiting"]


def test_prepare_next_turn_skips_the_repoll_when_steering_was_found() -> None:
    """One steer per turn: the re-poll after prepare_next_turn only runs on an empty poll."""
    steering: list[Any] = []
    polls: list[int] = []

    def get_steering() -> list[Any]:
        polls.append(len(steering))
        return [steering.pop(0)] if steering else []

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        steering.extend([user("s1"), user("s2")])
        return AgentToolResult(content=[TextContent("ok")])

    next_turns: list[int] = []
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})),
                           assistant_text("one"), assistant_text("two")])
    config = make_config(fn, get_steering_messages=get_steering,
                         prepare_next_turn=lambda ctx: next_turns.append(len(steering)))
    run_agent_loop([user("go")], context_for(make_tool(execute=execute)), config, Recorder(),
                   stream_fn=fn)
    # initial (empty), after turn 1 (takes s1), after turn 2 (takes s2), after turn 3 (empty)
    assert polls == [0, 2, 1, 0]
    assert next_turns == [1, 0]  # s2 was still queued during the second turn's preparation
    assert texts(fn.calls[1].context.messages)[-2:] == ["toolResult:call_1", "user:s1"]
    assert texts(fn.calls[2].context.messages)[-2:] == ["assistant:stop", "user:s2"]


def test_prepare_next_turn_repoll_picks_up_steering_queued_during_preparation() -> None:
    steering: list[Any] = []
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])
    config = make_config(fn, get_steering_messages=queue_getter(steering),
                         prepare_next_turn=lambda ctx: steering.append(user("late")))
    rec = Recorder()
    run_agent_loop([user("go")], context_for(make_tool()), config, rec, stream_fn=fn)
    assert texts(fn.calls[1].context.messages)[-2:] == ["toolResult:call_1", "user:late"]
    assert rows(rec.events)[-8:-4] == [("turn_start",), ("message_start", "user"),
                                       ("message_end", "user"), ("message_start", "assistant")]


def test_prepare_next_turn_update_replaces_model_level_and_adds_messages_first() -> None:
    other = Model(id="other", api="scripted", provider="scripted",
                  base_url="https://example.invalid")
    steering: list[Any] = []
    prepared = user("prepared")
    seen: list[AgentTurnContext] = []

    def prepare_next_turn(ctx: AgentTurnContext) -> AgentLoopTurnUpdate:
        seen.append(ctx)
        steering.append(user("queued"))
        return AgentLoopTurnUpdate(messages=[prepared], model=other, thinking_level="high")

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])
    config = make_config(fn, get_steering_messages=queue_getter(steering),
                         prepare_next_turn=prepare_next_turn, reasoning="low")
    rec = Recorder()
    new = run_agent_loop([user("go")], context_for(make_tool()), config, rec, stream_fn=fn)

    assert [c.model.id for c in fn.calls] == ["scripted", "other"]
    assert [c.options.reasoning for c in fn.calls] == ["low", "high"]
    assert [m.thinking_level for m in new if isinstance(m, AssistantMessage)] == ["low", "high"]
    # prepared messages go before queued ones, with their normal events
    assert texts(fn.calls[1].context.messages)[-3:] == [
        "toolResult:call_1", "user:prepared", "user:queued"]
    assert new[3] is prepared
    assert seen[0].message is new[1] and seen[0].tool_results == [new[2]]
    assert seen[0].new_messages[:3] == new[:3]
    assert config.model is fn.model and config.reasoning == "low"  # the caller's config kept


def test_prepare_next_turn_thinking_off_clears_reasoning_and_context_is_replaced() -> None:
    compacted = context_for(make_tool(), messages=(user("compacted"),))
    compacted.tools = []
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])
    config = make_config(fn, reasoning="high", prepare_next_turn=lambda ctx: AgentLoopTurnUpdate(
        context=compacted, thinking_level="off"))
    new = run_agent_loop([user("go")], context_for(make_tool()), config, Recorder(), stream_fn=fn)
    assert [c.options.reasoning for c in fn.calls] == ["high", None]
    assert new[-1].thinking_level == "off"  # type: ignore[union-attr]
    # the replacement is used as is (and grows); its tools differ, so a removal is declared
    second = fn.calls[1].context.messages
    assert texts(second) == ["system", "user:compacted", "system"]
    assert second[2].tools_removed == ["read"]  # type: ignore[union-attr]
    assert texts(compacted.messages) == ["system", "user:compacted", "system", "assistant:stop"]


def test_prepare_request_runs_once_per_request_and_replacements_persist() -> None:
    other = Model(id="other", api="scripted", provider="scripted",
                  base_url="https://example.invalid")
    calls: list[tuple[str, str, int]] = []
    rec = Recorder()

    def prepare_request(ctx: PrepareRequestContext, signal: AbortSignal) -> RequestUpdate | None:
        assert isinstance(signal, AbortSignal)
        calls.append((ctx.model.id if ctx.model else "", ctx.thinking_level, len(rec.events)))
        if len(calls) == 1:
            return RequestUpdate(model=other, thinking_level="low")
        return None

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])
    run_agent_loop([user("go")], context_for(make_tool()), make_config(
        fn, prepare_request=prepare_request), rec, stream_fn=fn)
    assert [c.model.id for c in fn.calls] == ["other", "other"]
    assert [c.options.reasoning for c in fn.calls] == ["low", "low"]
    # once per request, after the injected messages' events
    assert [(m, t) for m, t, _ in calls] == [("scripted", "off"), ("other", "low")]
    assert [row(rec.events[n - 1]) for _, _, n in calls] == [("message_end", "user"),
                                                             ("turn_start",)]


def test_prepare_request_context_replacement_is_what_the_model_sees() -> None:
    def prepare_request(ctx: PrepareRequestContext, signal: AbortSignal) -> RequestUpdate:
        return RequestUpdate(context=AgentContext([m for m in ctx.context.messages
                                                   if m.role != "system"], ctx.context.tools))

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])
    run_agent_loop([user("go")], context_for(make_tool()), make_config(
        fn, prepare_request=prepare_request), Recorder(), stream_fn=fn)
    assert texts(fn.calls[0].context.messages) == ["user:go"]
    assert texts(fn.calls[1].context.messages) == ["user:go", "assistant:toolUse",
                                                   "toolResult:call_1"]


def test_transform_context_then_convert_to_llm_build_the_request() -> None:
    order: list[str] = []
    extra = user("injected by transform")
    converted: list[list[Any]] = []

    def transform(messages: list[Any], signal: AbortSignal) -> list[Any]:
        assert isinstance(signal, AbortSignal) and not signal.aborted
        order.append("transform")
        return [*messages, extra]

    def convert(messages: list[Any]) -> list[Any]:
        order.append("convert")
        assert messages[-1] is extra
        out = [m for m in messages if m.role != "note"]
        converted.append(out)
        return out

    note = SystemMessage("note")
    note_custom = _Note("app only")
    fn = ScriptedStreamFn([assistant_text("ok")])
    run_agent_loop([note_custom, user("go")], AgentContext([note]), make_config(
        fn, transform_context=transform, convert_to_llm=convert), Recorder(), stream_fn=fn)
    assert order == ["transform", "convert"]
    assert fn.calls[0].context.messages == converted[0]
    assert texts(fn.calls[0].context.messages) == ["system", "user:go",
                                                   "user:injected by transform"]


class _Note:
    """An application message the model never sees."""

    role = "note"

    def __init__(self, text: str) -> None:
        self.text = text


def test_get_api_key_is_asked_per_request_and_falls_back_to_api_key() -> None:
    keys = iter(["k1", None])
    providers: list[str] = []

    def get_api_key(provider: str) -> str | None:
        providers.append(provider)
        return next(keys)

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])
    run_agent_loop([user("go")], context_for(make_tool()), make_config(
        fn, get_api_key=get_api_key, api_key="fallback", session_id="s-1"), Recorder(),
        stream_fn=fn)
    assert providers == ["scripted", "scripted"]
    assert [c.options.api_key for c in fn.calls] == ["k1", "fallback"]
    assert [c.options.session_id for c in fn.calls] == ["s-1", "s-1"]
    assert all(isinstance(c.options.signal, AbortSignal) for c in fn.calls)


# --- finish_turn ------------------------------------------------------------------------


@pytest.mark.parametrize("decision", ["end", {"action": "end"}])
def test_finish_turn_end_stops_with_queues_untouched(decision: Any) -> None:
    steering = [user("s")]
    follow_ups = [user("f")]
    polls: list[str] = []

    def get_steering() -> list[Any]:
        polls.append("steer")
        return []  # the initial poll sees nothing (the queue is "filled" later)

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])
    rec = Recorder()
    config = make_config(fn, get_steering_messages=get_steering,
                         get_follow_up_messages=queue_getter(follow_ups),
                         finish_turn=lambda turn, signal: decision)
    run_agent_loop([user("go")], context_for(make_tool()), config, rec, stream_fn=fn)
    assert fn.call_count == 1
    assert polls == ["steer"]  # only the initial poll
    assert steering and follow_ups
    assert rows(rec.events)[-3:] == [("message_end", "toolResult", "call_1"),
                                     ("turn_end", ("call_1",)),
                                     ("agent_end", ("user", "assistant", "toolResult"))]


@pytest.mark.parametrize("decision", ["continue", {"action": "continue"}])
def test_finish_turn_continue_makes_exactly_one_context_only_request(decision: Any) -> None:
    answers = iter([decision])
    fn = ScriptedStreamFn([assistant_text("first"), assistant_text("second")])
    rec = Recorder()
    run_agent_loop([user("go")], AgentContext(), make_config(
        fn, finish_turn=lambda turn, signal: next(answers, None)), rec, stream_fn=fn)
    assert fn.call_count == 2
    assert texts(fn.calls[1].context.messages) == ["user:go", "assistant:stop"]
    assert len(rec.of("turn_start")) == 2
    assert rows(rec.events)[-1] == ("agent_end", ("user", "assistant", "assistant"))


def test_finish_turn_continue_is_satisfied_by_tool_results() -> None:
    answers = iter(["continue"])
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok"),
                           assistant_text("extra")])
    run_agent_loop([user("go")], context_for(make_tool()), make_config(
        fn, finish_turn=lambda turn, signal: next(answers, None)), Recorder(), stream_fn=fn)
    assert fn.call_count == 2


def test_finish_turn_continue_is_satisfied_by_a_follow_up() -> None:
    answers = iter(["continue"])
    follow_ups = [user("later")]
    fn = ScriptedStreamFn([assistant_text("one"), assistant_text("two"), assistant_text("x")])
    run_agent_loop([user("go")], AgentContext(), make_config(
        fn, finish_turn=lambda turn, signal: next(answers, None),
        get_follow_up_messages=queue_getter(follow_ups)), Recorder(), stream_fn=fn)
    assert fn.call_count == 2
    assert texts(fn.calls[1].context.messages)[-1] == "user:later"


def test_finish_turn_sees_the_completed_turn() -> None:
    turns: list[tuple[AgentTurnContext, list[Any], list[Any]]] = []
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])
    prompt = user("go")
    new = run_agent_loop([prompt], context_for(make_tool()), make_config(
        fn, finish_turn=lambda turn, signal: turns.append(
            (turn, list(turn.context.messages), list(turn.new_messages)))),
        Recorder(), stream_fn=fn)
    first, messages, new_messages = turns[0]
    assert first.message is new[1] and first.tool_results == [new[2]]
    assert messages[-2:] == [new[1], new[2]]
    assert new_messages == [prompt, new[1], new[2]]


# --- error and aborted responses, follow-ups, counts -------------------------------------


@pytest.mark.parametrize("stop_reason", ["error", "aborted"])
def test_error_and_aborted_responses_are_hard_exits(stop_reason: str) -> None:
    """Tools in the message never run; continue is ignored; queues are not polled again."""
    failed = AssistantMessage(content=[ToolCall("call_1", "read", {"path": "a"})],
                              api="scripted", provider="scripted", model="scripted",
                              stop_reason=stop_reason, error_message="it broke")  # type: ignore[arg-type]
    ran: list[str] = []
    polls: list[str] = []
    decisions: list[str] = []

    def finish_turn(turn: AgentTurnContext, signal: AbortSignal) -> str:
        decisions.append(turn.message.stop_reason)
        return "continue"

    def get_steering() -> list[Any]:
        polls.append("steer")
        return []

    fn = ScriptedStreamFn([failed, assistant_text("never")])
    rec = Recorder()
    new = run_agent_loop([user("go")], context_for(make_tool(execute=lambda *a: ran.append("x"))),
                         make_config(fn, finish_turn=finish_turn, get_steering_messages=get_steering,
                                     get_follow_up_messages=lambda: polls.append("follow")),
                         rec, stream_fn=fn)
    assert fn.call_count == 1 and ran == [] and polls == ["steer"]
    assert decisions == [stop_reason]
    assert [r for r in rows(rec.events) if r[0] != "message_update"][-4:] == [
        ("message_start", "assistant"), ("message_end", "assistant"), ("turn_end", ()),
        ("agent_end", ("user", "assistant"))]
    assert new[-1].error_message == "it broke"  # type: ignore[union-attr]


def test_follow_ups_are_polled_only_when_the_agent_would_stop() -> None:
    follow_ups: list[Any] = [user("f1")]
    polled_at: list[int] = []
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("one"),
                           assistant_text("two")])

    def get_follow_ups() -> list[Any]:
        polled_at.append(fn.call_count)
        return [follow_ups.pop(0)] if follow_ups else []

    rec = Recorder()
    run_agent_loop([user("go")], context_for(make_tool()), make_config(
        fn, get_follow_up_messages=get_follow_ups), rec, stream_fn=fn)
    assert polled_at == [2, 3]  # not after the tool turn
    assert texts(fn.calls[2].context.messages)[-2:] == ["assistant:stop", "user:f1"]
    assert len(rec.of("turn_start")) == fn.call_count == 3


def test_turn_start_count_equals_request_count() -> None:
    steering: list[Any] = []
    follow_ups: list[Any] = [user("f")]
    answers = iter([None, None, "continue"])

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        steering.append(user("s"))
        return AgentToolResult(content=[TextContent("ok")])

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("a"),
                           assistant_text("b"), assistant_text("c"), assistant_text("d")])
    rec = Recorder()
    run_agent_loop([user("go")], context_for(make_tool(execute=execute)), make_config(
        fn, get_steering_messages=queue_getter(steering),
        get_follow_up_messages=queue_getter(follow_ups),
        finish_turn=lambda turn, signal: next(answers, None)), rec, stream_fn=fn)
    # tool turn, steer turn, follow-up turn, the turn "continue" asked for
    assert fn.call_count == 4
    assert len(rec.of("turn_start")) == len(rec.of("turn_end")) == 4


# --- streaming details -------------------------------------------------------------------


def test_message_start_is_synthesised_when_the_stream_sends_no_start() -> None:
    final = assistant_text("only done")

    def stream_fn(model: Any, context: Context, options: StreamOptions) -> Any:
        stream = AssistantMessageEventStream()
        stream.push(DoneEvent("stop", final))
        stream.end(final)
        return stream

    rec = Recorder()
    new = run_agent_loop([user("go")], AgentContext(), AgentLoopConfig(
        model=None, convert_to_llm=list), rec, stream_fn=stream_fn)
    assert rows(rec.events) == [
        ("agent_start",), ("turn_start",), ("message_start", "user"), ("message_end", "user"),
        ("message_start", "assistant"), ("message_end", "assistant"), ("turn_end", ()),
        ("agent_end", ("user", "assistant"))]
    assert new[-1] is final and rec.of("message_end")[-1].message is final
    assert rec.of("message_start")[-1].message.content == final.content


def test_start_and_update_events_carry_shallow_copies() -> None:
    fn = ScriptedStreamFn([assistant_text("one two three four five six seven")])
    rec = Recorder()
    new = run_agent_loop([user("go")], AgentContext(), make_config(fn), rec, stream_fn=fn)
    final = new[-1]
    streamed = [e.message for e in rec.events
                if e.type in ("message_start", "message_update") and e.message.role == "assistant"]
    assert len(streamed) >= 4
    assert all(m is not final for m in streamed)
    assert len({id(m) for m in streamed}) == len(streamed)
    assert all(isinstance(m, AssistantMessage) for m in streamed)
    partials = {id(e.assistant_message_event.partial) for e in rec.of("message_update")}
    assert all(id(m) not in partials for m in streamed)  # copies, not the stream's partial
    assert rec.of("message_end")[-1].message is final


def test_streamed_copies_share_every_field_value_with_the_partial() -> None:
    fn = ScriptedStreamFn([assistant_text("one two three")])
    rec = Recorder()
    run_agent_loop([user("go")], AgentContext(), make_config(fn), rec, stream_fn=fn)
    updates = rec.of("message_update")
    assert updates
    names = [f.name for f in dataclasses.fields(AssistantMessage)]
    for event in updates:
        partial = event.assistant_message_event.partial
        assert event.message is not partial
        assert all(getattr(event.message, n) is getattr(partial, n) for n in names)


@dataclasses.dataclass
class _TaggedAssistant(AssistantMessage):
    tag: str = "kept"


def test_a_subclassed_partial_is_copied_with_its_own_fields() -> None:
    def stream_fn(model: Any, context: Context, options: StreamOptions) -> Any:
        stream = AssistantMessageEventStream()
        partial = _TaggedAssistant(content=[TextContent(text="hi")], tag="mine")
        stream.push(StartEvent(partial=partial))
        stream.push(DoneEvent(reason="stop", message=partial))
        stream.end()
        return stream

    rec = Recorder()
    run_agent_loop([user("go")], AgentContext(), make_config(ScriptedStreamFn([])), rec,
                   stream_fn=stream_fn)
    start = rec.of("message_start")[-1].message
    assert type(start) is _TaggedAssistant
    assert start.tag == "mine"


@dataclasses.dataclass(slots=True)
class _MarkedDelta(TextDeltaEvent):
    mark: str = "x"


@dataclasses.dataclass(slots=True)
class _MarkedDone(DoneEvent):
    mark: str = "x"


def test_update_events_of_every_class_and_subclasses_take_their_places() -> None:
    # the loop looks the usual (exact) classes up first; a subclass takes the isinstance
    # chain: a delta subclass is still an update, a done subclass still ends the response
    partial = AssistantMessage(content=[TextContent(text="")])
    final = assistant_text("ab")
    before = TextDeltaEvent(0, "-", partial)  # before start: no message yet, ignored
    deltas = [TextStartEvent(0, partial), TextDeltaEvent(0, "a", partial),
              _MarkedDelta(0, "b", partial), TextEndEvent(0, "ab", partial)]
    after = TextDeltaEvent(0, "never", partial)

    def stream_fn(model: Any, context: Context, options: StreamOptions) -> Any:
        stream = AssistantMessageEventStream()
        stream.pull_from(iter([before, StartEvent(partial), *deltas,
                               _MarkedDone("stop", final), after]))
        return stream

    rec = Recorder()
    new = run_agent_loop([user("go")], AgentContext(), make_config(ScriptedStreamFn([])), rec,
                         stream_fn=stream_fn)
    assert [e.assistant_message_event for e in rec.of("message_update")] == deltas
    assert len(rec.of("message_start")) == 2  # the user's and the assistant's
    assert new[-1] is final and rec.of("message_end")[-1].message is final


@pytest.mark.parametrize(("reasoning", "stamped"), [(None, "off"), ("medium", "medium")])
def test_thinking_level_is_stamped_on_the_final_message(reasoning: str | None,
                                                        stamped: str) -> None:
    fn = ScriptedStreamFn([assistant_text("ok"), assistant_error("bad")])
    new = run_agent_loop([user("go")], AgentContext(), make_config(
        fn, reasoning=reasoning, finish_turn=lambda t, s: "continue"), Recorder(), stream_fn=fn)
    assert [m.thinking_level for m in new if isinstance(m, AssistantMessage)] == [stamped] * 2


def test_a_stream_that_never_sends_a_terminal_event_ends_the_turn_with_an_error() -> None:
    def stream_fn(model: Any, context: Context, options: StreamOptions) -> Any:
        stream = AssistantMessageEventStream()
        stream.end()
        return stream

    rec = Recorder()
    new = run_agent_loop([user("go")], AgentContext(), AgentLoopConfig(
        model=None, convert_to_llm=list), rec, stream_fn=stream_fn)
    assert new[-1].stop_reason == "error"  # type: ignore[union-attr]
    assert rows(rec.events)[-2:] == [("turn_end", ()), ("agent_end", ("user", "assistant"))]


# --- continue ---------------------------------------------------------------------------


def test_run_agent_loop_continue_returns_only_new_messages() -> None:
    existing = [user("go"), assistant_tool_calls(("read", {"path": "a"})),
                ToolResultMessage("call_1", "read", [TextContent("a")])]
    context = context_for(make_tool(), messages=tuple(existing))
    before = list(context.messages)
    fn = ScriptedStreamFn([assistant_text("ok")])
    rec = Recorder()
    new = run_agent_loop_continue(context, make_config(fn), rec, stream_fn=fn)
    assert rows(rec.events) == [
        ("agent_start",), ("turn_start",), ("message_start", "assistant"),
        ("message_update", ("text_start", "text_delta", "text_end")),
        ("message_end", "assistant"), ("turn_end", ()), ("agent_end", ("assistant",))]
    assert new == [rec.of("message_end")[0].message]
    assert texts(fn.calls[0].context.messages) == ["system", "user:go", "assistant:toolUse",
                                                   "toolResult:call_1"]
    assert context.messages == before


def test_continue_announces_a_tool_mismatch_before_the_first_request() -> None:
    first, second = make_tool("first"), make_tool("second")
    context = context_for(first, messages=(user("go"),))
    context.tools = [second]
    fn = ScriptedStreamFn([assistant_text("ok")])
    rec = Recorder()
    new = run_agent_loop_continue(context, make_config(fn), rec, stream_fn=fn)
    assert rows(rec.events)[:4] == [("agent_start",), ("turn_start",),
                                    ("message_start", "system"), ("message_end", "system")]
    update = new[0]
    assert isinstance(update, SystemMessage) and update.content == ""
    assert [t.name for t in update.tools_added or []] == ["second"]
    assert update.tools_removed == ["first"]


@pytest.mark.parametrize("entry", [run_agent_loop_continue, agent_loop_continue])
@pytest.mark.parametrize(("messages", "text"), [
    ([], "Cannot continue: no messages in context"),
    ([UserMessage("hi"), assistant_text("hello")], "Cannot continue from message role: assistant"),
])
def test_continue_guards_raise_at_the_call(entry: Any, messages: list[Any], text: str) -> None:
    fn = ScriptedStreamFn()
    args: tuple[Any, ...] = (AgentContext(messages), make_config(fn))
    if entry is run_agent_loop_continue:
        args = (*args, Recorder())
    with pytest.raises(ValueError) as info:
        entry(*args, stream_fn=fn)
    assert str(info.value) == text
    assert fn.call_count == 0


def test_continue_accepts_an_application_message_at_the_tail() -> None:
    fn = ScriptedStreamFn([assistant_text("ok")])
    new = run_agent_loop_continue(
        AgentContext([user("go"), _Note("tail")]),
        make_config(fn, convert_to_llm=lambda ms: [m for m in ms if m.role != "note"]),
        Recorder(), stream_fn=fn)
    assert [m.role for m in new] == ["assistant"]


# --- agent_loop streams, threads, timeouts -----------------------------------------------


def test_agent_loop_streams_the_same_events_as_run_agent_loop() -> None:
    fn = ScriptedStreamFn()

    def script() -> None:
        fn.set_responses([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])

    script()
    rec = Recorder()
    expected = run_agent_loop([user("go")], context_for(make_tool()), make_config(fn), rec,
                              stream_fn=fn)
    assert set(rec.threads) == {threading.current_thread()}  # emitted on the calling thread

    script()
    stream = agent_loop([user("go")], context_for(make_tool()), make_config(fn), stream_fn=fn)
    events = list(stream)
    result = stream.result(5)
    assert rows(events) == rows(rec.events)
    assert events[-1].type == "agent_end" and result == events[-1].messages
    assert texts(result) == texts(expected)


def test_every_event_of_agent_loop_comes_from_its_worker_thread() -> None:
    threads: list[threading.Thread] = []
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"}), ("read", {"path": "b"})),
                           assistant_text("ok")])

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        on_update(AgentToolResult(content=[TextContent("progress")]))
        return AgentToolResult(content=[TextContent("ok")])

    config = make_config(fn, transform_context=lambda ms, s: threads.append(
        threading.current_thread()) or ms)
    stream = agent_loop([user("go")], context_for(make_tool(execute=execute)), config, stream_fn=fn)
    events = list(stream)
    assert len(threads) == 2 and threads[0] is threads[1]
    assert threads[0] is not threading.current_thread() and not threads[0].is_alive()
    assert len([e for e in events if e.type == "tool_execution_update"]) == 2


def test_thread_count_returns_to_baseline_after_every_kind_of_run() -> None:
    baseline = threading.active_count()
    fn = ScriptedStreamFn()

    def script() -> None:
        fn.set_responses([assistant_tool_calls(("read", {"path": "a"}), ("read", {"path": "b"})),
                          assistant_text("ok")])

    script()
    run_agent_loop([user("go")], context_for(make_tool()), make_config(fn), Recorder(), stream_fn=fn)
    assert threading.active_count() == baseline
    script()
    agent_loop([user("go")], context_for(make_tool()), make_config(fn), stream_fn=fn).result(5)
    assert threading.active_count() == baseline
    script()
    list(agent_loop([user("go")], context_for(make_tool()), make_config(fn), stream_fn=fn))
    assert threading.active_count() == baseline
    script()
    with pytest.raises(AgentLoopError):
        agent_loop([user("go")], context_for(make_tool()), make_config(
            fn, finish_turn=_raise), stream_fn=fn).result(5)
    assert threading.active_count() == baseline


def _raise(*args: Any) -> Any:
    raise RuntimeError("hook failed")


def test_result_timeout_raises_timeout_error() -> None:
    release = threading.Event()
    entered = threading.Event()

    def slow(context: Context, options: StreamOptions) -> AssistantMessage:
        entered.set()
        assert release.wait(5)
        return assistant_text("late")

    fn = ScriptedStreamFn([slow])
    stream = agent_loop([user("go")], AgentContext(), make_config(fn), stream_fn=fn)
    assert entered.wait(5)
    with pytest.raises(TimeoutError):
        stream.result(timeout=0.01)
    release.set()
    assert [m.role for m in stream.result(5)] == ["user", "assistant"]
    with pytest.raises(TimeoutError):
        AssistantMessageEventStream().result(timeout=0.01)


# --- a raising hook ends agent_loop's stream --------------------------------------------


def _hooks_that_raise() -> list[tuple[str, dict[str, Any]]]:
    return [
        ("convert_to_llm", {"convert_to_llm": _raise}),
        ("transform_context", {"transform_context": _raise}),
        ("prepare_request", {"prepare_request": _raise}),
        ("finish_turn", {"finish_turn": _raise}),
        ("get_steering_messages", {"get_steering_messages": _raise}),
        ("get_follow_up_messages", {"get_follow_up_messages": _raise}),
        ("get_api_key", {"get_api_key": _raise}),
    ]


@pytest.mark.parametrize(("name", "hooks"), _hooks_that_raise(), ids=lambda v: str(v)[:20])
def test_a_raising_hook_ends_agent_loop_with_agent_loop_error(name: str,
                                                              hooks: dict[str, Any]) -> None:
    fn = ScriptedStreamFn([assistant_text("ok")])
    stream = agent_loop([user("go")], AgentContext(), make_config(fn, **hooks), stream_fn=fn)
    events: list[Any] = []
    with pytest.raises(AgentLoopError) as info:
        for event in stream:
            events.append(event)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert str(info.value.__cause__) == "hook failed"
    assert "hook failed" in str(info.value)
    assert events[0].type == "agent_start" and all(e.type != "agent_end" for e in events)
    with pytest.raises(AgentLoopError) as again:
        stream.result(5)
    assert again.value.__cause__ is info.value.__cause__


def test_a_raising_stream_function_ends_agent_loop_continue_with_agent_loop_error() -> None:
    def broken(model: Any, context: Context, options: StreamOptions) -> Any:
        raise KeyError("no stream")

    stream = agent_loop_continue(AgentContext([user("go")]), AgentLoopConfig(
        model=None, convert_to_llm=list), stream_fn=broken)
    with pytest.raises(AgentLoopError) as info:
        stream.result(5)
    assert isinstance(info.value.__cause__, KeyError)


def test_a_raising_hook_propagates_from_run_agent_loop() -> None:
    fn = ScriptedStreamFn([assistant_text("ok")])
    with pytest.raises(RuntimeError, match="hook failed"):
        run_agent_loop([user("go")], AgentContext(), make_config(fn, convert_to_llm=_raise),
                       Recorder(), stream_fn=fn)
