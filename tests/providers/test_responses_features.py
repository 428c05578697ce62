"""pi-ai 1.6.1's per-model Responses features (providers/_responses_compat.py): tools in
``additional_tools`` items, the thinking level in ``configuration_update`` items, and the
reasoning of a reasoning model with thinking off."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from piagent.messages import (
    AssistantMessage,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
)
from piagent.models import Model
from piagent.providers import get_model, stream_simple
from piagent.providers.openai_responses import build_responses_request
from piagent.stream import Context, StreamOptions
from tests.conftest import WAIT

from .sse_script import Reply

FIXTURES = Path(__file__).parent / "fixtures"
WEATHER = ToolDeclaration("weather", "Weather", {"type": "object"})
TIME = ToolDeclaration("time", "Time", {"type": "object"})
FLAGS = {"supportsMidConvoSystemMessages": True, "supportsAdditionalTools": True}


def _model(**fields: object) -> Model:
    values: dict[str, object] = {"id": "gpt-x", "api": "openai-responses",
                                 "provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                                 "reasoning": True}
    values.update(fields)
    return Model(**values)  # type: ignore[arg-type]


def _wire(tool: ToolDeclaration) -> dict[str, object]:
    return {"type": "function", "name": tool.name, "description": tool.description,
            "parameters": {"type": "object"}}


def test_additional_tools_items_follow_the_tool_changes():
    """The tools go in developer items before the system message that adds them; a later
    item is announced as incremental (with the tools still unavailable); a removal is
    announced in the system message's text; no top-level tools."""
    call = AssistantMessage(content=[ToolCall("c1|fc_1", "weather", {})], api="openai-responses",
                            provider="openai", model="gpt-x", stop_reason="toolUse")
    messages = [
        SystemMessage(content="Be brief.", tools_added=[WEATHER, TIME]),
        UserMessage(content="go"), call,
        ToolResultMessage("c1|fc_1", "weather", [TextContent("sunny")]),
        SystemMessage(content="", tools_removed=["time", "weather"], tools_added=[WEATHER]),
        UserMessage(content="more"),
        SystemMessage(content="Now with time.", tools_added=[TIME]),
    ]
    body = build_responses_request(_model(compat=FLAGS), messages, StreamOptions())
    assert "tools" not in body
    notice = ("This is an incremental tools update. Previously declared tools remain "
              "available unless explicitly marked unavailable. A tool declared again here "
              "is available again, and its latest definition replaces the earlier one.")
    assert body["input"] == [
        {"type": "additional_tools", "role": "developer", "tools": [_wire(WEATHER), _wire(TIME)]},
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "function_call", "call_id": "c1", "name": "weather", "status": "completed",
         "arguments": "{}", "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"role": "developer", "content": notice},
        {"type": "additional_tools", "role": "developer", "tools": [_wire(WEATHER)]},
        {"role": "developer", "content": "The following tools are no longer available. Do "
                                         "not call them:\n- time"},
        {"role": "user", "content": [{"type": "input_text", "text": "more"}]},
        {"role": "developer", "content": notice},  # time is declared again: none unavailable
        {"type": "additional_tools", "role": "developer", "tools": [_wire(TIME)]},
        {"role": "developer", "content": "Now with time."},
    ]
    plain = build_responses_request(_model(), messages[:2], StreamOptions())
    assert plain["tools"] == [_wire(WEATHER), _wire(TIME)]  # without the flags: as before


@pytest.mark.parametrize(("fields", "expected"), [
    ({}, {"effort": "none"}),
    ({"thinking_level_map": {"off": "minimal"}}, {"effort": "minimal"}),
    ({"thinking_level_map": {"off": None}}, None),  # cannot stop thinking: says nothing
    ({"provider": "github-copilot"}, None),
    ({"reasoning": False}, None),
])
def test_reasoning_with_thinking_off(fields, expected):
    body = build_responses_request(_model(**fields), [UserMessage(content="u")],
                                   StreamOptions())
    assert body.get("reasoning") == expected
    assert "include" not in body


def test_xai_always_gets_the_encrypted_reasoning():
    body = build_responses_request(_model(provider="xai", thinking_level_map={"off": None}),
                                   [UserMessage(content="u")], StreamOptions())
    assert body["include"] == ["reasoning.encrypted_content"] and "reasoning" not in body


def test_configuration_update_carries_the_level(sse_server):
    """supportsMidConvoEffort: reasoning.effort stays medium, the level goes in a
    configuration_update at the end and before each earlier answer that recorded one; the
    streamed answer records its level."""
    model = _model(base_url=sse_server.url + "/v1", thinking_level_map={"high": "xhigh"},
                   compat={"supportsMidConvoEffort": True})
    earlier = AssistantMessage(content=[TextContent("hi")], api="openai-responses",
                               provider="openai", model="gpt-x", provider_thinking_level="low")
    sse_server.add(Reply(body=[(FIXTURES / "responses_reasoning_tool.sse").read_bytes()]))
    stream = stream_simple(model, Context([UserMessage(content="a"), earlier,
                                           UserMessage(content="b")]),
                           StreamOptions(api_key="sk-test", reasoning="high"))
    message = stream.result(WAIT)
    assert message.stop_reason == "toolUse", message.error_message
    assert message.provider_thinking_level == "xhigh"
    body = sse_server.requests[0].json
    assert body["reasoning"] == {"effort": "medium", "summary": "auto"}
    kinds = [item.get("type", item.get("role")) for item in body["input"]]
    assert kinds == ["user", "configuration_update", "message", "user", "configuration_update"]
    assert body["input"][1]["reasoning"] == {"effort": "low"}
    assert body["input"][-1] == {"type": "configuration_update", "reasoning": {"effort": "xhigh"}}
    off = build_responses_request(model, [UserMessage(content="a"), earlier], StreamOptions())
    assert [i.get("type") for i in off["input"]] == [None, "message"]  # off: no updates


def test_catalogue_model_sends_pi_s_request():
    """gpt-5.6-luna (supportsAdditionalTools) at off: tools in input, effort none."""
    model = replace(get_model("openai", "gpt-5.6-luna"), base_url="http://127.0.0.1:9/v1")
    body = build_responses_request(model, [SystemMessage(content="", tools_added=[WEATHER]),
                                           UserMessage(content="u")], StreamOptions())
    assert body["input"][0]["type"] == "additional_tools" and "tools" not in body
    assert body["reasoning"] == {"effort": "none"}


def test_unsigned_text_ids_do_not_count_the_leading_system_message():
    """A replayed text without a signature gets the fallback id of its place after the
    leading system message, with or without additional_tools."""
    answer = AssistantMessage(content=[TextContent("hi")], api="openai-responses",
                              provider="openai", model="gpt-x")
    messages = [SystemMessage(content="s", tools_added=[WEATHER]), UserMessage(content="a"),
                answer]
    ids = [next(i["id"] for i in build_responses_request(model, messages, StreamOptions())["input"]
                if i.get("type") == "message")
           for model in (_model(), _model(compat=FLAGS))]
    assert ids[0] == ids[1]
