"""``AgentLoopConfig(limits=..., output_type=...)``: the low-level loop keeps the same limits
and typed output as the ``Agent`` (the guard lives in the loop layer)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

import piagent.loop._guard as guard_module
from piagent import Agent, AgentContext, AgentLoopConfig, Limits, default_convert_to_llm, tool
from piagent.loop import run_agent_loop
from piagent.messages import AssistantMessage, UserMessage
from piagent.testing import ScriptedStreamFn, assistant_tool_calls
from tests.conftest import Recorder


@tool
def poke() -> str:
    """Poke the system."""
    return "poked"


def test_a_loop_config_limit_ends_a_model_that_never_stops() -> None:
    scripted = ScriptedStreamFn([assistant_tool_calls(("poke", {}))] * 10)
    config = AgentLoopConfig(model=scripted.model, convert_to_llm=default_convert_to_llm,
                             limits=Limits(max_requests=3))
    messages = run_agent_loop([UserMessage("Go.")], AgentContext([], [poke]), config,
                              Recorder(), stream_fn=scripted)
    assert scripted.call_count == 3
    last = messages[-1]
    assert isinstance(last, AssistantMessage) and last.stop_reason == "error"
    assert last.error_message == "The run reached its limit max_requests=3: 3 requests made."


@dataclass
class Answer:
    value: int


def test_a_loop_config_output_type_adds_the_final_result_tool() -> None:
    scripted = ScriptedStreamFn([assistant_tool_calls(("final_result", {"value": 42}))])
    config = AgentLoopConfig(model=scripted.model, convert_to_llm=default_convert_to_llm,
                             output_type=Answer)
    messages = run_agent_loop([UserMessage("Answer.")], AgentContext([], []), config,
                              Recorder(), stream_fn=scripted)
    assert scripted.call_count == 1
    assert messages[-1].role == "toolResult" and not messages[-1].is_error  # type: ignore[union-attr]


def test_a_wrong_limits_value_is_refused_at_the_call() -> None:
    with pytest.raises(TypeError, match="limits must be a piagent.Limits or None, not dict"):
        AgentLoopConfig(model=None, convert_to_llm=default_convert_to_llm,
                        limits={"max_requests": 1})  # type: ignore[arg-type]


def test_wall_time_is_checked_before_each_request(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]  # the guard's clock: each tool call takes ten "seconds"

    @tool
    def slow() -> str:
        """Take a while."""
        clock[0] += 10.0
        return "done"

    monkeypatch.setattr(guard_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    scripted = ScriptedStreamFn([assistant_tool_calls(("slow", {}))] * 10)
    agent = Agent(model=scripted.model, tools=[slow], stream_fn=scripted,
                  limits=Limits(max_seconds=25.0))
    run = agent.prompt("Go.")
    assert scripted.call_count == 3
    assert run.error_message == "The run reached its limit max_seconds=25: 30 s elapsed."


