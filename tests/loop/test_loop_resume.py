"""``run_agent_loop_resume``: the loop finishes a batch a stopped process left, by each tool's
``replay``, and ``on_tool_execute`` runs just before each ``execute`` (docs/sessions.md)."""

from __future__ import annotations

from typing import Any

import pytest

from piagent import (
    AgentEvent,
    AgentTool,
    AgentToolResult,
    BeforeToolCallContext,
    BeforeToolCallResult,
    TextContent,
    ToolCall,
    UserMessage,
)
from piagent.loop import run_agent_loop, run_agent_loop_resume, unanswered_tool_calls
from piagent.messages import ToolResultMessage
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from .conftest import context_for, make_config


def tool(name: str, log: list[str], replay: Any = None) -> AgentTool:
    def execute(call_id: str, *args: Any) -> AgentToolResult:
        log.append(call_id)
        return AgentToolResult(content=[TextContent(f"{name} ok")])

    return AgentTool(name=name, description=name, parameters={"type": "object"},
                     execute=execute, replay=replay)


def test_unanswered_calls_are_the_last_assistant_messages_open_calls() -> None:
    asked = assistant_tool_calls(("a", {}, "1"), ("b", {}, "2"))
    answer = ToolResultMessage(tool_call_id="1", tool_name="a", content=[])
    found = unanswered_tool_calls([UserMessage("go"), asked, answer])
    assert found is not None and found[0] is asked and [c.id for c in found[1]] == ["2"]
    assert unanswered_tool_calls([UserMessage("go")]) is None
    assert unanswered_tool_calls([asked, answer, ToolResultMessage(
        tool_call_id="2", tool_name="b", content=[])]) is None
    failed = assistant_tool_calls(("a", {}, "1"), stop_reason="error")
    assert unanswered_tool_calls([UserMessage("go"), failed]) is None


def test_resume_runs_unstarted_and_safe_calls_and_answers_the_rest() -> None:
    log: list[str] = []
    tools = [tool("safe", log, "safe"), tool("never", log, "never"), tool("unset", log)]
    asked = assistant_tool_calls(("safe", {}, "1"), ("never", {}, "2"), ("unset", {}, "3"),
                                 ("unset", {}, "4"))
    context = context_for(*tools, messages=(UserMessage("go"), asked))
    fn = ScriptedStreamFn([assistant_text("done")])
    marked: list[str] = []
    config = make_config(fn, on_tool_execute=lambda call: marked.append(call.id))
    events: list[AgentEvent] = []
    new = run_agent_loop_resume(context, config, events.append, stream_fn=fn,
                                started={"1", "2", "3"})
    assert sorted(log) == ["1", "4"] and sorted(marked) == ["1", "4"]
    results = [m for m in new if isinstance(m, ToolResultMessage)]
    assert [(r.tool_call_id, r.is_error) for r in results] == [
        ("1", False), ("2", True), ("3", True), ("4", False)]
    assert "outcome is unknown" in results[1].content[0].text  # type: ignore[union-attr]
    assert new[-1].role == "assistant"
    assert [e.type for e in events][:2] == ["agent_start", "turn_start"]
    assert events[-1].type == "agent_end"
    assert len(context.messages) == 3  # the caller's context is not changed


def test_resume_with_no_open_batch_is_continue() -> None:
    fn = ScriptedStreamFn([assistant_text("hi")])
    context = context_for(messages=(UserMessage("hello"),))
    new = run_agent_loop_resume(context, make_config(fn), lambda e: None, stream_fn=fn)
    assert [m.role for m in new] == ["assistant"]
    done = context_for(messages=(UserMessage("hello"), assistant_text("hi")))
    with pytest.raises(ValueError, match="Cannot continue from message role: assistant"):
        run_agent_loop_resume(done, make_config(fn), lambda e: None, stream_fn=fn)


def test_on_tool_execute_is_not_called_for_blocked_or_unknown_calls() -> None:
    log: list[str] = []
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {}, "1"), ("nope", {}, "2"),
                                                ("read", {}, "3")),
                           assistant_text("done")])
    marked: list[ToolCall] = []

    def block_third(ctx: BeforeToolCallContext, signal: Any) -> BeforeToolCallResult | None:
        return BeforeToolCallResult(block=True) if ctx.tool_call.id == "3" else None

    config = make_config(fn, on_tool_execute=marked.append, before_tool_call=block_third)
    run_agent_loop([UserMessage("go")], context_for(tool("read", log)), config,
                   lambda e: None, stream_fn=fn)
    assert [c.id for c in marked] == ["1"] and log == ["1"]
