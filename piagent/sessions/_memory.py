"""``MemoryStore``: a store in this process's memory, for tests and one-process programs."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..messages import AgentMessage, AssistantMessage, ToolResultMessage
from ..policy import (
    ApprovalDecision,
    BudgetSpend,
    PendingApproval,
    check_budget_key,
    check_charge,
    check_decision,
)
from ._approvals import live_rows
from ._protocol import (
    check_messages,
    check_session_id,
    decode_message,
    encode_message,
    marked_call_id,
    unanswered_call_ids,
)


@dataclass
class _Session:
    records: list[str] = field(default_factory=list)  # each message's JSON, in order
    answers: list[str | None] = field(default_factory=list)  # per record: a result's call id
    marks: list[str] = field(default_factory=list)  # tool-call ids marked started, unanswered
    # the waiting batch in source order: ("pending", call id, PendingApproval) or ("held",
    # call id, the result's JSON); the results stored from record ``since`` on answer them
    batch: list[tuple[str, str, PendingApproval | str]] = field(default_factory=list)
    since: int = 0

    def live(self) -> list[int]:
        """The indices of the batch's rows no result stored since it waited answers."""
        if not self.batch:
            return []
        answered = [a for a in self.answers[self.since:] if a is not None]
        return live_rows([row[1] for row in self.batch], answered)


class MemoryStore:
    """Transcripts kept as pi-JSON in memory: the same semantics as the durable stores.

    Messages are encoded on ``append`` and decoded on ``load``, so a loaded transcript is a
    copy and a message that would not survive a real store fails here too.
    """

    def __init__(self) -> None:
        # guards _sessions and _budgets: every method reads or writes them under this lock,
        # from any thread
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._budgets: dict[str, BudgetSpend] = {}  # charge_budget's totals, by key

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
        answers = [m.tool_call_id if isinstance(m, ToolResultMessage) else None for m in items]
        answered = {a for a in answers[last + 1:] if a is not None}
        with self._lock:
            session = self._sessions.setdefault(session_id, _Session())
            session.records.extend(encoded)
            session.answers.extend(answers)
            if last >= 0:
                session.marks, session.batch = [], []
            if answered:
                session.marks = [i for i in session.marks if i not in answered]

    def replace(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        items = check_messages(messages)
        encoded = [encode_message(m) for m in items]
        answers = [m.tool_call_id if isinstance(m, ToolResultMessage) else None for m in items]
        keep = unanswered_call_ids(items)
        # renumbered: the results after the last assistant message answer the waiting batch
        since = 1 + max((i for i, m in enumerate(items) if isinstance(m, AssistantMessage)),
                        default=-1)
        with self._lock:
            old = self._sessions.pop(session_id, None)
            marks = [i for i in old.marks if marked_call_id(i) in keep] if old else []
            batch = old.batch if old else []
            if encoded or marks or batch:
                self._sessions[session_id] = _Session(encoded, answers, marks, batch, since)

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

    # --- approvals (piagent.policy.ApprovalStore) ------------------------------------------

    def mark_waiting(self, session_id: str, pending: Sequence[PendingApproval],
                     held: Sequence[ToolResultMessage]) -> None:
        check_session_id(session_id)
        rows: list[tuple[str, str, PendingApproval | str]] = [
            ("pending", p.tool_call_id, dataclasses.replace(p, decision=None)) for p in pending]
        rows += [("held", m.tool_call_id, encode_message(m)) for m in held]
        with self._lock:
            session = self._sessions.setdefault(session_id, _Session())
            session.batch, session.since = rows, len(session.records)

    def _pending(self, session_id: str) -> list[tuple[int, PendingApproval]]:
        """(batch index, entry) of the open waiting calls; under the lock."""
        session = self._sessions.get(session_id)
        if session is None:
            return []
        batch = session.batch
        return [(i, batch[i][2]) for i in session.live()  # type: ignore[misc]
                if batch[i][0] == "pending"]

    def decide(self, session_id: str, tool_call_id: str, decision: ApprovalDecision,
               digest: str | None) -> bool:
        check_session_id(session_id)
        with self._lock:
            open_rows = self._pending(session_id)
            entries = [entry for _, entry in open_rows]
            index = check_decision(session_id, entries, tool_call_id, decision, digest)
            at = open_rows[index][0]
            kind, call_id, _ = self._sessions[session_id].batch[at]
            self._sessions[session_id].batch[at] = (
                kind, call_id, dataclasses.replace(entries[index], decision=decision))
            return all(e.decision is not None for i, e in enumerate(entries) if i != index)

    def approvals(self, session_id: str) -> list[PendingApproval]:
        check_session_id(session_id)
        with self._lock:
            return [entry for _, entry in self._pending(session_id)]

    def held_results(self, session_id: str) -> list[ToolResultMessage]:
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            held = [session.batch[i][2] for i in session.live()
                    if session.batch[i][0] == "held"] if session else []
        return [decode_message(session_id, seq, text)  # type: ignore[misc]  # a tool result
                for seq, text in enumerate(held)]

    def clear_approvals(self, session_id: str) -> None:
        check_session_id(session_id)
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                session.batch = []

    # --- budgets (piagent.policy.BudgetStore) -----------------------------------------------

    def charge_budget(self, key: str, *, cost: float = 0.0, tokens: int = 0,
                      requests: int = 0) -> BudgetSpend:
        """Add to what has been spent under ``key`` and return the new totals, atomically
        (every process sees the other's charges); a charge of nothing reads the totals."""
        add_cost, add_tokens, add_requests = check_charge(cost, tokens, requests)
        key = check_budget_key(key)
        with self._lock:
            spent = self._budgets.get(key, BudgetSpend())
            spent = BudgetSpend(spent.cost + add_cost, spent.tokens + add_tokens,
                                spent.requests + add_requests)
            self._budgets[key] = spent
        return spent
