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

__all__ = ["context_tokens", "estimate_tokens", "should_compact", "usage_tokens"]

_IMAGE_CHARS = 4800  # pi's ESTIMATED_IMAGE_CHARS


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    chars = 0
    for block in content or ():
        if isinstance(block, TextContent):
            chars += len(block.text)
        elif isinstance(block, ImageContent):
            chars += _IMAGE_CHARS
    return chars


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
                chars += len(block.text)
            elif isinstance(block, ThinkingContent):
                chars += len(block.thinking)
            elif isinstance(block, ToolCall):
                chars += len(block.name) + len(json.dumps(block.arguments, ensure_ascii=False,
                                                          separators=(",", ":")))
        return _ceil4(chars)
    if isinstance(message, CompactionSummaryMessage):
        return _ceil4(len(message.summary))
    if isinstance(message, SystemMessage):
        chars = _content_chars(message.content)
        chars += sum(len(v) for v in (message.sections or {}).values() if v)
        if message.tools_added:
            chars += len(json.dumps([{"name": t.name, "description": t.description,
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
