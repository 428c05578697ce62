"""``MemoryStore``: a store in this process's memory, for tests and one-process programs."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..messages import AgentMessage, ToolResultMessage
from ._budgets import BudgetSpend, check_budget_key, check_charge, memory_charge
from ._protocol import (
    check_messages,
    check_session_id,
    decode_message,
    encode_message,
    unanswered_call_ids,
)


@dataclass
class _Session:
    records: list[str] = field(default_factory=list)  # each message's JSON, in order
    marks: list[str] = field(default_factory=list)  # tool-call ids marked started, unanswered


class MemoryStore:
    """Transcripts kept as pi-JSON in memory: the same semantics as the durable stores.

    Messages are encoded on ``append`` and decoded on ``load``, so a loaded transcript is a
    copy and a message that would not survive a real store fails here too.
    """

    def __init__(self) -> None:
        # guards _sessions: every method reads or writes it under this lock, from any thread
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._budgets: dict[str, BudgetSpend] = {}  # charge_budget's totals, also under _lock

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._sessions)} sessions)"

    def load(self, session_id: str) -> list[AgentMessage]:
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            records = list(session.records) if session else []
        return [decode_message(session_id, seq, text) for seq, text in enumerate(records)]

    def append(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        items = check_messages(messages)
        encoded = [encode_message(m) for m in items]  # all encoded before anything is kept
        if not encoded:
            return
        answered = {m.tool_call_id for m in items if isinstance(m, ToolResultMessage)}
        with self._lock:
            session = self._sessions.setdefault(session_id, _Session())
            session.records.extend(encoded)
            session.marks = [i for i in session.marks if i not in answered]

    def replace(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        items = check_messages(messages)
        encoded = [encode_message(m) for m in items]
        keep = unanswered_call_ids(items)
        with self._lock:
            old = self._sessions.pop(session_id, None)
            marks = [i for i in old.marks if i in keep] if old else []
            if encoded or marks:
                self._sessions[session_id] = _Session(encoded, marks)

    def delete(self, session_id: str) -> None:
        check_session_id(session_id)
        with self._lock:
            self._sessions.pop(session_id, None)

    def session_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._sessions)

    def mark_started(self, session_id: str, tool_call_id: str) -> None:
        check_session_id(session_id)
        if not isinstance(tool_call_id, str):
            msg = f"tool_call_id must be a str, got {type(tool_call_id).__name__}."
            raise TypeError(msg)
        with self._lock:
            session = self._sessions.setdefault(session_id, _Session())
            if tool_call_id not in session.marks:
                session.marks.append(tool_call_id)

    def started(self, session_id: str) -> set[str]:
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            return set(session.marks) if session else set()

    # --- budgets (piagent/sessions/_budgets.py) --------------------------------------------

    def charge_budget(self, key: str, *, cost: float = 0.0, tokens: int = 0,
                      requests: int = 0) -> BudgetSpend:
        """Add to what has been spent under ``key`` and return the new totals, atomically
        (every process sees the other's charges); a charge of nothing reads the totals."""
        amounts = check_charge(cost, tokens, requests)
        return memory_charge(self, check_budget_key(key), *amounts)
