"""An Agent's tool calls waiting for approval: where the waiting batch is kept, the decisions,
and the run that completes the batch (docs/approvals.md).

With a session store (an ``ApprovalStore``: MemoryStore, SQLiteStore, PostgresStore) the
waiting batch lives there, so another process's Agent on the same session sees it and its
decision resumes the run; without one it lives in a private ``MemoryStore``. A decision is
checked against the call's arguments in the transcript as it is now (the stored one, when
nothing is unsaved here), so a call whose arguments changed since they were shown is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import AgentBusyError, ApprovalError, ApprovalPendingError
from ..loop import open_calls
from ..messages import ToolCall, ToolResultMessage, messages_to_json
from ..policy import ApprovalDecision, ApprovalStore, PendingApproval, approval_digest, named_call
from ..sessions import MemoryStore
from ._input import RunInput
from ._persistence import StoreLink
from ._queues import Takings
from ._record import RunRecord, RunSlot
from ._run import AgentRun
from ._state import StateWriter

__all__ = ["AgentApprovalMethods", "Approvals"]

_BUSY_DECIDE = ("Agent is already processing. Decide once the run has ended (run.wait() or "
                "agent.wait_for_idle()); a run that waits for approval has ended.")
_OWN_SESSION = "agent"  # the private MemoryStore's one session


class Approvals:
    """The Agent's waiting batch. ``waiting`` is this agent's hint that a batch may wait
    (checked against the store before it refuses anything); ``_next`` carries the decided
    batch from the start of a run (under the Agent's run lock) to its loop configuration.
    ``link`` is the Agent's session link (set by the Agent when it attaches a store).

    Thread safety: called by the Agent's methods (any thread) and the run's worker thread;
    the store is atomic, ``waiting``, ``link`` and ``_next`` are single assignments.
    """

    __slots__ = ("_memory", "_next", "link", "slot", "waiting", "writer")

    def __init__(self, writer: StateWriter, slot: RunSlot) -> None:
        self.writer = writer  # the Agent's state (the transcript the calls are read from)
        self.slot = slot  # the Agent's run slot: no decision while a run is active
        self.link: StoreLink | None = None
        self._memory: MemoryStore | None = None  # made when a batch first waits, no store
        self._next: tuple[dict[str, ApprovalDecision], list[ToolResultMessage]] | None = None
        self.waiting = False

    # --- where ----------------------------------------------------------------------------

    def _where(self) -> tuple[ApprovalStore, str]:
        link = self.link
        if link is None:
            if self._memory is None:
                self._memory = MemoryStore()
            return self._memory, _OWN_SESSION
        store = link.store
        if not isinstance(store, ApprovalStore):
            msg = (f"The session store {type(store).__name__} does not keep tool calls waiting "
                   f"for approval (it has no mark_waiting/decide/approvals/held_results/"
                   f"clear_approvals); use SQLiteStore, PostgresStore or MemoryStore.")
            raise TypeError(msg)
        return store, link.session_id

    def _keeps(self) -> bool:
        """Whether a batch can be waiting: kept in the session store, or in this process."""
        link = self.link
        return isinstance(link.store, ApprovalStore) if link is not None \
            else self._memory is not None

    def _sync(self) -> None:
        """The stored transcript becomes the agent's when nothing is unsaved here (another
        process may have gone on, or replaced it)."""
        link, slot = self.link, self.slot
        if link is None:
            return
        with slot.lock:
            if slot.active is not None or link.count != len(link.state.messages):
                return
            stored = link.store.load(link.session_id)
            if messages_to_json(stored) != messages_to_json(link.state.messages):
                self.writer.reset(stored)
                link.count = len(stored)

    def _open_calls(self) -> dict[str, ToolCall]:
        """The last batch's unanswered calls by ``call_key``."""
        return open_calls(self.writer.state.messages)

    # --- reading ----------------------------------------------------------------------------

    def pending(self) -> list[PendingApproval]:
        """The waiting batch's calls (decided or not) still open in the transcript."""
        if not self._keeps():
            return []
        store, session_id = self._where()
        if not store.approvals(session_id):
            return []  # the usual case: one query, no transcript read
        self._sync()
        entries = store.approvals(session_id)
        if not entries:
            return []
        calls = self._open_calls()
        live = [e for e in entries if _call_of(e, calls) is not None]
        if not live and self.slot.active is None:
            store.clear_approvals(session_id)  # a batch the transcript has left behind
        return live

    def check_idle(self, where: str) -> None:
        """``ApprovalPendingError`` if calls wait (``prompt()``/``continue_()``)."""
        if not self.waiting:
            return
        entries = self.pending()
        if not entries:
            self.waiting = False
            return
        undecided = [e for e in entries if e.decision is None]
        if undecided:
            names = ", ".join(f"{e.tool_name!r} (call {e.tool_call_id})" for e in undecided)
            msg = (f"{where}: tool calls wait for approval: {names}. Decide each with "
                   f"agent.approve(tool_call_id) or agent.deny(tool_call_id, reason=...); the "
                   f"run goes on once the last one is decided.")
        else:
            msg = (f"{where}: every waiting tool call is decided but the batch has not "
                   f"completed (its run stopped); agent.resume() completes it.")
        raise ApprovalPendingError(msg, call_ids=[e.tool_call_id for e in entries])

    # --- deciding ---------------------------------------------------------------------------

    def decide(self, tool_call_id: str, approved: bool, reason: str | None,
               digest: str | None) -> bool:
        """Record a decision; True when it was the batch's last (the Agent then starts the
        run that completes it, with ``continue_input``)."""
        where = "approve()" if approved else "deny()"
        for name, value in (("reason", reason), ("digest", digest)):
            if value is not None and not isinstance(value, str):
                msg = f"{where}: {name} must be a str or None, not {type(value).__name__}."
                raise TypeError(msg)
        if not isinstance(tool_call_id, str):
            msg = f"{where}: tool_call_id must be a str, not {type(tool_call_id).__name__}."
            raise TypeError(msg)
        if self.slot.active is not None:
            raise AgentBusyError(_BUSY_DECIDE)
        self._sync()
        store, session_id = self._where()
        named, entry = named_call(session_id, store.approvals(session_id), tool_call_id)
        if entry is not None and entry.decision is None:
            self._check_arguments(entry, session_id, digest)
        return store.decide(session_id, named, ApprovalDecision(approved, reason), digest)

    def _check_arguments(self, entry: PendingApproval, session_id: str,
                         digest: str | None) -> None:
        call = _call_of(entry, self._open_calls())
        if call is None:
            msg = (f"No tool call {entry.tool_call_id!r} waits for approval in session "
                   f"{session_id!r}: the transcript has no open call of that id any more.")
            raise ApprovalError(msg)
        current = approval_digest(call.name, call.arguments)
        if current != entry.digest:
            msg = (f"Tool call {call.id!r} ({call.name!r}) of session {session_id!r}: its "
                   f"arguments changed since approval was asked (now {call.arguments!r}); "
                   f"nothing was decided.")
            raise ApprovalError(msg)
        if digest is not None and digest != current:
            msg = (f"Tool call {call.id!r} ({call.name!r}) of session {session_id!r}: the "
                   f"digest given does not match its current arguments ({call.arguments!r}); "
                   f"nothing was decided.")
            raise ApprovalError(msg)

    # --- the run that completes the batch ----------------------------------------------------

    def continue_input(self, takings: Takings) -> RunInput:
        """The input of the run that completes a decided batch."""
        link = self.link
        started = frozenset(link.store.started(link.session_id)) if link is not None \
            else frozenset()
        return self.resume_input((None, False, started))

    def resume_input(self, chosen: RunInput) -> RunInput:
        """``resume()``'s input with the waiting batch's decisions and held results (taken by
        ``loop_options``); ``ApprovalPendingError`` while a call is undecided."""
        if chosen[2] is None or not self._keeps():
            return chosen  # not mid-batch, or nothing can wait
        store, session_id = self._where()
        calls = self._open_calls()
        entries = [e for e in store.approvals(session_id) if _call_of(e, calls) is not None]
        undecided = [e.tool_call_id for e in entries if e.decision is None]
        if undecided:
            msg = (f"resume(): tool calls wait for approval ({', '.join(undecided)}); decide "
                   f"each with agent.approve() or agent.deny() and the run goes on.")
            raise ApprovalPendingError(msg, call_ids=undecided)
        decisions = {e.call_key or e.tool_call_id: e.decision for e in entries
                     if e.decision is not None}
        self._next = (decisions, store.held_results(session_id))
        self.waiting = False
        return chosen

    def loop_options(self, run: RunRecord) -> dict[str, Any]:
        """The loop options of ``run``: where a waiting batch is kept, and the decided batch
        it completes, if any."""
        options: dict[str, Any] = {"on_approval_wait": self._waiter(run)}
        taken, self._next = self._next, None
        if taken is not None:
            options["approvals"], options["held_results"] = taken
        return options

    def _waiter(self, run: RunRecord
                ) -> Callable[[list[PendingApproval], list[ToolResultMessage]], None]:
        def on_approval_wait(pending: list[PendingApproval],
                             held: list[ToolResultMessage]) -> None:
            store, session_id = self._where()
            store.mark_waiting(session_id, pending, held)  # before anyone is asked
            run.pending = list(pending)
            self.waiting = True

        return on_approval_wait


def _call_of(entry: PendingApproval, calls: dict[str, ToolCall]) -> ToolCall | None:
    """The open call a waiting entry names: by its key (by its id for an entry an older
    piagent stored, which has none)."""
    if entry.call_key:
        return calls.get(entry.call_key)
    return next((c for c in calls.values() if c.id == entry.tool_call_id), None)


class AgentApprovalMethods:
    """The approval half of ``Agent``'s public surface (a mixin over its ``Approvals``;
    ``piagent.runs`` has its own, by session id: ``RunnerApprovalMethods``)."""

    _approvals: Approvals

    def _start_decided(self) -> AgentRun:
        """The run that completes a decided batch (the ``Agent`` starts it)."""
        raise NotImplementedError

    def pending_approvals(self) -> list[PendingApproval]:
        """The tool calls waiting for approval, in source order, each with its
        ``decision`` once made; ``[]`` when nothing waits (docs/approvals.md)."""
        return self._approvals.pending()

    def approve(self, tool_call_id: str, *, reason: str | None = None,
                digest: str | None = None) -> AgentRun | None:
        """Approve a waiting call, named by its ``call_key`` (``PendingApproval.call_key``)
        or by its tool-call id when no other waiting call has that id (else
        ``ApprovalError`` naming their keys). When it was the last undecided call of its batch, the
        run goes on (on a worker thread, as ``continue_(block=False)``) and that run is
        returned; else ``None``. With ``digest`` (``PendingApproval.digest``, what was
        shown) the call's arguments must still be those. ``ApprovalError`` for an unknown
        call, one already decided or whose arguments changed; ``AgentBusyError`` while a
        run is active."""
        if not self._approvals.decide(tool_call_id, True, reason, digest):
            return None
        return self._start_decided()

    def deny(self, tool_call_id: str, *, reason: str | None = None,
             digest: str | None = None) -> AgentRun | None:
        """Deny a waiting call: it does not run and its result is the error ``Tool call
        denied by the user: <reason>``. Otherwise as ``approve()``."""
        if not self._approvals.decide(tool_call_id, False, reason, digest):
            return None
        return self._start_decided()
