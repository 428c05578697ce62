"""The ``SessionStore`` protocol, its error, and what every store shares.

A store keeps, per session id, the transcript as an ordered log of records: one per message
(its pi-JSON, ``message_to_dict``) and one per tool-call start mark (docs/sessions.md). Each
record has a per-session sequence number starting at 0 and growing by one per record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import PiAgentError
from ..messages import (
    AgentMessage,
    AssistantMessage,
    ToolCall,
    ToolResultMessage,
    message_from_dict,
    message_to_dict,
    sanitize_surrogates,
)

MAX_SESSION_ID_LENGTH = 200
"""The longest session id a store accepts, in characters."""


@runtime_checkable
class SessionStore(Protocol):
    """Where transcripts live between processes (docs/sessions.md).

    Every method may be called from any thread; ``append`` and ``replace`` are atomic.
    """

    def load(self, session_id: str) -> list[AgentMessage]:
        """The session's messages in order; ``[]`` for an unknown id."""
        ...

    def append(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        """Add messages at the end of the session, all or none."""
        ...

    def replace(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        """Make ``messages`` the session's whole transcript, all or none."""
        ...

    def delete(self, session_id: str) -> None:
        """Forget the session (no error for an unknown id)."""
        ...

    def session_ids(self) -> list[str]:
        """Every session that holds at least one record, sorted."""
        ...

    def mark_started(self, session_id: str, tool_call_id: str) -> None:
        """Record durably that a tool call's ``execute`` is about to be called."""
        ...

    def started(self, session_id: str) -> set[str]:
        """Tool-call ids marked started that no tool result in the transcript answers yet."""
        ...


class SessionCorruptError(PiAgentError, ValueError):
    """A stored record cannot be decoded; nothing is dropped silently.

    ``session_id`` and ``seq`` (the record's sequence number) say where.
    """

    def __init__(self, message: str, *, session_id: str, seq: int) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.seq = seq


def check_session_id(session_id: object) -> str:
    """``session_id`` itself when it is a non-empty ``str`` of at most 200 characters.

    Anything else raises ``ValueError`` saying what is accepted.
    """
    if not isinstance(session_id, str) or not session_id or len(session_id) > MAX_SESSION_ID_LENGTH:
        shown = repr(session_id) if not isinstance(session_id, str) or len(session_id) <= 60 \
            else f"a str of {len(session_id)} characters"
        msg = (f"A session id must be a non-empty str of at most {MAX_SESSION_ID_LENGTH} "
               f"characters; got {shown}.")
        raise ValueError(msg)
    return session_id


def check_messages(messages: object) -> list[AgentMessage]:
    """The messages as a list; a ``str`` or a non-sequence is a ``TypeError``."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        msg = f"Expected a sequence of messages, got {type(messages).__name__}."
        raise TypeError(msg)
    return list(messages)


def encode_message(message: AgentMessage) -> str:
    """One message as the compact JSON text a store keeps."""
    # a lone surrogate (a tool's details, an application's message) cannot be stored as
    # UTF-8: removed, as pi-ai's sanitizeSurrogates (raw in the JSON text, so removed there)
    return sanitize_surrogates(json.dumps(message_to_dict(message), ensure_ascii=False,
                                          separators=(",", ":")))


def decode_message(session_id: str, seq: int, text: str | bytes | Any) -> AgentMessage:
    """A stored message back; anything undecodable is a ``SessionCorruptError``."""
    try:
        data = json.loads(text) if isinstance(text, (str, bytes)) else text
        if not isinstance(data, dict):
            msg = f"expected a JSON object, got {type(data).__name__}"
            raise ValueError(msg)
        return message_from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        msg = f"Session {session_id!r}: record {seq} cannot be decoded: {exc}"
        raise SessionCorruptError(msg, session_id=session_id, seq=seq) from exc


def answered_ids(messages: Iterable[AgentMessage]) -> set[str]:
    """The tool-call ids that a tool result among ``messages`` answers."""
    return {m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)}


def marked_call_id(mark: str) -> str:
    """The tool-call id a start mark names: the mark itself, or its part before ``" @ "``
    (a call whose id another call of its batch shares is marked ``"<id> @ <call_key>"``)."""
    return mark.split(" @ ", 1)[0]


def unanswered_call_ids(messages: Sequence[AgentMessage]) -> set[str]:
    """The tool calls of the last assistant message in ``messages`` that no tool result
    answers: the batch ``resume()`` would finish, whose start marks a store keeps. An
    earlier batch left unanswered is over (a later reply went on without it)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            asked = {block.id for block in message.content if isinstance(block, ToolCall)}
            return asked - answered_ids(messages[index + 1:])
    return set()
