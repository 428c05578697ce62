"""Resuming a run a stopped process left in the middle of a tool batch.

``unanswered_tool_calls`` finds the last assistant message's calls without a result;
``run_agent_loop_resume`` runs them as a new batch (by each tool's ``replay``) and then
goes on as after any batch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..abort import AbortSignal
from ..messages import AgentMessage, AssistantMessage, ToolCall, ToolResultMessage
from ..policy import call_key
from ..stream import StreamFn
from ._approval import batch_keys, start_mark
from ._config import AgentContext, AgentLoopConfig
from ._guard import RunGuard
from ._loop import Emit, Run, run_agent_loop_continue

__all__ = ["call_start_mark", "open_calls", "run_agent_loop_resume", "unanswered_tool_calls"]


def _last_batch(messages: Sequence[AgentMessage]
                ) -> tuple[int, AssistantMessage, list[tuple[int, ToolCall]]] | None:
    """The last assistant message (its position) and its calls that no later tool result
    answers, each with its index among the message's tool calls. The k-th result with an
    id answers the k-th call with that id (ids may repeat within a batch, and a batch's
    results are stored in source order)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            if message.stop_reason in ("error", "aborted"):
                return None  # a failed response's calls were never meant to run
            answered: dict[str, int] = {}
            for later in messages[index + 1:]:
                if isinstance(later, ToolResultMessage):
                    answered[later.tool_call_id] = answered.get(later.tool_call_id, 0) + 1
            calls = []
            for at, call in enumerate(message.tool_calls):
                if answered.get(call.id, 0) > 0:
                    answered[call.id] -= 1
                else:
                    calls.append((at, call))
            return (index, message, calls) if calls else None
    return None


def call_start_mark(messages: Sequence[AgentMessage], call: ToolCall) -> str:
    """What a session store's start mark names for ``call`` of the last assistant message
    in ``messages``: its id, or ``"<id> @ <call_key>"`` when another call of that message
    has the same id (``on_tool_execute``'s mark, docs/sessions.md)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            calls = message.tool_calls
            at = next((i for i, c in enumerate(calls) if c is call), None)
            if at is None:
                return call.id
            return start_mark(call, message, call_key(index, at))
    return call.id


def unanswered_tool_calls(messages: Sequence[AgentMessage]
                          ) -> tuple[AssistantMessage, list[ToolCall]] | None:
    """The last assistant message and its tool calls that no later tool result answers, in
    source order; ``None`` when there is none (the transcript is not mid-batch). The k-th
    result with an id answers the k-th call with that id."""
    found = _last_batch(messages)
    return None if found is None else (found[1], [call for _, call in found[2]])


def open_calls(messages: Sequence[AgentMessage]) -> dict[str, ToolCall]:
    """The unanswered calls of the last batch by ``call_key`` (the assistant message's
    position and the call's index: unique within the session whatever the ids)."""
    found = _last_batch(messages)
    if found is None:
        return {}
    position, _, calls = found
    return {call_key(position, at): call for at, call in calls}


def run_agent_loop_resume(context: AgentContext, config: AgentLoopConfig, emit: Emit,
                          signal: AbortSignal | None = None, stream_fn: StreamFn | None = None,
                          *, started: Collection[str] = (),
                          guard: RunGuard | None = None) -> list[AgentMessage]:
    """Finish a batch a stopped process left without results, then go on (docs/sessions.md).

    The last assistant message's tool calls that have no result are run in a new batch
    with the usual events: a call not in ``started`` (its ``execute`` was never called)
    runs through the usual hooks; one in ``started`` runs again if its tool's ``replay`` is
    ``"safe"``, otherwise it gets an error result saying its outcome is unknown. A batch
    that waited for approval is completed with ``config.held_results`` (used as they are)
    and ``config.approvals`` (approved calls run, denied ones get an error result). The loop
    then continues as after any batch. With no such calls this is
    ``run_agent_loop_continue``. ``guard`` as ``run_agent_loop``'s. Blocks; returns the
    run's new messages.
    """
    pending = unanswered_tool_calls(context.messages)
    if pending is None:
        return run_agent_loop_continue(context, config, emit, signal, stream_fn, guard=guard)
    message, calls = pending
    replay = {tool.name: tool.replay for tool in context.tools}
    # a held result wins over a mark (ResumedCalls): the call finished before the batch waited
    keys = batch_keys(context.messages, message)
    marks = (start_mark(c, message, keys.get(id(c), "")) for c in calls
             if replay.get(c.name) != "safe")
    unknown = frozenset(mark for mark in marks if mark in started)
    return Run(context, config, emit, signal, stream_fn, guard).run(
        resume=(message, calls, unknown))
