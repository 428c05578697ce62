"""The seed's "Cạm bẫy và trường hợp biên" list, one test each, kept or fixed as api.md says.

The abort pitfalls (abort does not stop the loop at once; orphan tool calls after an aborted
sequential batch) live in ``test_loop_abort.py``; the continue guards in ``test_loop.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from piagent import (
    AgentContext,
    AgentLoopConfig,
    AgentLoopError,
    AgentToolResult,
    TextContent,
    ToolResultMessage,
    UserMessage,
    agent_loop,
    agent_loop_continue,
    message_to_dict,
    run_agent_loop,
    run_agent_loop_continue,
)
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.tools.conftest import make_tool

from .conftest import context_for

pytestmark = pytest.mark.usefixtures("no_thread_leak")



def test_pitfall_a_raising_hook_no_longer_hangs_agent_loop() -> None:
    """Fixed: the stream ends with AgentLoopError chained to the cause (iteration, result)."""
    cause = ValueError("convert_to_llm broke its contract")

    def convert(messages: list[Any]) -> list[Any]:
        raise cause

    fn = ScriptedStreamFn([assistant_text("ok")])
    stream = agent_loop([UserMessage("go")], AgentContext(),
                        AgentLoopConfig(model=fn.model, convert_to_llm=convert), stream_fn=fn)
    with pytest.raises(AgentLoopError) as iterated:
        list(stream)
    assert iterated.value.__cause__ is cause
    with pytest.raises(AgentLoopError) as waited:
        stream.result(5)
    assert waited.value.__cause__ is cause
    assert fn.call_count == 0


@pytest.mark.parametrize("entry", ["run_agent_loop", "run_agent_loop_continue", "agent_loop",
                                   "agent_loop_continue"])
def test_pitfall_no_entry_point_mutates_the_callers_context(entry: str) -> None:
    """Fixed for agent_loop_continue (the seed's appends to the caller's array)."""
    tools = [make_tool()]
    messages: list[Any] = [*context_for(*tools).messages, UserMessage("go")]
    context = AgentContext(messages, tools)
    before_messages, before_tools = list(messages), list(tools)
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})), assistant_text("ok")])
    config = AgentLoopConfig(model=fn.model, convert_to_llm=list)
    prompts = [UserMessage("more")]
    if entry == "run_agent_loop":
        new = run_agent_loop(prompts, context, config, lambda e: None, stream_fn=fn)
    elif entry == "run_agent_loop_continue":
        new = run_agent_loop_continue(context, config, lambda e: None, stream_fn=fn)
    elif entry == "agent_loop":
        new = agent_loop(prompts, context, config, stream_fn=fn).result(5)
    else:
        new = agent_loop_continue(context, config, stream_fn=fn).result(5)
    assert len(new) >= 3
    assert context.messages is messages and messages == before_messages
    assert context.tools is tools and tools == before_tools


def test_pitfall_state_changes_mid_run_do_not_take_effect() -> None:
    """The loop works on a snapshot: the caller's lists changed mid-run are not seen."""
    late_tool = make_tool("write")
    context = context_for(make_tool(), messages=(UserMessage("go"),))

    def execute(*args: Any) -> AgentToolResult:
        context.tools.append(late_tool)  # e.g. the app assigns new tools during a run
        context.messages.append(UserMessage("edited in"))
        return AgentToolResult(content=[TextContent("ok")])

    context.tools = [make_tool(execute=execute)]
    fn = ScriptedStreamFn([assistant_tool_calls(("read", {"path": "a"})),
                           assistant_tool_calls(("write", {"path": "b"})), assistant_text("ok")])
    new = run_agent_loop_continue(context, AgentLoopConfig(model=fn.model, convert_to_llm=list),
                                  lambda e: None, stream_fn=fn)
    second = fn.calls[1].context.messages
    assert [m.role for m in second] == ["system", "user", "assistant", "toolResult"]
    results = [m for m in new if isinstance(m, ToolResultMessage)]
    assert results[1].tool_name == "write" and results[1].is_error
    assert results[1].content[0].text == "Tool write not found"  # type: ignore[union-attr]


def test_pitfall_an_unconditional_continue_loops_until_the_hook_says_end() -> None:
    """Kept: "continue" re-runs after the request it asked for; a counter bounds it here."""
    turns: list[int] = []

    def finish_turn(turn: Any, signal: Any) -> str:
        turns.append(len(turns) + 1)
        return "end" if len(turns) == 5 else "continue"

    fn = ScriptedStreamFn([assistant_text(f"answer {i}") for i in range(1, 8)])
    run_agent_loop([UserMessage("go")], AgentContext(),
                   AgentLoopConfig(model=fn.model, convert_to_llm=list, finish_turn=finish_turn),
                   lambda e: None, stream_fn=fn)
    assert turns == [1, 2, 3, 4, 5]
    assert fn.call_count == 5 and fn.remaining == 2


def test_pitfall_terminate_is_not_stored_in_the_transcript() -> None:
    """Kept: terminate (and structured content) live only on tool_execution_end."""
    def done(*args: Any) -> AgentToolResult:
        return AgentToolResult(content=[TextContent("finished")], structured_content={"ok": 1},
                               terminate=True)

    ends: list[Any] = []
    fn = ScriptedStreamFn([assistant_tool_calls(("done", {"path": "a"}))])
    new = run_agent_loop([UserMessage("go")], context_for(make_tool("done", done)),
                         AgentLoopConfig(model=fn.model, convert_to_llm=list),
                         lambda e: ends.append(e) if e.type == "tool_execution_end" else None,
                         stream_fn=fn)
    assert ends[0].result.terminate is True and ends[0].result.structured_content == {"ok": 1}
    stored = new[-1]
    assert isinstance(stored, ToolResultMessage)
    assert not hasattr(stored, "terminate") and not hasattr(stored, "structured_content")
    as_json = message_to_dict(stored)
    assert "terminate" not in as_json and "structuredContent" not in as_json
    assert fn.call_count == 1


def test_pitfall_the_loop_passes_system_messages_to_convert_to_llm() -> None:
    """The prompt and tool declarations travel as system messages through convert_to_llm."""
    seen: list[list[str]] = []
    fn = ScriptedStreamFn([assistant_text("ok")])
    run_agent_loop([UserMessage("go")], context_for(make_tool()),
                   AgentLoopConfig(model=fn.model, convert_to_llm=lambda ms: seen.append(
                       [m.role for m in ms]) or list(ms)), lambda e: None, stream_fn=fn)
    assert seen == [["system", "user"]]
