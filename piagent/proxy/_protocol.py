"""The proxy wire protocol: the request envelope, its JSON Schema, and the proxy events.

A request is ``{"model": …, "context": {"messages": […]}, "options": {…}}`` with pi's
camelCase keys; the answer is a stream of ``data: <json>`` server-sent events, each one of
pi's assistant events without ``partial`` (pi ``proxy.ts``). This module converts between
those JSON forms and piagent's objects; it owns no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from ..errors import ProxyProtocolError
from ..messages import (
    AgentMessage,
    SystemMessage,
    ToolDeclaration,
    message_from_dict,
    message_to_dict,
    sanitize_surrogates,
    usage_from_dict,
    usage_to_dict,
)
from ..models import CostTier, Model, ModelCost
from ..stream import (
    AssistantMessageEvent,
    Context,
    DoneEvent,
    ErrorEvent,
    StreamOptions,
    TextEndEvent,
    ThinkingEndEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)

__all__ = [
    "REQUEST_SCHEMA",
    "SERIALISABLE_OPTIONS",
    "context_from_dict",
    "context_to_dict",
    "encode_sse",
    "model_from_dict",
    "model_to_dict",
    "options_from_dict",
    "options_to_dict",
    "proxy_event_to_dict",
    "usage_from_dict",
    "usage_to_dict",
    "validate_request",
]

SERIALISABLE_OPTIONS: dict[str, str] = {
    "temperature": "temperature",
    "sampling_params": "samplingParams",
    "max_tokens": "maxTokens",
    "reasoning": "reasoning",
    "cache_retention": "cacheRetention",
    "session_id": "sessionId",
    "disable_continuation": "disableContinuation",
    "headers": "headers",
    "metadata": "metadata",
    "transport": "transport",
    "thinking_budgets": "thinkingBudgets",
    "max_retry_delay_ms": "maxRetryDelayMs",
    "max_retries": "maxRetries",
}
"""The options that travel to the proxy (snake_case → wire name); never the signal, the
API key, the proxy URL or the auth token (pi #3512, #7568)."""

_NUMBER = {"type": "number"}
_STRING = {"type": "string"}
_STRING_MAP = {"type": ["object", "null"], "additionalProperties": {"type": "string"}}
# request headers: a null value removes a default header (pi-ai's ProviderHeaders)
_HEADER_MAP = {"type": ["object", "null"], "additionalProperties": {"type": ["string", "null"]}}
_OBJECT_OR_NULL = {"type": ["object", "null"]}

REQUEST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["model", "context"],
    "properties": {
        "model": {
            "type": "object",
            "required": ["id", "api", "provider", "baseUrl"],
            "properties": {
                "id": {"type": "string", "minLength": 1},
                "api": {"type": "string", "minLength": 1},
                "provider": _STRING,
                "baseUrl": _STRING,
                "name": {"type": ["string", "null"]},
                "reasoning": {"type": "boolean"},
                "input": {"type": "array", "items": _STRING},
                "cost": {"type": "object", "properties": {
                    "input": _NUMBER, "output": _NUMBER, "cacheRead": _NUMBER,
                    "cacheWrite": _NUMBER,
                    "tiers": {"type": ["array", "null"], "items": {
                        "type": "object", "required": ["inputTokensAbove"], "properties": {
                            "inputTokensAbove": _NUMBER, "input": _NUMBER, "output": _NUMBER,
                            "cacheRead": _NUMBER, "cacheWrite": _NUMBER}}}}},
                "contextWindow": {"type": "integer", "minimum": 0},
                "maxTokens": {"type": "integer", "minimum": 0},
                "headers": _STRING_MAP,
                "compat": _OBJECT_OR_NULL,
            },
        },
        "context": {
            "type": "object",
            "required": ["messages"],
            "properties": {
                "messages": {"type": "array", "items": {
                    "type": "object",
                    "required": ["role"],
                    "properties": {
                        "role": {"type": "string", "minLength": 1},
                        "content": {"type": ["string", "array"], "items": {
                            "type": "object", "required": ["type"],
                            "properties": {"type": _STRING}}},
                    },
                }},
                "systemPrompt": {"type": ["string", "null"]},
                "tools": {"type": ["array", "null"], "items": {
                    "type": "object", "required": ["name"],
                    "properties": {"name": _STRING, "description": _STRING,
                                   "parameters": {"type": "object"}}}},
            },
        },
        "options": {
            "type": ["object", "null"],
            "properties": {
                "temperature": {"type": ["number", "null"]},
                "samplingParams": _OBJECT_OR_NULL,
                "maxTokens": {"type": ["integer", "null"], "minimum": 1},
                "reasoning": {"type": ["string", "null"]},
                "cacheRetention": {"type": ["string", "null"]},
                "sessionId": {"type": ["string", "null"]},
                "disableContinuation": {"type": ["boolean", "null"]},
                "headers": _HEADER_MAP,
                "metadata": _OBJECT_OR_NULL,
                "transport": {"type": ["string", "null"]},
                "thinkingBudgets": {"type": ["object", "null"],
                                    "additionalProperties": {"type": "integer"}},
                "maxRetryDelayMs": {"type": ["integer", "null"], "minimum": 0},
                "maxRetries": {"type": ["integer", "null"], "minimum": 0},
            },
        },
    },
}
"""JSON Schema of a proxy request body. Unknown keys are allowed (and ignored), so newer
pi clients that send more options still work."""

# compiled once: building a validator per request costs more than the request itself
_VALIDATOR = jsonschema.Draft202012Validator(REQUEST_SCHEMA)


def validate_request(body: Any) -> None:
    """Raise ``ProxyProtocolError`` naming the first problem if ``body`` fails the schema."""
    error = best_match(_VALIDATOR.iter_errors(body))
    if error is None:
        return
    where = ".".join(str(part) for part in error.absolute_path) or "the top level"
    msg = f"Request body does not match the proxy protocol at {where}: {error.message}."
    raise ProxyProtocolError(msg)


# --- usage and models -------------------------------------------------------------------


def model_to_dict(model: Model) -> dict[str, Any]:
    """pi's JSON form of a ``Model`` (camelCase keys)."""
    out: dict[str, Any] = {
        "id": model.id, "name": model.name if model.name is not None else model.id,
        "api": model.api, "provider": model.provider, "baseUrl": model.base_url,
        "reasoning": model.reasoning, "input": list(model.input),
        "cost": {"input": model.cost.input, "output": model.cost.output,
                 "cacheRead": model.cost.cache_read, "cacheWrite": model.cost.cache_write},
        "contextWindow": model.context_window, "maxTokens": model.max_tokens,
    }
    if model.cost.tiers:
        out["cost"]["tiers"] = [tier.to_json() for tier in model.cost.tiers]
    if model.headers is not None:
        out["headers"] = dict(model.headers)
    if model.compat is not None:
        out["compat"] = dict(model.compat)
    if model.thinking_level_map is not None:
        out["thinkingLevelMap"] = dict(model.thinking_level_map)
    return out


def model_from_dict(data: Mapping[str, Any]) -> Model:
    """A ``Model`` from pi's JSON form (validate the request first)."""
    defaults = Model(id="", api="", provider="", base_url="")
    cost = data.get("cost") or {}
    headers = data.get("headers")
    compat = data.get("compat")
    levels = data.get("thinkingLevelMap")
    return Model(
        id=data["id"], api=data["api"], provider=data["provider"], base_url=data["baseUrl"],
        name=data.get("name"),
        reasoning=bool(data.get("reasoning", False)),
        input=tuple(data.get("input") or defaults.input),
        cost=ModelCost(float(cost.get("input", 0.0)), float(cost.get("output", 0.0)),
                       float(cost.get("cacheRead", 0.0)), float(cost.get("cacheWrite", 0.0)),
                       CostTier.from_json(cost.get("tiers"))),
        context_window=int(data.get("contextWindow", defaults.context_window)),
        max_tokens=int(data.get("maxTokens", defaults.max_tokens)),
        headers=dict(headers) if headers is not None else None,
        compat=dict(compat) if compat is not None else None,
        thinking_level_map=dict(levels) if levels is not None else None,
    )


# --- context and options ------------------------------------------------------------------


def context_to_dict(context: Context) -> dict[str, Any]:
    """pi's ``TranscriptContext`` JSON: ``{"messages": [...]}``."""
    return {"messages": [message_to_dict(m) for m in context.messages]}


def context_from_dict(data: Mapping[str, Any]) -> Context:
    """A ``Context`` from JSON; a legacy ``systemPrompt``/``tools`` pair becomes a leading
    system message, as pi's ``normalizeContext`` does.

    Raises ``ProxyProtocolError`` naming the message that could not be read.
    """
    messages: list[AgentMessage] = []
    for index, item in enumerate(data.get("messages") or ()):
        try:
            messages.append(message_from_dict(item))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            msg = f"context.messages.{index} could not be read: {exc}"
            raise ProxyProtocolError(msg) from exc
    prompt = data.get("systemPrompt")
    tools = data.get("tools")
    if prompt or tools:
        declarations = [ToolDeclaration(t["name"], t.get("description", ""),
                                        dict(t.get("parameters") or {})) for t in tools or ()]
        messages.insert(0, SystemMessage(content=prompt or "", tools_added=declarations or None,
                                         timestamp=0))
    # a registered application message the sender let through stays as it came
    return Context(messages)  # type: ignore[arg-type]


def options_to_dict(options: StreamOptions) -> dict[str, Any]:
    """The serialisable options with pi's wire names; unset (``None``) options left out."""
    out: dict[str, Any] = {}
    for name, wire in SERIALISABLE_OPTIONS.items():
        value = getattr(options, name, None)
        if value is not None:
            out[wire] = dict(value) if isinstance(value, Mapping) else value
    return out


def options_from_dict(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments for ``StreamOptions`` from the wire options (unknown keys ignored)."""
    kwargs: dict[str, Any] = {}
    if not data:
        return kwargs
    for name, wire in SERIALISABLE_OPTIONS.items():
        value = data.get(wire)
        if value is not None:
            kwargs[name] = value
    return kwargs


# --- events -------------------------------------------------------------------------------


def proxy_event_to_dict(event: AssistantMessageEvent) -> dict[str, Any]:
    """pi's proxy event for an assistant event: the event without ``partial``.

    ``text_end``/``thinking_end`` carry ``contentSignature`` instead of the full text,
    ``toolcall_start`` carries ``id`` and ``toolName``, and the terminal events carry the
    final ``usage`` (and ``errorMessage``, ``providerThinkingLevel``), from which the client
    rebuilds the message.
    """
    out: dict[str, Any] = {"type": event.type}
    if isinstance(event, DoneEvent):
        out["reason"] = event.reason
        out["usage"] = usage_to_dict(event.message.usage)
        if event.message.provider_thinking_level is not None:
            out["providerThinkingLevel"] = event.message.provider_thinking_level
        return out
    if isinstance(event, ErrorEvent):
        out["reason"] = event.reason
        if event.error.error_message is not None:
            out["errorMessage"] = event.error.error_message
        out["usage"] = usage_to_dict(event.error.usage)
        if event.error.provider_thinking_level is not None:
            out["providerThinkingLevel"] = event.error.provider_thinking_level
        return out
    index = getattr(event, "content_index", None)
    if index is None:
        return out  # "start"
    out["contentIndex"] = index
    block = _block(event, index)
    if isinstance(event, (TextEndEvent, ThinkingEndEvent)):
        signature = getattr(block, "text_signature" if isinstance(event, TextEndEvent)
                            else "thinking_signature", None)
        if signature is not None:
            out["contentSignature"] = signature
    elif isinstance(event, ToolCallStartEvent):
        out["id"] = getattr(block, "id", "")
        out["toolName"] = getattr(block, "name", "")
    elif isinstance(event, ToolCallEndEvent):
        out["toolCall"] = {"type": "toolCall", "id": event.tool_call.id,
                           "name": event.tool_call.name,
                           "arguments": event.tool_call.arguments}
        if event.tool_call.thought_signature is not None:
            out["toolCall"]["thoughtSignature"] = event.tool_call.thought_signature
    else:
        delta = getattr(event, "delta", None)
        if delta is not None:
            out["delta"] = delta
    return out


def _block(event: AssistantMessageEvent, index: int) -> Any:
    partial = getattr(event, "partial", None)
    content = getattr(partial, "content", None)
    if content is not None and 0 <= index < len(content):
        return content[index]
    return None


def encode_sse(data: Mapping[str, Any]) -> bytes:
    """One ``data: <json>`` server-sent event (compact JSON, UTF-8)."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    try:
        return b"data: " + payload.encode("utf-8") + b"\n\n"
    except UnicodeEncodeError:  # a lone surrogate, raw in the JSON: removed (sanitizeSurrogates)
        return b"data: " + sanitize_surrogates(payload).encode("utf-8") + b"\n\n"
