"""The output-token limit every request carries: pi-ai 1.6.1's ``clampMaxTokensToContext``.

A request asks for ``options.max_tokens`` or the model's ``max_tokens``, clamped so that the
estimated context plus the answer fits the model's ``context_window`` with a margin of
``CONTEXT_SAFETY_RATIO`` (15 %) of the context, at least ``CONTEXT_SAFETY_TOKENS``; when that
leaves less than ``MIN_OUTPUT_WITH_RATIO_MARGIN`` tokens, only ``CONTEXT_SAFETY_TOKENS`` and
at most ``MIN_OUTPUT_WITH_RATIO_MARGIN`` (pi-ai 1.4.0 kept the fixed margin only). The context is the usage of the last assistant message that
reported one (``total_tokens``, else the sum of its parts) plus about one token per 3.5
characters of every message after it (4800 characters per image), or that estimate of the
whole transcript when none did. Lengths are counted as JavaScript does (UTF-16 code units),
so the number is pi's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from ..messages import (
    AgentMessage,
    AssistantMessage,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
)
from ..models import Model
from ..transcript import get_system_message_text

__all__ = ["CONTEXT_SAFETY_TOKENS", "clamp_max_tokens", "estimate_context_tokens"]

CONTEXT_SAFETY_TOKENS = 4096
CONTEXT_SAFETY_RATIO = 0.15
MIN_OUTPUT_WITH_RATIO_MARGIN = 32768
_CHARS_PER_TOKEN = 3.5
_IMAGE_CHARS = 4800
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_TIMESTAMP = attrgetter("timestamp")


def _length(text: str) -> int:
    """``text.length`` in JavaScript: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _tokens(chars: int) -> int:
    return math.ceil(chars / _CHARS_PER_TOKEN)


def _content_chars(content: str | Sequence[Any]) -> int:
    if isinstance(content, str):
        return _length(content)
    return sum(_length(b.text) if isinstance(b, TextContent) else _IMAGE_CHARS for b in content)


def _declaration(tool: ToolDeclaration) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name, "description": tool.description,
                           "parameters": tool.parameters}
    if tool.constrained_sampling is not None:
        out["constrainedSampling"] = tool.constrained_sampling
    return out


def _message_tokens(message: AgentMessage) -> int:
    if isinstance(message, SystemMessage):
        tokens = _tokens(_length(get_system_message_text(message)))
        if message.tools_added:
            tokens += _tokens(_length(_COMPACT.encode(
                [_declaration(t) for t in message.tools_added])))
        if message.tools_removed:
            tokens += _tokens(_length(_COMPACT.encode(
                [{"name": name} for name in message.tools_removed])))
        return tokens
    if isinstance(message, (UserMessage, ToolResultMessage)):
        return _tokens(_content_chars(message.content))
    if isinstance(message, AssistantMessage):
        chars = 0
        for block in message.content:
            if isinstance(block, TextContent):
                chars += _length(block.text)
            elif isinstance(block, ThinkingContent):
                chars += _length(block.thinking)
            elif isinstance(block, ToolCall):
                chars += _length(block.name) + _length(_COMPACT.encode(block.arguments))
        return _tokens(chars)
    return 0  # an application message: convert_to_llm decides what it becomes


def _usage_tokens(message: AssistantMessage) -> int:
    usage = message.usage
    return usage.total_tokens or (usage.input + usage.output + usage.cache_read
                                  + usage.cache_write)


def _timestamp(message: Any) -> float:
    return getattr(message, "timestamp", 0) or 0


def _last_usage(messages: Sequence[AgentMessage]) -> tuple[int, int] | None:
    """(index, tokens) of the last assistant message whose usage describes the context: not
    aborted or failed, usage above 0, and no earlier message newer than it (a message
    inserted before it, such as a compaction summary, makes its usage stale)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, AssistantMessage) \
                or message.stop_reason in ("aborted", "error"):
            continue
        used = _usage_tokens(message)
        if used <= 0:
            continue
        try:  # in C for the messages pi-ai knows (each has a timestamp)
            latest = max(map(_TIMESTAMP, messages[:index]), default=-math.inf)
        except AttributeError:  # an application message without one
            latest = max(map(_timestamp, messages[:index]), default=-math.inf)
        if message.timestamp >= (latest or 0):
            return index, used
    return None


def estimate_context_tokens(messages: Sequence[AgentMessage]) -> int:
    """pi's ``estimateContextTokens(messages).tokens`` (searched from the end, the same
    message pi's forward pass settles on)."""
    found = _last_usage(messages)
    if found is None:
        return sum(map(_message_tokens, messages))
    index, used = found
    return used + sum(map(_message_tokens, messages[index + 1:]))


def clamp_max_tokens(model: Model, messages: Sequence[AgentMessage], requested: int) -> int:
    """``requested`` within what the context window leaves (at least 1)."""
    if model.context_window <= 0:
        return max(1, requested)
    used = estimate_context_tokens(messages)
    # pi-ai 1.6: a margin of 15 % of the input (OpenRouter counts up to 12 % more tokens than
    # the provider), at least CONTEXT_SAFETY_TOKENS, kept only while it leaves 32768 tokens
    # of output; else only the fixed margin, and at most 32768 tokens of output
    room = model.context_window - used - max(CONTEXT_SAFETY_TOKENS,
                                             math.ceil(used * CONTEXT_SAFETY_RATIO))
    if room < MIN_OUTPUT_WITH_RATIO_MARGIN:
        room = min(MIN_OUTPUT_WITH_RATIO_MARGIN,
                   model.context_window - used - CONTEXT_SAFETY_TOKENS)
    return min(requested, max(1, room))
