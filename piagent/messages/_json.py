"""The JSON form of messages: pi's camelCase keys, decoding dispatched on ``role``/``type``."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import UnknownMessageTypeError
from ._summary import CompactionSummaryMessage, summary_from_dict, summary_to_dict
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

# --- unknown keys, explicit nulls -------------------------------------------------------


def _extra(data: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """The keys of ``data`` no attribute holds: unknown keys and explicit nulls.

    Decoders call it only when ``known.issuperset(data) and None not in data.values()``
    (both in C) fails: in the common case nothing is extra, and ``extra`` stays the
    dataclass's own empty dict.
    """
    return {k: v for k, v in data.items() if v is None or k not in known}


def _write_extra(out: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``out`` with ``extra``'s keys added after its own (a key ``out`` has wins)."""
    for key, value in extra.items():
        if key not in out:
            out[key] = value
    return out


_TEXT_KEYS = frozenset({"type", "text", "textSignature"})
_THINKING_KEYS = frozenset({"type", "thinking", "thinkingSignature", "redacted"})
_IMAGE_KEYS = frozenset({"type", "data", "mimeType"})
_TOOL_CALL_COMMON_KEYS = frozenset({"type", "id", "name", "arguments", "thoughtSignature"})
_TOOL_CALL_KEYS = _TOOL_CALL_COMMON_KEYS | {"namespace", "argumentsError"}
_USAGE_COMMON_KEYS = frozenset({"input", "output", "cacheRead", "cacheWrite", "totalTokens",
                                "cost"})
_USAGE_KEYS = _USAGE_COMMON_KEYS | {"cacheWrite1h", "reasoning"}
_COST_KEYS = frozenset({"input", "output", "cacheRead", "cacheWrite", "total"})
_DECLARATION_KEYS = frozenset({"name", "description", "parameters", "constrainedSampling"})
_SYSTEM_KEYS = frozenset({"role", "content", "sections", "toolsAdded", "toolsRemoved",
                          "timestamp"})
_USER_KEYS = frozenset({"role", "content", "timestamp"})
_ASSISTANT_COMMON_KEYS = frozenset({"role", "content", "api", "provider", "model", "thinkingLevel",
                                    "usage", "stopReason", "errorMessage", "timestamp"})
_ASSISTANT_KEYS = _ASSISTANT_COMMON_KEYS | {
    "responseModel", "responseId", "providerThinkingLevel", "diagnostics", "deferred",
    "rawStopReason", "endTurn", "durationMs"}
_TOOL_RESULT_COMMON_KEYS = frozenset({"role", "toolCallId", "toolName", "content", "details",
                                      "usage", "isError", "timestamp", "durationMs"})
_TOOL_RESULT_KEYS = _TOOL_RESULT_COMMON_KEYS | {"nestedCalls"}


# --- JSON: content ----------------------------------------------------------------------


def content_to_dict(block: Any) -> dict[str, Any]:
    """The JSON form of one content block."""
    kind = type(block)
    if kind is TextContent or isinstance(block, TextContent):
        out: dict[str, Any] = {"type": "text", "text": block.text}
        if block.text_signature is not None:
            out["textSignature"] = block.text_signature
    elif kind is ToolCall or isinstance(block, ToolCall):
        out = {"type": "toolCall", "id": block.id, "name": block.name,
               "arguments": block.arguments}
        if block.thought_signature is not None:
            out["thoughtSignature"] = block.thought_signature
        if block.namespace is not None:
            out["namespace"] = block.namespace
        if block.arguments_error is not None:
            out["argumentsError"] = block.arguments_error
    elif kind is ThinkingContent or isinstance(block, ThinkingContent):
        out = {"type": "thinking", "thinking": block.thinking}
        if block.thinking_signature is not None:
            out["thinkingSignature"] = block.thinking_signature
        if block.redacted:
            out["redacted"] = True
    elif kind is ImageContent or isinstance(block, ImageContent):
        out = {"type": "image", "data": block.data, "mimeType": block.mime_type}
    else:
        msg = (f"Cannot serialise content block {block!r}: expected a text, thinking, image or "
               "toolCall block.")
        raise TypeError(msg)
    extra = block.extra
    return _write_extra(out, extra) if extra else out


def content_from_dict(data: Mapping[str, Any]) -> Any:
    """A content block from its JSON form, chosen by its ``type``."""
    # Each decoder builds the block from the keys nearly every block has, then looks at the
    # rest only when the data holds a key beyond those or a null (tested in C).
    kind = data.get("type")
    if kind == "text":
        text = TextContent(data.get("text", ""), data.get("textSignature"))
        if not (_TEXT_KEYS.issuperset(data) and None not in data.values()):
            text.extra = _extra(data, _TEXT_KEYS)
        return text
    if kind == "toolCall":
        call = ToolCall(data.get("id", ""), data.get("name", ""), dict(data.get("arguments") or {}),
                        data.get("thoughtSignature"))
        if not (_TOOL_CALL_COMMON_KEYS.issuperset(data) and None not in data.values()):
            call.namespace = data.get("namespace")
            call.arguments_error = data.get("argumentsError")
            call.extra = _extra(data, _TOOL_CALL_KEYS)
        return call
    if kind == "thinking":
        redacted = data.get("redacted", False)
        thinking = ThinkingContent(data.get("thinking", ""), data.get("thinkingSignature"),
                                   bool(redacted))
        if redacted is False and "redacted" in data:  # an explicit false, kept as written
            thinking.extra = {**_extra(data, _THINKING_KEYS), "redacted": False}
        elif not (_THINKING_KEYS.issuperset(data) and None not in data.values()):
            thinking.extra = _extra(data, _THINKING_KEYS)
        return thinking
    if kind == "image":
        image = ImageContent(data.get("data", ""), data.get("mimeType", ""))
        if not (_IMAGE_KEYS.issuperset(data) and None not in data.values()):
            image.extra = _extra(data, _IMAGE_KEYS)
        return image
    msg = f"Unknown content block type {kind!r}; expected 'text', 'thinking', 'image' or 'toolCall'."
    raise UnknownMessageTypeError(msg)


def usage_to_dict(usage: Usage) -> dict[str, Any]:
    """pi's JSON form of a ``Usage``."""
    cost = usage.cost
    cost_out = {"input": cost.input, "output": cost.output, "cacheRead": cost.cache_read,
                "cacheWrite": cost.cache_write, "total": cost.total}
    if cost.total_from_provider:
        cost_out["totalFromProvider"] = True
    if cost.extra:
        _write_extra(cost_out, cost.extra)
    if usage.cache_write_1h is None and usage.reasoning is None:
        out = {"input": usage.input, "output": usage.output, "cacheRead": usage.cache_read,
               "cacheWrite": usage.cache_write, "totalTokens": usage.total_tokens,
               "cost": cost_out}
    else:
        out = {"input": usage.input, "output": usage.output, "cacheRead": usage.cache_read,
               "cacheWrite": usage.cache_write}
        if usage.cache_write_1h is not None:
            out["cacheWrite1h"] = usage.cache_write_1h
        if usage.reasoning is not None:
            out["reasoning"] = usage.reasoning
        out["totalTokens"] = usage.total_tokens
        out["cost"] = cost_out
    return _write_extra(out, usage.extra) if usage.extra else out


def _count(value: Any) -> int:
    """A token count from JSON: exact for any size (ints never pass through float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return value if isinstance(value, int) else int(value)


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def usage_from_dict(data: Any) -> Usage:
    """A ``Usage`` from pi's JSON form; missing or malformed parts count as zero."""
    if not isinstance(data, Mapping):
        return Usage()
    cost = data.get("cost")
    cost = cost if isinstance(cost, Mapping) else {}
    get, cget = data.get, cost.get
    # type(...) is int/float first: the common case without a call
    i, o, cr, cw, tt = (get("input", 0), get("output", 0), get("cacheRead", 0),
                        get("cacheWrite", 0), get("totalTokens", 0))
    ci, co, ccr, ccw, ct = (cget("input", 0), cget("output", 0), cget("cacheRead", 0),
                            cget("cacheWrite", 0), cget("total", 0))
    usage = Usage(
        i if type(i) is int else _count(i), o if type(o) is int else _count(o),
        cr if type(cr) is int else _count(cr), cw if type(cw) is int else _count(cw),
        tt if type(tt) is int else _count(tt),
        Cost(ci if type(ci) is float else _num(ci), co if type(co) is float else _num(co),
             ccr if type(ccr) is float else _num(ccr), ccw if type(ccw) is float else _num(ccw),
             ct if type(ct) is float else _num(ct)),
    )
    if not (_COST_KEYS.issuperset(cost) and None not in cost.values()):
        if cget("totalFromProvider") is True:
            usage.cost.total_from_provider = True
        usage.cost.extra = _extra(cost, _COST_KEYS | {"totalFromProvider"})
    if not (_USAGE_COMMON_KEYS.issuperset(data) and None not in data.values()):
        if get("cacheWrite1h") is not None:
            usage.cache_write_1h = _count(data["cacheWrite1h"])
        if get("reasoning") is not None:
            usage.reasoning = _count(data["reasoning"])
        usage.extra = _extra(data, _USAGE_KEYS)
    return usage


# --- JSON: standard messages ------------------------------------------------------------


def _declaration_to_dict(t: ToolDeclaration) -> dict[str, Any]:
    out: dict[str, Any] = {"name": t.name, "description": t.description, "parameters": t.parameters}
    if t.constrained_sampling is not None:
        out["constrainedSampling"] = t.constrained_sampling
    return _write_extra(out, t.extra) if t.extra else out


def _declaration_from_dict(t: Mapping[str, Any]) -> ToolDeclaration:
    declaration = ToolDeclaration(t["name"], t.get("description", ""), t.get("parameters") or {},
                                  constrained_sampling=t.get("constrainedSampling"))
    if not (_DECLARATION_KEYS.issuperset(t) and None not in t.values()):
        declaration.extra = _extra(t, _DECLARATION_KEYS)
    return declaration


def _system_to_dict(m: SystemMessage) -> dict[str, Any]:
    content = m.content if isinstance(m.content, str) else [content_to_dict(b) for b in m.content]
    out: dict[str, Any] = {"role": "system", "content": content}
    if m.sections is not None:
        out["sections"] = dict(m.sections)
    if m.tools_added is not None:
        out["toolsAdded"] = [_declaration_to_dict(t) for t in m.tools_added]
    if m.tools_removed is not None:
        out["toolsRemoved"] = [{"name": name} for name in m.tools_removed]
    out["timestamp"] = m.timestamp
    return _write_extra(out, m.extra) if m.extra else out


def _system_from_dict(d: Mapping[str, Any]) -> SystemMessage:
    added = d.get("toolsAdded")
    removed = d.get("toolsRemoved")
    content = d.get("content", "")
    if not isinstance(content, str):  # pi 1.4: a list of text blocks
        content = [content_from_dict(b) for b in content]
    message = SystemMessage(
        content=content,
        sections=dict(d["sections"]) if d.get("sections") is not None else None,
        tools_added=None if added is None else [_declaration_from_dict(t) for t in added],
        tools_removed=None if removed is None else [
            r if isinstance(r, str) else r["name"] for r in removed],
        timestamp=int(d.get("timestamp", 0)),
    )
    if not (_SYSTEM_KEYS.issuperset(d) and None not in d.values()):
        message.extra = _extra(d, _SYSTEM_KEYS)
    return message


def _user_to_dict(m: UserMessage) -> dict[str, Any]:
    content = m.content if isinstance(m.content, str) else [content_to_dict(b) for b in m.content]
    out = {"role": "user", "content": content, "timestamp": m.timestamp}
    return _write_extra(out, m.extra) if m.extra else out


def _user_from_dict(d: Mapping[str, Any]) -> UserMessage:
    content = d.get("content", "")
    if not isinstance(content, str):
        content = [content_from_dict(b) for b in content]
    message = UserMessage(content=content, timestamp=int(d.get("timestamp", 0)))
    if not (_USER_KEYS.issuperset(d) and None not in d.values()):
        message.extra = _extra(d, _USER_KEYS)
    return message


def _assistant_to_dict(m: AssistantMessage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": "assistant", "content": [content_to_dict(b) for b in m.content],
        "api": m.api, "provider": m.provider, "model": m.model,
    }
    if m.response_model is not None:
        out["responseModel"] = m.response_model
    if m.response_id is not None:
        out["responseId"] = m.response_id
    if m.provider_thinking_level is not None:
        out["providerThinkingLevel"] = m.provider_thinking_level
    if m.thinking_level is not None:
        out["thinkingLevel"] = m.thinking_level
    if m.diagnostics is not None:
        out["diagnostics"] = m.diagnostics
    out["usage"] = usage_to_dict(m.usage)
    out["stopReason"] = m.stop_reason
    if m.deferred is not None:
        out["deferred"] = m.deferred
    if m.error_message is not None:
        out["errorMessage"] = m.error_message
    if m.raw_stop_reason is not None:
        out["rawStopReason"] = m.raw_stop_reason
    if m.end_turn is not None:
        out["endTurn"] = m.end_turn
    out["timestamp"] = m.timestamp
    if m.duration_ms is not None:
        out["durationMs"] = m.duration_ms
    return _write_extra(out, m.extra) if m.extra else out


def _assistant_from_dict(d: Mapping[str, Any]) -> AssistantMessage:
    message = AssistantMessage(
        content=[content_from_dict(b) for b in d.get("content", ())],
        api=d.get("api", ""), provider=d.get("provider", ""), model=d.get("model", ""),
        usage=usage_from_dict(d.get("usage")), stop_reason=d.get("stopReason", "stop"),
        error_message=d.get("errorMessage"), thinking_level=d.get("thinkingLevel"),
        timestamp=int(d.get("timestamp", 0)),
    )
    if not (_ASSISTANT_COMMON_KEYS.issuperset(d) and None not in d.values()):
        duration = d.get("durationMs")
        message.duration_ms = int(duration) if duration is not None else None
        message.response_model = d.get("responseModel")
        message.response_id = d.get("responseId")
        message.provider_thinking_level = d.get("providerThinkingLevel")
        message.raw_stop_reason = d.get("rawStopReason")
        message.end_turn = d.get("endTurn")
        message.diagnostics = d.get("diagnostics")
        message.deferred = d.get("deferred")
        message.extra = _extra(d, _ASSISTANT_KEYS)
    return message


def _tool_result_to_dict(m: ToolResultMessage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": "toolResult", "toolCallId": m.tool_call_id, "toolName": m.tool_name,
        "content": [content_to_dict(b) for b in m.content],
    }
    if m.details is not None:
        out["details"] = m.details
    if m.usage is not None:
        out["usage"] = usage_to_dict(m.usage)
    if m.nested_calls is not None:
        out["nestedCalls"] = m.nested_calls
    out["isError"] = m.is_error
    out["timestamp"] = m.timestamp
    if m.duration_ms is not None:
        out["durationMs"] = m.duration_ms
    return _write_extra(out, m.extra) if m.extra else out


def _tool_result_from_dict(d: Mapping[str, Any]) -> ToolResultMessage:
    message = ToolResultMessage(
        tool_call_id=d.get("toolCallId", ""), tool_name=d.get("toolName", ""),
        content=[content_from_dict(b) for b in d.get("content") or ()],
        details=d.get("details"),
        usage=usage_from_dict(d["usage"]) if d.get("usage") is not None else None,
        is_error=bool(d.get("isError", False)),
        duration_ms=int(d["durationMs"]) if d.get("durationMs") is not None else None,
        timestamp=int(d.get("timestamp", 0)),
    )
    if not (_TOOL_RESULT_COMMON_KEYS.issuperset(d) and None not in d.values()):
        message.nested_calls = d.get("nestedCalls")
        message.extra = _extra(d, _TOOL_RESULT_KEYS)
    return message


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
    "compactionSummary": summary_from_dict,  # pi-coding-agent's, built in (docs/compaction.md)
}
_ENCODERS: dict[type, _Encoder] = {**_STANDARD, CompactionSummaryMessage: summary_to_dict}


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
