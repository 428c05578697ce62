"""The public namespace: ``__all__`` is exact, sorted, and every name imports.

Every public module's ``__all__`` is checked against its ``vars()``: a re-exporting package
(``__init__.py``) holds nothing else (no stray ``logging``), and a plain module defines no
public-looking function or class that its ``__all__`` leaves out.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import piagent

DOCUMENTED = {
    # messages and content
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
    "set_default_stream_fn", "get_default_stream_fn", "reset_default_stream_fn",
    "parse_streaming_json", "ThinkingLevel", "CustomAgentMessage", "ReplayPolicy",
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
    "RUN_SETTLED", "RunSettled", "QueueView",
    # approvals (docs/approvals.md)
    "ApprovalDecision", "PendingApproval", "ToolApprovalRequestEvent", "ApprovalError",
    "ApprovalPendingError",
    # limits and typed output (docs/limits.md, docs/output.md)
    "Limits", "Budget", "BudgetStore", "LimitHit", "OutputSchema", "TypedRun",
    # compaction (docs/compaction.md; Compaction itself lives in piagent.compaction)
    "CompactionStartEvent", "CompactionEndEvent", "CompactionSummaryMessage",
    # models (§8; the catalogue lives in piagent.providers)
    "Model", "ModelCost", "calculate_cost",
    # errors
    "PiAgentError", "AgentBusyError", "AgentLoopError", "AgentRunError", "StreamFnError", "ToolArgumentError",
    "UnknownMessageTypeError", "ProviderError", "ProviderConnectionError",
    "ProviderResponseError", "ProxyError", "ProxyProtocolError",
    "__version__",
}


def test_all_is_exactly_the_documented_names() -> None:
    assert set(piagent.__all__) == DOCUMENTED


def _public_modules() -> list[ModuleType]:
    """``piagent`` and every package or plain module below it without a leading ``_``."""
    found = [piagent]
    for info in pkgutil.walk_packages(piagent.__path__, "piagent."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        found.append(importlib.import_module(info.name))
    return found


PUBLIC_MODULES = _public_modules()


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_all_is_sorted_unique_and_importable(module: ModuleType) -> None:
    names = module.__all__
    assert list(names) == sorted(names, key=lambda n: (n.startswith("_"), not n.isupper(), n))
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(module, name), f"{module.__name__}.__all__ names {name!r}, not defined"


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_all_is_derived_from_what_the_module_holds(module: ModuleType) -> None:
    exported = set(module.__all__)
    is_package = hasattr(module, "__path__")
    leaked = []
    for name, value in vars(module).items():
        if name.startswith("_") or name in exported or name == "annotations":
            continue
        if isinstance(value, ModuleType):
            if value.__name__.startswith(module.__name__ + "."):
                continue  # a sub-module, set by the import system
            if is_package or value.__name__.startswith("piagent"):
                leaked.append(name)  # a plain module may import the standard library
        elif is_package:
            leaked.append(name)  # a package only re-exports
        elif ((inspect.isclass(value) or inspect.isfunction(value))
              and value.__module__ == module.__name__):
            leaked.append(name)  # defined here, public-looking, undocumented
    assert leaked == [], f"{module.__name__} holds public names outside __all__: {leaked}"


def test_the_public_modules_are_the_layers() -> None:
    names = {m.__name__ for m in PUBLIC_MODULES}
    assert {"piagent", "piagent.agent", "piagent.loop", "piagent.stream", "piagent.tools",
            "piagent.providers", "piagent.proxy", "piagent.web", "piagent.testing",
            "piagent.cli", "piagent.messages", "piagent.events"} <= names


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
