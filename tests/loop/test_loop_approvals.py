"""Tool calls waiting for approval in the low-level loop: the batch runs the rest, holds back
the later results, reports the waiting calls and ends; ``run_agent_loop_resume`` with the
decisions completes the batch in source order and goes on (docs/approvals.md)."""

from __future__ import annotations

from typing import Any

import pytest

from piagent import (
    AgentEvent,
    ApprovalDecision,
    BeforeToolCallContext,
    BeforeToolCallResult,
    PendingApproval,
    ToolApprovalRequestEvent,
    ToolResultMessage,
    UserMessage,
    event_to_dict,
    run_agent_loop,
    tool,
)
from piagent.loop import run_agent_loop_resume, unanswered_tool_calls
from piagent.sessions import approval_digest
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import logging_tool as make

from .conftest import context_for, make_config


def text_of(message: Any) -> str:
    return "".join(c.text for c in message.content)


class Waits:
    """The loop's ``on_approval_wait`` calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[PendingApproval], list[ToolResultMessage]]] = []

    def __call__(self, pending: list[PendingApproval], held: list[ToolResultMessage]) -> None:
        self.calls.append((pending, held))


def types(events: list[AgentEvent]) -> list[str]:
    return [e.type for e in events]


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_a_batch_runs_the_rest_and_ends_waiting_without_a_request(mode: str) -> None:
    log: list[str] = []
    tools = [make("free", log), make("guarded", log, needs_approval=True)]
    asked = assistant_tool_calls(("free", {"n": 1}, "1"), ("guarded", {"n": 2}, "2"),
                                 ("free", {"n": 3}, "3"))
    fn = ScriptedStreamFn([asked, assistant_text("never asked")])
    waits = Waits()
    events: list[AgentEvent] = []
    new = run_agent_loop([UserMessage("go")], context_for(*tools), make_config(
        fn, tool_execution=mode, on_approval_wait=waits), events.append, stream_fn=fn)
    assert sorted(log) == ["1", "3"]
    assert len(fn.calls) == 1  # no request while a decision is missing
    # call 1's result precedes the waiting call: recorded; call 3's is held back
    assert [getattr(m, "tool_call_id", None) for m in new] == [None, None, "1"]
    assert types(events)[-2:] == ["tool_approval_request", "agent_end"]
    assert "turn_end" not in types(events)
    request = events[-2]
    assert isinstance(request, ToolApprovalRequestEvent)
    assert (request.tool_call_id, request.tool_name, request.args) == ("2", "guarded", {"n": 2})
    assert request.digest == approval_digest("guarded", {"n": 2})
    assert event_to_dict(request) == {"type": "tool_approval_request", "toolCallId": "2",
                                      "toolName": "guarded", "args": {"n": 2},
                                      "digest": request.digest, "callKey": "2:1"}
    [(pending, held)] = waits.calls
    # the key: the assistant message's position in the transcript, the call's index
    assert pending == [PendingApproval("2", "guarded", {"n": 2}, request.digest, None, "2:1")]
    assert [m.tool_call_id for m in held] == ["3"] and text_of(held[0]) == "free 3 ok"


@pytest.mark.parametrize("approved", [True, False])
@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_resuming_with_the_decision_completes_the_batch_in_source_order(
        mode: str, approved: bool) -> None:
    log: list[str] = []
    seen: list[ApprovalDecision | None] = []

    def before(ctx: BeforeToolCallContext, signal: Any) -> BeforeToolCallResult:
        seen.append(ctx.approval)
        return BeforeToolCallResult(needs_approval=True)  # ignored once decided

    tools = [make("free", log), make("guarded", log, needs_approval=True)]
    asked = assistant_tool_calls(("free", {}, "1"), ("guarded", {}, "2"), ("free", {}, "3"))
    fn = ScriptedStreamFn([asked, assistant_text("done")])
    waits = Waits()
    first = run_agent_loop([UserMessage("go")], context_for(*tools), make_config(
        fn, tool_execution=mode, on_approval_wait=waits, before_tool_call=before), [].append,
        stream_fn=fn)
    [(pending, held)] = waits.calls
    # the free calls were asked for approval by the hook too: they wait as well
    assert [p.tool_call_id for p in pending] == ["1", "2", "3"] and held == []
    assert log == [] and seen == [None, None]

    # decide: the hook's own asks are decided too
    log.clear()
    seen.clear()
    decisions = {"1": ApprovalDecision(True), "3": ApprovalDecision(True),
                 "2": ApprovalDecision(approved, "too risky")}
    context = context_for(*tools, messages=(*first,))
    marked: list[str] = []
    events: list[AgentEvent] = []
    config = make_config(fn, tool_execution=mode, approvals=decisions, before_tool_call=before,
                         on_tool_execute=lambda c: marked.append(c.id))
    new = run_agent_loop_resume(context, config, events.append, stream_fn=fn)
    ran = ["1", "2", "3"] if approved else ["1", "3"]
    assert sorted(log) == ran and sorted(marked) == ran
    assert [d.approved for d in seen if d is not None] == [True] * len(ran)
    results = [m for m in new if isinstance(m, ToolResultMessage)]
    assert [m.tool_call_id for m in results] == ["1", "2", "3"]
    assert text_of(results[1]) == ("guarded 2 ok" if approved
                                   else "Tool call denied by the user: too risky")
    assert results[1].is_error is (not approved)
    assert new[-1].content[0].text == "done" and len(fn.calls) == 2
    assert types(events)[:2] == ["agent_start", "turn_start"] and types(events)[-1] == "agent_end"


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_held_results_are_not_run_again(mode: str) -> None:
    log: list[str] = []
    tools = [make("free", log), make("guarded", log, needs_approval=lambda args: args["x"])]
    asked = assistant_tool_calls(("guarded", {"x": True}, "1"), ("free", {}, "2"),
                                 ("guarded", {"x": False}, "3"))
    fn = ScriptedStreamFn([asked, assistant_text("done")])
    waits = Waits()
    first = run_agent_loop([UserMessage("go")], context_for(*tools), make_config(
        fn, tool_execution=mode, on_approval_wait=waits), [].append, stream_fn=fn)
    assert sorted(log) == ["2", "3"]  # the function said call 3 needs none
    [(pending, held)] = waits.calls
    assert [p.tool_call_id for p in pending] == ["1"]
    assert [m.tool_call_id for m in held] == ["2", "3"]
    log.clear()
    events: list[AgentEvent] = []
    config = make_config(fn, tool_execution=mode, approvals={"1": ApprovalDecision(False)},
                         held_results=held)
    new = run_agent_loop_resume(context_for(*tools, messages=(*first,)), config,
                                events.append, stream_fn=fn, started={"2", "3"})
    assert log == []  # held results are used, not run again, started marks or not
    results = [m for m in new if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, text_of(m)) for m in results] == [
        ("1", "Tool call denied by the user."), ("2", "free 2 ok"), ("3", "guarded 3 ok")]
    started = [e.tool_call_id for e in events if e.type == "tool_execution_start"]
    assert started == ["1"]  # the held calls' events were sent when they ran
    turn_end = next(e for e in events if e.type == "turn_end")
    assert [m.tool_call_id for m in turn_end.tool_results] == ["1", "2", "3"]


def test_an_aborted_run_waits_for_nothing() -> None:
    log: list[str] = []
    tools = [make("guarded", log, needs_approval=True)]
    fn = ScriptedStreamFn([assistant_tool_calls(("guarded", {}, "1"))])
    waits = Waits()
    events: list[AgentEvent] = []

    from piagent import AbortController
    controller = AbortController()

    def before(ctx: BeforeToolCallContext, signal: Any) -> BeforeToolCallResult:
        controller.abort()
        return BeforeToolCallResult(needs_approval=True)

    tools = [make("guarded", log)]
    new = run_agent_loop([UserMessage("go")], context_for(*tools), make_config(
        fn, on_approval_wait=waits, before_tool_call=before), events.append,
        signal=controller.signal, stream_fn=fn)
    assert waits.calls == [] and log == []
    results = [m for m in new if isinstance(m, ToolResultMessage)]
    assert [text_of(m) for m in results] == ["Operation aborted"]


def test_the_tools_function_and_the_hook_can_ask() -> None:
    log: list[str] = []
    checked: list[Any] = []

    @tool(needs_approval=lambda args: checked.append(args) or args["path"].startswith("/etc"))
    def write(path: str) -> str:
        """Write.

        Args:
            path: where
        """
        log.append(path)
        return "written"

    assert write.needs_approval is not False
    fn = ScriptedStreamFn([assistant_tool_calls(("write", {"path": "/etc/x"}, "1"),
                                                ("write", {"path": "/tmp/x"}, "2"))])
    waits = Waits()
    run_agent_loop([UserMessage("go")], context_for(write), make_config(
        fn, on_approval_wait=waits), [].append, stream_fn=fn)
    assert log == ["/tmp/x"] and checked == [{"path": "/etc/x"}, {"path": "/tmp/x"}]
    assert [p.tool_call_id for p in waits.calls[0][0]] == ["1"]


def test_a_call_that_waits_is_left_unanswered_in_the_transcript() -> None:
    fn = ScriptedStreamFn([assistant_tool_calls(("guarded", {}, "1"))])
    new = run_agent_loop([UserMessage("go")], context_for(make("guarded", [], True)),
                         make_config(fn), [].append, stream_fn=fn)
    found = unanswered_tool_calls(new)
    assert found is not None and [c.id for c in found[1]] == ["1"]


def test_needs_approval_must_be_a_bool_or_a_function() -> None:
    with pytest.raises(TypeError, match="needs_approval must be True, False or a function"):
        make("x", [], needs_approval="yes")
