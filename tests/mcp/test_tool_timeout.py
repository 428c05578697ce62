"""A tool timeout on an MCP server's tool (``hold_server.py``, whose call holds until the
test releases it): the smaller of the tool's timeout and the server's ``call_timeout``
answers the call, and either way the call is cancelled on the server (its late answer is
dropped)."""

from __future__ import annotations

from piagent import Agent, ToolResultMessage
from piagent.mcp import MCPServer
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from tests.conftest import WAIT

from .conftest import HoldServer


def held_call(hold_server: HoldServer, tag: str, *, tool_timeout: float,
              call_timeout: float) -> tuple[list[ToolResultMessage], str]:
    """An agent calls ``hold`` with these limits; its results and its final text, once the
    server said it received the cancellation and answered (late) after its release."""
    with MCPServer.http(hold_server.url, call_timeout=call_timeout) as server:
        scripted = ScriptedStreamFn([assistant_tool_calls(("hold", {"tag": tag})),
                                     assistant_text("went on")])
        agent = Agent(model=scripted.model, tools=server.tools(), stream_fn=scripted,
                      tool_timeout=tool_timeout)
        run = agent.prompt("hold on", timeout=WAIT)
        line = hold_server.output.find(f"MARK started {tag} ", WAIT)
        assert line is not None, hold_server.output.seen
        request_id = hold_server.output.seen[line].split()[-1]
        assert hold_server.output.wait_for(f"MARK cancel {request_id}\n", WAIT, since=line), \
            hold_server.output.seen[line:]
        hold_server.release(tag)
        assert hold_server.output.wait_for(f"MARK answered {tag}\n", WAIT, since=line)
        assert f"released {tag}" not in repr(agent.state.messages)
        return [m for m in run.messages if isinstance(m, ToolResultMessage)], run.text


def test_the_tool_timeout_fires_first_and_the_call_is_cancelled_on_the_server(
        hold_server: HoldServer) -> None:
    tag = f"tool-timeout-{hold_server.kind}-{hold_server.mode}"
    results, text = held_call(hold_server, tag, tool_timeout=0.3, call_timeout=WAIT * 3)
    assert [(r.is_error, r.text) for r in results] == [
        (True, "Tool 'hold' timed out after 0.3 s; it was abandoned and its result will not "
               "be used.")]
    assert text == "went on"


def test_a_smaller_call_timeout_answers_first(hold_server: HoldServer) -> None:
    tag = f"call-timeout-{hold_server.kind}-{hold_server.mode}"
    results, text = held_call(hold_server, tag, tool_timeout=WAIT * 3, call_timeout=0.3)
    assert len(results) == 1 and results[0].is_error
    assert "did not answer tools/call within 0.3 s" in results[0].text
    assert text == "went on"

