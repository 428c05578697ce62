"""Resuming a run a stopped process left in the middle of a tool batch.

``unanswered_tool_calls`` finds the last assistant message's calls without a result;
``run_agent_loop_resume`` runs them as a new batch (by each tool's ``replay``) and then
goes on as after any batch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..abort import AbortSignal
from ..messages import AgentMessage, AssistantMessage, ToolCall, ToolResultMessage
from ..stream import StreamFn
from ._config import AgentContext, AgentLoopConfig
from ._loop import Emit, Run, emit_start, run_agent_loop_continue

__all__ = ["run_agent_loop_resume", "unanswered_tool_calls"]


def unanswered_tool_calls(messages: Sequence[AgentMessage]
                          ) -> tuple[AssistantMessage, list[ToolCall]] | None:
    """The last assistant message and its tool calls that no later tool result answers, in
    source order; ``None`` when there is none (the transcript is not mid-batch)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            answered = {m.tool_call_id for m in messages[index + 1:]
                        if isinstance(m, ToolResultMessage)}
            if message.stop_reason in ("error", "aborted"):
                return None  # a failed response's calls were never meant to run
            calls = [c for c in message.tool_calls if c.id not in answered]
            return (message, calls) if calls else None
    return None


def run_agent_loop_resume(context: AgentContext, config: AgentLoopConfig, emit: Emit,
                          signal: AbortSignal | None = None, stream_fn: StreamFn | None = None,
                          *, started: Collection[str] = ()) -> list[AgentMessage]:
    """Finish a batch a stopped process left without results, then go on (docs/sessions.md).

    The last assistant message's tool calls that have no result are run in a new batch
    with the usual events: a call not in ``started`` (its ``execute`` was never called)
    runs through the usual hooks; one in ``started`` runs again if its tool's ``replay`` is
    ``"safe"``, otherwise it gets an error result saying its outcome is unknown. A batch
    that waited for approval is completed with ``config.held_results`` (used as they are)
    and ``config.approvals`` (approved calls run, denied ones get an error result). The loop
    then continues as after any batch. With no such calls this is
    ``run_agent_loop_continue``. Blocks; returns the run's new messages.
    """
    pending = unanswered_tool_calls(context.messages)
    if pending is None:
        return run_agent_loop_continue(context, config, emit, signal, stream_fn)
    message, calls = pending
    replay = {tool.name: tool.replay for tool in context.tools}
    held = {m.tool_call_id for m in config.held_results}
    unknown = frozenset(c.id for c in calls if c.id in started and c.id not in held
                        and replay.get(c.name) != "safe")
    run = Run(context, config, emit, signal, stream_fn)
    run.trace.run(emit_start, run.emit)
    return run.run((message, calls, unknown))
