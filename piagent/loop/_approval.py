"""The steps around a batch's phases: resume before (``resumed_answers``), approval after
(``wait_for_approval``); docs/approvals.md tells why calls from the first waiting one on are
held back (when the batch completes, every result lands in source order)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from ..events import AgentEvent, ToolApprovalRequestEvent
from ..messages import AssistantMessage, ToolCall, ToolResultMessage, now_ms
from ..policy import (
    HELD_KEY,
    ApprovalDecision,
    PendingApproval,
    approval_digest,
    call_key,
    held_key,
)
from ..tools import AgentToolResult
from ._call import Finalized, Waiting, tool_result_message
from ._config import AgentLoopConfig
from ._results import denied_result, unknown_outcome_result

__all__ = ["Answer", "batch_keys", "resumed_answers", "start_mark", "wait_for_approval"]

# of a resumed call: its held result, its result without running (an unknown outcome, a
# denial), or its approval
Answer = Finalized | AgentToolResult | ApprovalDecision


def batch_keys(messages: Sequence[object], message: AssistantMessage) -> dict[int, str]:
    """Each tool call of ``message`` (by object identity) to its ``call_key``: the message's
    position in ``messages`` and the call's index (``""`` when the message is not there)."""
    position = next((i for i in range(len(messages) - 1, -1, -1) if messages[i] is message),
                    None)
    return {id(call): "" if position is None else call_key(position, index)
            for index, call in enumerate(message.tool_calls)}


def start_mark(call: ToolCall, message: AssistantMessage, key: str) -> str:
    """What a session store's start mark names for ``call`` of ``message``: its id, or, when
    another call of the message has the same id, ``"<id> @ <call_key>"`` (such a mark is
    never answered by a result; it goes with its batch)."""
    shared = sum(1 for c in message.tool_calls if c.id == call.id) > 1
    return f"{call.id} @ {key}" if shared and key else call.id


def resumed_answers(message: AssistantMessage, calls: Sequence[ToolCall],
                    keys: Mapping[int, str], decisions: Mapping[str, ApprovalDecision] | None,
                    held: Sequence[ToolResultMessage], unknown: Collection[str]
                    ) -> dict[int, Answer]:
    """The resume step: each call's ``Answer`` (by object identity) from ``decisions`` (by
    ``call_key``, or by id as an older piagent stored them), ``held`` results and
    ``unknown``: the start marks of calls running when the process stopped."""
    decided = dict(decisions or {})
    by_key = {held_key(m): m for m in held if held_key(m)}
    unkeyed: dict[str, list[ToolResultMessage]] = {}
    for m in held:
        if not held_key(m):
            unkeyed.setdefault(m.tool_call_id, []).append(m)
    answers: dict[int, Answer] = {}
    for call in calls:
        key = keys.get(id(call), "")
        decision = decided.get(key) if key in decided else decided.get(call.id)
        kept = None
        if decision is None:  # a held result: by its key, else the next of its id
            kept = by_key.get(key) or (unkeyed[call.id].pop(0) if unkeyed.get(call.id) else None)
        if kept is not None:
            answers[id(call)] = Finalized(call, AgentToolResult(
                list(kept.content), kept.details, usage=kept.usage), kept.is_error,
                kept.duration_ms)
        elif start_mark(call, message, key) in unknown:
            answers[id(call)] = unknown_outcome_result(call)
        elif decision is not None:
            answers[id(call)] = decision if decision.approved else denied_result(decision.reason)
    return answers


def wait_for_approval(rest: Sequence[Finalized | Waiting], keys: Mapping[int, str],
                      config: AgentLoopConfig, emit: Callable[[AgentEvent], None]
                      ) -> list[PendingApproval]:
    """The approval step: ``rest`` (from the first waiting call on) to ``on_approval_wait``
    (pending calls, and held results marked with their key), then ``tool_approval_request``
    for each waiting call."""
    timestamp = now_ms()
    held: list[ToolResultMessage] = []
    pending: list[PendingApproval] = []
    for slot in rest:
        call, key = slot.tool_call, keys.get(id(slot.tool_call), "")
        if isinstance(slot, Waiting):
            pending.append(PendingApproval(call.id, call.name, call.arguments,
                                           approval_digest(call.name, call.arguments), None, key))
            continue
        held.append(message := tool_result_message(slot, timestamp))
        if key:
            message.extra[HELD_KEY] = key
    if config.on_approval_wait is not None:
        config.on_approval_wait(list(pending), held)
    for entry in pending:
        emit(ToolApprovalRequestEvent(entry.tool_call_id, entry.tool_name, entry.args,
                                      entry.digest, entry.call_key))
    return pending
