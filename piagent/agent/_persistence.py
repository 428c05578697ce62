"""An Agent's session store: the transcript loaded, every ended message kept, the run resumed.

``StoreLink`` is the Agent's tie to one session of one ``SessionStore``. It knows how many
leading messages of the state's transcript the store holds, so a message that ended is
appended (or, when earlier ones are missing, the whole transcript replaces the stored one),
and it reads back what ``resume()`` needs. The Agent decides *when* (under its run lock, or on
the run's worker thread); this module only talks to the store.
"""

from __future__ import annotations

from collections.abc import Callable

from ..loop import call_start_mark, unanswered_tool_calls
from ..messages import AgentMessage, ToolCall, messages_to_json
from ..sessions import SessionStore, check_session_id
from ._input import RunInput, continue_input
from ._queues import QueueLedger, Takings
from ._record import RunRecord
from ._state import StateWriter

__all__ = ["StoreLink", "check_store", "stored_messages"]


def check_store(store: object, session_id: object, where: str) -> None:
    """A store must come with a session id; both are checked at once."""
    if not isinstance(store, SessionStore):
        msg = (f"{where}: store must be a SessionStore (SQLiteStore, PostgresStore, JsonlStore, "
               f"MemoryStore or an object with their methods), not {type(store).__name__}.")
        raise TypeError(msg)
    if session_id is None:
        msg = (f"{where}: a store needs a session_id (a non-empty str of at most 200 "
               "characters) naming the transcript to keep, e.g. session_id='user-42'.")
        raise ValueError(msg)
    check_session_id(session_id)


def stored_messages(store: SessionStore, session_id: str | None,
                    given: list[AgentMessage]) -> list[AgentMessage]:
    """What ``Agent(store=..., session_id=..., messages=given)`` starts from: the stored
    transcript (``[]`` for an empty session); ``ValueError`` if both hold messages."""
    check_store(store, session_id, "Agent()")
    assert session_id is not None  # check_store refuses None
    stored = store.load(session_id)
    if stored and given:
        msg = (f"Agent(): session {session_id!r} already holds {len(stored)} messages "
               "in the store; pass messages= or a stored session, not both (to "
               "overwrite the stored transcript, assign agent.state.messages).")
        raise ValueError(msg)
    return stored


class StoreLink:
    """The session ``session_id`` of ``store``, kept in step with ``state.messages``.

    Made when the store is attached: the stored transcript (``stored``, as loaded) becomes
    the state's, or an empty session receives the state's messages. Thread safety: only the
    thread that owns the agent's state at the time (the caller between runs, holding the
    Agent's run lock; the run's worker during a run) calls it, so ``count`` needs no lock.
    """

    __slots__ = ("count", "session_id", "state", "store", "writer")

    def __init__(self, store: SessionStore, session_id: str, writer: StateWriter,
                 stored: list[AgentMessage]) -> None:
        state = writer.state
        if stored:
            writer.reset(list(stored))
        elif state.messages:
            store.replace(session_id, state.messages)
        self.store = store
        self.session_id = session_id
        self.writer = writer
        self.state = state
        # how many leading messages of state.messages the store holds
        self.count = len(state.messages)

    def replace(self, messages: list[AgentMessage]) -> None:
        """Make ``messages`` the stored transcript."""
        self.store.replace(self.session_id, messages)
        self.count = len(messages)

    def ended(self, run: RunRecord, message: AgentMessage) -> None:
        """Store a message at its ``message_end`` (the reducer has added it to the state),
        before the run's record and the listeners see it.

        If earlier messages are missing from the store (a failed append, or the live list
        changed in place), the whole transcript replaces the stored one instead. A store
        that raises still leaves the message added to the run (``agent_end.messages``) and
        delivered (a queued one is not put back).
        """
        messages = self.state.messages
        try:
            if self.count == len(messages) - 1:
                self.store.append(self.session_id, [message])
            else:
                self.store.replace(self.session_id, messages)
        except Exception as exc:
            run.kept(message)
            role = getattr(message, "role", type(message).__name__)
            msg = (f"The session store {type(self.store).__name__} failed to store the {role} "
                   f"message of session {self.session_id!r}: {type(exc).__name__}: {exc}")
            raise RuntimeError(msg) from exc
        self.count = len(messages)

    def resume_input(self, queues: QueueLedger, takings: Takings) -> RunInput:
        """What ``resume()`` runs: the unanswered tool calls of the transcript's last batch
        with the store's start marks, or what ``continue_()`` would.

        The stored transcript is the truth when nothing is missing from it (another
        process may have gone on with the session since this agent last ran), so a
        different one replaces the state's first.
        """
        state = self.state
        if self.count == len(state.messages):
            stored = self.store.load(self.session_id)
            if messages_to_json(stored) != messages_to_json(state.messages):
                self.writer.reset(stored)
                self.count = len(stored)
        if unanswered_tool_calls(state.messages) is None:
            return continue_input(state.messages, queues, takings)
        return None, False, frozenset(self.store.started(self.session_id))

    def mark_started(self) -> Callable[[ToolCall], None]:
        """The loop's ``on_tool_execute``: a tool call is marked started just before its
        ``execute`` (it runs on the tool's pool thread)."""
        store, session_id, state = self.store, self.session_id, self.state

        def on_tool_execute(call: ToolCall) -> None:
            try:
                # a read of the run's transcript from the pool thread: the batch's assistant
                # message is in place before any of its calls executes, and only appends follow
                store.mark_started(session_id, call_start_mark(state.messages, call))
            except Exception as exc:
                msg = (f"The session store {type(store).__name__} failed to mark tool call "
                       f"{call.id} ({call.name!r}) of session {session_id!r} started: "
                       f"{type(exc).__name__}: {exc}")
                raise RuntimeError(msg) from exc

        return on_tool_execute
