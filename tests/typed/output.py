"""Typed output and limits as a user writes them: ``mypy --strict`` must accept this file and
infer ``run.output`` as the output type (tests/test_typing.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from piagent import Agent, AgentRun, Budget, LimitHit, Limits, OutputSchema, TypedRun
from piagent.sessions import BudgetSpend, MemoryStore
from piagent.testing import ScriptedStreamFn, assistant_tool_calls


@dataclass
class Weather:
    city: str
    celsius: float


class Mood(enum.Enum):
    HAPPY = "happy"


class Point(TypedDict):
    x: int


scripted = ScriptedStreamFn([assistant_tool_calls(("final_result", {"city": "Oslo",
                                                                     "celsius": 1}))])
agent = Agent(model=scripted.model, stream_fn=scripted,
              limits=Limits(max_requests=5, max_cost=0.5, output_retries=1))

run: TypedRun[Weather] = agent.prompt("Weather?", output_type=Weather)
weather: Weather | None = run.output
if weather is not None:
    celsius: float = weather.celsius

named = agent.prompt("Weather?", output_type=OutputSchema(Weather, name="report"))
also: Weather | None = named.output

mood: Mood | None = agent.prompt("Mood?", output_type=Mood).output
point: Point | None = agent.prompt("Point?", output_type=Point).output
yes_no: Any = agent.prompt("Yes?", output_type=Literal["yes", "no"]).output
schema: Any = agent.prompt("Any?", output_type={"type": "object"}).output

plain: AgentRun = agent.prompt("Hi")
hit: LimitHit | None = plain.limit_hit
if hit is not None:
    name: str = hit.limit
    figures: tuple[float, float] = (hit.value, hit.used)

budget = Budget(MemoryStore(), "user:42", max_cost=5.0)
spent: BudgetSpend = budget.spent()
limited = Agent(model=scripted.model, stream_fn=scripted, limits=Limits(budget=budget))
