"""Approvals by session id, the same on every runner (docs/approvals.md): ``pending_approvals``,
``approve`` and ``deny``.

A run that ends with tool calls waiting for a decision reads ``waiting``. The calls, their
decisions and the batch's results so far live in the session store (an ``ApprovalStore``:
``MemoryStore``, ``SQLiteStore``, ``PostgresStore``), so any thread or process that reaches
the store decides. ``store.decide`` records one decision atomically and says whether it
completed the batch; only that caller starts the session's next run, which executes the
decided batch (approved calls run, denied ones get their error result) and goes on:
``LocalRunner`` on threads of the deciding process, ``QueuedRunner`` through its ``submit``.
A process that dies between the last decision and that start leaves a decided batch: the
session's next ``start()`` finishes it first (the transcript stops mid-run, so the run
recovers it with ``agent.resume()``).
"""

from __future__ import annotations

import time

from ..errors import ApprovalError, ApprovalPendingError
from ..loop import open_calls
from ..policy import ApprovalDecision, ApprovalStore, PendingApproval, approval_digest, named_call
from ..sessions import SessionStore, check_session_id
from ._backend import SessionBusy

__all__ = ["CONTINUE_WAIT_S", "RunnerApprovalMethods", "approval_store"]

# how long a decision that completed a batch waits for the session's live run to end (the
# run that ended waiting records its end a moment after it reported the calls)
CONTINUE_WAIT_S = 5.0


def approval_store(store: SessionStore) -> ApprovalStore:
    """``store`` as an ``ApprovalStore`` (``TypeError`` for a store that keeps no approvals)."""
    if not isinstance(store, ApprovalStore):
        msg = (f"approvals need a session store that keeps them (MemoryStore, SQLiteStore, "
               f"PostgresStore), got {type(store).__name__}.")
        raise TypeError(msg)
    return store


def _check_optional_text(value: object, name: str, what: str) -> None:
    if value is not None and not isinstance(value, str):
        msg = f"{name} must be None or a str ({what}), got {type(value).__name__}."
        raise TypeError(msg)


def describe(pending: PendingApproval) -> str:
    """``name (id)``: how an error names a waiting call."""
    return f"{pending.tool_name} ({pending.tool_call_id})"


class RunnerApprovalMethods:
    """``pending_approvals``/``approve``/``deny`` for a runner; the runner adds
    ``_start_continuation``, which starts (or submits) the run that executes a decided
    batch."""

    store: SessionStore
    # whether the store keeps approvals, once checked (a protocol isinstance is slow)
    _keeps_approvals: bool | None = None

    def _kept(self) -> ApprovalStore | None:
        """The store as an ``ApprovalStore``, ``None`` if it keeps no approvals."""
        if self._keeps_approvals is None:
            self._keeps_approvals = isinstance(self.store, ApprovalStore)
        return self.store if self._keeps_approvals else None  # type: ignore[return-value]

    def _approvals(self) -> ApprovalStore:
        kept = self._kept()
        return kept if kept is not None else approval_store(self.store)

    def pending_approvals(self, session_id: str) -> list[PendingApproval]:
        """The tool calls of the session's waiting batch, in source order, each with its
        decision so far (``None`` while undecided); empty when nothing waits."""
        check_session_id(session_id)
        return self._approvals().approvals(session_id)

    def approve(self, session_id: str, tool_call_id: str, *, reason: str | None = None,
                digest: str | None = None) -> str | None:
        """Approve a waiting call of ``session_id``, named by its ``call_key`` or by its
        tool-call id when no other waiting call has that id; the id of the run that goes on
        when this decision completed the batch, else ``None``.

        ``digest`` (the ``digest`` of the ``PendingApproval`` or of the
        ``tool_approval_request`` event the user saw) refuses the decision when the call's
        arguments are no longer those. ``ApprovalError`` for an unknown call, a call already
        decided or a digest that does not match. Safe from any thread or process that
        reaches the store.
        """
        return self._decide(session_id, tool_call_id, True, reason, digest)

    def deny(self, session_id: str, tool_call_id: str, *, reason: str | None = None,
             digest: str | None = None) -> str | None:
        """Deny a waiting call of ``session_id``: it gets an error result the model reads,
        with ``reason`` in it. Returns and raises as ``approve``."""
        return self._decide(session_id, tool_call_id, False, reason, digest)

    def _decide(self, session_id: str, tool_call_id: str, approved: bool, reason: str | None,
                digest: str | None) -> str | None:
        check_session_id(session_id)
        if not isinstance(tool_call_id, str):
            msg = (f"tool_call_id must be a str (a PendingApproval's tool_call_id), got "
                   f"{type(tool_call_id).__name__}.")
            raise TypeError(msg)
        _check_optional_text(reason, "reason", "it is shown to the model")
        _check_optional_text(digest, "digest", "a PendingApproval's digest")
        store = self._approvals()
        named, entry = named_call(session_id, store.approvals(session_id), tool_call_id)
        if entry is not None and entry.decision is None:
            self._check_arguments(session_id, entry, digest)
        decision = ApprovalDecision(approved=approved, reason=reason)
        if not store.decide(session_id, named, decision, digest):
            return None
        return self._continue_batch(session_id)

    def _check_arguments(self, session_id: str, entry: PendingApproval,
                         digest: str | None) -> None:
        """``ApprovalError`` unless the stored transcript still has the call open with the
        arguments it was shown with (and, given ``digest``, those the decider saw)."""
        calls = open_calls(self.store.load(session_id))
        call = calls.get(entry.call_key) if entry.call_key else next(
            (c for c in calls.values() if c.id == entry.tool_call_id), None)
        if call is None:
            msg = (f"No tool call {entry.tool_call_id!r} waits for approval in session "
                   f"{session_id!r}: the stored transcript has no open call of that id any "
                   f"more.")
            raise ApprovalError(msg)
        current = approval_digest(call.name, call.arguments)
        if current != entry.digest or (digest is not None and digest != current):
            given = "its arguments changed since approval was asked" if current != \
                entry.digest else "the digest given does not match its arguments"
            msg = (f"Tool call {call.id!r} ({call.name!r}) of session {session_id!r}: "
                   f"{given} (now {call.arguments!r}); nothing was decided.")
            raise ApprovalError(msg)

    def _continue_batch(self, session_id: str) -> str:
        """Start the run that executes the session's decided batch and goes on; its id.

        The session may still have a live run: the one that ended waiting, whose end is not
        recorded yet (a decision made the moment the calls were reported), or a ``start()``
        that took the decided batch on first. The first is waited for (at most
        ``CONTINUE_WAIT_S``), then the run starts; for the second, its id is returned.
        """
        deadline = time.monotonic() + CONTINUE_WAIT_S
        while True:
            try:
                return self._start_continuation(session_id)
            except SessionBusy as busy:
                ended = self._wait_stored(busy.run_id, deadline)
                if not ended or not self._approvals().approvals(session_id):
                    return busy.run_id  # that run goes on with the batch

    def _start_continuation(self, session_id: str) -> str:
        """Record and start (or submit) the continuation run; ``SessionBusy`` if the session
        has a live run."""
        raise NotImplementedError

    def _wait_stored(self, run_id: str, deadline: float | None) -> bool:
        raise NotImplementedError  # RunnerBase's

    def _check_not_waiting(self, session_id: str) -> None:
        """``ApprovalPendingError`` when calls of the session wait for a decision: a new run
        would have to answer them first."""
        kept = self._kept()
        if kept is None:
            return  # a store that keeps no approvals: no call of it can wait
        waiting = [p for p in kept.approvals(session_id) if p.decision is None]
        if waiting:
            names = ", ".join(describe(p) for p in waiting)
            msg = (f"Session {session_id!r} has tool calls waiting for approval: {names}; "
                   f"decide each with runner.approve() or runner.deny() (the last decision "
                   f"starts the next run) before starting another.")
            raise ApprovalPendingError(msg, call_ids=[p.tool_call_id for p in waiting])
