"""Pydantic v2 models as ``output_type`` and ``@tool`` parameters (issue 49 item 1): taken
by duck typing (``model_json_schema``, ``model_validate``), their validators run, a refusal
is a retry the model reads; types only pydantic knows go through ``TypeAdapter``. Without
pydantic (a subprocess that blocks its import) dataclasses and TypedDicts keep piagent's own
path, and ``import piagent`` loads the same modules either way."""

from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest

from piagent import Agent, ToolResultMessage, tool
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls
from piagent.tools import OutputSchema, validate_tool_arguments

ROOT = Path(__file__).resolve().parents[2]


class Place(pydantic.BaseModel):
    city: str
    country: str | None = None


class WeatherP(pydantic.BaseModel):
    """The weather at a place."""

    place: Place
    celsius: float
    on: datetime.date | None = None

    @pydantic.field_validator("celsius")
    @classmethod
    def possible(cls, value: float) -> float:
        if value < -90:
            msg = "colder than anywhere on Earth"
            raise ValueError(msg)
        return value


def _results(agent: Agent) -> list[tuple[bool, str]]:
    out = []
    for message in agent.state.messages:
        if isinstance(message, ToolResultMessage):
            block = message.content[0]
            out.append((message.is_error, getattr(block, "text", "")))
    return out


def test_a_pydantic_model_is_an_output_type_whose_validators_make_a_retry() -> None:
    schema = OutputSchema(WeatherP)
    assert not schema.wrapped and "$defs" not in json.dumps(schema.parameters)
    assert schema.parameters["properties"]["place"]["properties"]["city"]["type"] == "string"
    assert schema.description.startswith("The weather at a place.")
    scripted = ScriptedStreamFn([
        assistant_tool_calls(("final_result", {"place": {"city": "Oslo"}, "celsius": -120})),
        assistant_tool_calls(("final_result", {"place": {"city": "Oslo"}, "celsius": 3,
                                               "on": "2026-12-07"}))])
    agent = Agent(model=scripted.model, stream_fn=scripted)
    run = agent.prompt("Weather in Oslo?", output_type=WeatherP)
    assert run.error_message is None
    assert run.output == WeatherP(place=Place(city="Oslo"), celsius=3.0,
                                  on=datetime.date(2026, 12, 7))
    (refused, refusal), (accepted, _) = _results(agent)
    assert refused and not accepted
    assert refusal.startswith("The final result was not accepted: ValidationError: ")
    assert "colder than anywhere on Earth" in refusal


def test_a_pydantic_model_is_a_tool_parameter_and_types_pydantic_knows_too() -> None:
    saved: list[tuple[WeatherP, datetime.datetime]] = []

    @tool
    def save(weather: WeatherP, at: datetime.datetime) -> str:
        """Save a reading.

        Args:
            weather: The reading.
            at: When it was taken.
        """
        saved.append((weather, at))
        return "saved"

    properties = save.parameters["properties"]
    assert properties["weather"]["required"] == ["place", "celsius"]
    assert properties["at"] == {"type": "string", "format": "date-time",
                                "description": "When it was taken."}
    assert "$ref" not in json.dumps(save.parameters)  # $defs inlined: the schema stands alone
    good = {"weather": {"place": {"city": "Oslo"}, "celsius": 2}, "at": "2026-12-07T08:00:00Z"}
    bad = {**good, "weather": {"place": {"city": "Oslo"}, "celsius": -100}}
    assert validate_tool_arguments(save, good) == good
    scripted = ScriptedStreamFn([assistant_tool_calls(("save", bad)),
                                 assistant_tool_calls(("save", good)),
                                 assistant_text("Saved.")])
    agent = Agent(model=scripted.model, stream_fn=scripted, tools=[save])
    assert agent.prompt("Save it.").error_message is None
    [(weather, at)] = saved
    assert weather == WeatherP(place=Place(city="Oslo"), celsius=2.0)
    assert at == datetime.datetime(2026, 12, 7, 8, tzinfo=datetime.timezone.utc)
    (refused, refusal), (accepted, text) = _results(agent)
    assert refused and "colder than anywhere on Earth" in refusal
    assert (accepted, text) == (False, "saved")


def test_a_nested_and_a_recursive_model_stand_alone() -> None:
    class Node(pydantic.BaseModel):
        name: str
        children: list[Node] = []

    Node.model_rebuild()
    schema = OutputSchema(Node).parameters
    children = schema["properties"]["children"]
    assert children["type"] == "array" and children["items"]["type"] == "object"
    assert "$ref" not in json.dumps(schema)
    tree = {"name": "a", "children": [{"name": "b", "children": []}]}
    assert OutputSchema(Node).parse(tree) == Node(name="a", children=[Node(name="b")])


@dataclasses.dataclass
class Reading:
    celsius: float
    where: str = "here"


_WITHOUT_PYDANTIC = r"""
import importlib.abc, json, sys

class NoPydantic(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pydantic" or name.startswith(("pydantic.", "pydantic_core")):
            raise ImportError(f"blocked: {name}")
        return None

if sys.argv[1] == "blocked":
    sys.meta_path.insert(0, NoPydantic())
before = set(sys.modules)
import piagent
loaded = sorted(set(sys.modules) - before)
import dataclasses
from typing import TypedDict

@dataclasses.dataclass
class Reading:
    celsius: float
    where: str = "here"

class Spot(TypedDict):
    city: str

@piagent.tool
def save(reading: Reading, spot: Spot) -> str:
    '''Save a reading.'''
    return f"{reading!r} {spot!r}"

schema = piagent.OutputSchema(Reading)
print(json.dumps({"loaded": loaded, "tool": save.parameters, "output": schema.parameters,
                  "parsed": repr(schema.parse({"celsius": 1})),
                  "pydantic": any(m.startswith("pydantic") for m in sys.modules)}))
"""


def _child(mode: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _WITHOUT_PYDANTIC, mode], cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_without_pydantic_dataclasses_keep_their_path_and_import_piagent_is_unchanged() -> None:
    blocked, installed = _child("blocked"), _child("installed")
    assert blocked["pydantic"] is False and installed["pydantic"] is False
    assert blocked == installed  # the same modules, the same schemas, the same values
    assert not any(name.startswith("pydantic") for name in installed["loaded"])
    assert blocked["parsed"] == "Reading(celsius=1.0, where='here')"
    assert blocked["output"] == OutputSchema(Reading).parameters


def test_a_type_neither_knows_is_still_refused_at_the_call() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError, match=r"^output_type .*Opaque has no JSON Schema .*; use a "
                                        r"dataclass, TypedDict, pydantic model, Enum"):
        OutputSchema(Opaque)
