"""``mistral-conversations``: Mistral's own chat API (``POST {base_url}/v1/chat/completions``).

The request and stream as pi-ai 1.6.1's adapter speaks them: typed content parts (text,
``thinking`` parts holding text chunks, ``image_url``), assistant turns replayed with
``prefix: false``, tool results as ``role: tool`` with their name, tool-call ids of exactly nine
letters and digits, ``reasoning_effort`` (a model with a thinking-level map) or
``prompt_mode: "reasoning"`` (any other reasoning model), and the session id as
``prompt_cache_key`` and the ``x-affinity`` header. The stream: Chat Completions chunks whose
``delta.content`` is a string or a list of typed parts. Transport, retries and abort: ``kit``.
"""

from __future__ import annotations

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
    sanitize_surrogates,
)
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamOptions
from ..transcript import get_current_tools
from ._budget import clamp_max_tokens
from ._compat import fold_system_messages
from ._keys import resolve_api_key
from ._strict import strict_sampling
from ._transform import leading_system_text, system_update_text, transform_messages
from .kit import HttpClient, MessageBuilder, ProviderCall, arguments_json, start_stream

__all__ = ["build_mistral_request", "mistral_tool_call_id", "short_hash", "stream_mistral"]

API = "mistral-conversations"
_CLIENT = HttpClient(API)
_ID_LENGTH = 9
_STOP: dict[str, StopReason] = {"stop": "stop", "length": "length", "model_length": "length",
                                "tool_calls": "toolUse"}


def _imul(a: int, b: int) -> int:
    """JavaScript's ``Math.imul``: the low 32 bits of the product, as unsigned."""
    return (a * b) & 0xFFFFFFFF


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


def short_hash(text: str) -> str:
    """pi-ai's ``shortHash`` (two 32-bit multiplicative hashes of the UTF-16 code units,
    in base 36)."""
    h1, h2 = 0xDEADBEEF, 0x41C6CE57
    units = text.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(units), 2):
        ch = units[i] | units[i + 1] << 8
        h1 = _imul(h1 ^ ch, 2654435761)
        h2 = _imul(h2 ^ ch, 1597334677)
    h1 = _imul(h1 ^ (h1 >> 16), 2246822507) ^ _imul(h2 ^ (h2 >> 13), 3266489909)
    h2 = _imul(h2 ^ (h2 >> 16), 2246822507) ^ _imul(h1 ^ (h1 >> 13), 3266489909)
    return _base36(h2) + _base36(h1)


def _derive_id(call_id: str, attempt: int) -> str:
    plain = "".join(c for c in call_id if c.isascii() and c.isalnum())
    if attempt == 0 and len(plain) == _ID_LENGTH:
        return plain
    seed = plain or call_id
    return short_hash(seed if attempt == 0 else f"{seed}:{attempt}")[:_ID_LENGTH]


class _IdNormalizer:
    """Another model's tool-call ids as Mistral's nine characters, distinct within one
    request (pi-ai's normalizer). Used by one request's worker thread only."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}
        self.owners: dict[str, str] = {}

    def __call__(self, call_id: str) -> str:
        found = self.ids.get(call_id)
        if found is not None:
            return found
        attempt = 0
        while True:
            candidate = _derive_id(call_id, attempt)
            owner = self.owners.get(candidate)
            if owner is None or owner == call_id:
                self.ids[call_id] = candidate
                self.owners[candidate] = call_id
                return candidate
            attempt += 1


def mistral_tool_call_id(call_id: str) -> str:
    """``call_id`` as Mistral takes it: nine letters and digits (kept when it already is)."""
    return _derive_id(call_id, 0)


# --- the request ------------------------------------------------------------------------------


def build_mistral_request(model: Model, messages: Sequence[AgentMessage],
                          options: StreamOptions, *, max_tokens: int | None = None
                          ) -> dict[str, Any]:
    """The JSON body of a streaming ``POST /v1/chat/completions`` for a transformed
    transcript (``max_tokens``: the output limit, by default ``clamp_max_tokens``)."""
    images = "image" in model.input
    body: dict[str, Any] = {"model": model.id, "stream": True,
                            "messages": _wire_messages(messages, images)}
    tools = get_current_tools(messages)
    if tools:
        # strict tools only where the compat says so: Mistral Large 4 can go silent for
        # minutes before a strict call (pi-ai #12148)
        supported = bool((model.compat or {}).get("supportsStrictMode", False))
        wire = []
        for tool in tools:
            schema = strict_sampling(tool, supported) \
                if tool.constrained_sampling is not None else None
            wire.append({"type": "function", "function": {
                "name": tool.name, "description": tool.description,
                "parameters": schema or tool.parameters, "strict": schema is not None}})
        body["tools"] = wire
    if options.temperature is not None:
        body["temperature"] = options.temperature
    body["max_tokens"] = max_tokens if max_tokens is not None else \
        clamp_max_tokens(model, messages, options.max_tokens or model.max_tokens)
    level = options.reasoning if options.reasoning != "off" else None
    level_map = model.thinking_level_map if model.reasoning else None
    if level_map is not None:
        effort = (level_map.get(level) or "high") if level else level_map.get("off")
        if effort:
            body["reasoning_effort"] = effort
    elif model.reasoning and level:
        body["prompt_mode"] = "reasoning"
    if _caching(options):
        body["prompt_cache_key"] = options.session_id
    return body


def _caching(options: StreamOptions) -> bool:
    return bool(options.session_id) and options.cache_retention != "none"


def _wire_messages(messages: Sequence[AgentMessage], images: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    prompt, start = leading_system_text(messages)
    if prompt:
        out.append({"role": "system", "content": sanitize_surrogates(prompt)})
    for message in messages[start:]:
        if isinstance(message, SystemMessage):
            text = system_update_text(message)
            if text:
                out.append({"role": "system", "content": sanitize_surrogates(text)})
        elif isinstance(message, UserMessage):
            _user(message, images, out)
        elif isinstance(message, AssistantMessage):
            _assistant(message, out)
        elif isinstance(message, ToolResultMessage):
            out.append(_tool_result(message, images))
    return out


def _image(block: ImageContent) -> dict[str, Any]:
    return {"type": "image_url", "image_url": f"data:{block.mime_type};base64,{block.data}"}


def _user(message: UserMessage, images: bool, out: list[dict[str, Any]]) -> None:
    if isinstance(message.content, str):
        out.append({"role": "user", "content": sanitize_surrogates(message.content)})
        return
    parts: list[dict[str, Any]] = []
    had_images = False
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append({"type": "text", "text": sanitize_surrogates(block.text)})
        elif isinstance(block, ImageContent):
            had_images = True
            if images:
                parts.append(_image(block))
    if parts:
        out.append({"role": "user", "content": parts})
    elif had_images:
        out.append({"role": "user", "content": "(image omitted: model does not support images)"})


def _assistant(message: AssistantMessage, out: list[dict[str, Any]]) -> None:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent):
            if block.text.strip():
                parts.append({"type": "text", "text": sanitize_surrogates(block.text)})
        elif isinstance(block, ThinkingContent):
            if block.thinking.strip():
                parts.append({"type": "thinking", "thinking": [
                    {"type": "text", "text": sanitize_surrogates(block.thinking)}]})
        elif isinstance(block, ToolCall):
            calls.append({"id": block.id, "type": "function", "index": 0, "function": {
                "name": block.name, "arguments": arguments_json(block.arguments or {})}})
    if not parts and not calls:
        return
    item: dict[str, Any] = {"role": "assistant", "prefix": False}
    if parts:
        item["content"] = parts
    if calls:
        item["tool_calls"] = calls
    out.append(item)


def _tool_result(message: ToolResultMessage, images: bool) -> dict[str, Any]:
    text = "\n".join(sanitize_surrogates(b.text) for b in message.content
                     if isinstance(b, TextContent)).strip()
    pictures = [b for b in message.content if isinstance(b, ImageContent)]
    error = "[tool error] " if message.is_error else ""
    if text:
        omitted = "\n[tool image omitted: model does not support images]" \
            if pictures and not images else ""
        text = f"{error}{text}{omitted}"
    elif pictures:
        text = error + ("(see attached image)" if images else
                        "(image omitted: model does not support images)")
    else:
        text = error + "(no tool output)"
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if images:
        content += [_image(b) for b in pictures]
    return {"role": "tool", "tool_call_id": message.tool_call_id, "name": message.tool_name,
            "content": content}


# --- the response -----------------------------------------------------------------------------


def stream_mistral(model: Model | None, context: Context,
                   options: StreamOptions | None = None) -> AssistantMessageEventStream:
    """The ``mistral-conversations`` stream function (a ``StreamFn``; never raises)."""
    return start_stream(model, options, _run, context=context, client=_CLIENT, api=API,
                        label="Mistral")


def _run(call: ProviderCall) -> Iterator[None]:
    model = call.model
    options = call.options
    api_key = resolve_api_key(model.provider, options.api_key, options.env)
    if not api_key:
        raise ProviderError(
            f"No API key for provider: {model.provider}. Pass StreamOptions(api_key=...) or "
            "set MISTRAL_API_KEY (looked for in StreamOptions.env and the environment).",
            provider=model.provider)
    call.add_secret(api_key)
    headers: dict[str, str | None] = {"Authorization": f"Bearer {api_key}"}
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    if _caching(options) and not any(k.lower() == "x-affinity" for k in headers):
        headers["x-affinity"] = options.session_id
    messages = transform_messages(fold_system_messages(model, call.messages), model,
                                  _IdNormalizer(), foreign_thinking_as_text=False)
    limit = clamp_max_tokens(model, call.messages, options.max_tokens or model.max_tokens)
    body = build_mistral_request(model, messages, options, max_tokens=limit)
    url = model.base_url.rstrip("/") + "/v1/chat/completions"
    state = _StreamState(call.out, call.label)
    parse = call.event_parser()
    with call.open_sse(call.request(url, body, headers)) as sse:
        for event in sse.events():
            if event.data.strip() == "[DONE]":
                break
            if not event.data.strip():
                continue
            data = parse(event, call.label)
            if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
                raise ProviderError("Invalid Mistral streaming event", provider=model.provider)
            state.handle(data)
            yield
    state.finish()


class _StreamState:
    """Mistral's chunks onto the builder. Used only by the worker thread."""

    def __init__(self, out: MessageBuilder, label: str) -> None:
        self.out = out
        self.label = label
        self.current: tuple[str, int] | None = None  # ("text" | "thinking", index) open now
        self.calls: dict[Any, int] = {}  # the call's stream index (or id) → content index
        self.stop: StopReason | None = None
        self.error: str | None = None
        self.identified = False  # the response id is the first chunk's (pi-ai: ``||=``)

    def handle(self, chunk: dict[str, Any]) -> None:
        if not self.identified:
            response_id = chunk.get("id")
            if isinstance(response_id, str) and response_id:
                self.identified = True
                self.out.set_response(response_id=response_id)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage(usage)
        choices = chunk["choices"]
        if not choices:
            return
        choice = choices[0]
        reason = choice.get("finish_reason")
        if reason:
            self.out.set_response(raw_stop_reason=str(reason))
            self.stop = _STOP.get(reason, "error")
            self.error = None if reason in _STOP else f"Provider stopped with: {reason}"
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if content is not None:
            for item in [content] if isinstance(content, str) else content:
                if isinstance(item, str):
                    self._add("text", item)
                elif isinstance(item, dict) and item.get("type") == "thinking":
                    self._add("thinking", "".join(
                        p.get("text") or "" for p in item.get("thinking") or ()
                        if isinstance(p, dict)))
                elif isinstance(item, dict) and item.get("type") == "text":
                    self._add("text", item.get("text") or "")
        for call in delta.get("tool_calls") or ():
            self._tool_call(call)

    def _add(self, kind: str, text: str) -> None:
        text = sanitize_surrogates(text)
        if not text:
            return  # GLM on Mistral sends empty deltas around thinking and calls
        out = self.out
        if self.current is None or self.current[0] != kind:
            self._close_current()
            self.current = (kind, out.open_text() if kind == "text" else out.open_thinking())
        if kind == "text":
            out.add_text(self.current[1], text)
        else:
            out.add_thinking(self.current[1], text)

    def _close_current(self) -> None:
        if self.current is not None:
            self.out.close_block(self.current[1])
            self.current = None

    def _tool_call(self, call: dict[str, Any]) -> None:
        self._close_current()
        call_id = call.get("id")
        if not call_id or call_id == "null":
            call_id = _derive_id(f"toolcall:{call.get('index') or 0}", 0)
        key = call.get("index")
        key = call_id if key is None else key
        function = call.get("function") or {}
        arguments = function.get("arguments")
        fragment = arguments if isinstance(arguments, str) else arguments_json(arguments or {})
        index = self.calls.get(key)
        if index is None:
            index = self.calls[key] = self.out.open_tool_call(call_id,
                                                              function.get("name") or "")
        self.out.add_tool_arguments(index, fragment)

    def _usage(self, usage: dict[str, Any]) -> None:
        prompt = int(usage.get("prompt_tokens") or 0)
        cached: Any = None  # the first key present wins, as pi-ai's chain of ``??``
        for details, key in (("promptTokensDetails", "cachedTokens"),
                             ("prompt_tokens_details", "cached_tokens"),
                             ("promptTokenDetails", "cachedTokens"),
                             ("prompt_token_details", "cached_tokens")):
            found = usage.get(details)
            if isinstance(found, dict) and found.get(key) is not None:
                cached = found[key]
                break
        if cached is None:
            cached = usage.get("numCachedTokens", usage.get("num_cached_tokens"))
        cached = int(cached) if isinstance(cached, (int, float)) and cached == cached \
            and abs(cached) != float("inf") else 0
        cached = min(prompt, max(0, cached))
        output = int(usage.get("completion_tokens") or 0)
        self.out.set_usage(input=max(0, prompt - cached), output=output, cache_read=cached,
                           total_tokens=usage.get("total_tokens") or None)

    def finish(self) -> None:
        self._close_current()
        self.out.close_open_blocks()  # the calls end last, as pi-ai ends them
        if self.stop is None:
            raise ProviderError("Mistral stream ended without a finish reason")
        if self.error is not None:
            raise ProviderError(self.error)
        self.out.finish(self.stop)
