"""Tool calls waiting for a person's decision: ``ApprovalDecision``, ``PendingApproval``, the
``ApprovalStore`` protocol the stores implement (``piagent.sessions``), and what the loop,
the Agent, the runners and the stores share: the digest of a call's arguments, call keys,
which waiting entry a key or id names, the checks of a decision.

A store keeps one waiting batch per session: its waiting calls (each with its decision once
made) and the results the batch already produced (held until the batch completes, so the
results reach the transcript in source order). The tool results stored since the batch
waited answer its entries, the k-th result of an id the k-th entry of it: an
answered entry is done with and no longer listed; the next assistant message ends the
batch (docs/approvals.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ApprovalError
from ..messages import ToolResultMessage

__all__ = ["HELD_KEY", "ApprovalDecision", "ApprovalStore", "PendingApproval",
           "approval_digest", "call_key", "check_decision", "find_entry", "held_key",
           "named_call"]


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """A person's answer to a waiting tool call: ``approved``, and why (``reason``)."""

    approved: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A tool call that waits for approval: its id, tool name, the model's arguments, their
    ``digest`` (what the person was shown), the ``decision`` once made, and ``call_key``.

    ``call_key`` names the call uniquely within its session, whatever its id (ids repeat:
    across batches, and a model may give two calls of one batch the same id): ``"P:I"``,
    the position of the assistant message that asked for it in the transcript and the
    call's index among that message's tool calls (``""`` for an entry stored by an older
    piagent). ``approve()``/``deny()`` take it, or the id when no other waiting call has
    that id (docs/approvals.md)."""

    tool_call_id: str
    tool_name: str
    args: Any
    digest: str
    decision: ApprovalDecision | None = None
    call_key: str = ""


def approval_digest(tool_name: str, args: Any) -> str:
    """sha256 (hex) of the canonical JSON of ``{"name": tool_name, "arguments": args}``
    (sorted keys, no spaces): it changes whenever the call's arguments do."""
    text = json.dumps({"name": tool_name, "arguments": args}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False, default=repr)
    # surrogatepass: a lone surrogate in the arguments still has a digest (valid text's
    # bytes are the same either way)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@runtime_checkable
class ApprovalStore(Protocol):
    """The waiting state of a session, kept where its transcript is (``MemoryStore``,
    ``SQLiteStore``, ``PostgresStore``). Every method is atomic and may be called from any
    thread, process or machine sharing the store."""

    def mark_waiting(self, session_id: str, pending: Sequence[PendingApproval],
                     held: Sequence[ToolResultMessage]) -> None:
        """Make ``pending`` (undecided) and ``held`` the session's waiting batch, replacing
        any earlier one."""
        ...

    def decide(self, session_id: str, tool_call_id: str, decision: ApprovalDecision,
               digest: str | None) -> bool:
        """Record ``decision`` for a waiting call (``tool_call_id``: its ``call_key``, or an
        id no other undecided waiting call has), atomically across processes; ``True`` when
        every waiting call of the batch is now decided. ``ApprovalError`` for an unknown
        call, an id two waiting calls share, one already decided, or a ``digest`` other
        than the call's."""
        ...

    def approvals(self, session_id: str) -> list[PendingApproval]:
        """The batch's waiting calls in source order, decided or not; ``[]`` when nothing
        waits."""
        ...

    def held_results(self, session_id: str) -> list[ToolResultMessage]:
        """The results the waiting batch already produced, in source order."""
        ...

    def clear_approvals(self, session_id: str) -> None:
        """Forget the session's waiting batch (no error when there is none)."""
        ...


def call_key(position: int, index: int) -> str:
    """The key of the ``index``-th tool call of the assistant message at ``position``."""
    return f"{position}:{index}"


HELD_KEY = "piagentCallKey"
"""The ``extra`` key under which a held result carries its call's ``call_key`` (held results
never reach the transcript as they are: the batch's run makes each call's result anew)."""


def held_key(message: ToolResultMessage) -> str:
    """The ``call_key`` a held result was kept with (``""`` when it has none)."""
    key = message.extra.get(HELD_KEY, "")
    return key if isinstance(key, str) else ""


def find_entry(session_id: str, entries: Sequence[PendingApproval], call: str) -> int:
    """The index of the entry ``call`` names: the one whose ``call_key`` it is, else the
    one whose ``tool_call_id`` it is, undecided first; ``ApprovalError`` when none does, or
    when two undecided entries share that id (naming their keys)."""
    for index, entry in enumerate(entries):
        if entry.call_key == call:
            return index
    named = [i for i, e in enumerate(entries) if e.tool_call_id == call]
    undecided = [i for i in named if entries[i].decision is None]
    if len(undecided) > 1:
        keys = ", ".join(f"{entries[i].call_key!r} ({entries[i].tool_name!r}, args "
                         f"{entries[i].args!r})" for i in undecided)
        msg = (f"{len(undecided)} tool calls waiting for approval in session {session_id!r} "
               f"have the id {call!r}; pass the call_key of the one meant: {keys}.")
        raise ApprovalError(msg)
    if undecided or named:
        return (undecided or named)[0]
    waiting = ", ".join(repr(e.call_key or e.tool_call_id) for e in entries
                        if e.decision is None)
    msg = (f"No tool call {call!r} waits for approval in session {session_id!r} "
           f"({'waiting: ' + waiting if waiting else 'nothing waits'}).")
    raise ApprovalError(msg)


def named_call(session_id: str, entries: Sequence[PendingApproval],
               call: str) -> tuple[str, PendingApproval | None]:
    """What a decision for ``call`` (a ``call_key`` or a tool-call id) names in the store:
    the ``call_key`` (else the id) of the entry ``find_entry`` picks, and that entry;
    ``(call, None)`` when nothing waits (the store's ``decide`` then says so)."""
    if not entries:
        return call, None
    entry = entries[find_entry(session_id, entries, call)]
    return entry.call_key or entry.tool_call_id, entry


def check_decision(session_id: str, entries: Sequence[PendingApproval], tool_call_id: str,
                   decision: object, digest: str | None) -> int:
    """The index of the entry ``tool_call_id`` names (a ``call_key``, or a tool-call id
    no other undecided entry has; ``find_entry``) if ``decision`` may be recorded for it;
    ``ApprovalError`` (or ``TypeError`` for a wrong argument) saying why not."""
    if not isinstance(decision, ApprovalDecision):
        msg = f"decision must be an ApprovalDecision, not {type(decision).__name__}."
        raise TypeError(msg)
    if not isinstance(tool_call_id, str):
        msg = f"tool_call_id must be a str, not {type(tool_call_id).__name__}."
        raise TypeError(msg)
    if digest is not None and not isinstance(digest, str):
        msg = f"digest must be a str (PendingApproval.digest) or None, not {type(digest).__name__}."
        raise TypeError(msg)
    index = find_entry(session_id, entries, tool_call_id)
    entry = entries[index]
    if entry.decision is not None:
        verb = "approved" if entry.decision.approved else "denied"
        msg = (f"Tool call {entry.tool_call_id!r} ({entry.tool_name!r}) of session "
               f"{session_id!r} was already {verb}; a decision cannot be changed.")
        raise ApprovalError(msg)
    if digest is not None and digest != entry.digest:
        msg = (f"Tool call {entry.tool_call_id!r} ({entry.tool_name!r}) of session "
               f"{session_id!r}: the digest given does not match its arguments (they "
               f"changed since they were shown); nothing was decided. Show the call's "
               f"current arguments (pending_approvals()) and decide again.")
        raise ApprovalError(msg)
    return index
