"""``openai-completions``: OpenAI Chat Completions and every compatible server.

Ollama, vLLM, llama.cpp, LM Studio, OpenRouter, Groq, DeepSeek, … differ in small ways;
those are per-model ``compat`` flags (docs/providers.md), detected from the provider and
base URL and overridable with ``Model.compat`` (pi's camelCase keys or snake_case). This
module maps the request side of the wire format; the response side is
``_completions_stream``; transport, retries and abort live in ``kit`` (``_call``, ``_start``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import ProviderError
from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
)
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamOptions
from ..transcript import get_current_system_prompt, get_current_tools, get_system_message_text
from ._budget import clamp_max_tokens
from ._compat import OpenAICompat, fold_system_messages, get_compat
from ._completions_stream import CompletionsStreamState, event_error
from ._keys import is_local_url, missing_key_message, provider_label, resolve_api_key
from ._prompt_cache import affinity_headers, anthropic_breakpoints, cache_key, cache_retention
from ._strict import strict_sampling
from ._thinking_formats import add_reasoning
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
    ProviderCall,
    arguments_json,
    start_stream,
)

__all__ = ["OpenAICompat", "build_completions_request", "get_compat", "stream_openai_completions"]

API = "openai-completions"
_CLIENT = HttpClient(API)


# --- the request ----------------------------------------------------------------------------


def build_completions_request(model: Model, messages: Sequence[AgentMessage],
                              options: StreamOptions, compat: OpenAICompat | None = None,
                              *, wire_messages: list[dict[str, Any]] | None = None,
                              max_tokens: int | None = None) -> dict[str, Any]:
    """The JSON body of ``POST {base_url}/chat/completions`` for a transformed transcript.

    ``wire_messages``: the messages already converted (see ``_convert``). ``max_tokens``:
    the output limit, by default ``clamp_max_tokens`` of ``messages`` (sent on every request).
    """
    compat = compat or get_compat(model)
    if wire_messages is None:
        wire_messages = _wire_messages(model, messages, compat)
    body: dict[str, Any] = {"model": model.id, "messages": wire_messages, "stream": True}
    if compat.supports_usage_in_streaming:
        body["stream_options"] = {"include_usage": True}
    if compat.supports_store:
        body["store"] = False
    tools = (get_current_tools(messages) if not _tool_additions(compat)
             else get_current_tools(_folded_system_messages(messages)[0]))
    if tools:
        body["tools"] = _wire_tools(tools, compat)
        if compat.zai_tool_stream:
            body["tool_stream"] = True  # z.ai streams tool-call arguments only when asked
    elif compat.requires_tools_with_tool_history and _has_tool_history(messages):
        body["tools"] = []  # older LiteLLM proxies reject tool history without a tools list
    body[compat.max_tokens_field] = max_tokens if max_tokens is not None else \
        clamp_max_tokens(model, messages, options.max_tokens or model.max_tokens)
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.session_id or options.cache_retention or options.env is not None \
            or "PI_CACHE_RETENTION" in os.environ:
        _add_prompt_cache(body, model, options, compat)
    if compat.cache_control_format == "anthropic":
        retention = cache_retention(options)
        if retention != "none":
            anthropic_breakpoints(body, {"type": "ephemeral", "ttl": "1h"} if retention ==
                                  "long" and compat.supports_long_cache_retention
                                  else {"type": "ephemeral"})
    if model.reasoning:
        add_reasoning(body, model, options.reasoning, compat)
    if options.sampling_params:
        body.update(options.sampling_params)
    return body


def _add_prompt_cache(body: dict[str, Any], model: Model, options: StreamOptions,
                      compat: OpenAICompat) -> None:
    """``prompt_cache_key`` (the session id, per ``prompt_cache_key_mode``) and
    ``prompt_cache_retention`` (long retention), as pi-ai 1.6.1."""
    retention = cache_retention(options)
    long = retention == "long" and compat.supports_long_cache_retention
    mode = compat.prompt_cache_key_mode
    if options.session_id and retention != "none" and (mode == "enabled" or (
            mode == "auto" and ("api.openai.com" in model.base_url or long))):
        body["prompt_cache_key"] = cache_key(options.session_id)
    if long:
        body["prompt_cache_retention"] = "24h"


def _wire_tools(tools: Sequence[ToolDeclaration], compat: OpenAICompat
                ) -> list[dict[str, Any]]:
    wire_tools = []
    supports = compat.supports_strict_mode
    for tool in tools:
        strict = (strict_sampling(tool, supports)
                  if tool.constrained_sampling is not None else None)
        function: dict[str, Any] = {
            "name": tool.name, "description": tool.description,
            "parameters": strict or tool.parameters or {"type": "object"}}
        if supports:
            function["strict"] = strict is not None
        wire_tools.append({"type": "function", "function": function})
    return wire_tools


def _tool_additions(compat: OpenAICompat) -> bool:
    return compat.supports_mid_convo_system_messages and \
        compat.supports_mid_convo_tool_additions


def _folded_system_messages(messages: Sequence[AgentMessage]
                            ) -> tuple[list[SystemMessage], int]:
    """The system messages whose tools are the request's ``tools`` (pi-ai 1.6.1's
    ``resolveTranscriptTools``, "additions"): the leading one and every one up to the last
    that removes or redefines a tool; and how many system messages that is."""
    systems = [m for m in messages if isinstance(m, SystemMessage)]
    declared: set[str] = set()
    last = -1
    for index, system in enumerate(systems):
        if system.tools_removed:
            last = index
        for tool in system.tools_added or []:
            if tool.name in declared:
                last = index
            declared.add(tool.name)
    folded = max(1 if messages and isinstance(messages[0], SystemMessage) else 0, last + 1)
    return systems[:folded], folded


def _has_tool_history(messages: Sequence[AgentMessage]) -> bool:
    """A tool result, or an assistant message with a tool call, is in ``messages``."""
    for message in messages:
        if isinstance(message, ToolResultMessage):
            return True
        if isinstance(message, AssistantMessage) and any(
                isinstance(block, ToolCall) for block in message.content):
            return True
    return False


def _system_role(model: Model, compat: OpenAICompat) -> str:
    return "developer" if model.reasoning and compat.supports_developer_role else "system"


def _wire_messages(model: Model, messages: Sequence[AgentMessage],
                   compat: OpenAICompat, keep: bool = True) -> list[dict[str, Any]]:
    role = _system_role(model, compat)
    out: list[dict[str, Any]] = []
    additions = _tool_additions(compat)
    folded = _folded_system_messages(messages)[1] if additions else 0
    system_index = 0
    if additions:  # as pi-ai: the first message is the prompt, every later one an update
        first = messages[0] if messages else None
        start = 1 if isinstance(first, SystemMessage) else 0
        system_index = start
        prompt = get_system_message_text(first) if isinstance(first, SystemMessage) else ""
    elif compat.supports_mid_convo_system_messages:
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
            user = _user_content(message.content, images_ok)
            if user != []:  # nothing left to send (only empty text): no message, as pi
                out.append({"role": "user", "content": user})
        elif isinstance(message, AssistantMessage):
            wire = (_ASSISTANT_WIRE.get(message, variant, lambda m: _assistant(m, compat))
                    if keep else _assistant(message, compat))
            if wire is not None:
                out.append(wire)
        elif isinstance(message, ToolResultMessage):
            out.append(_tool_result(message, compat, pending_images if images_ok else None))
        elif isinstance(message, SystemMessage) and compat.supports_mid_convo_system_messages:
            if additions:
                if system_index >= folded and message.tools_added:
                    out.append({"role": "system",
                                "tools": _wire_tools(message.tools_added, compat)})
                system_index += 1
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

    def convert(part: Sequence[AgentMessage], keep: bool = True) -> list[dict[str, Any]]:
        return _wire_messages(model, transform_messages(part, model, normalize), compat, keep)

    # without mid-conversation system messages every later one folds into the head first
    # (pi's resolveTranscript); what is left converts the same in segments
    messages = fold_system_messages(model, messages, compat.supports_mid_convo_system_messages)
    if _tool_additions(compat) and any(isinstance(m, SystemMessage) for m in messages[1:]):
        return convert(messages)  # where the tools fold depends on every system message
    variant = (model.provider, model.api, model.id, tuple(model.input), compat)
    # what the segment cache keeps skips the per-message cache (it holds the conversion);
    # a transcript converted whole keeps its assistant messages' there
    return _SEGMENTS.convert(messages, variant, convert,
                             lambda part: renames_tool_call_ids(part, model, normalize),
                             lambda part: convert(part, False))


def _user_content(content: str | list[Any], images_ok: bool) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []  # a list stays a list, one text block included (as pi)
    for block in content:
        if isinstance(block, TextContent):
            if block.text:
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
    if wire["content"] is None and (compat.requires_assistant_after_tool_result
                                    or compat.requires_non_null_assistant_content):
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


# --- the stream function (the response mapping is ``_completions_stream``) --------------------


def stream_openai_completions(model: Model | None, context: Context,
                              options: StreamOptions | None = None
                              ) -> AssistantMessageEventStream:
    """The ``openai-completions`` stream function (a ``StreamFn``; never raises)."""
    label = provider_label(model.provider) if model is not None else "OpenAI"
    return start_stream(model, options, _run, context=context, client=_CLIENT, api=API,
                        label=label)


def _run(call: ProviderCall) -> Iterator[None]:
    model = call.model
    options = call.options
    api_key = resolve_api_key(model.provider, options.api_key, options.env)
    headers: dict[str, str | None] = {}
    if api_key:
        call.add_secret(api_key)
        headers["Authorization"] = f"Bearer {api_key}"
    elif model.provider in ("openai", "openrouter", "groq", "xai", "cerebras", "deepseek",
                            "mistral", "together", "fireworks", "zai", "moonshot") \
            and not is_local_url(model.base_url):
        raise ProviderError(missing_key_message(model.provider), provider=model.provider)
    headers.update(model.headers or {})
    compat = get_compat(model)
    if options.session_id and compat.send_session_affinity_headers \
            and cache_retention(options) != "none":
        headers.update(affinity_headers(options.session_id, compat.session_affinity_format,
                                        completions=True))
    headers.update(options.headers or {})
    body = build_completions_request(model, call.messages, options, compat,
                                     wire_messages=_convert(model, call.messages, compat))
    url = model.base_url.rstrip("/") + "/chat/completions"
    state = CompletionsStreamState(call.out, call.label, openrouter=model.provider == "openrouter"
                                   or "openrouter.ai" in model.base_url)
    parse = call.event_parser()  # parse_event_json unless on_provider_stream_event is set
    request = call.request(url, body, headers, encoder=_BODIES)  # old messages' JSON reused
    # the wire dicts go now, not when the stream ends: with many runs in flight, each one's
    # would outlive a garbage collection or two and make the next full one come sooner
    del body
    try:
        with call.open_sse(request) as sse:
            for event in sse.events():
                if event.data.strip() == "[DONE]":
                    state.done = True
                    break
                if event.event == "error":  # Groq sends these mid-stream
                    raise ProviderError(f"{call.label} stream error: "
                                        f"{event_error(event.data)}", provider=model.provider)
                state.handle(parse(event, call.label))
                yield  # hand the queued events to the consumer
    except BaseException:
        state.apply_details()  # a failed message keeps its replay entries too (as pi's)
        raise
    state.finish(compat)
