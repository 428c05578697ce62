"""What the model sees of a compacted transcript, and where the next compaction cuts it.

A session's transcript keeps every message; a compaction appends a
``CompactionSummaryMessage`` whose ``first_kept`` says where the kept part starts (pi's
``compaction`` entry and its ``firstKeptEntryId``). ``project`` gives the messages a request
is built from: the system messages of the summarised part folded into one, the latest
summary, the kept messages (older summaries left out), then everything after the summary.

``prepare`` is pi's ``prepareCompaction``/``findCutPoint``: walking back from the newest
message, it keeps about ``keep_recent_tokens`` and cuts at a user or assistant message,
never at a tool result (an assistant message's tool results follow it, so a call and its
result stay together). A cut at an assistant message splits its turn: the turn's start,
the prefix, is summarised apart (pi's turn-prefix summary).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..messages import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
)
from ..transcript import get_current_system_message
from ._tokens import context_tokens, estimate_tokens

__all__ = ["Preparation", "Projection", "latest_summary", "prepare", "project", "projected_tokens"]


@dataclass
class Projection:
    """A transcript as requests see it: ``messages``, and for each its index in the whole
    transcript (``-1`` for the folded system message); ``summary_at``: the latest summary's
    index in the transcript (``-1``: none), ``start``: its position in ``messages``."""

    messages: list[AgentMessage]
    indices: list[int]
    summary_at: int = -1
    start: int = 0


def latest_summary(log: Sequence[AgentMessage]) -> int:
    """The index of the last ``CompactionSummaryMessage`` of ``log``; -1 when none."""
    for index in range(len(log) - 1, -1, -1):
        if type(log[index]) is CompactionSummaryMessage:
            return index
    return -1


def project(log: Sequence[AgentMessage], at: int | None = None) -> Projection:
    """What requests see of the transcript ``log`` (``at``: its latest summary's index,
    when the caller knows it)."""
    p = latest_summary(log) if at is None else at
    if p < 0:
        return Projection(list(log), list(range(len(log))))
    summary = log[p]
    assert isinstance(summary, CompactionSummaryMessage)
    kept_from = p if summary.first_kept is None else max(0, min(summary.first_kept, p))
    messages: list[AgentMessage] = []
    indices: list[int] = []
    head = get_current_system_message(log[:kept_from])
    if head is not None:
        messages.append(head)
        indices.append(-1)
    start = len(messages)
    messages.append(summary)
    indices.append(p)
    for index in range(kept_from, p):
        message = log[index]
        if type(message) is not CompactionSummaryMessage:
            messages.append(message)
            indices.append(index)
    messages.extend(log[p + 1:])
    indices.extend(range(p + 1, len(log)))
    return Projection(messages, indices, p, start)


def projected_tokens(view: Projection) -> int:
    """The estimated context of ``view``: a response's usage counts only if it came after
    the latest summary (an older one measured the context before the compaction)."""
    usage_from = 0
    if view.summary_at >= 0:
        usage_from = len(view.messages) - (view.indices[-1] - view.summary_at) \
            if view.indices[-1] > view.summary_at else len(view.messages)
    return context_tokens(view.messages, usage_from)


def _is_cut_point(message: AgentMessage) -> bool:
    return not isinstance(message, (ToolResultMessage, SystemMessage))


def _starts_turn(message: AgentMessage) -> bool:
    # pi: user, bashExecution, custom, branchSummary, compactionSummary
    return not isinstance(message, (AssistantMessage, ToolResultMessage, SystemMessage))


@dataclass
class Preparation:
    """pi's ``CompactionPreparation``: what to summarise and where the kept part starts."""

    first_kept: int
    """Index in the whole transcript of the first message kept."""
    to_summarize: list[AgentMessage]
    turn_prefix: list[AgentMessage]
    is_split_turn: bool
    tokens_before: int
    previous_summary: str | None
    read_files: set[str] = field(default_factory=set)
    modified_files: set[str] = field(default_factory=set)


def _cut_point(messages: list[AgentMessage], start: int, keep_recent_tokens: int
               ) -> tuple[int, int]:
    """pi's ``findCutPoint`` over ``messages[start:]``: the first kept position, and the
    position of the turn it splits (-1 when it cuts at a turn's start)."""
    cuts = [i for i in range(start, len(messages)) if _is_cut_point(messages[i])]
    if not cuts:
        return start, -1
    cut = cuts[0]
    accumulated = 0
    for i in range(len(messages) - 1, start - 1, -1):
        tokens = estimate_tokens(messages[i])
        if not tokens:
            continue
        accumulated += tokens
        if accumulated >= keep_recent_tokens:
            cut = next((c for c in cuts if c >= i), cuts[-1])
            break
    if _starts_turn(messages[cut]):
        return cut, -1
    for i in range(cut, start - 1, -1):
        if _starts_turn(messages[i]):
            return cut, i
    return cut, -1


def _file_ops(messages: Sequence[AgentMessage], read: set[str], modified: set[str]) -> None:
    """pi's file operations: the ``path`` of ``read``, ``write`` and ``edit`` tool calls."""
    for message in messages:
        if not isinstance(message, AssistantMessage):
            continue
        for block in message.content:
            if isinstance(block, ToolCall) and isinstance(block.arguments, dict):
                path = block.arguments.get("path")
                if isinstance(path, str) and path:
                    if block.name == "read":
                        read.add(path)
                    elif block.name in ("write", "edit"):
                        modified.add(path)


def prepare(log: Sequence[AgentMessage], keep_recent_tokens: int,
            view: Projection | None = None) -> Preparation | None:
    """pi's ``prepareCompaction`` over the transcript ``log``; ``None`` when there is nothing
    to summarise (the last message is a summary, or everything fits in the kept part)."""
    if log and type(log[-1]) is CompactionSummaryMessage:
        return None
    view = view if view is not None else project(log)
    messages = view.messages
    previous: CompactionSummaryMessage | None = None
    start = 0
    if view.summary_at >= 0:
        summary = messages[view.start]
        assert isinstance(summary, CompactionSummaryMessage)
        previous, start = summary, view.start + 1
    while start < len(messages) and isinstance(messages[start], SystemMessage):
        start += 1
    cut, turn_start = _cut_point(messages, start, keep_recent_tokens)
    if cut >= len(messages) or view.indices[cut] < 0:
        return None
    split = turn_start >= 0
    history_end = turn_start if split else cut
    to_summarize = [m for m in messages[start:history_end] if not isinstance(m, SystemMessage)]
    prefix = [m for m in messages[turn_start:cut] if not isinstance(m, SystemMessage)] \
        if split else []
    if not to_summarize and not prefix:
        return None
    read: set[str] = set()
    modified: set[str] = set()
    if previous is not None and isinstance(previous.details, dict):
        read.update(f for f in previous.details.get("readFiles") or () if isinstance(f, str))
        modified.update(f for f in previous.details.get("modifiedFiles") or ()
                        if isinstance(f, str))
    _file_ops(to_summarize, read, modified)
    _file_ops(prefix, read, modified)
    return Preparation(
        first_kept=view.indices[cut], to_summarize=to_summarize, turn_prefix=prefix,
        is_split_turn=split, tokens_before=projected_tokens(view),
        previous_summary=previous.summary if previous is not None else None,
        read_files=read, modified_files=modified)
