"""Token counts as pi-coding-agent estimates them: chars/4 per message, the last real usage.

``estimate_tokens`` is pi's ``estimateTokens`` (conservative: it overestimates);
``context_tokens`` is pi's ``estimateContextTokens``: the last response's usage (which
counted the system prompt and tools) plus an estimate of every message after it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..messages import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)

__all__ = ["RunningEstimate", "context_tokens", "estimate_tokens", "should_compact",
           "usage_tokens"]

_IMAGE_CHARS = 4800  # pi's ESTIMATED_IMAGE_CHARS


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return _units(content)
    chars = 0
    for block in content or ():
        if isinstance(block, TextContent):
            chars += _units(block.text)
        elif isinstance(block, ImageContent):
            chars += _IMAGE_CHARS
    return chars


def _units(text: str) -> int:
    """The length pi counts: JavaScript's ``length``, in UTF-16 code units (a character
    outside the Basic Multilingual Plane, an emoji, counts 2)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _ceil4(chars: int) -> int:
    return -(-chars // 4)


def estimate_tokens(message: AgentMessage) -> int:
    """pi's ``estimateTokens``: ceil(chars / 4) of what the model reads of ``message``
    (a system message's tool declarations as JSON; an image as 4,800 chars)."""
    if isinstance(message, (UserMessage, ToolResultMessage)):
        return _ceil4(_content_chars(message.content))
    if isinstance(message, AssistantMessage):
        chars = 0
        for block in message.content:
            if isinstance(block, TextContent):
                chars += _units(block.text)
            elif isinstance(block, ThinkingContent):
                chars += _units(block.thinking)
            elif isinstance(block, ToolCall):
                chars += _units(block.name) + _units(json.dumps(block.arguments, ensure_ascii=False,
                                                          separators=(",", ":")))
        return _ceil4(chars)
    if isinstance(message, CompactionSummaryMessage):
        return _ceil4(_units(message.summary))
    if isinstance(message, SystemMessage):
        chars = _content_chars(message.content)
        chars += sum(_units(v) for v in (message.sections or {}).values() if v)
        if message.tools_added:
            chars += _units(json.dumps([{"name": t.name, "description": t.description,
                                      "parameters": t.parameters} for t in message.tools_added],
                                    separators=(",", ":")))
        return _ceil4(chars)
    content = getattr(message, "content", None)  # pi's "custom": its content
    return _ceil4(_content_chars(content)) if content is not None else 0


def usage_tokens(usage: Usage) -> int:
    """pi's ``calculateContextTokens``: ``total_tokens``, else the sum of its parts."""
    return usage.total_tokens or usage.input + usage.output + usage.cache_read + usage.cache_write


def _valid_usage(message: AgentMessage) -> Usage | None:
    if (isinstance(message, AssistantMessage) and message.stop_reason not in ("error", "aborted")
            and usage_tokens(message.usage) > 0):
        return message.usage
    return None


def context_tokens(messages: Sequence[AgentMessage], usage_from: int = 0) -> int:
    """The context ``messages`` make, as pi estimates it: the usage of the last successful
    response at or after index ``usage_from`` plus chars/4 of each message after it; with no
    such response, chars/4 of every message (system messages and tools included)."""
    trailing = 0
    for index in range(len(messages) - 1, usage_from - 1, -1):
        message = messages[index]
        usage = _valid_usage(message)
        if usage is not None:
            return usage_tokens(usage) + trailing
        trailing += estimate_tokens(message)
    for index in range(usage_from - 1, -1, -1):
        trailing += estimate_tokens(messages[index])
    return trailing


def should_compact(tokens: int, context_window: int, reserve_tokens: int) -> bool:
    """pi's ``shouldCompact``: the context does not leave ``reserve_tokens`` free."""
    return tokens > context_window - reserve_tokens


class RunningEstimate:
    """``context_tokens`` of one growing list of messages, kept up to date by looking only
    at the messages appended since the last call (a run's context between requests grows
    at its end only). Not thread-safe: one run's thread uses it."""

    __slots__ = ("_last_usage", "_messages", "_prefix", "_usage_from")

    def __init__(self, messages: list[AgentMessage], usage_from: int = 0) -> None:
        self._messages = messages
        self._usage_from = usage_from
        self._prefix = [0]  # _prefix[k]: the estimate of messages[:k]
        self._last_usage = -1  # the last message at or after usage_from with a usage

    def tracks(self, messages: list[AgentMessage]) -> bool:
        """Whether this estimate follows ``messages`` (that very list)."""
        return messages is self._messages

    def tokens(self) -> int:
        """The context the list makes now, as ``context_tokens(messages, usage_from)``."""
        messages, prefix = self._messages, self._prefix
        for index in range(len(prefix) - 1, len(messages)):
            message = messages[index]
            prefix.append(prefix[-1] + estimate_tokens(message))
            if index >= self._usage_from and _valid_usage(message) is not None:
                self._last_usage = index
        last = self._last_usage
        if last < 0:
            return prefix[-1]
        usage = _valid_usage(messages[last])
        assert usage is not None  # found above
        return usage_tokens(usage) + prefix[-1] - prefix[last + 1]
