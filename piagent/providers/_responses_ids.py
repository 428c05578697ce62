"""Responses replay ids as pi-ai 1.6.1 gives them: a text block's signature parsed (its
``parseTextSignature``) and another model's tool-call ids normalised (``call|item`` kept for the
providers that use OpenAI's ids, so the wire step can hash another provider's item id).

Called once per request (the normaliser) and per replayed text block (the signature).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

__all__ = ["PIPE_ID_PROVIDERS", "call_id_normalizer", "normalize_pipe_id", "normalize_whole_id",
           "text_signature"]

PIPE_ID_PROVIDERS = frozenset({"openai", "openai-codex", "opencode"})
"""pi-ai's ``OPENAI_TOOL_CALL_PROVIDERS``: the providers whose call ids are ``call|item``."""
_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_PHASES = frozenset({"commentary", "final_answer"})


def call_id_normalizer(provider: str) -> Callable[[str], str]:
    """The ``transform_messages`` normaliser of another model's call ids for ``provider``."""
    return normalize_pipe_id if provider in PIPE_ID_PROVIDERS else normalize_whole_id


def text_signature(signature: str | None) -> tuple[str | None, str | None]:
    """pi-ai's ``parseTextSignature``: ``(id, phase)`` of a text block's signature (the v1
    JSON form, else the whole string as a legacy id)."""
    if not signature:
        return None, None
    if signature[0] == "{":
        try:
            parsed = json.loads(signature)
        except ValueError:
            return signature, None
        if type(parsed) is dict:
            item_id, v = parsed.get("id"), parsed.get("v")
            if type(item_id) is str and v == 1 and v is not True:  # JavaScript's v === 1
                phase = parsed.get("phase")
                return item_id, phase if type(phase) is str and phase in _PHASES else None
    return signature, None


def _id_part(part: str) -> str:
    return _ID_CHARS.sub("_", part)[:64].rstrip("_")


def normalize_pipe_id(call_id: str) -> str:
    """Another model's tool-call id for a provider that takes OpenAI's ``call|item`` ids
    (pi-ai's ``OPENAI_TOOL_CALL_PROVIDERS``): the call id cleaned, the item id kept raw (the
    wire step hashes another provider's, drops another model's of this provider)."""
    call, pipe, item = call_id.partition("|")
    if not pipe:
        return _id_part(call_id) or "call"
    return f"{_id_part(call) or 'call'}|{item.partition('|')[0]}"


def normalize_whole_id(call_id: str) -> str:
    """Another model's tool-call id for any other provider: the whole id cleaned (pi-ai)."""
    return _id_part(call_id) or "call"
