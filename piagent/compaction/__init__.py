"""Compaction of long conversations, as pi-coding-agent does it (docs/compaction.md).

``Agent(compaction=Compaction(...))`` summarises the older part of its transcript before a
request that would not fit the model's context window, and once more when the provider
refuses a request as too long; ``Agent.compact()`` does it on demand. The transcript keeps
every message; a ``CompactionSummaryMessage`` records where the kept part starts, and
requests see the summary and the kept part only (``project``). The functions below are the
parts, usable on their own.
"""

from __future__ import annotations

from ._compact import CompactionOutcome, compact
from ._cut import Preparation, Projection, latest_summary, prepare, project, projected_tokens
from ._settings import Compaction
from ._summary import CompactionError, serialize_conversation
from ._tokens import RunningEstimate, context_tokens, estimate_tokens, should_compact, usage_tokens

__all__ = [
    "Compaction",
    "CompactionError",
    "CompactionOutcome",
    "Preparation",
    "Projection",
    "RunningEstimate",
    "compact",
    "context_tokens",
    "estimate_tokens",
    "latest_summary",
    "prepare",
    "project",
    "projected_tokens",
    "serialize_conversation",
    "should_compact",
    "usage_tokens",
]
