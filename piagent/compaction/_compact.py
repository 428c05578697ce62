"""``compact``: one compaction of a transcript, from preparation to the summary message."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..abort import AbortSignal
from ..messages import AgentMessage, CompactionSummaryMessage, Usage
from ..models import Model
from ..stream import StreamFn, StreamOptions
from ._cut import Preparation, prepare, project, projected_tokens
from ._summary import file_lists, format_file_lists, summarize

__all__ = ["CompactionOutcome", "compact"]


@dataclass
class CompactionOutcome:
    """What ``compact`` made: the ``summary`` to append to the transcript, the estimated
    context before and after, and the summary requests' ``usage`` (with their cost)."""

    summary: CompactionSummaryMessage
    tokens_before: int
    tokens_after: int
    usage: Usage | None


def compact(log: Sequence[AgentMessage], *, keep_recent_tokens: int, model: Model,
            stream_fn: StreamFn, instructions: str | None = None,
            signal: AbortSignal | None = None, options: StreamOptions | None = None,
            preparation: Preparation | None = None) -> CompactionOutcome | None:
    """Summarise the older part of the transcript ``log`` (docs/compaction.md).

    Returns ``None`` when there is nothing to summarise; raises ``CompactionError`` when
    the summary cannot be made. ``log`` itself is not changed: the caller appends
    ``outcome.summary`` to it (and to its session store).
    """
    prep = preparation if preparation is not None else prepare(log, keep_recent_tokens)
    if prep is None:
        return None
    text, usage = summarize(prep.to_summarize, prep.turn_prefix, previous=prep.previous_summary,
                            instructions=instructions, model=model, stream_fn=stream_fn,
                            signal=signal, options=options)
    read, modified = file_lists(prep.read_files, prep.modified_files)
    text += format_file_lists(read, modified)
    summary = CompactionSummaryMessage(
        summary=text, tokens_before=prep.tokens_before, first_kept=prep.first_kept,
        details={"readFiles": read, "modifiedFiles": modified})
    after = project([*log, summary], len(log))
    return CompactionOutcome(summary, prep.tokens_before, projected_tokens(after), usage)
