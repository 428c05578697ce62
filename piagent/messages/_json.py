"""The JSON form of messages: pi's camelCase keys, decoding dispatched on ``role``/``type``."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import UnknownMessageTypeError
from ._types import (
    AgentMessage,
    AssistantMessage,
    Cost,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    Usage,
    UserMessage,
)

# --- JSON: content ----------------------------------------------------------------------


def content_to_dict(block: Any) -> dict[str, Any]:
    """The JSON form of one content block."""
    if isinstance(block, TextContent):
        out: dict[str, Any] = {"type": "text", "text": block.text}
        if block.text_signature is not None:
            out["textSignature"] = block.text_signature
        return out
    if isinstance(block, ToolCall):
        out = {"type": "toolCall", "id": block.id, "name": block.name,
               "arguments": block.arguments}
        if block.thought_signature is not None:
            out["thoughtSignature"] = block.thought_signature
        return out
    if isinstance(block, ThinkingContent):
        out = {"type": "thinking", "thinking": block.thinking}
        if block.thinking_signature is not None:
            out["thinkingSignature"] = block.thinking_signature
        if block.redacted:
            out["redacted"] = True
        return out
    if isinstance(block, ImageContent):
        return {"type": "image", "data": block.data, "mimeType": block.mime_type}
    msg = f"Cannot serialise content block {block!r}: expected a text, thinking, image or toolCall block."
    raise TypeError(msg)


def content_from_dict(data: Mapping[str, Any]) -> Any:
    """A content block from its JSON form, chosen by its ``type``."""
    kind = data.get("type")
    if kind == "text":
        return TextContent(data.get("text", ""), data.get("textSignature"))
    if kind == "toolCall":
        return ToolCall(data.get("id", ""), data.get("name", ""), dict(data.get("arguments") or {}),
                        data.get("thoughtSignature"))
    if kind == "thinking":
        return ThinkingContent(data.get("thinking", ""), data.get("thinkingSignature"),
                               bool(data.get("redacted", False)))
    if kind == "image":
        return ImageContent(data.get("data", ""), data.get("mimeType", ""))
    msg = f"Unknown content block type {kind!r}; expected 'text', 'thinking', 'image' or 'toolCall'."
    raise UnknownMessageTypeError(msg)


def usage_to_dict(usage: Usage) -> dict[str, Any]:
    """pi's JSON form of a ``Usage``."""
    cost = usage.cost
    return {
        "input": usage.input, "output": usage.output, "cacheRead": usage.cache_read,
        "cacheWrite": usage.cache_write, "totalTokens": usage.total_tokens,
        "cost": {"input": cost.input, "output": cost.output, "cacheRead": cost.cache_read,
                 "cacheWrite": cost.cache_write, "total": cost.total},
    }


def usage_from_dict(data: Any) -> Usage:
    """A ``Usage`` from pi's JSON form; missing or malformed parts count as zero."""
    if not isinstance(data, Mapping):
        return Usage()
    cost = data.get("cost")
    cost = cost if isinstance(cost, Mapping) else {}

    def count(key: str) -> int:  # exact for any size: ints never pass through float
        value = data.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return 0
        return value if isinstance(value, int) else int(value)

    def num(key: str) -> float:
        value = cost.get(key, 0)
        return float(value) if isinstance(value, (int, float)) else 0.0

    return Usage(
        count("input"), count("output"), count("cacheRead"), count("cacheWrite"),
        count("totalTokens"),
        Cost(num("input"), num("output"), num("cacheRead"), num("cacheWrite"), num("total")),
    )


# --- JSON: standard messages ------------------------------------------------------------


def _system_to_dict(m: SystemMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "system", "content": m.content}
    if m.sections is not None:
        out["sections"] = dict(m.sections)
    if m.tools_added is not None:
        out["toolsAdded"] = [{"name": t.name, "description": t.description,
                              "parameters": t.parameters} for t in m.tools_added]
    if m.tools_removed is not None:
        out["toolsRemoved"] = [{"name": name} for name in m.tools_removed]
    out["timestamp"] = m.timestamp
    return out


def _system_from_dict(d: Mapping[str, Any]) -> SystemMessage:
    added = d.get("toolsAdded")
    removed = d.get("toolsRemoved")
    content = d.get("content", "")
    if isinstance(content, list):  # pi reads text blocks through contentText as well
        content = "".join(b.get("text", "") for b in content if b.get("type") == "text")
    return SystemMessage(
        content=content,
        sections=dict(d["sections"]) if d.get("sections") is not None else None,
        tools_added=None if added is None else [
            ToolDeclaration(t["name"], t.get("description", ""), t.get("parameters") or {})
            for t in added],
        tools_removed=None if removed is None else [
            r if isinstance(r, str) else r["name"] for r in removed],
        timestamp=int(d.get("timestamp", 0)),
    )


def _user_to_dict(m: UserMessage) -> dict[str, Any]:
    content = m.content if isinstance(m.content, str) else [content_to_dict(b) for b in m.content]
    return {"role": "user", "content": content, "timestamp": m.timestamp}


def _user_from_dict(d: Mapping[str, Any]) -> UserMessage:
    content = d.get("content", "")
    if not isinstance(content, str):
        content = [content_from_dict(b) for b in content]
    return UserMessage(content=content, timestamp=int(d.get("timestamp", 0)))


def _assistant_to_dict(m: AssistantMessage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": "assistant", "content": [content_to_dict(b) for b in m.content],
        "api": m.api, "provider": m.provider, "model": m.model,
        "usage": usage_to_dict(m.usage), "stopReason": m.stop_reason,
    }
    if m.error_message is not None:
        out["errorMessage"] = m.error_message
    if m.thinking_level is not None:
        out["thinkingLevel"] = m.thinking_level
    out["timestamp"] = m.timestamp
    return out


def _assistant_from_dict(d: Mapping[str, Any]) -> AssistantMessage:
    return AssistantMessage(
        content=[content_from_dict(b) for b in d.get("content", ())],
        api=d.get("api", ""), provider=d.get("provider", ""), model=d.get("model", ""),
        usage=usage_from_dict(d.get("usage")), stop_reason=d.get("stopReason", "stop"),
        error_message=d.get("errorMessage"), thinking_level=d.get("thinkingLevel"),
        timestamp=int(d.get("timestamp", 0)),
    )


def _tool_result_to_dict(m: ToolResultMessage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": "toolResult", "toolCallId": m.tool_call_id, "toolName": m.tool_name,
        "content": [content_to_dict(b) for b in m.content],
    }
    if m.details is not None:
        out["details"] = m.details
    if m.usage is not None:
        out["usage"] = usage_to_dict(m.usage)
    out["isError"] = m.is_error
    if m.duration_ms is not None:
        out["durationMs"] = m.duration_ms
    out["timestamp"] = m.timestamp
    return out


def _tool_result_from_dict(d: Mapping[str, Any]) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=d.get("toolCallId", ""), tool_name=d.get("toolName", ""),
        content=[content_from_dict(b) for b in d.get("content") or ()],
        details=d.get("details"),
        usage=usage_from_dict(d["usage"]) if d.get("usage") is not None else None,
        is_error=bool(d.get("isError", False)),
        duration_ms=int(d["durationMs"]) if d.get("durationMs") is not None else None,
        timestamp=int(d.get("timestamp", 0)),
    )


_Encoder = Callable[[Any], dict[str, Any]]
_Decoder = Callable[[Mapping[str, Any]], Any]

_STANDARD: dict[type, _Encoder] = {
    SystemMessage: _system_to_dict,
    UserMessage: _user_to_dict,
    AssistantMessage: _assistant_to_dict,
    ToolResultMessage: _tool_result_to_dict,
}
# guards _DECODERS and _ENCODERS (written by register_message_type from any thread)
_registry_lock = threading.Lock()
_DECODERS: dict[str, _Decoder] = {
    "system": _system_from_dict,
    "user": _user_from_dict,
    "assistant": _assistant_from_dict,
    "toolResult": _tool_result_from_dict,
}
_ENCODERS: dict[type, _Encoder] = dict(_STANDARD)


def register_message_type(role: str, cls: type) -> type:
    """Make an application message dataclass serialisable under ``role``.

    ``cls`` must be a dataclass whose instances have ``role == role`` (a field or a class
    attribute). Fields are written with camelCase keys through dataclasses-json; nested
    dataclasses, enums and datetimes work as dataclasses-json supports them. Returns ``cls``
    so it can be used as a decorator factory argument. Registering the same role again
    replaces the earlier class.
    """
    if not dataclasses.is_dataclass(cls):
        msg = f"register_message_type needs a dataclass, got {cls!r}; decorate it with @dataclass."
        raise TypeError(msg)
    if role in ("system", "user", "assistant", "toolResult"):
        msg = f"Role {role!r} is a standard message role; choose another name for {cls.__name__}."
        raise ValueError(msg)
    from dataclasses_json import DataClassJsonMixin, LetterCase, dataclass_json

    if not issubclass(cls, DataClassJsonMixin) and not hasattr(cls, "from_dict"):
        cls = dataclass_json(letter_case=LetterCase.CAMEL)(cls)  # type: ignore[call-overload]
    field_names = {f.name for f in dataclasses.fields(cls)}

    def encode(message: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"role": role}
        out.update(message.to_dict(encode_json=True))
        return out

    def decode(data: Mapping[str, Any]) -> Any:
        payload = dict(data)
        if "role" not in field_names:
            payload.pop("role", None)
        return cls.from_dict(payload)  # type: ignore[attr-defined]

    with _registry_lock:
        _ENCODERS[cls] = encode
        _DECODERS[role] = decode
    return cls


def message_to_dict(message: AgentMessage) -> dict[str, Any]:
    """The JSON form of a message (pi's camelCase keys), ready for ``json.dumps``."""
    encoder = _ENCODERS.get(type(message))
    if encoder is None:
        for cls, candidate in list(_ENCODERS.items()):  # subclasses of a registered class
            if isinstance(message, cls):
                encoder = candidate
                break
    if encoder is None:
        role = getattr(message, "role", None)
        msg = (f"Cannot serialise {type(message).__name__} (role {role!r}): register it with "
               "register_message_type(role, cls) first.")
        raise UnknownMessageTypeError(msg)
    return encoder(message)


def message_from_dict(data: Mapping[str, Any]) -> AgentMessage:
    """A message from its JSON form, chosen by its ``role``."""
    role = data.get("role")
    decoder = _DECODERS.get(role) if isinstance(role, str) else None
    if decoder is None:
        msg = (f"Unknown message role {role!r}; register application messages with "
               "register_message_type(role, cls) before loading them.")
        raise UnknownMessageTypeError(msg)
    message: AgentMessage = decoder(data)
    return message


def messages_to_json(messages: Iterable[AgentMessage], *, indent: int | None = None) -> str:
    """A transcript as a JSON array string."""
    return json.dumps([message_to_dict(m) for m in messages], indent=indent, ensure_ascii=False)


def messages_from_json(text: str | bytes) -> list[AgentMessage]:
    """A transcript from the JSON array written by ``messages_to_json`` (or by pi)."""
    data = json.loads(text)
    if not isinstance(data, list):
        msg = f"Expected a JSON array of messages, got {type(data).__name__}."
        raise ValueError(msg)
    return [message_from_dict(item) for item in data]
