"""The stores' side of approvals (the types are ``piagent.policy``'s): a waiting entry and a
decision as the JSON the durable stores keep, and which rows of a waiting batch the tool
results stored since it waited leave open.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..messages import sanitize_surrogates
from ..policy import ApprovalDecision, PendingApproval

__all__ = ["decision_from_json", "decision_to_json", "live_rows", "pending_from_json",
           "pending_to_json"]


def live_rows(ids: Sequence[str], answered: Sequence[str]) -> list[int]:
    """The indices of a waiting batch's rows (their calls' ids, in source order) that the
    tool results stored since the batch waited (``answered``, in order) leave open: a result
    answers the first open row of its id (results of one batch are stored in source
    order), so two calls of one batch sharing an id are told apart."""
    if not answered:
        return list(range(len(ids)))
    open_rows = list(range(len(ids)))
    for call_id in answered:
        for at, row in enumerate(open_rows):
            if ids[row] == call_id:
                del open_rows[at]
                break
    return open_rows


def pending_to_json(pending: PendingApproval) -> str:
    data = {"toolCallId": pending.tool_call_id, "toolName": pending.tool_name,
            "args": pending.args, "digest": pending.digest}
    if pending.call_key:
        data["callKey"] = pending.call_key
    return sanitize_surrogates(json.dumps(data, ensure_ascii=False, separators=(",", ":"),
                                          default=repr))


def decision_to_json(decision: ApprovalDecision | None) -> str | None:
    if decision is None:
        return None
    return sanitize_surrogates(json.dumps({"approved": decision.approved,
                                           "reason": decision.reason},
                                          ensure_ascii=False, separators=(",", ":")))


def decision_from_json(text: str | None) -> ApprovalDecision | None:
    if text is None:
        return None
    data = json.loads(text)
    return ApprovalDecision(bool(data["approved"]), data.get("reason"))


def pending_from_json(text: str, decision: str | None) -> PendingApproval:
    data = json.loads(text)
    return PendingApproval(data["toolCallId"], data["toolName"], data.get("args"),
                           data["digest"], decision_from_json(decision),
                           data.get("callKey") or "")
