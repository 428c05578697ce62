"""The summary requests: the conversation as plain text, the structured prompts, one call.

The prompts are piagent's own, with the structure of pi-coding-agent's summary (goal,
constraints, progress, decisions, next steps, critical context) and its three kinds of
request: a first summary, an update of an earlier summary (merged, never nested), and the
prefix of a turn cut in two.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..abort import AbortSignal
from ..errors import PiAgentError
from ..messages import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    Cost,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from ..models import Model
from ..stream import Context, StreamFn, StreamOptions

__all__ = ["CompactionError", "add_usage", "file_lists", "format_file_lists", "serialize_conversation",
           "summarize"]

SYSTEM_PROMPT = (
    "You write checkpoint summaries of conversations between a user and an AI assistant. "
    "Read the conversation you are given and write the structured summary it asks for.\n\n"
    "Never answer or continue the conversation, never call a tool: your whole reply is the "
    "summary.")

_SECTIONS = """## Goal
[What the user wants done; several goals if the conversation has several tasks.]

## Constraints & Preferences
- [Requirements, constraints and preferences the user stated, or "(none)"]

## Progress
### Done
- [x] [Finished work]

### In Progress
- [ ] [Work under way]

### Blocked
- [What stops progress, if anything]

## Key Decisions
- **[Decision]**: [Why]

## Next Steps
1. [What comes next, in order]

## Critical Context
- [Data, names, references or results needed to go on, or "(none)"]

Be brief in every section. Keep file paths, function names, identifiers and error messages
exactly as written."""

FIRST_PROMPT = ("Summarise the conversation above as a checkpoint another model will use to "
                "carry on the work. Answer in exactly this format:\n\n" + _SECTIONS)

UPDATE_PROMPT = (
    "The conversation above is new; <previous-summary> holds the checkpoint of what came "
    "before it. Write the updated checkpoint: keep everything the previous summary says "
    "that still holds, add the new progress, decisions and context, move finished items "
    "from In Progress to Done, and revise Next Steps. Answer in exactly this format:\n\n"
    + _SECTIONS)

TURN_PREFIX_PROMPT = """The conversation above is the beginning of a turn whose later messages are kept
verbatim after this summary; do not reconstruct them.

Write a short checkpoint of this beginning, so that the later messages make sense:

## Original Request
[What the user asked for in this turn]

## Progress So Far
- [Work done and decisions made in these messages]

## Context Needed to Continue
- [What the later messages rely on from these]

Only state what the messages above say."""

_TOOL_RESULT_MAX_CHARS = 2000


class CompactionError(PiAgentError, RuntimeError):
    """A summary could not be made (the request failed, was cut at its token limit, or
    called a tool); the transcript is unchanged."""


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.text for b in content or () if isinstance(b, TextContent))  # type: ignore[attr-defined]


def serialize_conversation(messages: Sequence[AgentMessage]) -> str:
    """The messages as labelled plain text, so the summariser reads them instead of
    continuing them; thinking left out, each tool result cut at 2,000 characters."""
    parts: list[str] = []
    for message in messages:
        if isinstance(message, CompactionSummaryMessage):
            parts.append(f"[Earlier summary]: {message.summary}")
        elif isinstance(message, UserMessage):
            text = _text(message.content)
            if text:
                parts.append(f"[User]: {text}")
        elif isinstance(message, AssistantMessage):
            texts = [b.text for b in message.content if isinstance(b, TextContent)]
            if texts:
                parts.append("[Assistant]: " + "".join(texts))
            calls = [f"{b.name}(" + ", ".join(
                f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in
                (b.arguments.items() if isinstance(b.arguments, dict) else ())) + ")"
                for b in message.content if isinstance(b, ToolCall)]
            if calls:
                parts.append("[Assistant tool calls]: " + "; ".join(calls))
        elif isinstance(message, ToolResultMessage):
            text = _text(message.content)
            if len(text) > _TOOL_RESULT_MAX_CHARS:
                cut = len(text) - _TOOL_RESULT_MAX_CHARS
                text = f"{text[:_TOOL_RESULT_MAX_CHARS]}\n\n[... {cut} more characters truncated]"
            if text:
                parts.append(f"[Tool result]: {text}")
        elif not isinstance(message, SystemMessage):
            text = _text(getattr(message, "content", None))
            if text:
                parts.append(f"[User]: {text}")
    return "\n\n".join(parts)


def add_usage(a: Usage | None, b: Usage) -> Usage:
    """Two responses' usage added up (``a`` may be ``None``)."""
    if a is None:
        return b
    return Usage(input=a.input + b.input, output=a.output + b.output,
                 cache_read=a.cache_read + b.cache_read, cache_write=a.cache_write + b.cache_write,
                 total_tokens=a.total_tokens + b.total_tokens,
                 cost=Cost(input=a.cost.input + b.cost.input, output=a.cost.output + b.cost.output,
                           cache_read=a.cost.cache_read + b.cost.cache_read,
                           cache_write=a.cost.cache_write + b.cost.cache_write,
                           total=a.cost.total + b.cost.total))


def _ask(prompt: str, label: str, model: Model, stream_fn: StreamFn,
         options: StreamOptions) -> tuple[str, Usage]:
    context = Context([SystemMessage(SYSTEM_PROMPT), UserMessage([TextContent(prompt)])])
    reply = stream_fn(model, context, options).result()
    if reply.stop_reason == "aborted":
        msg = f"{label} was aborted"
        raise CompactionError(msg)
    if reply.stop_reason == "error":
        msg = f"{label} failed: {reply.error_message or 'unknown error'}"
        raise CompactionError(msg)
    if reply.stop_reason == "length":
        msg = f"{label} failed: the summary hit the output token limit and is incomplete"
        raise CompactionError(msg)
    if any(isinstance(b, ToolCall) for b in reply.content):
        msg = f"{label} failed: the model called a tool instead of writing the summary"
        raise CompactionError(msg)
    text = "".join(b.text for b in reply.content if isinstance(b, TextContent)).strip()
    if not text:
        msg = f"{label} failed: the model answered with no text"
        raise CompactionError(msg)
    return text, reply.usage


def summarize(to_summarize: Sequence[AgentMessage], turn_prefix: Sequence[AgentMessage], *,
              previous: str | None, instructions: str | None, model: Model,
              stream_fn: StreamFn, signal: AbortSignal | None,
              options: StreamOptions | None = None) -> tuple[str, Usage | None]:
    """pi's ``compact``'s summaries: the history (an update when ``previous`` is given),
    and, for a split turn, its prefix after a separator. Raises ``CompactionError``."""
    opts = options if options is not None else StreamOptions()
    opts.signal = signal
    focus = f"\n\nAdditional focus: {instructions}" if instructions else ""
    usage: Usage | None = None
    history = previous or "No prior history."
    if to_summarize or not turn_prefix:
        prompt = f"<conversation>\n{serialize_conversation(to_summarize)}\n</conversation>\n\n"
        if previous:
            prompt += f"<previous-summary>\n{previous}\n</previous-summary>\n\n"
        prompt += (UPDATE_PROMPT if previous else FIRST_PROMPT) + focus
        history, usage = _ask(prompt, "Summarization", model, stream_fn, opts)
    if not turn_prefix:
        return history, usage
    prompt = (f"<conversation>\n{serialize_conversation(turn_prefix)}\n</conversation>\n\n"
              + TURN_PREFIX_PROMPT + focus)
    prefix, prefix_usage = _ask(prompt, "Turn prefix summarization", model, stream_fn, opts)
    return (f"{history}\n\n---\n\n**Turn Context (split turn):**\n\n{prefix}",
            add_usage(usage, prefix_usage))


def file_lists(read: set[str], modified: set[str]) -> tuple[list[str], list[str]]:
    """pi's ``computeFileLists``: files only read, and files written or edited, sorted."""
    return sorted(read - modified), sorted(modified)


def format_file_lists(read: list[str], modified: list[str]) -> str:
    """pi's ``formatFileOperations``: the lists as tags after the summary."""
    sections = []
    if read:
        sections.append("<read-files>\n" + "\n".join(read) + "\n</read-files>")
    if modified:
        sections.append("<modified-files>\n" + "\n".join(modified) + "\n</modified-files>")
    return "\n\n" + "\n\n".join(sections) if sections else ""
