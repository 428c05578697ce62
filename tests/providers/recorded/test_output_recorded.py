"""Typed output over the four wire APIs: the final answer is a real recorded tool call,
replayed through piagent's adapters, validated and built into a dataclass.

Each API runs twice: the recorded answer alone, and a first invalid answer (a call of the
same tool with wrong arguments, written in that API's own SSE) that the model sees as an
error result and corrects with the recorded answer on the retry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from piagent import Agent, Model, OutputSchema, ToolResultMessage

from ..sse_script import Reply, ScriptedServer, sse
from .test_recorded import _BASE, DATA, KEY


@dataclass
class Element:
    location: str
    temperature: int
    condition: str


@dataclass
class Forecast:
    elements: list[Element]


@dataclass
class Capital:
    country: str


@dataclass
class Ingredient:
    name: str
    amount: str


@dataclass
class RecipeBody:
    name: str
    ingredients: list[Ingredient]
    steps: list[str]


@dataclass
class Recipe:
    recipe: RecipeBody


@dataclass
class Answer:
    label: str
    answer: str


@dataclass
class Answers:
    answers: list[Answer]


CASES: dict[str, tuple[str, str, type, dict[str, Any], Any]] = {
    # api: (recording, tool name, output type, an invalid first answer, the expected output)
    "anthropic-messages": (
        "anthropic-json-tool", "json", Forecast,
        {"elements": [{"location": "San Francisco", "temperature": "warm"}]},
        Forecast([Element("San Francisco", 58, "sunny")])),
    "openai-completions": (
        "completions-openai-tool-call", "get_capital", Capital, {"nation": "UK"},
        Capital("UK")),
    "openai-responses": (
        "responses-openai-tool-call", "get_capital", Capital, {}, Capital("France")),
    "google-generative-ai": (
        "google-vertex-tool-call-nested", "cookRecipe", Recipe, {"recipe": {"name": "Lasagna"}},
        None),  # checked below: ten ingredients and ten steps
    # pydantic-ai's own final-result tool, recorded from gpt-4o (the default tool name)
    "openai-completions-final_result": (
        "completions-openai-final-structured", "final_result", Answers,
        {"answers": [{"label": "Capital"}]},
        Answers([Answer("Capital", "The capital of Mexico is Mexico City."),
                 Answer("Weather", "The weather in Mexico City is currently sunny."),
                 Answer("Product Name", "The product name is Pydantic AI.")])),
}


def _invalid(api: str, name: str, arguments: dict[str, Any]) -> list[bytes]:
    """One tool call with ``arguments`` in the API's own streaming format."""
    text = json.dumps(arguments)
    if api == "openai-completions":
        return [sse({"id": "c1", "object": "chat.completion.chunk", "choices": [{
                    "index": 0, "finish_reason": None, "delta": {"role": "assistant",
                    "tool_calls": [{"index": 0, "id": "call_bad", "type": "function",
                                    "function": {"name": name, "arguments": text}}]}}]}),
                sse({"id": "c1", "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                     "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}}),
                b"data: [DONE]\n\n"]
    if api == "openai-responses":
        item = {"type": "function_call", "id": "fc_bad", "call_id": "call_bad", "name": name,
                "arguments": ""}
        return [sse({"type": "response.created", "response": {"id": "r1", "output": [],
                                                              "status": "in_progress"}}),
                sse({"type": "response.output_item.added", "output_index": 0, "item": item}),
                sse({"type": "response.function_call_arguments.delta", "item_id": "fc_bad",
                     "output_index": 0, "delta": text}),
                sse({"type": "response.output_item.done", "output_index": 0,
                     "item": {**item, "arguments": text, "status": "completed"}}),
                sse({"type": "response.completed", "response": {
                    "id": "r1", "status": "completed", "output": [],
                    "usage": {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}}})]
    if api == "anthropic-messages":
        events = [
            {"type": "message_start", "message": {
                "id": "msg_bad", "type": "message", "role": "assistant", "content": [],
                "model": "m", "stop_reason": None, "usage": {"input_tokens": 20,
                                                               "output_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": {
                "type": "tool_use", "id": "toolu_bad", "name": name, "input": {}}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "input_json_delta", "partial_json": text}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
             "usage": {"output_tokens": 5}},
            {"type": "message_stop"}]
        return [sse(e, event=e["type"]) for e in events]
    return [sse({"candidates": [{"content": {"role": "model", "parts": [
                    {"functionCall": {"name": name, "args": arguments}}]},
                 "finishReason": "STOP"}],
                 "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 5,
                                   "totalTokenCount": 25}})]


def _recorded(name: str) -> tuple[dict[str, Any], Reply]:
    meta = json.loads((DATA / f"{name}.meta.json").read_text())
    body = (DATA / meta["body"]).read_bytes()
    return meta, Reply(status=meta["status"], body=[body], content_type=meta["content_type"])


@pytest.mark.parametrize("first_invalid", [False, True], ids=["recorded", "invalid-then-recorded"])
@pytest.mark.parametrize("case", list(CASES))
def test_typed_output_on_recorded_streams(case: str, first_invalid: bool,
                                          sse_server: ScriptedServer,
                                          no_piagent_threads: None) -> None:
    recording, name, output_type, invalid, expected = CASES[case]
    api = case.split("-final_result")[0]
    meta, reply = _recorded(recording)
    if first_invalid:
        sse_server.add(Reply(body=_invalid(api, name, invalid)))
    sse_server.add(reply)
    model = Model(id=meta["model"], api=api, provider=meta["provider"],
                  base_url=sse_server.url + _BASE[api])
    agent = Agent(model=model, api_key=KEY, max_retry_delay_ms=1)
    schema = output_type if name == "final_result" else OutputSchema(output_type, name=name)
    run = agent.prompt("Answer with the tool.", output_type=schema)
    assert run.error_message is None, run.error_message
    assert isinstance(run.output, output_type)
    if expected is not None:
        assert run.output == expected
    else:
        assert run.output.recipe.name == "Lasagna"
        assert run.output.recipe.ingredients[0] == Ingredient("Lasagna noodles", "16 oz")
        assert (len(run.output.recipe.ingredients), len(run.output.recipe.steps)) == (10, 10)
    results = [m for m in run.messages if isinstance(m, ToolResultMessage)]
    assert [r.is_error for r in results] == ([True, False] if first_invalid else [False])
    requests = sse_server.requests
    assert len(requests) == (2 if first_invalid else 1)
    assert name in requests[0].body.decode()  # the tool was declared
    if first_invalid:
        assert results[0].text.startswith(f'Validation failed for tool "{name}":')
        assert "Validation failed for tool" in requests[1].body.decode()
