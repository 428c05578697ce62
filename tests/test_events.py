"""event_to_dict: pi's camelCase JSON for every agent event."""

from __future__ import annotations

import json

from piagent import (
    AgentEndEvent,
    AgentStartEvent,
    AgentToolResult,
    AssistantMessage,
    MessageEndEvent,
    MessageUpdateEvent,
    TextContent,
    TextDeltaEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    ToolResultMessage,
    TurnEndEvent,
    TurnStartEvent,
    UserMessage,
    event_to_dict,
)


def test_lifecycle_events() -> None:
    user = UserMessage("hi", timestamp=1)
    assert event_to_dict(AgentStartEvent()) == {"type": "agent_start"}
    assert event_to_dict(TurnStartEvent()) == {"type": "turn_start"}
    assert event_to_dict(AgentEndEvent([user])) == {
        "type": "agent_end", "messages": [{"role": "user", "content": "hi", "timestamp": 1}]}
    assert event_to_dict(MessageEndEvent(user))["message"]["role"] == "user"


def test_message_update_carries_the_partial_in_the_inner_event_as_pi() -> None:
    partial = AssistantMessage([TextContent("He")], timestamp=1)
    data = event_to_dict(MessageUpdateEvent(partial, TextDeltaEvent(0, "He", partial)))
    assert data["message"]["content"] == [{"type": "text", "text": "He"}]
    assert data["assistantMessageEvent"] == {"type": "text_delta", "contentIndex": 0, "delta": "He",
                                             "partial": data["message"]}
    lean = event_to_dict(MessageUpdateEvent(partial, TextDeltaEvent(0, "He", partial)),
                         partial=False)
    assert lean["assistantMessageEvent"] == {"type": "text_delta", "contentIndex": 0, "delta": "He"}
    assert lean["message"] == data["message"]


def test_tool_events_use_camel_case_and_serialise_results() -> None:
    assert event_to_dict(ToolExecutionStartEvent("c1", "read", {"path": "a"})) == {
        "type": "tool_execution_start", "toolCallId": "c1", "toolName": "read",
        "args": {"path": "a"}}
    update = event_to_dict(ToolExecutionUpdateEvent("c1", "read", {}, {"done": 3}))
    assert update["partialResult"] == {"done": 3}
    end = event_to_dict(ToolExecutionEndEvent(
        "c1", "read", AgentToolResult([TextContent("ok")], details={"n": 1}, terminate=True),
        False, 12))
    assert end == {"type": "tool_execution_end", "toolCallId": "c1", "toolName": "read",
                   "result": {"content": [{"type": "text", "text": "ok"}], "details": {"n": 1},
                              "terminate": True},
                   "isError": False, "durationMs": 12}
    json.dumps(end)


def test_turn_end_carries_tool_results() -> None:
    result = ToolResultMessage("c1", "read", [TextContent("x")], timestamp=2)
    data = event_to_dict(TurnEndEvent(AssistantMessage(timestamp=1), [result]))
    assert data["toolResults"][0]["toolCallId"] == "c1"
