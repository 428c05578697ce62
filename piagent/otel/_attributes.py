"""The GenAI semantic-convention attributes piagent's spans carry, made from its values."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
)
from ..models import Model
from ..transcript import get_current_system_prompt

__all__ = ["CAPTURE_VARIABLE", "add_usage", "capture_from_env", "finish_reason",
           "input_messages", "model_attributes", "output_messages", "provider_name",
           "system_instructions", "usage_attributes"]

CAPTURE_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_ON = frozenset({"span_only", "span_and_event", "true", "1", "yes"})

# piagent's provider names that the conventions spell otherwise (gen_ai.provider.name)
_PROVIDERS = {
    "google": "gcp.gemini",
    "google-gemini-cli": "gcp.gemini",
    "google-vertex": "gcp.vertex_ai",
    "amazon-bedrock": "aws.bedrock",
    "azure-openai-responses": "azure.ai.openai",
    "mistral": "mistral_ai",
    "xai": "x_ai",
}

# pi's stop reasons as gen_ai.response.finish_reasons values
_FINISH = {"stop": "stop", "length": "length", "toolUse": "tool_call", "error": "error",
           "aborted": "aborted"}


def capture_from_env() -> bool:
    """Whether message content goes on spans: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
    set to ``SPAN_ONLY``, ``SPAN_AND_EVENT`` or ``true`` (off when unset or anything else)."""
    return os.environ.get(CAPTURE_VARIABLE, "").strip().lower() in _CAPTURE_ON


def provider_name(provider: str) -> str:
    """``gen_ai.provider.name`` for a piagent provider name."""
    return _PROVIDERS.get(provider, provider)


def finish_reason(stop_reason: str) -> str:
    return _FINISH.get(stop_reason, stop_reason)


def model_attributes(model: Model | None) -> dict[str, Any]:
    """The request side of a model: provider, model id, server address and port."""
    if model is None:
        return {}
    attributes: dict[str, Any] = {"gen_ai.provider.name": provider_name(model.provider),
                                  "gen_ai.request.model": model.id}
    try:
        parts = urlsplit(model.base_url)
        if parts.hostname:
            attributes["server.address"] = parts.hostname
            port = parts.port or (443 if parts.scheme == "https" else 80)
            attributes["server.port"] = port
    except ValueError:  # a base_url that is no URL: no server attributes
        pass
    return attributes


def usage_attributes(usage: Usage) -> dict[str, Any]:
    """Token counts under the registry's names (input includes the cached tokens, as the
    conventions say) and the cost, which the registry has no name for, as
    ``piagent.usage.cost`` (USD)."""
    attributes: dict[str, Any] = {
        "gen_ai.usage.input_tokens": usage.input + usage.cache_read + usage.cache_write,
        "gen_ai.usage.output_tokens": usage.output,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write,
    }
    if usage.reasoning is not None:
        attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning
    attributes["piagent.usage.cost"] = usage.cost.total
    return attributes


def add_usage(total: Usage, usage: Usage) -> None:
    """Add ``usage`` into ``total`` (the run's aggregate)."""
    total.input += usage.input
    total.output += usage.output
    total.cache_read += usage.cache_read
    total.cache_write += usage.cache_write
    total.total_tokens += usage.total_tokens
    total.cost.total += usage.cost.total
    if usage.reasoning is not None:
        total.reasoning = (total.reasoning or 0) + usage.reasoning


def _parts(message: AgentMessage) -> list[dict[str, Any]]:
    """A message's content as the conventions' parts (text, reasoning, tool calls, results)."""
    parts: list[dict[str, Any]] = []
    if isinstance(message, ToolResultMessage):
        text = "".join(b.text for b in message.content if isinstance(b, TextContent))
        return [{"type": "tool_call_response", "id": message.tool_call_id, "response": text}]
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    for block in content or ():
        if isinstance(block, TextContent):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ThinkingContent):
            parts.append({"type": "reasoning", "content": block.thinking})
        elif isinstance(block, ToolCall):
            parts.append({"type": "tool_call", "id": block.id, "name": block.name,
                          "arguments": block.arguments})
        elif isinstance(block, ImageContent):
            parts.append({"type": "blob", "modality": "image", "mime_type": block.mime_type})
    return parts


def _role(message: AgentMessage) -> str:
    role = str(getattr(message, "role", "user"))
    return "tool" if role == "toolResult" else role


def input_messages(messages: Sequence[Message]) -> str:
    """``gen_ai.input.messages``: the request's messages as JSON, without its system
    messages (the instructions are ``system_instructions``; a system message that only
    declares tools sends no text at all)."""
    return json.dumps([{"role": _role(m), "parts": _parts(m)} for m in messages
                       if m.role != "system"], ensure_ascii=False, default=str)


def system_instructions(messages: Sequence[Message]) -> str | None:
    """``gen_ai.system_instructions``: the system prompt the request's system messages add
    up to, as the conventions' JSON parts, or ``None`` when there is none."""
    prompt = get_current_system_prompt(messages)
    if not prompt:
        return None
    return json.dumps([{"type": "text", "content": prompt}], ensure_ascii=False)


def output_messages(message: AssistantMessage) -> str:
    """``gen_ai.output.messages``: the response as JSON."""
    return json.dumps([{"role": "assistant", "parts": _parts(message),
                        "finish_reason": finish_reason(message.stop_reason)}],
                      ensure_ascii=False, default=str)
