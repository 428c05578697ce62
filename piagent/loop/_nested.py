"""``run_tool_call``: one call outside any batch (a tool that calls other tools), through the
same three phases as a model's call (``_call.py``), without events."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..abort import AbortSignal
from ..messages import AssistantMessage, ToolCall
from ..tools import AgentTool
from ._call import (
    Finalized,
    Waiting,
    execute_prepared_tool_call,
    finalize_executed_tool_call,
    prepare_tool_call,
)
from ._config import AgentContext, AgentLoopConfig, AgentToolCallOutcome
from ._results import error_result

__all__ = ["run_tool_call"]


def run_tool_call(tool_call: ToolCall, *, tools: Sequence[AgentTool],
                  assistant_message: AssistantMessage, context: AgentContext,
                  config: AgentLoopConfig | None = None, signal: AbortSignal | None = None,
                  on_update: Callable[[Any], None] | None = None) -> AgentToolCallOutcome:
    """Run one call through the same prepare → execute → finalize phases as a model's call.

    For tools that call other tools: the hooks (permission checks, say) apply to the nested
    call too. Runs on the calling thread, emits no events, adds no messages, and never
    raises for tool failures (they come back with ``is_error=True``).
    """
    signal = signal if signal is not None else AbortSignal()
    tool = next((t for t in tools if t.name == tool_call.name), None)
    prepared = prepare_tool_call(context, assistant_message, tool_call, config, signal, tool)
    if isinstance(prepared, Waiting):
        return AgentToolCallOutcome(tool_call, error_result(
            f"Tool {tool_call.name!r} needs approval, which a call made by another tool "
            f"cannot wait for; it was not run."), True)
    if isinstance(prepared, Finalized):
        return AgentToolCallOutcome(tool_call, prepared.result, True)
    gate = threading.Lock()  # guards `accepting`: updates sent after execute() are ignored
    accepting = True

    def forward(partial: Any) -> None:
        with gate:
            if accepting and on_update is not None:
                on_update(partial)

    executed = execute_prepared_tool_call(prepared, signal, forward)
    with gate:
        accepting = False
    done = finalize_executed_tool_call(context, assistant_message, prepared, executed, config,
                                       signal)
    return AgentToolCallOutcome(tool_call, done.result, done.is_error)
