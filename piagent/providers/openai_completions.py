"""``openai-completions``: OpenAI Chat Completions and every compatible server.

Ollama, vLLM, llama.cpp, LM Studio, OpenRouter, Groq, DeepSeek, … differ in small ways;
those are per-model ``compat`` flags (docs/providers.md), detected from the provider and
base URL and overridable with ``Model.compat`` (pi's camelCase keys or snake_case). This
module only maps the wire format; transport, retries and abort live in ``kit`` (``_call``, ``_start``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import ProviderError
from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    StopReason,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamOptions
from ..transcript import get_current_system_prompt, get_current_tools
from ._compat import OpenAICompat, get_compat
from ._errors import MESSAGE_BODY_LIMIT, clip
from ._keys import is_local_url, missing_key_message, provider_label, resolve_api_key
from ._transform import (
    SegmentCache,
    WireCache,
    leading_system_text,
    renames_tool_call_ids,
    system_update_text,
    transform_messages,
)
from ._wire import PrefixEncoder
from .kit import (
    HttpClient,
    MessageBuilder,
    ProviderCall,
    SSERequest,
    arguments_json,
    parse_event_json,
    start_stream,
)

__all__ = ["OpenAICompat", "build_completions_request", "get_compat", "stream_openai_completions"]

API = "openai-completions"
_CLIENT = HttpClient(API)


# --- the request ----------------------------------------------------------------------------


def build_completions_request(model: Model, messages: Sequence[AgentMessage],
                              options: StreamOptions, compat: OpenAICompat | None = None,
                              *, wire_messages: list[dict[str, Any]] | None = None
                              ) -> dict[str, Any]:
    """The JSON body of ``POST {base_url}/chat/completions`` for a transformed transcript.

    ``wire_messages``: the messages already converted (see ``_convert``).
    """
    compat = compat or get_compat(model)
    if wire_messages is None:
        wire_messages = _wire_messages(model, messages, compat)
    body: dict[str, Any] = {"model": model.id, "messages": wire_messages, "stream": True}
    if compat.supports_usage_in_streaming:
        body["stream_options"] = {"include_usage": True}
    if compat.supports_store:
        body["store"] = False
    tools = get_current_tools(messages)
    if tools:
        wire_tools = []
        for tool in tools:
            function: dict[str, Any] = {"name": tool.name, "description": tool.description,
                                        "parameters": tool.parameters or {"type": "object"}}
            if compat.supports_strict_mode:
                function["strict"] = False
            wire_tools.append({"type": "function", "function": function})
        body["tools"] = wire_tools
    elif any(isinstance(m, ToolResultMessage) for m in messages):
        body["tools"] = []  # LiteLLM-style proxies reject tool history without a tools list
    if options.max_tokens:
        body[compat.max_tokens_field] = options.max_tokens
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if model.reasoning:
        _add_reasoning(body, options.reasoning, compat)
    if options.sampling_params:
        body.update(options.sampling_params)
    return body


def _add_reasoning(body: dict[str, Any], level: str | None, compat: OpenAICompat) -> None:
    on = level is not None and level != "off"
    fmt = compat.thinking_format
    if fmt == "openrouter":
        body["reasoning"] = {"effort": _effort(level, compat) if on else "none"}
    elif fmt in ("zai", "deepseek"):
        body["thinking"] = {"type": "enabled" if on else "disabled"}
    elif fmt == "qwen":
        body["enable_thinking"] = on
    elif fmt == "qwen-chat-template":
        body["chat_template_kwargs"] = {"enable_thinking": on}
    elif fmt == "together":
        body["reasoning"] = {"enabled": on}
    elif on and compat.supports_reasoning_effort:
        body["reasoning_effort"] = _effort(level, compat)


def _effort(level: str | None, compat: OpenAICompat) -> str:
    assert level is not None
    if level in compat.reasoning_effort_map:
        return compat.reasoning_effort_map[level]
    return "high" if level in ("xhigh", "max") else level


def _system_role(model: Model, compat: OpenAICompat) -> str:
    return "developer" if model.reasoning and compat.supports_developer_role else "system"


def _wire_messages(model: Model, messages: Sequence[AgentMessage],
                   compat: OpenAICompat) -> list[dict[str, Any]]:
    role = _system_role(model, compat)
    out: list[dict[str, Any]] = []
    if compat.supports_mid_convo_system_messages:
        prompt, start = leading_system_text(messages)
    else:
        prompt, start = get_current_system_prompt(messages), 0
    if prompt:
        out.append({"role": role, "content": prompt})
    images_ok = "image" in model.input
    variant = compat  # compared with == (compat holds dicts: no hash); one object per model
    pending_images: list[dict[str, Any]] = []
    for message in messages[start:]:
        if pending_images and not isinstance(message, ToolResultMessage):
            _flush_tool_images(out, pending_images, compat)
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": _user_content(message.content, images_ok)})
        elif isinstance(message, AssistantMessage):
            wire = _ASSISTANT_WIRE.get(message, variant, lambda m: _assistant(m, compat))
            if wire is not None:
                out.append(wire)
        elif isinstance(message, ToolResultMessage):
            out.append(_tool_result(message, compat, pending_images if images_ok else None))
        elif isinstance(message, SystemMessage) and compat.supports_mid_convo_system_messages:
            text = system_update_text(message)
            if text:
                out.append({"role": role, "content": text})
    if pending_images:
        _flush_tool_images(out, pending_images, compat)
    return out


_ASSISTANT_WIRE = WireCache()  # an assistant message's wire dict, per compat settings
_SEGMENTS = SegmentCache()  # converted transcript segments, reused across requests
_BODIES = PrefixEncoder()  # the JSON of converted messages, reused across requests


def _convert(model: Model, messages: Sequence[AgentMessage],
             compat: OpenAICompat) -> list[dict[str, Any]]:
    """The transcript's wire messages: transformed, converted, old segments reused."""
    normalize = _normalize_id(model)

    def convert(part: Sequence[AgentMessage]) -> list[dict[str, Any]]:
        return _wire_messages(model, transform_messages(part, model, normalize), compat)

    if not compat.supports_mid_convo_system_messages:
        return convert(messages)  # every system message folds into the head: no segments
    variant = (model.provider, model.api, model.id, tuple(model.input), compat)
    return _SEGMENTS.convert(messages, variant, convert,
                             lambda part: renames_tool_call_ids(part, model, normalize))


def _user_content(content: str | list[Any], images_ok: bool) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if len(content) == 1 and isinstance(content[0], TextContent):
        return content[0].text
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent) and images_ok:
            parts.append({"type": "image_url", "image_url": {
                "url": f"data:{block.mime_type};base64,{block.data}"}})
    return parts


def _assistant(message: AssistantMessage, compat: OpenAICompat) -> dict[str, Any] | None:
    texts: list[str] = []
    thinking: list[str] = []
    thinking_field: str | None = None
    details: Any = None
    calls: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            if block.text:
                texts.append(block.text)
        elif isinstance(block, ThinkingContent):
            signature = block.thinking_signature
            if signature and signature.startswith("["):
                try:
                    details = json.loads(signature)  # OpenRouter reasoning_details
                except ValueError:
                    details = None
            elif signature:
                thinking_field = signature
            if block.thinking:
                thinking.append(block.thinking)
        elif isinstance(block, ToolCall):
            calls.append({"id": block.id, "type": "function", "function": {
                "name": block.name, "arguments": arguments_json(block.arguments)}})
    if compat.requires_thinking_as_text and thinking:
        texts.insert(0, "\n\n".join(thinking))
        thinking = []
    if not texts and not calls and not thinking:
        return None
    wire: dict[str, Any] = {"role": "assistant",
                            "content": "".join(texts) if texts else None}
    if calls:
        wire["tool_calls"] = calls
    if details is not None:
        wire["reasoning_details"] = details
    elif thinking and thinking_field in ("reasoning_content", "reasoning", "reasoning_text"):
        wire[thinking_field] = "\n\n".join(thinking)
    if compat.requires_reasoning_content_on_assistant_messages:
        wire.setdefault("reasoning_content", "\n\n".join(thinking))
    if wire["content"] is None and compat.requires_assistant_after_tool_result:
        wire["content"] = ""
    return wire


def _tool_result(message: ToolResultMessage, compat: OpenAICompat,
                 images: list[dict[str, Any]] | None) -> dict[str, Any]:
    text = "\n".join(b.text for b in message.content if isinstance(b, TextContent))
    has_image = False
    for block in message.content:
        if isinstance(block, ImageContent):
            has_image = True
            if images is not None:
                images.append({"type": "image_url", "image_url": {
                    "url": f"data:{block.mime_type};base64,{block.data}"}})
    wire: dict[str, Any] = {"role": "tool", "tool_call_id": message.tool_call_id,
                            "content": text or ("(see attached image)" if has_image else "")}
    if compat.requires_tool_result_name:
        wire["name"] = message.tool_name
    return wire


def _flush_tool_images(out: list[dict[str, Any]], images: list[dict[str, Any]],
                       compat: OpenAICompat) -> None:
    if compat.requires_assistant_after_tool_result:
        out.append({"role": "assistant", "content": "I have processed the tool results."})
    out.append({"role": "user", "content": [
        {"type": "text", "text": "Attached image(s) from tool result:"}, *images]})
    images.clear()


_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def _normalize_id(model: Model) -> Any:
    def normalize(call_id: str) -> str:
        if "|" in call_id:
            joined = _ID_CHARS.sub("_", call_id.replace("|", "_"))
            if len(joined) <= 40:
                return joined
            digest = hashlib.sha1(call_id.encode()).hexdigest()[:8]
            return f"{joined[:31]}_{digest}"
        if model.provider == "openai" and len(call_id) > 40:
            return call_id[:40]
        return call_id

    return normalize


# --- the response -----------------------------------------------------------------------------


_STOP_REASONS: dict[str, StopReason] = {"stop": "stop", "end": "stop", "length": "length",
                                        "tool_calls": "toolUse", "function_call": "toolUse"}
_REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_text")
_REASONING_KEYS = frozenset((*_REASONING_FIELDS, "reasoning_details"))


def stream_openai_completions(model: Model | None, context: Context,
                              options: StreamOptions | None = None
                              ) -> AssistantMessageEventStream:
    """The ``openai-completions`` stream function (a ``StreamFn``; never raises)."""
    label = provider_label(model.provider) if model is not None else "OpenAI"
    return start_stream(model, options, _run, context=context, client=_CLIENT, api=API,
                        label=label)


def _run(call: ProviderCall) -> Iterator[None]:
    model = call.model
    api_key = resolve_api_key(model.provider, call.options.api_key)
    headers: dict[str, str] = {}
    if api_key:
        call.add_secret(api_key)
        headers["Authorization"] = f"Bearer {api_key}"
    elif model.provider in ("openai", "openrouter", "groq", "xai", "cerebras", "deepseek",
                            "mistral", "together", "fireworks", "zai", "moonshot") \
            and not is_local_url(model.base_url):
        raise ProviderError(missing_key_message(model.provider), provider=model.provider)
    headers.update(model.headers or {})
    headers.update(call.options.headers or {})
    compat = get_compat(model)
    body = build_completions_request(model, call.messages, call.options, compat,
                                     wire_messages=_convert(model, call.messages, compat))
    url = model.base_url.rstrip("/") + "/chat/completions"
    state = _StreamState(call.out, call.label)
    encoded = _BODIES.encode(body, "messages")  # old messages' JSON reused
    with call.open_sse(SSERequest(url=url, body=encoded, headers=headers)) as sse:
        for event in sse.events():
            if event.data.strip() == "[DONE]":
                state.done = True
                break
            if event.event == "error":  # Groq sends these mid-stream
                raise ProviderError(f"{call.label} stream error: {_event_error(event.data)}",
                                    provider=model.provider)
            state.handle(parse_event_json(event, call.label))
            yield  # hand the queued events to the consumer
    state.finish(compat)


class _StreamState:
    """Maps chunks onto the builder (pi new: blocks stay open until the stream ends).

    Thread safety: used only by the worker thread.
    """

    def __init__(self, out: MessageBuilder, label: str) -> None:
        self.out = out
        self.label = label
        self.text: int | None = None
        self.thinking: int | None = None
        self.tools_by_index: dict[int, int] = {}
        self.tools_by_id: dict[str, int] = {}
        self.details: list[Any] = []
        self.finish_reason: str | None = None
        self.done = False  # the server sent ``data: [DONE]``

    def handle(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            return
        error = chunk.get("error")
        if error or chunk.get("object") == "error":
            # OpenRouter sends the error object in a chunk that also has ``choices``
            usage = self._usage_of(chunk)
            if usage:
                self._usage(usage, chunk)  # what the failed request was billed
            raise ProviderError(f"{self.label} stream error: {_error_text(error or chunk)}")
        usage = chunk.get("usage") or (chunk.get("x_groq") or {}).get("usage")
        for choice in chunk.get("choices") or ():
            usage = usage or choice.get("usage")
            delta = choice.get("delta")
            if delta:
                self._delta(delta)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = reason
            break  # only the first choice is used
        if usage and isinstance(usage, dict):
            self._usage(usage, chunk)

    def _usage_of(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        usage = chunk.get("usage") or (chunk.get("x_groq") or {}).get("usage")
        for choice in chunk.get("choices") or ():
            usage = usage or choice.get("usage")
            break
        return usage if isinstance(usage, dict) else None

    def _delta(self, delta: dict[str, Any]) -> None:
        content = delta.get("content")
        if content:
            if isinstance(content, list):  # Mistral (magistral): typed thinking/text parts
                for part in content:
                    self._content_part(part)
            else:
                self._add_text(str(content))
        if not _REASONING_KEYS.isdisjoint(delta):  # one test for the rare fields
            for name in _REASONING_FIELDS:
                piece = delta.get(name)
                if piece:
                    self._add_thinking(piece, name)
                    break
            details = delta.get("reasoning_details")
            if isinstance(details, list):
                self.details.extend(details)
        tools = delta.get("tool_calls")
        if tools:
            for tool in tools:
                self._tool_delta(tool)

    def _add_text(self, piece: str) -> None:
        if self.text is None:
            self.text = self.out.open_text()
        self.out.add_text(self.text, piece)

    def _add_thinking(self, piece: str, field: str | None) -> None:
        if self.thinking is None:
            self.thinking = self.out.open_thinking(signature=field)
        self.out.add_thinking(self.thinking, piece)

    def _content_part(self, part: Any) -> None:
        if isinstance(part, str):
            if part:
                self._add_text(part)
            return
        if not isinstance(part, dict):
            return
        kind = part.get("type")
        if kind == "text" and part.get("text"):
            self._add_text(str(part["text"]))
        elif kind == "thinking":
            inner = part.get("thinking")
            pieces = [inner] if isinstance(inner, str) else [
                p.get("text") for p in inner or () if isinstance(p, dict)]
            for piece in pieces:
                if piece:
                    self._add_thinking(str(piece), None)

    def _tool_delta(self, tool: dict[str, Any]) -> None:
        out = self.out
        call_id = tool.get("id") or ""
        function = tool.get("function") or {}
        name = function.get("name") or ""
        fragment = function.get("arguments") or ""
        if not isinstance(fragment, str):
            fragment = json.dumps(fragment)  # some servers send the object itself
        position = tool.get("index")
        block = self.tools_by_id.get(call_id) if call_id else None
        if block is None and isinstance(position, int):
            block = self.tools_by_index.get(position)
            if block is not None and call_id:
                existing = out.block(block).id
                if existing and existing != call_id:
                    block = None  # same index, new id: a server numbering parallel calls badly
        if block is None:
            block = out.open_tool_call(call_id, name)  # with this id and name
            if isinstance(position, int):
                self.tools_by_index[position] = block
        elif call_id or name:
            current = out.block(block)
            if call_id and not current.id:
                current.id = call_id
            if name and not current.name:
                current.name = name
        if call_id:
            self.tools_by_id[call_id] = block
        out.add_tool_arguments(block, fragment)

    def _usage(self, usage: dict[str, Any], chunk: dict[str, Any]) -> None:
        details = usage.get("prompt_tokens_details") or {}
        cache_read = int(details.get("cached_tokens") or usage.get("prompt_cache_hit_tokens")
                         or usage.get("cached_tokens") or chunk.get("cached_tokens") or 0)
        cache_write = int(details.get("cache_write_tokens") or 0)
        prompt = int(usage.get("prompt_tokens") or 0)
        output = int(usage.get("completion_tokens") or 0)
        reasoning = int((usage.get("completion_tokens_details") or {})
                        .get("reasoning_tokens") or 0)
        if reasoning and usage.get("total_tokens") == prompt + output + reasoning:
            output += reasoning  # xAI bills reasoning tokens outside completion_tokens
        self.out.set_usage(input=max(prompt - cache_read - cache_write, 0), output=output,
                           cache_read=cache_read, cache_write=cache_write)

    def finish(self, compat: OpenAICompat) -> None:
        out = self.out
        if self.details:
            signature = json.dumps(self.details)
            if self.thinking is None:
                self.thinking = out.open_thinking()
            out.block(self.thinking).thinking_signature = signature
        has_tools = bool(self.tools_by_index or self.tools_by_id)
        reason = self.finish_reason
        if reason is None:
            # ``[DONE]`` is the end of a complete answer even without a finish_reason
            # (Snowflake Cortex never sends one); without it the connection closed early
            if compat.supports_finish_reason and not self.done:
                msg = (f"The {self.label} stream ended without finish_reason (the connection "
                       "closed early). Retry the request.")
                raise ProviderError(msg)
            reason = "tool_calls" if has_tools else "stop"
        stop = _STOP_REASONS.get(reason)
        if stop is None:
            raise ProviderError(f"Provider finish_reason: {reason}")
        if stop == "stop" and has_tools:
            stop = "toolUse"  # some servers say "stop" after tool calls
        out.close_open_blocks()
        out.finish(stop)


def _event_error(data: str) -> str:
    """The readable text of an ``event: error`` body (JSON with an ``error`` object)."""
    try:
        payload = json.loads(data)
    except ValueError:
        return clip(data, MESSAGE_BODY_LIMIT)
    if isinstance(payload, dict):
        return _error_text(payload.get("error") or payload)
    return clip(data, MESSAGE_BODY_LIMIT)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        message = str(error.get("message") or json.dumps(error))
        code = error.get("code") or error.get("type")
        metadata = error.get("metadata")
        if isinstance(metadata, dict) and metadata.get("raw"):
            message = f"{message} ({metadata['raw']})"
        return f"{message} ({code})" if code and str(code) not in message else message
    return str(error)
