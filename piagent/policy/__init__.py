"""Approvals and budgets: the types the loop, the Agent, the runners and the stores share.

``ApprovalDecision`` and ``PendingApproval`` are a person's answer to a tool call that waits
for approval and the call as it waits; ``ApprovalStore`` is where a session's waiting batch
is kept (docs/approvals.md). ``Budget`` is spending shared under a key, ``BudgetStore`` the
store that charges it atomically, ``BudgetSpend`` the totals a charge reads back
(docs/limits.md). The session stores (``piagent.sessions``) implement both protocols, each
in methods of its own; this package knows no store.
"""

from __future__ import annotations

from ._approvals import (
    HELD_KEY,
    ApprovalDecision,
    ApprovalStore,
    PendingApproval,
    approval_digest,
    call_key,
    check_decision,
    find_entry,
    held_key,
    named_call,
)
from ._budgets import (
    MAX_BUDGET_KEY_LENGTH,
    Budget,
    BudgetSpend,
    BudgetStore,
    check_budget_key,
    check_charge,
    check_limit,
)

__all__ = [
    "HELD_KEY",
    "MAX_BUDGET_KEY_LENGTH",
    "ApprovalDecision",
    "ApprovalStore",
    "Budget",
    "BudgetSpend",
    "BudgetStore",
    "PendingApproval",
    "approval_digest",
    "call_key",
    "check_budget_key",
    "check_charge",
    "check_decision",
    "check_limit",
    "find_entry",
    "held_key",
    "named_call",
]
