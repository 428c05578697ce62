"""The Anthropic Messages adapter (api ``anthropic-messages``): ``stream_anthropic``.

Owns the wire mapping only: the request body built from a ``Context`` (system prompt,
tools, messages, thinking, prompt caching via ``cache_control``) and the SSE event →
pi event state machine (thinking with signatures, redacted thinking, ``input_json``
deltas, cache usage). Transport, retries, abort and error formatting live in ``kit`` (``_call``, ``_start``);
replay rules (skipped errored turns, orphan tool calls, cross-model thinking) in
``_transform``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
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
    now_ms,
)
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamOptions
from ..transcript import get_current_tools
from ._anthropic_features import (
    BINDING,
    EFFORTS,
    PLACEHOLDER,
    feature_betas,
    insert_effort_markers,
    managed_effort,
    native_tool_changes,
    set_fallbacks,
)
from ._anthropic_stream import AnthropicStreamState
from ._anthropic_thinking import thinking_config
from ._anthropic_tools import convert_tools
from ._budget import clamp_max_tokens
from ._compat import fold_system_messages, supports_mid_convo_system_messages
from ._keys import is_local_url, key_owner, missing_key_message, resolve_api_key
from ._prompt_cache import anthropic_affinity_header, cache_retention, compat_value
from ._strict import is_strict_limit_error, mark_over_strict_limits, over_strict_limits
from ._transform import (
    SegmentCache,
    WireCache,
    leading_prompt,
    leading_system_text,
    renames_tool_call_ids,
    system_update_text,
    transform_messages,
)
from ._wire import PrefixEncoder
from .kit import (
    HttpClient,
    ProviderCall,
    start_stream,
)

__all__ = ["build_anthropic_headers", "build_anthropic_request", "stream_anthropic"]

API = "anthropic-messages"
LABEL = "Anthropic"
ANTHROPIC_VERSION = "2023-06-01"
_CLIENT = HttpClient("anthropic")

# pi's default thinking budgets (tokens) for models with budget-based thinking
_INVALID_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
ToolDefs = Callable[[Sequence[ToolDeclaration]], list[dict[str, Any]]]


def stream_anthropic(model: Model | None, context: Context,
                     options: StreamOptions | None = None) -> AssistantMessageEventStream:
    """Stream one response from the Anthropic Messages API (a ``StreamFn``).

    The key comes from ``options.api_key``, else ``ANTHROPIC_API_KEY``. Never raises:
    HTTP, stream and transport failures end the stream with an ``ErrorEvent`` whose
    message never contains the key; an abort ends it ``"aborted"`` with the partial
    content kept.
    """
    return start_stream(model, options, _run, context=context, client=_CLIENT, api=API,
                        label=LABEL)


# --- the request --------------------------------------------------------------------------


def _normalize_tool_call_id(call_id: str) -> str:
    """Anthropic ids must match ``^[a-zA-Z0-9_-]+$`` and be at most 64 characters."""
    cleaned = _INVALID_ID_CHARS.sub("_", call_id)[:64]
    return cleaned or "tool_call"


def build_anthropic_request(model: Model, messages: Sequence[AgentMessage],
                            options: StreamOptions, *, relax_strict: bool = False
                            ) -> dict[str, Any]:
    """The JSON body of a streaming ``POST /v1/messages`` for a context's messages.

    The transcript is first made safe to replay (``_transform.transform_messages``).
    ``relax_strict``: send the tools that only prefer strict sampling plain (``_strict``).
    """
    max_tokens = clamp_max_tokens(model, messages, options.max_tokens or model.max_tokens)
    messages = fold_system_messages(model, messages)
    cache = _cache_control(model, options)
    system_prompt = leading_prompt(messages, model, _normalize_tool_call_id)
    native = native_tool_changes(model, messages)
    first = messages[0] if native else None
    tools = (first.tools_added or [] if isinstance(first, SystemMessage)
             else get_current_tools(messages))
    body: dict[str, Any] = {"model": model.id, "stream": True}
    thinking = thinking_config(model, options, max_tokens, messages)
    managed = managed_effort(model)
    active = None
    if thinking is None and model.reasoning \
            and (model.thinking_level_map or {}).get("off", "") is not None:
        # said, not left to the model's default; not for a model that cannot stop thinking
        # (the catalogue's thinkingLevelMap has "off": null)
        body["thinking"] = {"type": "disabled"}
    elif managed:  # the level goes in effort markers (_anthropic_features)
        active = "high"
        if thinking is not None:
            config, max_tokens = thinking
            active = config.get("output_config", {}).get("effort", "high")
        body["thinking"] = {"type": "adaptive", "display": "summarized",
                            "block_binding": BINDING}
        body["output_config"] = {"effort": "low"}
    elif thinking is not None:
        config, max_tokens = thinking
        body.update(config)
    body["max_tokens"] = max_tokens
    if system_prompt:
        block: dict[str, Any] = {"type": "text", "text": system_prompt}
        if cache is not None:
            block["cache_control"] = cache
        body["system"] = [block]
    levels: dict[int, str] | None = {} if active is not None else None
    tool_defs = (lambda added: convert_tools(model, added, None, relax_strict=relax_strict)) \
        if native else None
    body["messages"] = _with_cache_breakpoint(_convert(model, messages, levels, tool_defs),
                                              cache)
    if levels is not None and active is not None:
        body["messages"] = insert_effort_markers(body["messages"], levels, active)
    if tools:
        body["tools"] = convert_tools(model, tools, cache, relax_strict=relax_strict)
    if native:
        body["tools"] = [*body.get("tools", []), PLACEHOLDER]
    if options.temperature is not None and thinking is None and not managed \
            and (model.compat or {}).get("supportsTemperature", True):
        body["temperature"] = options.temperature
    user_id = (options.metadata or {}).get("user_id")
    if isinstance(user_id, str):
        body["metadata"] = {"user_id": user_id}
    set_fallbacks(body, model)
    return body


def _cache_control(model: Model, options: StreamOptions) -> dict[str, str] | None:
    retention = cache_retention(options)
    if retention == "none":
        return None
    if retention == "long" and compat_value(model.compat, "supportsLongCacheRetention",
                                            "supports_long_cache_retention", True):
        return {"type": "ephemeral", "ttl": "1h"}
    return {"type": "ephemeral"}


_ASSISTANT_WIRE = WireCache()  # an assistant message's content blocks, while it is unchanged


def _convert_messages(messages: Sequence[AgentMessage], keep: bool = True,
                      levels: dict[int, str] | None = None, provider: str = "",
                      tool_defs: ToolDefs | None = None, allow_empty: bool = False
                      ) -> list[dict[str, Any]]:
    """``levels``: filled with the index of each answer of ``provider`` that recorded its
    effort, and the effort (managed effort); ``tool_defs``: the tools a system message
    adds and removes as ``tool_addition`` / ``tool_removal`` blocks (native tool changes);
    ``allow_empty``: unsigned thinking replays as thinking with an empty signature
    (``allowEmptySignature``: servers that emit and accept them)."""
    out: list[dict[str, Any]] = []
    # later system messages (only with supportsMidConvoSystemMessages: else they were folded)
    # are native system messages, held back until the next assistant message, as pi sends
    # them (a tool_result must follow its tool_use directly)
    pending: list[dict[str, Any]] = []
    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        if isinstance(message, UserMessage):
            content = _user_content(message.content)
            if content:
                out.append({"role": "user", "content": content})
        elif isinstance(message, AssistantMessage):
            out.extend(pending)
            pending.clear()
            build = _empty_signed_blocks if allow_empty else _assistant_blocks
            blocks = _ASSISTANT_WIRE.get(message, allow_empty, build) if keep else build(message)
            if blocks:
                if levels is not None and message.api == API and message.provider == provider \
                        and message.provider_thinking_level in EFFORTS:
                    levels[len(out)] = message.provider_thinking_level
                out.append({"role": "assistant", "content": blocks})
        elif isinstance(message, ToolResultMessage):
            # consecutive tool results travel in one user message
            results: list[dict[str, Any]] = []
            while i < n:
                result = messages[i]
                if not isinstance(result, ToolResultMessage):
                    break
                results.append(_tool_result_block(result))
                i += 1
            out.append({"role": "user", "content": results})
            continue
        elif isinstance(message, SystemMessage):
            text = system_update_text(message)
            system = [{"type": "text", "text": text}] if text else []
            if tool_defs is not None:
                system += _tool_changes(message, tool_defs)
            if system:
                pending.append({"role": "system", "content": system})
        i += 1
    out.extend(pending)
    return out


def _tool_changes(message: SystemMessage, tool_defs: ToolDefs) -> list[dict[str, Any]]:
    added = message.tools_added or []
    redefined = {tool.name for tool in added}  # a new definition replaces the old one
    blocks = [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": name}}
              for name in message.tools_removed or [] if name not in redefined]
    blocks += [{"type": "tool_addition", "tool": {"type": "tool_definition", "definition": d}}
               for d in (tool_defs(added) if added else [])]
    return blocks


_SEGMENTS = SegmentCache()  # converted transcript segments, reused across requests
_BODIES = PrefixEncoder()  # the JSON of converted messages, reused across requests


def _convert(model: Model, messages: Sequence[AgentMessage],
             levels: dict[int, str] | None = None,
             tool_defs: ToolDefs | None = None) -> list[dict[str, Any]]:
    """The transcript after its leading system messages, transformed and converted; the
    part an earlier request shared is reused (``SegmentCache``)."""

    def convert(part: Sequence[AgentMessage], keep: bool = True) -> list[dict[str, Any]]:
        transformed = transform_messages(part, model, _normalize_tool_call_id)
        _, leading = leading_system_text(transformed)
        return _convert_messages(transformed[leading:], keep, levels, model.provider,
                                 tool_defs, allow_empty)

    allow_empty = bool((model.compat or {}).get("allowEmptySignature"))

    if levels is not None or supports_mid_convo_system_messages(model) and any(
            isinstance(m, SystemMessage) for m in messages[1:]):
        # a native system message waits for the next assistant message, across segment
        # boundaries; effort markers need each answer's place: converted whole (only with
        # the compat on)
        return convert(messages)
    variant = (model.provider, model.api, model.id, tuple(model.input), allow_empty)
    # what the segment cache keeps skips the per-message cache (as in openai_completions)
    return _SEGMENTS.convert(
        messages, variant, convert,
        lambda part: renames_tool_call_ids(part, model, _normalize_tool_call_id),
        lambda part: convert(part, False))


def _with_cache_breakpoint(out: list[dict[str, Any]],
                           cache: dict[str, str] | None) -> list[dict[str, Any]]:
    """Mark the last user (or system) message for prompt caching, on a copy (the rest is
    shared)."""
    if cache is None or not out or out[-1]["role"] not in ("user", "system"):
        return out
    last = out[-1]
    content = last["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    out[-1] = {**last, "content": [*content[:-1], {**content[-1], "cache_control": cache}]}
    return out


def _image_block(image: ImageContent) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": image.mime_type,
                                        "data": image.data}}


def _user_content(content: str | Sequence[Any]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content if content.strip() else ""
    blocks: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent):
            if block.text.strip():  # the API rejects empty text blocks
                blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            blocks.append(_image_block(block))
    return blocks


def _empty_signed_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    return _assistant_blocks(message, True)


def _assistant_blocks(message: AssistantMessage, allow_empty: bool = False
                      ) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            if block.text.strip():
                blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingContent):
            if block.redacted:
                if block.thinking_signature:
                    blocks.append({"type": "redacted_thinking", "data": block.thinking_signature})
            elif block.thinking_signature:
                blocks.append({"type": "thinking", "thinking": block.thinking,
                               "signature": block.thinking_signature})
            elif block.thinking.strip():
                # unsigned thinking (aborted stream, other provider) cannot be replayed as such
                blocks.append({"type": "thinking", "thinking": block.thinking, "signature": ""}
                              if allow_empty else {"type": "text", "text": block.thinking})
        elif isinstance(block, ToolCall):
            blocks.append({"type": "tool_use", "id": _normalize_tool_call_id(block.id),
                           "name": block.name, "input": block.arguments})
    return blocks


def _tool_result_block(result: ToolResultMessage) -> dict[str, Any]:
    texts = [b.text for b in result.content if isinstance(b, TextContent)]
    images = [b for b in result.content if isinstance(b, ImageContent)]
    content: str | list[dict[str, Any]]
    if not images:
        content = "\n".join(texts)
    else:
        content = [{"type": "text", "text": t} for t in texts if t.strip()]
        if not content:
            content.append({"type": "text", "text": "(see attached image)"})
        content.extend(_image_block(image) for image in images)
    block: dict[str, Any] = {"type": "tool_result",
                             "tool_use_id": _normalize_tool_call_id(result.tool_call_id),
                             "content": content}
    block["is_error"] = bool(result.is_error)  # false too, as pi sends it
    return block


def build_anthropic_headers(model: Model, options: StreamOptions, api_key: str | None,
                            body: dict[str, Any]) -> dict[str, str | None]:
    """The request headers: key, API version, betas, then model and option headers."""
    headers: dict[str, str | None] = {"anthropic-version": ANTHROPIC_VERSION}
    if api_key and model.provider == "github-copilot":  # a Copilot token is a bearer token
        headers["Authorization"] = f"Bearer {api_key}"
    elif api_key:
        headers["x-api-key"] = api_key
    betas = []
    if body.get("tools") and (model.compat or {}).get("supportsEagerToolInputStreaming") is False:
        betas.append("fine-grained-tool-streaming-2025-05-14")  # streamed arguments without it
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        # lets budget-thinking models think between tool calls
        betas.append("interleaved-thinking-2025-05-14")
    betas += feature_betas(model, body)
    if betas:
        headers["anthropic-beta"] = ",".join(betas)
    if options.session_id:
        headers.update(anthropic_affinity_header(model, options))
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    return headers



# --- the response -------------------------------------------------------------------------


def _run(call: ProviderCall) -> Iterator[None]:
    owner = key_owner(call.model.provider, "anthropic")
    api_key = resolve_api_key(owner, call.options.api_key, call.options.env)
    if api_key:
        call.add_secret(api_key)
    elif not is_local_url(call.model.base_url):  # local Anthropic-compatible servers need none
        raise _provider_error(missing_key_message(owner))
    session_id = call.options.session_id
    relax = over_strict_limits(session_id)
    body = build_anthropic_request(call.model, call.messages, call.options, relax_strict=relax)
    headers = build_anthropic_headers(call.model, call.options, api_key, body)
    if (body.get("thinking") or {}).get("block_binding") is not None:
        # managed effort: the answer records the level of the last marker
        call.out.message.provider_thinking_level = body["messages"][-1]["output_config"][
            "effort"]
    url = call.model.base_url.rstrip("/") + "/v1/messages"
    # the parser: parse_event_json unless on_provider_stream_event is set
    state = AnthropicStreamState(call.out, call.label, call.event_parser())
    request = call.request(url, body, headers, encoder=_BODIES, replaced={"stream": True})
    try:
        response = call.open_sse(request)
    except ProviderError as error:
        # Claude refused the number of strict tools: again with the "prefer" ones plain,
        # and so for the rest of the session (pi-ai 1.6)
        relaxed = None if relax or error.status_code != 400 or not is_strict_limit_error(
            str(error)) else build_anthropic_request(call.model, call.messages, call.options,
                                                     relax_strict=True)
        if relaxed is None or relaxed.get("tools") == body.get("tools"):
            raise
        mark_over_strict_limits(session_id)
        call.out.add_diagnostic({"type": "anthropic_strict_tools_fallback",
                                 "timestamp": now_ms(), "error": {"message": str(error)},
                                 "details": {"reason": "strict_tool_limits_exceeded"}})
        response = call.open_sse(call.request(url, relaxed, headers, encoder=_BODIES,
                                              replaced={"stream": True}))
    with response as sse:  # _BODIES: the old messages' JSON reused
        for event in sse.events():
            state.handle(event)
            if state.stopped:
                break  # leaving the block drains the body's end, keeping the connection
            yield  # hand the queued events to the consumer
    state.finish()


def _provider_error(message: str) -> ProviderError:
    return ProviderError(message, provider="anthropic")
