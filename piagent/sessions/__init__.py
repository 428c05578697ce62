"""Transcripts that survive the process: session stores (docs/sessions.md).

``SessionStore`` is the protocol; ``SQLiteStore`` (stdlib ``sqlite3``, WAL) is the embedded
default, ``JsonlStore`` keeps one readable ``<id>.jsonl`` per session, ``MemoryStore`` keeps
them in memory. ``Agent(store=..., session_id=...)`` loads and appends through one. Each
store also keeps a session's calls waiting for approval and spending under a budget key
(the ``ApprovalStore`` and ``BudgetStore`` protocols of ``piagent.policy``, whose types
are re-exported here as well).
"""

from __future__ import annotations

from ..policy import (
    HELD_KEY,
    ApprovalDecision,
    ApprovalStore,
    BudgetSpend,
    PendingApproval,
    approval_digest,
    call_key,
    find_entry,
    held_key,
)
from ._jsonl import JsonlStore
from ._memory import MemoryStore
from ._postgres import PostgresStore
from ._protocol import MAX_SESSION_ID_LENGTH, SessionCorruptError, SessionStore, check_session_id
from ._sqlite import SQLiteStore

__all__ = [
    "HELD_KEY",
    "MAX_SESSION_ID_LENGTH",
    "ApprovalDecision",
    "ApprovalStore",
    "BudgetSpend",
    "JsonlStore",
    "MemoryStore",
    "PendingApproval",
    "PostgresStore",
    "SQLiteStore",
    "SessionCorruptError",
    "SessionStore",
    "approval_digest",
    "call_key",
    "check_session_id",
    "find_entry",
    "held_key",
]
