"""Typed output: a final-result tool, validated and coerced, retried at most N times."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import pytest

from piagent import (
    Agent,
    AssistantMessage,
    Limits,
    OutputSchema,
    SystemMessage,
    ToolResultMessage,
    TypedRun,
    UserMessage,
    tool,
)
from piagent.sessions import MemoryStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls


@dataclass
class Weather:
    """The weather in a city."""

    city: str
    celsius: float
    sunny: bool = False


class Mood(enum.Enum):
    HAPPY = "happy"
    SAD = "sad"


class Point(TypedDict):
    x: int
    y: int


@tool
def lookup(city: str) -> str:
    """Look the weather up.

    Args:
        city: The city.
    """
    return f"{city}: 21 degrees, sunny"


def test_a_dataclass_answer_is_validated_coerced_and_returned() -> None:
    scripted = ScriptedStreamFn([
        assistant_tool_calls(("lookup", {"city": "Paris"})),
        assistant_tool_calls(("final_result", {"city": "Paris", "celsius": "21", "sunny": "true"})),
        assistant_text("never asked"),
    ])
    agent = Agent(model=scripted.model, tools=[lookup], stream_fn=scripted)
    run = agent.prompt("Weather in Paris?", output_type=Weather)
    assert isinstance(run, TypedRun)
    assert run.output == Weather("Paris", 21.0, True)
    assert isinstance(run.output.celsius, float)
    assert run.error_message is None and run.limit_hit is None
    assert scripted.call_count == 2
    tools = {t.name: t for m in scripted.calls[0].context.messages
             if isinstance(m, SystemMessage) for t in m.tools_added or ()}
    assert tools["final_result"].parameters == {
        "type": "object", "description": "The weather in a city.",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "number"},
                       "sunny": {"type": "boolean"}},
        "required": ["city", "celsius"], "additionalProperties": False}
    final = run.messages[-1]
    assert isinstance(final, ToolResultMessage) and final.text == "Final result accepted."
    assert final.details == {"city": "Paris", "celsius": 21, "sunny": True}


def test_a_first_invalid_answer_is_an_error_result_the_model_corrects() -> None:
    scripted = ScriptedStreamFn([
        assistant_tool_calls(("final_result", {"city": "Paris"})),  # celsius missing
        assistant_tool_calls(("final_result", {"city": "Paris", "celsius": 21})),
    ])
    agent = Agent(model=scripted.model, stream_fn=scripted, output_type=Weather)
    run = agent.prompt("Weather in Paris?")
    assert run.output == Weather("Paris", 21.0)
    first = run.messages[3]
    assert isinstance(first, ToolResultMessage) and first.is_error
    assert first.text.startswith('Validation failed for tool "final_result":\n'
                                 "  - celsius: missing")
    sent = scripted.calls[1].context.messages
    assert isinstance(sent[-1], ToolResultMessage) and sent[-1].is_error


def test_the_retries_are_bounded_and_the_run_says_why_it_ended() -> None:
    bad = assistant_tool_calls(("final_result", {"city": 3}))
    scripted = ScriptedStreamFn([bad] * 10)
    agent = Agent(model=scripted.model, stream_fn=scripted, output_type=Weather,
                  limits=Limits(output_retries=1))
    run = agent.prompt("Weather?")
    assert scripted.call_count == 2
    assert run.output is None
    hit = run.limit_hit
    assert hit is not None and hit.limit == "output_retries" and hit.used == 2
    assert run.error_message is not None
    assert run.error_message.startswith(
        "The model gave no valid final result: 2 attempts failed (output_retries=1). "
        'The last error: Validation failed for tool "final_result":')


def test_a_text_answer_gets_one_more_turn_asking_for_the_tool() -> None:
    scripted = ScriptedStreamFn([
        assistant_text("It is sunny and 21 degrees."),
        assistant_tool_calls(("final_result", {"city": "Paris", "celsius": 21})),
    ])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    run = agent.prompt("Weather in Paris?", output_type=Weather)
    assert run.output == Weather("Paris", 21.0)
    asked = scripted.calls[1].context.messages[-1]
    assert isinstance(asked, UserMessage)
    assert asked.text == "Give your final answer by calling the final_result tool."


def test_the_type_can_refuse_a_value_and_the_model_retries() -> None:
    @dataclass
    class Positive:
        n: int

        def __post_init__(self) -> None:
            if self.n <= 0:
                msg = "n must be > 0"
                raise ValueError(msg)

    scripted = ScriptedStreamFn([assistant_tool_calls(("final_result", {"n": -1})),
                                 assistant_tool_calls(("final_result", {"n": 2}))])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    run = agent.prompt("A positive number.", output_type=Positive)
    assert run.output == Positive(2)
    refused = run.messages[3]
    assert isinstance(refused, ToolResultMessage)
    assert refused.text == ("The final result was not accepted: ValueError: n must be > 0. "
                            "Call final_result again with corrected arguments.")


@pytest.mark.parametrize(("output_type", "arguments", "expected"), [
    (Literal["yes", "no"], {"result": "yes"}, "yes"),
    (Mood, {"result": "sad"}, Mood.SAD),
    (Point, {"x": "1", "y": 2}, {"x": 1, "y": 2}),
    (list[int], {"result": ["1", 2]}, [1, 2]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
     {"a": "5"}, {"a": 5}),
    ({"type": "string", "enum": ["x", "y"]}, {"result": "y"}, "y"),
])
def test_every_kind_of_output_type(output_type: Any, arguments: dict[str, Any],
                                   expected: Any) -> None:
    scripted = ScriptedStreamFn([assistant_tool_calls(("final_result", arguments))])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    run = agent.prompt("Answer.", output_type=output_type)
    assert run.output == expected and type(run.output) is type(expected)


def test_a_final_result_beside_other_calls_ends_the_run_after_the_batch() -> None:
    scripted = ScriptedStreamFn([assistant_tool_calls(
        ("lookup", {"city": "Oslo"}), ("final_result", {"city": "Oslo", "celsius": -3}))])
    agent = Agent(model=scripted.model, tools=[lookup], stream_fn=scripted)
    run = agent.prompt("Weather in Oslo?", output_type=Weather)
    assert run.output == Weather("Oslo", -3.0)
    assert scripted.call_count == 1
    assert [m.role for m in run.messages[-2:]] == ["toolResult", "toolResult"]


def test_a_stored_session_keeps_the_answer_as_json() -> None:
    store = MemoryStore()
    scripted = ScriptedStreamFn([assistant_tool_calls(("final_result", {"city": "Rome",
                                                                         "celsius": 30}))])
    agent = Agent(model=scripted.model, stream_fn=scripted, store=store, session_id="s")
    run = agent.prompt("Weather in Rome?", output_type=Weather)
    assert run.output == Weather("Rome", 30.0)
    stored = store.load("s")[-1]
    assert isinstance(stored, ToolResultMessage)
    assert stored.details == {"city": "Rome", "celsius": 30}


def test_a_run_without_output_type_has_no_output_and_no_extra_tool() -> None:
    scripted = ScriptedStreamFn([assistant_text("hi")])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    run = agent.prompt("Hi")
    assert run.output is None and run.limit_hit is None and not isinstance(run, TypedRun)
    assert not any(isinstance(m, SystemMessage) for m in scripted.calls[0].context.messages)


class _Opaque:
    """A class with no fields anyone can describe."""


def test_wrong_output_types_fail_at_the_call() -> None:
    with pytest.raises(TypeError, match="output_type must be a type"):
        Agent(output_type="Weather")
    with pytest.raises(ValueError, match="not a valid schema"):
        OutputSchema({"type": 5})
    with pytest.raises(TypeError, match="has no JSON Schema"):
        OutputSchema(_Opaque)  # neither piagent nor pydantic has a schema for it
    scripted = ScriptedStreamFn([assistant_text("hi")])
    clash = tool(lambda: "x", name="final_result", description="clash")
    agent = Agent(model=scripted.model, stream_fn=scripted, tools=[clash])
    run = agent.prompt("Hi", output_type=Weather)
    assert run.error_message is not None and "already has a tool named 'final_result'" \
        in run.error_message
    assert isinstance(run.messages[-1], AssistantMessage)
