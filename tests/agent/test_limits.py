"""``Agent(limits=...)``: a run ends at a limit with an error naming it, within one request."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from piagent import (
    Agent,
    AssistantMessage,
    Budget,
    Cost,
    LimitHit,
    Limits,
    Model,
    ModelCost,
    ToolResultMessage,
    Usage,
    tool,
)
from piagent.sessions import MemoryStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls


@tool
def poke() -> str:
    """Poke the system."""
    return "poked"


def costly(message: AssistantMessage, *, input: int = 0, output: int = 0,
           cost: float = 0.0) -> AssistantMessage:
    message.usage = Usage(input=input, output=output, total_tokens=input + output,
                          cost=Cost(total=cost))
    return message


def forever(**usage: Any) -> ScriptedStreamFn:
    """A model that calls ``poke`` for ever (1000 responses)."""
    return ScriptedStreamFn([costly(assistant_tool_calls(("poke", {})), **usage)] * 1000)


def test_a_model_that_never_stops_ends_at_the_request_limit() -> None:
    scripted = forever()
    agent = Agent(model=scripted.model, tools=[poke], stream_fn=scripted,
                  limits=Limits(max_requests=5))
    run = agent.prompt("Poke until something happens.")
    assert scripted.call_count == 5
    assert run.error_message == "The run reached its limit max_requests=5: 5 requests made."
    assert run.limit_hit == LimitHit("max_requests", 5, 5, run.error_message)
    last = run.messages[-1]
    assert isinstance(last, AssistantMessage) and last.stop_reason == "error"
    assert last.usage == Usage()  # the refusal asked no model
    # every request's tool calls got their results before the refusal
    assert sum(isinstance(m, ToolResultMessage) for m in run.messages) == 5
    assert agent.state.error_message == run.error_message


def test_a_run_within_its_limits_has_no_limit_hit() -> None:
    scripted = ScriptedStreamFn([assistant_tool_calls(("poke", {})), assistant_text("done")])
    agent = Agent(model=scripted.model, tools=[poke], stream_fn=scripted,
                  limits=Limits(max_requests=2, max_tool_calls=1))
    run = agent.prompt("Poke once.")
    assert run.error_message is None and run.limit_hit is None
    assert run.text == "done"


@pytest.mark.parametrize(("limits", "per_request", "requests", "name", "used"), [
    (Limits(max_input_tokens=1000), {"input": 300}, 4, "max_input_tokens", 1200),
    (Limits(max_output_tokens=100), {"output": 40}, 3, "max_output_tokens", 120),
    (Limits(max_total_tokens=500), {"input": 100, "output": 50}, 4, "max_total_tokens", 600),
    (Limits(max_cost=0.05), {"cost": 0.02}, 3, "max_cost", 0.06),
])
def test_token_and_cost_limits_end_the_run_within_one_request(
        limits: Limits, per_request: dict[str, Any], requests: int, name: str,
        used: float) -> None:
    scripted = forever(**per_request)
    agent = Agent(model=scripted.model, tools=[poke], stream_fn=scripted, limits=limits)
    run = agent.prompt("Go.")
    assert scripted.call_count == requests  # the request that crossed the limit, no more
    hit = run.limit_hit
    assert hit is not None and hit.limit == name and hit.used == pytest.approx(used)
    assert run.error_message == hit.message and f"limit {name}=" in hit.message


def test_cost_comes_from_the_catalogue_prices_when_the_stream_left_it_zero() -> None:
    scripted = forever(input=1_000_000)  # usage.cost.total stays 0
    model = Model(id="priced", api="scripted", provider="scripted", base_url="",
                  cost=ModelCost(input=2.0))  # USD per million input tokens
    agent = Agent(model=model, tools=[poke], stream_fn=scripted, limits=Limits(max_cost=5.0))
    run = agent.prompt("Go.")
    assert scripted.call_count == 3
    assert run.error_message == "The run reached its limit max_cost=5: 6 USD spent."


def test_the_tool_call_limit_refuses_calls_beyond_it_then_ends_the_run() -> None:
    ran: list[str] = []

    @tool
    def work(n: int) -> str:
        """Work.

        Args:
            n: Which piece.
        """
        ran.append(str(n))
        return "ok"

    scripted = ScriptedStreamFn([assistant_tool_calls(("work", {"n": 1}), ("work", {"n": 2})),
                                 assistant_tool_calls(("work", {"n": 3}), ("work", {"n": 4})),
                                 assistant_text("never asked")])
    agent = Agent(model=scripted.model, tools=[work], stream_fn=scripted,
                  tool_execution="sequential", limits=Limits(max_tool_calls=3))
    run = agent.prompt("Work.")
    assert ran == ["1", "2", "3"]
    refused = [m for m in run.messages if isinstance(m, ToolResultMessage)][-1]
    assert refused.is_error
    assert refused.text == "Tool call refused: the run reached its tool call limit (max_tool_calls=3)."
    assert scripted.call_count == 2
    assert run.error_message == ("The run reached its limit max_tool_calls=3: 3 tool calls "
                                 "made, 1 refused.")


def test_the_final_result_tool_is_not_a_counted_tool_call() -> None:
    scripted = ScriptedStreamFn([assistant_tool_calls(("poke", {})),
                                 assistant_tool_calls(("final_result", {"result": "ok"}))])
    agent = Agent(model=scripted.model, tools=[poke], stream_fn=scripted,
                  limits=Limits(max_tool_calls=1))
    run = agent.prompt("Poke once, then answer.", output_type=str)
    assert run.output == "ok" and run.limit_hit is None


def test_the_limit_message_arrives_with_the_usual_events() -> None:
    scripted = forever()
    agent = Agent(model=scripted.model, tools=[poke], stream_fn=scripted,
                  limits=Limits(max_requests=1))
    run = agent.prompt("Go.")
    tail = [e.type for e in run.events()][-6:]
    assert tail == ["turn_end", "turn_start", "message_start", "message_end", "turn_end",
                    "agent_end"]
    assert agent.state.messages[-1] is run.messages[-1]


def test_a_budget_is_shared_by_runs_and_agents() -> None:
    store = MemoryStore()
    budget = Budget(store, "user:42", max_cost=0.10)
    scripted = forever(cost=0.03)
    first = Agent(model=scripted.model, tools=[poke], stream_fn=scripted,
                  limits=Limits(max_requests=2, budget=budget))
    assert first.prompt("Go.").limit_hit is not None  # the run's own limit
    assert budget.spent().cost == pytest.approx(0.06)
    second = Agent(model=scripted.model, tools=[poke], stream_fn=scripted,
                   limits=Limits(budget=budget))
    run = second.prompt("Go on.")
    assert budget.spent().cost == pytest.approx(0.12)
    assert scripted.call_count == 4
    assert run.error_message == ("The budget 'user:42' is spent: 0.12 of 0.1 USD "
                                 "(budget.max_cost), by every run that shares it.")
    assert budget.spent().requests == 4  # the refused request was not counted


def test_limits_are_checked_when_given() -> None:
    with pytest.raises(ValueError, match="max_requests must be None"):
        Limits(max_requests=0)
    with pytest.raises(TypeError, match="max_cost must be None .* or a number > 0"):
        Limits(max_cost="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limits must be a piagent.Limits"):
        Agent(limits={"max_requests": 3})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Budget: store must keep budgets"):
        Budget(object(), "k", max_cost=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="give at least one"):
        Budget(MemoryStore(), "k")


def test_a_cost_limit_the_model_can_never_reach_is_refused_at_the_call(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 49 item 3: ``max_cost`` (or a budget's) on a model with no prices whose provider
    reports no cost, or one the catalogue marks free, would never stop a run: refused at the
    call, naming the model and the fix, in the Agent, the loop and the CLI alike."""
    from piagent import AgentContext, AgentLoopConfig, UserMessage, default_convert_to_llm
    from piagent.cli import main
    from piagent.loop import agent_loop, run_agent_loop

    unpriced = Model(id="llama3.2", api="openai-completions", provider="ollama",
                     base_url="http://localhost:11434/v1")
    free = Model(id="meta-llama/llama-3.3-8b-instruct:free", api="openai-completions",
                 provider="openrouter", base_url="https://openrouter.ai/api/v1")
    budget = Budget(MemoryStore(), "user:42", max_cost=1.0)
    with pytest.raises(ValueError) as said:
        Agent(model=unpriced, limits=Limits(max_cost=0.5))
    assert str(said.value) == (
        "limits: max_cost can never be reached: the model ollama/llama3.2 has no prices (its "
        "cost is all zero) and ollama reports no cost, so its responses cost nothing. Give the "
        "Model its prices (dataclasses.replace(model, cost=ModelCost(input=..., output=...)), "
        "USD per million tokens), or limit tokens instead (Limits(max_total_tokens=...), "
        "Budget(max_tokens=...)).")
    with pytest.raises(ValueError, match=r"^limits: budget.max_cost can never be reached: the "
                                         r"model openrouter/meta-llama/llama-3.3-8b-instruct:free"
                                         r" is free \(':free'\)"):
        Agent(model=free, limits=Limits(budget=budget))
    with pytest.raises(ValueError, match=r"^limits: max_cost and budget.max_cost can never"), \
            pytest.warns(UserWarning, match="ollama/llama3.2 is not in the catalogue"):
        Agent(model="ollama/llama3.2", limits=Limits(max_cost=0.5, budget=budget))
    # what can cost something is taken: prices, a provider that reports cost, a stream
    # function of its own (the scripted one reports whatever usage it is given)
    Agent(model=dataclasses.replace(unpriced, cost=ModelCost(input=0.1)),
          limits=Limits(max_cost=0.5))
    Agent(model=dataclasses.replace(free, id="meta-llama/llama-3.3-8b-instruct"),
          limits=Limits(max_cost=0.5))
    Agent(model=unpriced, limits=Limits(max_total_tokens=10_000))  # no cost limit
    scripted = ScriptedStreamFn([assistant_text("hi")])
    agent = Agent(model=scripted.model, stream_fn=scripted, limits=Limits(max_cost=0.5))
    agent.state.model = unpriced  # prompt() checks the model it will use
    with pytest.raises(ValueError, match="the model ollama/llama3.2 has no prices"):
        agent.prompt("Hi")
    assert scripted.call_count == 0 and agent.state.messages == []
    config = AgentLoopConfig(model=free, convert_to_llm=default_convert_to_llm,
                             limits=Limits(max_cost=0.5))
    with pytest.raises(ValueError, match=r"is free \(':free'\)"):
        run_agent_loop([UserMessage("Hi")], AgentContext([], []), config, lambda event: None)
    with pytest.raises(ValueError, match=r"is free \(':free'\)"):
        agent_loop([UserMessage("Hi")], AgentContext([], []), config)
    capsys.readouterr()
    assert main(["chat", "-m", "ollama/llama3.2", "--max-cost", "0.5", "hi"]) == 2
    assert capsys.readouterr().err == (
        "piagent chat: --max-cost: the model ollama/llama3.2 has no prices (its cost is all "
        "zero) and ollama reports no cost, so its responses cost nothing; limit requests "
        "instead (--max-requests N).\n")
