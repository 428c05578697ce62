"""The steps around a batch's phases: resume before (``ResumedCalls``: what a resumed
batch knows of each call), approval after (``wait_for_approval``). docs/approvals.md tells
the whole story: calls from the first waiting one on are held back, so that when the
batch completes every result lands in source order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from ..events import AgentEvent, ToolApprovalRequestEvent
from ..messages import AssistantMessage, ToolCall, ToolResultMessage, now_ms
from ..sessions import (
    HELD_KEY,
    ApprovalDecision,
    PendingApproval,
    approval_digest,
    call_key,
    held_key,
)
from ..tools import AgentToolResult
from ._call import Finalized, Waiting, error_result, tool_result_message, unknown_outcome_result
from ._config import AgentLoopConfig

__all__ = ["DENIED_TEXT", "NOTHING_RESUMED", "ResumedCalls", "batch_keys", "denied_result",
           "start_mark", "wait_for_approval"]

DENIED_TEXT = "Tool call denied by the user"


def denied_result(reason: str | None) -> AgentToolResult:
    """``Tool call denied by the user: <reason>`` (``...user.`` without one)."""
    return error_result(f"{DENIED_TEXT}: {reason}" if reason else f"{DENIED_TEXT}.")


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


@dataclass(slots=True)
class ResumedCalls:
    """Each call of a resumed batch (by object identity): its held result, its decision,
    whether it gets an unknown-outcome result; ``ids``: every call named by any of them."""

    held: dict[int, ToolResultMessage]
    decisions: dict[int, ApprovalDecision]
    unknown: frozenset[int]
    ids: frozenset[int]

    @classmethod
    def of(cls, message: AssistantMessage, calls: Sequence[ToolCall], keys: Mapping[int, str],
           decisions: Mapping[str, ApprovalDecision] | None,
           held: Sequence[ToolResultMessage], unknown: Collection[str]) -> ResumedCalls:
        """``decisions`` by ``call_key`` (or by tool-call id, for entries an older piagent
        stored), ``held`` results (each with its call's key, or matched to the next call of
        its id that has no decision), ``unknown``: the start marks (``start_mark``) of the
        calls that get an unknown-outcome result unless a held result answers them."""
        decided = dict(decisions or {})
        by_key = {held_key(m): m for m in held if held_key(m)}
        unkeyed: dict[str, list[ToolResultMessage]] = {}
        for m in held:
            if not held_key(m):
                unkeyed.setdefault(m.tool_call_id, []).append(m)
        held_of: dict[int, ToolResultMessage] = {}
        decision_of: dict[int, ApprovalDecision] = {}
        for call in calls:
            key = keys.get(id(call), "")
            decision = decided.get(key) if key in decided else decided.get(call.id)
            if decision is not None:
                decision_of[id(call)] = decision
            elif key in by_key:
                held_of[id(call)] = by_key[key]
            elif unkeyed.get(call.id):
                held_of[id(call)] = unkeyed[call.id].pop(0)
        late = frozenset(id(c) for c in calls if id(c) not in held_of
                         and start_mark(c, message, keys.get(id(c), "")) in unknown)
        return cls(held_of, decision_of, late, frozenset(held_of) | frozenset(decision_of) | late)

    def held_done(self, call: ToolCall) -> Finalized | None:
        """The call's held result as a finished call (its events were sent when it ran)."""
        held = self.held.get(id(call))
        if held is None:
            return None
        return Finalized(call, AgentToolResult(content=list(held.content), details=held.details,
                                               usage=held.usage), held.is_error, held.duration_ms)

    def settled(self, call: ToolCall) -> Finalized | ApprovalDecision | None:
        """The resume step before ``prepare_tool_call``: the call's result if it does not run
        (an unknown outcome, a denial), else its decision (``None``: none)."""
        decision = self.decisions.get(id(call))
        if id(call) in self.unknown:
            return Finalized(call, unknown_outcome_result(call), True)
        if decision is not None and not decision.approved:
            return Finalized(call, denied_result(decision.reason), True)
        return decision


NOTHING_RESUMED = ResumedCalls({}, {}, frozenset(), frozenset())


def wait_for_approval(rest: Sequence[Finalized | Waiting], keys: Mapping[int, str],
                      config: AgentLoopConfig, emit: Callable[[AgentEvent], None]
                      ) -> list[PendingApproval]:
    """The approval step: ``rest`` (from the first waiting call on) goes to
    ``on_approval_wait`` before anyone is asked: the waiting calls as ``PendingApproval``s,
    the finished ones as held results marked with their call's key (kept in the store, not
    the transcript). Then each waiting call is reported (``tool_approval_request``)."""
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
