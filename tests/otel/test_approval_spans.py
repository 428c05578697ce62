"""A call waiting for approval ends its ``execute_tool`` span when the run ends waiting (it
did not run), and the completing run traces the call as it executes."""

from __future__ import annotations

from typing import Any

from piagent import Agent, AgentTool, AgentToolResult, TextContent
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

from ..conftest import WAIT
from .conftest import Spans


def test_a_waiting_calls_span_ends_marked_and_the_approved_call_is_traced(spans: Spans) -> None:
    def execute(call_id: str, *args: Any) -> AgentToolResult:
        return AgentToolResult(content=[TextContent("done")])

    guarded = AgentTool(name="guarded", description="g", parameters={"type": "object"},
                        execute=execute, needs_approval=True)
    fn = ScriptedStreamFn([assistant_tool_calls(("guarded", {}, "c1")), assistant_text("ok")])
    agent = Agent(model=fn.model, stream_fn=fn, tools=[guarded])
    assert agent.prompt("go", timeout=WAIT).waiting
    [waited] = spans.named("execute_tool guarded")
    assert waited.attributes is not None
    assert waited.attributes["piagent.tool.waiting_for_approval"] is True
    run = agent.approve("c1")
    assert run is not None and run.wait(WAIT)
    executed = [s for s in spans.named("execute_tool guarded") if s is not waited]
    assert len(executed) == 1 and len(spans.named("invoke_agent support")) == 2
