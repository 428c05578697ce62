"""``CompactionSummaryMessage``: pi-coding-agent's ``compactionSummary`` message, and its JSON.

pi's coding agent writes ``{"role": "compactionSummary", "summary", "tokensBefore",
"timestamp"}``; piagent adds where the kept part of the session starts (``firstKept``, the
index of the first kept message in the session's whole transcript, as pi's ``compaction``
entry's ``firstKeptEntryId``) and pi's ``details`` (the files read and modified). The model
sees it as a user message framed by ``COMPACTION_SUMMARY_PREFIX`` and ``..._SUFFIX``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, Literal

from ._types import TextContent, UserMessage, now_ms

__all__ = ["COMPACTION_SUMMARY_PREFIX", "COMPACTION_SUMMARY_SUFFIX", "CompactionSummaryMessage",
           "summary_from_dict", "summary_to_dict"]

COMPACTION_SUMMARY_PREFIX = ("The conversation history before this point was compacted into "
                             "the following summary:\n\n<summary>\n")
"""What the model reads before a compaction summary (pi-coding-agent 1.6.0's text)."""
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
"""What the model reads after a compaction summary."""

_KEYS = frozenset({"role", "summary", "tokensBefore", "timestamp", "firstKept", "details"})


@dataclass
class CompactionSummaryMessage:
    """The older part of a conversation, summarised (docs/compaction.md).

    ``summary`` is the structured summary; ``tokens_before`` the estimated context before
    the compaction; ``first_kept`` the index, in the session's whole transcript, of the first
    message kept after it (``None``: the summary's own position, nothing kept before it);
    ``details`` pi's ``{"readFiles": [...], "modifiedFiles": [...]}``.
    """

    summary: str
    tokens_before: int = 0
    timestamp: int = field(default_factory=now_ms)
    first_kept: int | None = None
    details: dict[str, Any] | None = None
    _: KW_ONLY
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys, written back as they were."""
    role: ClassVar[Literal["compactionSummary"]] = "compactionSummary"

    def to_user_message(self) -> UserMessage:
        """The message the model sees: pi's prefix, the summary, pi's suffix."""
        return UserMessage(content=[TextContent(
            COMPACTION_SUMMARY_PREFIX + self.summary + COMPACTION_SUMMARY_SUFFIX)],
            timestamp=self.timestamp)


def summary_to_dict(m: CompactionSummaryMessage) -> dict[str, Any]:
    """pi's JSON of a compaction summary (with piagent's ``firstKept`` and ``details``)."""
    out: dict[str, Any] = {"role": "compactionSummary", "summary": m.summary,
                           "tokensBefore": m.tokens_before, "timestamp": m.timestamp}
    if m.first_kept is not None:
        out["firstKept"] = m.first_kept
    if m.details is not None:
        out["details"] = m.details
    for key, value in m.extra.items():
        out.setdefault(key, value)
    return out


def summary_from_dict(d: Mapping[str, Any]) -> CompactionSummaryMessage:
    """A compaction summary from its JSON (pi's or piagent's)."""
    first = d.get("firstKept")
    return CompactionSummaryMessage(
        summary=str(d.get("summary", "")), tokens_before=int(d.get("tokensBefore") or 0),
        timestamp=int(d.get("timestamp") or 0),
        first_kept=int(first) if first is not None else None, details=d.get("details"),
        extra={k: v for k, v in d.items() if k not in _KEYS})
