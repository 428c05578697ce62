"""Tool calls that wait for a person's decision, in a batch.

A call whose tool (``needs_approval``) or ``before_tool_call`` (``needs_approval=True``) asks
for approval and has no decision yet is ``Waiting``: it does not run. The rest of the batch
runs as usual; the results that come before the first waiting call (source order) are
recorded, the later ones are held back, so that when the batch completes every result
lands in source order. ``ResumedCalls`` is the decided batch ``run_agent_loop_resume``
completes: held results are used as they are, denied calls get ``denied_result``, approved
ones run (``before_tool_call`` sees the decision), calls that started before a crash follow
their tool's ``replay``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ..messages import AssistantMessage, ToolCall, ToolResultMessage
from ..policy import (
    HELD_KEY,
    ApprovalDecision,
    PendingApproval,
    approval_digest,
    call_key,
    held_key,
)
from ..tools import AgentToolResult
from ._call import Finalized, error_result

__all__ = ["DENIED_TEXT", "ResumedCalls", "batch_keys", "denied_result", "held_done",
           "keep_key", "pending_of", "start_mark"]

DENIED_TEXT = "Tool call denied by the user"


def denied_result(reason: str | None) -> AgentToolResult:
    """The error result of a denied call: ``Tool call denied by the user: <reason>`` (or
    ``...user.`` without a reason), so the model can act on it."""
    return error_result(f"{DENIED_TEXT}: {reason}" if reason else f"{DENIED_TEXT}.")


def pending_of(call: ToolCall, key: str) -> PendingApproval:
    """The ``PendingApproval`` of a waiting call (no decision yet), named by ``key``."""
    return PendingApproval(call.id, call.name, call.arguments,
                           approval_digest(call.name, call.arguments), None, key)


def batch_keys(messages: Sequence[object], message: AssistantMessage) -> dict[int, str]:
    """Each tool call of ``message`` (by object identity) to its ``call_key``: the
    message's position in ``messages`` and the call's index (``""`` when the message is not
    there)."""
    position = next((i for i in range(len(messages) - 1, -1, -1) if messages[i] is message),
                    None)
    return {id(call): "" if position is None else call_key(position, index)
            for index, call in enumerate(message.tool_calls)}


def start_mark(call: ToolCall, message: AssistantMessage, key: str) -> str:
    """What a session store's start mark names for ``call`` of ``message``: its id, or,
    when another call of the message has the same id, ``"<id> @ <call_key>"`` (such a mark
    is never answered by a result; it goes with its batch)."""
    shared = sum(1 for c in message.tool_calls if c.id == call.id) > 1
    return f"{call.id} @ {key}" if shared and key else call.id


def keep_key(result: ToolResultMessage, key: str) -> ToolResultMessage:
    """A held result marked with its call's key (kept in the store, never in the
    transcript: the batch's run makes the call's result anew from it)."""
    if key:
        result.extra[HELD_KEY] = key
    return result


def held_done(call: ToolCall, held: ToolResultMessage) -> Finalized:
    """A held result as a finished call (its events were sent when it ran)."""
    return Finalized(call, AgentToolResult(content=list(held.content), details=held.details,
                                           usage=held.usage), held.is_error, held.duration_ms)


@dataclass(slots=True)
class ResumedCalls:
    """What a resumed batch knows about each of its calls (by object identity): its held
    result, its decision, whether it gets an unknown-outcome result. ``ids``: every call
    named by any of them."""

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


NOTHING_RESUMED = ResumedCalls({}, {}, frozenset(), frozenset())
