"""The public namespace: ``__all__`` is exact, sorted, and every name imports."""

from __future__ import annotations

import piagent

DOCUMENTED = {
    # messages and content (api.md §2)
    "TextContent", "ThinkingContent", "ImageContent", "ToolCall", "SystemMessage", "UserMessage",
    "AssistantMessage", "ToolResultMessage", "Usage", "Cost", "ToolDeclaration", "AgentMessage",
    "Message", "StopReason", "register_message_type", "message_to_dict", "message_from_dict",
    "messages_to_json", "messages_from_json", "now_ms", "get_current_system_prompt", "get_current_tools",
    "get_current_system_message", "get_system_message_text", "get_tool_state_changes",
    "ToolStateChanges", "collapse_system_messages", "create_initial_system_message",
    "render_system_message_update", "to_tool_declaration",
    # tools (§3)
    "AgentTool", "AgentToolResult", "tool", "validate_tool_arguments",
    # abort (§4)
    "AbortController", "AbortSignal",
    # streams (§5)
    "StreamFn", "Context", "StreamOptions", "AssistantMessageEventStream", "EventStream",
    "AssistantMessageEvent", "StartEvent", "TextStartEvent", "TextDeltaEvent", "TextEndEvent",
    "ThinkingStartEvent", "ThinkingDeltaEvent", "ThinkingEndEvent", "ToolCallStartEvent",
    "ToolCallDeltaEvent", "ToolCallEndEvent", "DoneEvent", "ErrorEvent",
    "set_default_stream_fn", "get_default_stream_fn", "parse_streaming_json",
    # the loop (§6)
    "run_agent_loop", "run_agent_loop_continue", "agent_loop", "agent_loop_continue",
    "run_tool_call", "AgentToolCallOutcome", "AgentContext", "AgentLoopConfig",
    "BeforeToolCallContext", "BeforeToolCallResult", "AfterToolCallContext",
    "AfterToolCallResult", "AgentTurnContext", "PrepareNextTurnContext", "AgentLoopTurnUpdate",
    "PrepareRequestContext", "RequestUpdate", "ToolExecutionMode", "QueueMode", "TurnDecision",
    "AgentEvent", "AgentStartEvent", "AgentEndEvent", "TurnStartEvent", "TurnEndEvent",
    "MessageStartEvent", "MessageUpdateEvent", "MessageEndEvent", "ToolExecutionStartEvent",
    "ToolExecutionUpdateEvent", "ToolExecutionEndEvent", "event_to_dict",
    # Agent (§7)
    "Agent", "AgentRun", "AgentState", "AgentEventIterator", "default_convert_to_llm",
    # models (§8; the catalogue lives in piagent.providers)
    "Model", "ModelCost", "calculate_cost",
    # errors
    "PiAgentError", "AgentBusyError", "AgentLoopError", "StreamFnError", "ToolArgumentError",
    "UnknownMessageTypeError", "ProviderError", "ProviderConnectionError",
    "ProviderResponseError", "ProxyError", "ProxyProtocolError",
    "__version__",
}


def test_all_is_exactly_the_documented_names() -> None:
    assert set(piagent.__all__) == DOCUMENTED


def test_all_is_sorted_and_unique() -> None:
    assert piagent.__all__ == sorted(piagent.__all__)
    assert len(piagent.__all__) == len(set(piagent.__all__))


def test_every_name_imports() -> None:
    for name in piagent.__all__:
        assert getattr(piagent, name) is not None, name


def test_errors_subclass_fitting_builtins() -> None:
    assert issubclass(piagent.AgentBusyError, RuntimeError)
    assert issubclass(piagent.ToolArgumentError, ValueError)
    assert issubclass(piagent.StreamFnError, LookupError)
    assert issubclass(piagent.AgentLoopError, RuntimeError)
    for name in ("AgentBusyError", "AgentLoopError", "ProviderError", "ProxyError"):
        assert issubclass(getattr(piagent, name), piagent.PiAgentError)


def test_py_typed_ships() -> None:
    from importlib.resources import files

    assert files("piagent").joinpath("py.typed").is_file()
