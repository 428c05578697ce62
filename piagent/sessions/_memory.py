"""``MemoryStore``: a store in this process's memory, for tests and one-process programs."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..messages import AgentMessage, AssistantMessage, ToolResultMessage
from ._approvals import ApprovalDecision, PendingApproval, check_decision
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
    # the waiting batch: its calls (unanswered) and held results ((call id, JSON), unanswered)
    pending: list[PendingApproval] = field(default_factory=list)
    held: list[tuple[str, str]] = field(default_factory=list)


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
        # a new reply ends the batch before it (completed, or gone past): its marks and
        # waiting calls are over; a result answers the last batch's call of its id only
        # (tool-call ids repeat across batches)
        last = max((i for i, m in enumerate(items) if isinstance(m, AssistantMessage)),
                   default=-1)
        answered = {m.tool_call_id for m in items[last + 1:] if isinstance(m, ToolResultMessage)}
        with self._lock:
            session = self._sessions.setdefault(session_id, _Session())
            session.records.extend(encoded)
            if last >= 0:
                session.marks, session.pending, session.held = [], [], []
            session.marks = [i for i in session.marks if i not in answered]
            if answered and (session.pending or session.held):
                session.pending = [p for p in session.pending if p.tool_call_id not in answered]
                session.held = [h for h in session.held if h[0] not in answered]

    def replace(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        items = check_messages(messages)
        encoded = [encode_message(m) for m in items]
        keep = unanswered_call_ids(items)
        with self._lock:
            old = self._sessions.pop(session_id, None)
            marks = [i for i in old.marks if i in keep] if old else []
            pending = [p for p in old.pending if p.tool_call_id in keep] if old else []
            held = [h for h in old.held if h[0] in keep] if old else []
            if encoded or marks or pending or held:
                self._sessions[session_id] = _Session(encoded, marks, pending, held)

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

    # --- approvals (piagent/sessions/_approvals.py) ---------------------------------------

    def mark_waiting(self, session_id: str, pending: Sequence[PendingApproval],
                     held: Sequence[ToolResultMessage]) -> None:
        check_session_id(session_id)
        entries = [dataclasses.replace(p, decision=None) for p in pending]
        kept = [(m.tool_call_id, encode_message(m)) for m in held]
        with self._lock:
            session = self._sessions.setdefault(session_id, _Session())
            session.pending, session.held = entries, kept

    def decide(self, session_id: str, tool_call_id: str, decision: ApprovalDecision,
               digest: str | None) -> bool:
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            entries = session.pending if session else []
            index = check_decision(session_id, entries, tool_call_id, decision, digest)
            entries[index] = dataclasses.replace(entries[index], decision=decision)
            return all(e.decision is not None for e in entries)

    def approvals(self, session_id: str) -> list[PendingApproval]:
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            return list(session.pending) if session else []

    def held_results(self, session_id: str) -> list[ToolResultMessage]:
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            held = list(session.held) if session else []
        return [decode_message(session_id, seq, text)  # type: ignore[misc]  # a tool result
                for seq, (_, text) in enumerate(held)]

    def clear_approvals(self, session_id: str) -> None:
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                session.pending, session.held = [], []

    # --- budgets (piagent/sessions/_budgets.py) --------------------------------------------

    def charge_budget(self, key: str, *, cost: float = 0.0, tokens: int = 0,
                      requests: int = 0) -> BudgetSpend:
        """Add to what has been spent under ``key`` and return the new totals, atomically
        (every process sees the other's charges); a charge of nothing reads the totals."""
        amounts = check_charge(cost, tokens, requests)
        return memory_charge(self, check_budget_key(key), *amounts)
