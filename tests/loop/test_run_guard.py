"""``guard=`` on the loop's entry points: the one place a run is assembled (``Run``) wires a
guard the caller made, so the caller reads its outcome afterwards, and the run closes it.
The ``Agent`` runs through the same path (its limits and typed output)."""

from __future__ import annotations

from dataclasses import dataclass

from piagent import Agent, AgentContext, AgentLoopConfig, Limits, default_convert_to_llm, tool
from piagent.loop import make_guard, run_agent_loop, run_agent_loop_continue
from piagent.messages import AssistantMessage, UserMessage
from piagent.testing import ScriptedStreamFn, assistant_tool_calls
from tests.conftest import Recorder


@tool
def poke() -> str:
    """Poke the system."""
    return "poked"


@dataclass
class Answer:
    value: int


def _config(scripted: ScriptedStreamFn) -> AgentLoopConfig:
    return AgentLoopConfig(model=scripted.model, convert_to_llm=default_convert_to_llm)


def test_a_guard_given_to_run_agent_loop_ends_the_run_and_says_which_limit() -> None:
    scripted = ScriptedStreamFn([assistant_tool_calls(("poke", {}))] * 10)
    guard = make_guard(Limits(max_requests=2), None)
    assert guard is not None
    messages = run_agent_loop([UserMessage("Go.")], AgentContext([], [poke]), _config(scripted),
                              Recorder(), stream_fn=scripted, guard=guard)
    assert scripted.call_count == 2
    assert guard.hit is not None and guard.hit.limit == "max_requests"
    last = messages[-1]
    assert isinstance(last, AssistantMessage) and last.error_message == guard.hit.message


def test_a_guard_given_to_a_continuation_holds_the_typed_output() -> None:
    scripted = ScriptedStreamFn([assistant_tool_calls(("final_result", {"value": 7}))])
    guard = make_guard(None, Answer)
    assert guard is not None
    run_agent_loop_continue(AgentContext([UserMessage("Answer.")], []), _config(scripted),
                            Recorder(), stream_fn=scripted, guard=guard)
    assert guard.value == Answer(7) and guard.hit is None


def test_the_agent_wires_its_guard_through_the_loop_once() -> None:
    # the guard's hooks wrap the config once: a second wiring would count each request twice
    scripted = ScriptedStreamFn([assistant_tool_calls(("poke", {}))] * 10)
    agent = Agent(model=scripted.model, tools=[poke], stream_fn=scripted,
                  limits=Limits(max_requests=3, max_tool_calls=3))
    run = agent.prompt("Go.")
    assert scripted.call_count == 3
    assert run.limit_hit is not None and run.limit_hit.limit == "max_requests"
    assert run.limit_hit.used == 3

