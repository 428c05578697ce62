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

from ..messages import ToolCall, ToolResultMessage
from ..sessions import ApprovalDecision, PendingApproval, approval_digest
from ..tools import AgentToolResult
from ._call import Finalized, error_result

__all__ = ["DENIED_TEXT", "ResumedCalls", "denied_result", "held_done", "pending_of"]

DENIED_TEXT = "Tool call denied by the user"


def denied_result(reason: str | None) -> AgentToolResult:
    """The error result of a denied call: ``Tool call denied by the user: <reason>`` (or
    ``...user.`` without a reason), so the model can act on it."""
    return error_result(f"{DENIED_TEXT}: {reason}" if reason else f"{DENIED_TEXT}.")


def pending_of(call: ToolCall) -> PendingApproval:
    """The ``PendingApproval`` of a waiting call (no decision yet)."""
    return PendingApproval(call.id, call.name, call.arguments,
                           approval_digest(call.name, call.arguments))


def held_done(call: ToolCall, held: ToolResultMessage) -> Finalized:
    """A held result as a finished call (its events were sent when it ran)."""
    return Finalized(call, AgentToolResult(content=list(held.content), details=held.details,
                                           usage=held.usage), held.is_error, held.duration_ms)


@dataclass(slots=True)
class ResumedCalls:
    """What a resumed batch knows about its calls: held results, decisions, and the calls
    that get an unknown-outcome result. ``ids``: every call named by any of them."""

    held: dict[str, ToolResultMessage]
    decisions: Mapping[str, ApprovalDecision]
    unknown: frozenset[str]
    ids: frozenset[str]

    @classmethod
    def of(cls, decisions: Mapping[str, ApprovalDecision] | None,
           held: Sequence[ToolResultMessage], unknown: Collection[str]) -> ResumedCalls:
        held_by_id = {m.tool_call_id: m for m in held}
        decided = dict(decisions or {})
        unknown = frozenset(unknown) - held_by_id.keys()
        return cls(held_by_id, decided, unknown,
                   frozenset(held_by_id) | frozenset(decided) | unknown)


NOTHING_RESUMED = ResumedCalls({}, {}, frozenset(), frozenset())
