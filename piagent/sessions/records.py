"""What every session store shares, for stores built outside this package
(``piagent.contrib``): the session-id and messages checks, a message as the JSON text a
store keeps and back, which start marks and waiting calls a batch leaves open, and the
approvals' stored JSON. The stores in this package use the same functions."""

from __future__ import annotations

from ._approvals import (
    decision_from_json,
    decision_to_json,
    live_rows,
    pending_from_json,
    pending_to_json,
)
from ._protocol import (
    answered_ids,
    check_messages,
    check_session_id,
    decode_message,
    encode_message,
    marked_call_id,
    unanswered_call_ids,
)

__all__ = [
    "answered_ids",
    "check_messages",
    "check_session_id",
    "decision_from_json",
    "decision_to_json",
    "decode_message",
    "encode_message",
    "live_rows",
    "marked_call_id",
    "pending_from_json",
    "pending_to_json",
    "unanswered_call_ids",
]
