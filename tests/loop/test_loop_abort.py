"""Abort in the low-level loop: no request with an aborted signal, no polls, no more hooks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from piagent import (
    AbortController,
    AbortSignal,
    AgentContext,
    AgentEvent,
    AgentLoopConfig,
    AgentLoopTurnUpdate,
    AgentToolResult,
    AssistantMessage,
    TextContent,
    UserMessage,
    agent_loop,
    run_agent_loop,
)
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import Recorder
from tests.tools.conftest import make_tool

from .conftest import context_for

pytestmark = pytest.mark.usefixtures("no_thread_leak")



class Hooks:
    """Every hook of the loop, logging its calls (and optionally acting in one of them)."""

    def __init__(self, act: dict[str, Callable[[], Any]] | None = None) -> None:
        self.log: list[str] = []
        self.act = act or {}
        self.steering: list[Any] = []
        self.follow_ups: list[Any] = []

    def _call(self, name: str, value: Any = None) -> Any:
        self.log.append(name)
        if name in self.act:
            out = self.act[name]()
            if out is not None:
                return out
        return value

    def config(self, fn: ScriptedStreamFn, **kwargs: Any) -> AgentLoopConfig:
        return AgentLoopConfig(
            model=fn.model,
            convert_to_llm=lambda ms: self._call("convert_to_llm") or list(ms),
            transform_context=lambda ms, s: self._call("transform_context") or ms,
            prepare_request=lambda ctx, s: self._call("prepare_request"),
            prepare_next_turn=lambda ctx: self._call("prepare_next_turn"),
            get_api_key=lambda provider: self._call("get_api_key"),
            get_steering_messages=lambda: self._drain("get_steering_messages", self.steering),
            get_follow_up_messages=lambda: self._drain("get_follow_up_messages",
                                                       self.follow_ups),
            finish_turn=lambda turn, s: self._call("finish_turn"),
            before_tool_call=lambda ctx, s: self._call("before_tool_call"),
            **kwargs)

    def _drain(self, name: str, queue: list[Any]) -> list[Any]:
        self._call(name)
        return [queue.pop(0)] if queue else []


def closing_rows(reason: str = "aborted") -> list[tuple[Any, ...]]:
    return [("message_start", "assistant", reason), ("message_end", "assistant", reason),
            ("turn_end",), ("agent_end",)]


# --- before any request ----------------------------------------------------------------------


@pytest.mark.parametrize(("reason", "text"), [(None, "Operation aborted"),
                                              ("user pressed Esc", "user pressed Esc")])
def test_an_aborted_signal_never_starts_a_request(reason: str | None, text: str) -> None:
    controller = AbortController()
    controller.abort(reason)
    hooks = Hooks()
    hooks.steering.append(UserMessage("queued"))
    fn = ScriptedStreamFn([assistant_text("never")])
    rec = Recorder()
    new = run_agent_loop([UserMessage("go")], AgentContext(), hooks.config(fn), rec,
                         signal=controller.signal, stream_fn=fn)
    assert fn.call_count == 0
    assert hooks.log == []  # no queue polled, no hook run
    assert hooks.steering  # still queued
    assert rec.rows() == [("agent_start",), ("turn_start",), ("message_start", "user", ""),
                          ("message_end", "user", ""), *closing_rows()]
    final = new[-1]
    assert isinstance(final, AssistantMessage)
    assert (final.stop_reason, final.error_message, final.thinking_level) == (
        "aborted", text, "off")
    assert rec.events[-1].messages == new and rec.events[-2].message is final


@pytest.mark.parametrize("where", ["prepare_request", "transform_context"])
def test_an_abort_inside_request_preparation_stops_the_request(where: str) -> None:
    controller = AbortController()
    hooks = Hooks({where: controller.abort})
    fn = ScriptedStreamFn([assistant_text("never")])
    rec = Recorder()
    new = run_agent_loop([UserMessage("go")], AgentContext(), hooks.config(fn), rec,
                         signal=controller.signal, stream_fn=fn)
    assert fn.call_count == 0
    assert rec.rows()[-4:] == closing_rows()
    assert [m.role for m in new] == ["user", "assistant"]
    assert "finish_turn" not in hooks.log and "get_follow_up_messages" not in hooks.log
    if where == "prepare_request":
        assert "transform_context" not in hooks.log


def test_an_abort_during_injection_stops_before_the_next_message() -> None:
    controller = AbortController()
    hooks = Hooks()
    hooks.steering.extend([UserMessage("s1"), UserMessage("s2")])

    def listener(event: AgentEvent) -> None:
        if event.type == "message_end" and getattr(event.message, "content", None) == "s1":
            controller.abort()

    fn = ScriptedStreamFn([assistant_text("never")])
    config = hooks.config(fn)
    config.get_steering_messages = lambda: [hooks.steering.pop(0) for _ in
                                            list(hooks.steering)]  # "all" mode
    rec = Recorder(on_event=listener)
    new = run_agent_loop([UserMessage("go")], AgentContext(), config, rec,
                         signal=controller.signal, stream_fn=fn)
    assert [getattr(m, "content", None) for m in new[:2]] == ["go", "s1"]
    assert fn.call_count == 0 and "prepare_request" not in hooks.log
    assert rec.rows()[-4:] == closing_rows()


# --- during a run ------------------------------------------------------------------------


def test_an_abort_during_a_tool_ends_the_run_without_polls_or_requests() -> None:
    """The seed's pitfall, fixed: no steering poll, no request after the aborted batch."""
    controller = AbortController()
    hooks = Hooks()

    def execute(*args: Any) -> AgentToolResult:
        hooks.steering.append(UserMessage("typed during the tool"))
        controller.abort("stop")
        return AgentToolResult(content=[TextContent("partial")])

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("no")])
    rec = Recorder()
    new = run_agent_loop([UserMessage("go")], context_for(make_tool(execute=execute)), hooks.config(fn),
                         rec, signal=controller.signal, stream_fn=fn)
    assert fn.call_count == 1
    assert hooks.steering  # the steer is not polled, so it is not recorded before an abort
    after_abort = hooks.log[hooks.log.index("before_tool_call") + 1:]
    assert "get_steering_messages" not in after_abort
    for hook in ("finish_turn", "prepare_next_turn", "prepare_request", "transform_context",
                 "get_follow_up_messages"):
        assert hook not in after_abort
    assert rec.rows()[-9:] == [
        ("tool_execution_end", "call_1"),
        ("message_start", "toolResult", "call_1"), ("message_end", "toolResult", "call_1"),
        ("turn_end",), ("turn_start",), *closing_rows()]
    assert new[-1].error_message == "stop"  # type: ignore[union-attr]
    assert [m.role for m in new] == ["user", "assistant", "toolResult", "assistant"]


def test_an_abort_in_prepare_next_turn_closes_the_opened_turn() -> None:
    controller = AbortController()
    hooks = Hooks({"prepare_next_turn": lambda: (controller.abort(), AgentLoopTurnUpdate(
        messages=[UserMessage("prepared")]))[1]})
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("no")])
    rec = Recorder()
    new = run_agent_loop([UserMessage("go")], context_for(make_tool()), hooks.config(fn), rec,
                         signal=controller.signal, stream_fn=fn)
    assert fn.call_count == 1
    after = hooks.log[hooks.log.index("prepare_next_turn") + 1:]
    assert after == []  # no re-poll, no request hooks
    assert rec.rows()[-6:] == [("turn_end",), ("turn_start",), *closing_rows()]
    assert [m.role for m in new] == ["user", "assistant", "toolResult", "assistant"]


def test_an_abort_while_streaming_is_a_hard_exit() -> None:
    controller = AbortController()

    def listener(event: AgentEvent) -> None:
        if event.type == "message_update":
            controller.abort()

    ran: list[str] = []
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"}))])
    rec = Recorder(on_event=listener)
    new = run_agent_loop([UserMessage("go")], context_for(make_tool(execute=lambda *a: ran.append("x"))),
                         AgentLoopConfig(model=fn.model, convert_to_llm=list), rec,
                         signal=controller.signal, stream_fn=fn)
    assert ran == [] and fn.call_count == 1
    final = new[-1]
    assert isinstance(final, AssistantMessage) and final.stop_reason == "aborted"
    assert final.error_message == "Operation aborted"
    assert rec.rows()[-3:] == closing_rows()[1:]


def batch_rows(rec: Recorder) -> list[tuple[Any, ...]]:
    """The tool events and the tool result messages, in order."""
    return [r for r in rec.rows() if r[0].startswith("tool_") or r[1:2] == ("toolResult",)]


def answered_rows(*ids: str) -> list[tuple[Any, ...]]:
    """Sequential (or one call): each call's start, end and result message in turn."""
    return [row for i in ids for row in (
        ("tool_execution_start", i), ("tool_execution_end", i),
        ("message_start", "toolResult", i), ("message_end", "toolResult", i))]


def aborted_ends(rec: Recorder) -> dict[str, tuple[bool, str]]:
    return {e.tool_call_id: (e.is_error, e.result.content[0].text)
            for e in rec.events if e.type == "tool_execution_end"}


def assert_every_call_answered(new: list[Any]) -> None:
    """No tool call of the transcript is left without its result (a provider answers 400)."""
    asked = [c.id for m in new if isinstance(m, AssistantMessage) for c in m.tool_calls]
    answered = [m.tool_call_id for m in new if m.role == "toolResult"]
    assert answered == asked


@pytest.mark.parametrize("execution", ["parallel", "sequential"])
def test_an_abort_during_preflight_answers_every_sibling_without_its_hook(
        execution: str) -> None:
    """pi-agent-core 1.6.0 (#9986): the calls after the abort still start, end "Operation
    aborted" and get their result message; no before_tool_call runs for them."""
    controller = AbortController()
    hooks = Hooks({"before_tool_call": controller.abort})
    ran: list[str] = []
    fn = ScriptedStreamFn([assistant_tool_calls(*[("read", {"path": p}) for p in "abc"]),
                           assistant_text("no")])
    rec = Recorder()
    tool = make_tool(execute=lambda call_id, *a: ran.append(call_id))
    new = run_agent_loop([UserMessage("go")], context_for(tool),
                         hooks.config(fn, tool_execution=execution), rec,
                         signal=controller.signal, stream_fn=fn)
    assert hooks.log.count("before_tool_call") == 1 and ran == []
    starts_and_ends = [("tool_execution_start", "call_1"), ("tool_execution_end", "call_1"),
                       ("tool_execution_start", "call_2"), ("tool_execution_end", "call_2"),
                       ("tool_execution_start", "call_3"), ("tool_execution_end", "call_3")]
    results = [(kind, "toolResult", i) for i in ("call_1", "call_2", "call_3")
               for kind in ("message_start", "message_end")]
    assert batch_rows(rec) == (starts_and_ends + results if execution == "parallel"
                               else answered_rows("call_1", "call_2", "call_3"))
    assert aborted_ends(rec) == {i: (True, "Operation aborted")
                                 for i in ("call_1", "call_2", "call_3")}
    assert [m.role for m in new] == ["user", "assistant", *["toolResult"] * 3, "assistant"]
    assert [m.content[0].text for m in new[2:5]] == ["Operation aborted"] * 3
    assert all(m.is_error for m in new[2:5])
    assert_every_call_answered(new)


@pytest.mark.parametrize("execution", ["parallel", "sequential"])
def test_an_abort_before_preflight_answers_every_call_and_runs_no_tool_hook(
        execution: str) -> None:
    controller = AbortController()
    hooks = Hooks()

    def listener(event: AgentEvent) -> None:
        if event.type == "message_end" and event.message.role == "assistant":
            controller.abort()

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"}),
                                                ("read", {"path": "b"})), assistant_text("no")])
    rec = Recorder(on_event=listener)
    new = run_agent_loop([UserMessage("go")], context_for(make_tool()),
                         hooks.config(fn, tool_execution=execution), rec,
                         signal=controller.signal, stream_fn=fn)
    assert "before_tool_call" not in hooks.log and "finish_turn" not in hooks.log
    assert fn.call_count == 1
    assert aborted_ends(rec) == {"call_1": (True, "Operation aborted"),
                                 "call_2": (True, "Operation aborted")}
    assert len(batch_rows(rec)) == 8
    assert_every_call_answered(new)


@pytest.mark.parametrize("execution", ["parallel", "sequential"])
def test_an_abort_comes_before_the_lookup_and_the_validation(execution: str) -> None:
    """An unknown tool and invalid arguments: once aborted, both end "Operation aborted"
    (pi-agent-core 1.6.0 checks the signal first), not "not found" or a validation error."""
    controller = AbortController()

    def listener(event: AgentEvent) -> None:
        if event.type == "message_end" and event.message.role == "assistant":
            controller.abort()

    fn = ScriptedStreamFn([assistant_tool_calls(("ghost", {}), ("read", {}))])
    rec = Recorder(on_event=listener)
    new = run_agent_loop([UserMessage("go")], context_for(make_tool()),
                         AgentLoopConfig(model=fn.model, convert_to_llm=list,
                                         tool_execution=execution),  # type: ignore[arg-type]
                         rec, signal=controller.signal, stream_fn=fn)
    assert aborted_ends(rec) == {"call_1": (True, "Operation aborted"),
                                 "call_2": (True, "Operation aborted")}
    assert [m.content[0].text for m in new if m.role == "toolResult"] == [
        "Operation aborted", "Operation aborted"]
    assert_every_call_answered(new)


def test_every_call_of_an_aborted_sequential_batch_is_answered() -> None:
    controller = AbortController()
    ran: list[str] = []

    def execute(tool_call_id: str, *args: Any) -> AgentToolResult:
        ran.append(tool_call_id)
        controller.abort()
        return AgentToolResult(content=[TextContent("first")])

    fn = ScriptedStreamFn([assistant_tool_calls(*[("read", {"path": p}) for p in "abc"])])
    rec = Recorder()
    new = run_agent_loop([UserMessage("go")], context_for(make_tool(execute=execute)),
                         AgentLoopConfig(model=fn.model, convert_to_llm=list,
                                         tool_execution="sequential"),
                         rec, signal=controller.signal, stream_fn=fn)
    assert ran == ["call_1"]
    assert batch_rows(rec) == answered_rows("call_1", "call_2", "call_3")
    assert aborted_ends(rec) == {"call_1": (False, "first"),
                                 "call_2": (True, "Operation aborted"),
                                 "call_3": (True, "Operation aborted")}
    assert [getattr(m, "tool_call_id", m.role) for m in new] == [
        "user", "assistant", "call_1", "call_2", "call_3", "assistant"]
    assert_every_call_answered(new)


def test_a_parallel_call_not_started_before_the_abort_is_not_executed() -> None:
    controller = AbortController()
    ran: list[str] = []
    started = threading.Event()

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        ran.append(tool_call_id)
        controller.abort()
        started.set()
        return AgentToolResult(content=[TextContent("one")])

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"}),
                                                ("read", {"path": "b"}))])
    rec = Recorder()
    run_agent_loop([UserMessage("go")], context_for(make_tool(execute=execute)),
                   AgentLoopConfig(model=fn.model, convert_to_llm=list, max_parallel_tools=1),
                   rec, signal=controller.signal, stream_fn=fn)
    assert started.is_set() and ran == ["call_1"]
    ends = {e.tool_call_id: e for e in rec.events if e.type == "tool_execution_end"}
    assert ends["call_2"].is_error
    assert ends["call_2"].result.content[0].text == "Operation aborted"


def test_finish_turn_continue_makes_no_request_after_an_abort() -> None:
    controller = AbortController()
    fn = ScriptedStreamFn([assistant_text("one"), assistant_text("two")])

    def finish_turn(turn: Any, signal: AbortSignal) -> str:
        controller.abort()
        return "continue"

    rec = Recorder()
    run_agent_loop([UserMessage("go")], AgentContext(), AgentLoopConfig(
        model=fn.model, convert_to_llm=list, finish_turn=finish_turn), rec,
        signal=controller.signal, stream_fn=fn)
    assert fn.call_count == 1
    assert rec.rows()[-2:] == [("turn_end",), ("agent_end",)]


def test_agent_loop_abort_from_another_thread_settles_the_stream() -> None:
    controller = AbortController()
    entered = threading.Event()

    def execute(tool_call_id: str, params: Any, signal: AbortSignal,
                on_update: Callable[[Any], None]) -> AgentToolResult:
        entered.set()
        assert signal.wait(5)  # a long tool that honours the signal
        return AgentToolResult(content=[TextContent("cancelled")], is_error=True)

    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("no")])
    stream = agent_loop([UserMessage("go")], context_for(make_tool(execute=execute)),
                        AgentLoopConfig(model=fn.model, convert_to_llm=list),
                        signal=controller.signal, stream_fn=fn)
    assert entered.wait(5)
    controller.abort()
    new = stream.result(5)
    assert fn.call_count == 1
    assert [m.role for m in new] == ["user", "assistant", "toolResult", "assistant"]
    assert new[-1].stop_reason == "aborted"  # type: ignore[union-attr]
