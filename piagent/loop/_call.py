"""One tool call in pi's three phases: ``prepare_tool_call`` → ``execute_prepared_tool_call``
→ ``finalize_executed_tool_call``, each returning what the next takes (``Prepared``,
``Finalized``; ``Waiting`` for a call that needs approval), and the result message of a
finished call. The batches (``_tools.py``) and ``run_tool_call`` (``_nested.py``) run them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..abort import AbortSignal
from ..errors import ToolArgumentError
from ..messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    now_ms,
)
from ..policy import ApprovalDecision
from ..tools import AgentTool, AgentToolResult, validate_tool_arguments
from ._config import (
    AfterToolCallContext,
    AgentContext,
    AgentLoopConfig,
    BeforeToolCallContext,
)
from ._results import ABORTED_TEXT, clean_result, error_result, exception_text, tool_failure_result

_OVERRIDES = ("content", "details", "structured_content", "usage", "terminate")


@dataclass(slots=True)
class Prepared:
    """A call ready to execute: its tool and validated arguments."""

    tool_call: ToolCall
    tool: AgentTool
    args: Any


@dataclass(slots=True)
class Waiting:
    """A call that waits for a person's decision (its tool or ``before_tool_call`` asked)."""

    tool_call: ToolCall


@dataclass(slots=True)
class Finalized:
    """A finished call: what ``tool_execution_end`` and the result message carry."""

    tool_call: ToolCall
    result: AgentToolResult
    is_error: bool
    duration_ms: int | None = None


def prepare_tool_call(context: AgentContext, assistant_message: AssistantMessage,
                      tool_call: ToolCall, config: AgentLoopConfig | None, signal: AbortSignal,
                      tool: AgentTool | None, approval: ApprovalDecision | None = None
                      ) -> Prepared | Finalized | Waiting:
    """Phase 1: the tool (``None``: not found), its arguments prepared and validated, then
    ``before_tool_call``. A failure, a block or an abort finishes the call with an error
    result; a call the tool or the hook wants approved waits unless it has its ``approval``.
    Once aborted, the call ends "Operation aborted" before the lookup: nothing is prepared,
    no hook runs, and the caller still records the result (pi-agent-core 1.6.0, #9986)."""
    if signal.is_set():
        return Finalized(tool_call, error_result(ABORTED_TEXT), True)
    if tool is None:
        return Finalized(tool_call, error_result(f"Tool {tool_call.name} not found"), True)
    try:
        arguments = tool_call.arguments
        if tool.prepare_arguments is not None:
            arguments = tool.prepare_arguments(arguments)
        if tool_call.arguments_error:  # the model's text was no JSON object (pi-ai's words)
            raise ToolArgumentError(
                f'Invalid arguments for tool "{tool_call.name}": {tool_call.arguments_error}',
                tool_name=tool_call.name, errors=[tool_call.arguments_error])
        args = validate_tool_arguments(tool, arguments)
        ask = tool.needs_approval
        if ask is not False and approval is None and (ask is True or ask(args)):
            return Waiting(tool_call)
        before_tool_call = config.before_tool_call if config is not None else None
        if before_tool_call is not None:
            decision = before_tool_call(BeforeToolCallContext(
                assistant_message, tool_call, args, context, approval), signal)
            if decision is not None and not signal.is_set():
                if decision.block:
                    result = error_result(decision.reason or "Tool execution was blocked")
                    result.terminate = decision.terminate is True
                    return Finalized(tool_call, result, True)
                if decision.needs_approval and approval is None:
                    return Waiting(tool_call)
    except Exception as exc:  # hook and validation failures are results the model can read
        return Finalized(tool_call, error_result(exception_text(exc)), True)
    if signal.is_set():
        return Finalized(tool_call, error_result(ABORTED_TEXT), True)
    return Prepared(tool_call, tool, args)


def execute_prepared_tool_call(prepared: Prepared, signal: AbortSignal,
                               on_update: Callable[[Any], None]) -> Finalized:
    """Phase 2: ``execute``, timed; an exception becomes an error result, a ``str`` or
    ``None`` a result's content."""
    call = prepared.tool_call
    started = time.monotonic()
    try:
        result = prepared.tool.execute(call.id, prepared.args, signal, on_update)
        if not isinstance(result, AgentToolResult):
            if result is not None and not isinstance(result, str):
                raise TypeError(f"Tool execute() returned {type(result).__name__}; return an "
                                "AgentToolResult (or use the @tool decorator, which converts "
                                "return values).")
            result = AgentToolResult([] if result is None else [TextContent(result)])
    except Exception as exc:  # a failing tool is a result the model can read
        return Finalized(call, clean_result(tool_failure_result(call.name, exc)), True,
                         round((time.monotonic() - started) * 1000))
    for block in result.content:  # clean_result's check, inline: this runs per call
        if type(block) is TextContent and not block.text.isascii():
            result = clean_result(result)
            break
    return Finalized(call, result, result.is_error is True,
                     round((time.monotonic() - started) * 1000))


def finalize_executed_tool_call(context: AgentContext, assistant_message: AssistantMessage,
                                prepared: Prepared, executed: Finalized,
                                config: AgentLoopConfig | None,
                                signal: AbortSignal) -> Finalized:
    """Phase 3: ``after_tool_call``, each field it sets replacing the result's; a raising
    hook makes the result an error. Without the hook, ``executed`` is the final form."""
    after_tool_call = config.after_tool_call if config is not None else None
    if after_tool_call is None:
        return executed
    result, is_error = executed.result, executed.is_error
    try:
        override = after_tool_call(AfterToolCallContext(
            assistant_message, prepared.tool_call, prepared.args, result, is_error, context),
            signal)
        if override is not None:
            changes = {name: value for name in _OVERRIDES
                       if (value := getattr(override, name)) is not None}
            if override.content is not None and override.structured_content is None:
                changes["structured_content"] = None  # it may no longer match the content
            result = dataclasses.replace(result, **changes)
            if override.is_error is not None:
                is_error = override.is_error
    except Exception as exc:  # the hook's failure becomes this call's error result
        result, is_error = error_result(exception_text(exc)), True
    return Finalized(prepared.tool_call, clean_result(result), is_error, executed.duration_ms)


def tool_result_message(done: Finalized, timestamp: int | None = None) -> ToolResultMessage:
    """The transcript's record of a call (``terminate`` and structured content stay out),
    stamped ``timestamp`` (default: now)."""
    result = done.result
    content = result.content
    # positional, which costs half of keywords: the fields in ToolResultMessage's order
    return ToolResultMessage(done.tool_call.id, done.tool_call.name,
                             [*content] if content else [], result.details, result.usage,
                             done.is_error, done.duration_ms,
                             now_ms() if timestamp is None else timestamp)
