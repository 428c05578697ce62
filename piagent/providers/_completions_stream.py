"""Chat Completions chunks onto pi's assistant events (``openai-completions``).

Text, thinking (the ``reasoning_*`` fields, OpenRouter's ``reasoning_details``, Mistral's
typed parts), tool calls by index or id, usage, finish reasons and the error shapes of
the compatible servers. The request side and the stream function are in
``openai_completions``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import ProviderError
from ..messages import StopReason, TextContent, ToolCall
from ._compat import OpenAICompat
from ._errors import MESSAGE_BODY_LIMIT, clip
from .kit import MessageBuilder

__all__ = ["CompletionsStreamState", "event_error"]

_STOP_REASONS: dict[str, StopReason] = {"stop": "stop", "end": "stop", "length": "length",
                                        "tool_calls": "toolUse", "function_call": "toolUse"}
_REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_text")
_REASONING_KEYS = frozenset((*_REASONING_FIELDS, "reasoning_details"))



class CompletionsStreamState:
    """Maps chunks onto the builder (pi new: blocks stay open until the stream ends).

    Thread safety: used only by the worker thread.
    """

    def __init__(self, out: MessageBuilder, label: str, *, openrouter: bool = False) -> None:
        self.out = out
        self.label = label
        self.openrouter = openrouter  # read OpenRouter's native_finish_reason
        self.native_reason: str | None = None
        self.text: int | None = None
        self.thinking: int | None = None
        self.tools_by_index: dict[int, int] = {}
        self.tools_by_id: dict[str, int] = {}
        self.details: list[Any] = []
        self.finish_reason: str | None = None
        self.done = False  # the server sent ``data: [DONE]``
        self.identified = False  # the response's id (and model) are recorded

    def handle(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            return
        if not self.identified:
            self._identify(chunk)
        error = chunk.get("error")
        if error or chunk.get("object") == "error":
            # OpenRouter sends the error object in a chunk that also has ``choices``
            usage = self._usage_of(chunk)
            if usage:
                self._usage(usage, chunk)  # what the failed request was billed
            raise ProviderError(f"{self.label} stream error: {_error_text(error or chunk)}")
        usage = chunk.get("usage")
        if not usage:
            groq = chunk.get("x_groq")
            usage = groq.get("usage") if groq else None
        for choice in chunk.get("choices") or ():
            usage = usage or choice.get("usage")
            delta = choice.get("delta")
            if delta:  # the delta, here rather than in a method: this runs per chunk
                if not _REASONING_KEYS.isdisjoint(delta):  # one test for the rare fields
                    self._reasoning(delta)
                content = delta.get("content")  # after the same chunk's reasoning (pi-ai)
                if content:
                    if isinstance(content, list):  # Mistral (magistral): typed parts
                        for part in content:
                            self._content_part(part)
                    else:
                        self._add_text(str(content))
                tools = delta.get("tool_calls")
                if tools:
                    for tool in tools:
                        self._tool_delta(tool)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = reason
                self.out.set_response(raw_stop_reason=str(reason))
                if self.openrouter:
                    native = choice.get("native_finish_reason")
                    if isinstance(native, str) and native:
                        self.native_reason = native
            break  # only the first choice is used
        if usage and isinstance(usage, dict):
            self._usage(usage, chunk)

    def _identify(self, chunk: dict[str, Any]) -> None:
        """The response's id and the model the server says answered (the first chunk with
        an id: every chunk of a completion repeats them)."""
        response_id = chunk.get("id")
        if isinstance(response_id, str) and response_id:
            self.identified = True
            model = chunk.get("model")
            self.out.set_response(response_id=response_id,
                                  model=model if isinstance(model, str) else None)

    def _usage_of(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        usage = chunk.get("usage") or (chunk.get("x_groq") or {}).get("usage")
        for choice in chunk.get("choices") or ():
            usage = usage or choice.get("usage")
            break
        return usage if isinstance(usage, dict) else None

    def _reasoning(self, delta: dict[str, Any]) -> None:
        """A delta's thinking: the first reasoning field present, then replay entries."""
        for name in _REASONING_FIELDS:
            piece = delta.get(name)
            if piece:
                self._add_thinking(piece, name)
                break
        details = delta.get("reasoning_details")
        if isinstance(details, list):
            self._reasoning_details(details)

    def _reasoning_details(self, details: list[Any]) -> None:
        """OpenRouter-style replay entries: the thinking block opens where the first arrives
        (before any text), and the streamed fragments of one entry are joined into one."""
        for detail in details:
            if not _is_detail(detail):
                continue
            if self.thinking is None:
                self.thinking = self.out.open_thinking(signature="")
            _append_detail(self.details, detail)

    def apply_details(self) -> None:
        """Write the collected ``reasoning_details`` into the thinking block's signature
        (pi's JSON: compact, non-ASCII kept); at the end of the stream, whole or failed."""
        if self.details and self.thinking is not None:
            signature = json.dumps(self.details, separators=(",", ":"), ensure_ascii=False)
            self.out.block(self.thinking).thinking_signature = signature

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
                        .get("reasoning_tokens") or usage.get("reasoning_tokens") or 0)
        if reasoning and usage.get("total_tokens") == prompt + output + reasoning:
            output += reasoning  # xAI bills reasoning tokens outside completion_tokens
        self.out.set_usage(input=max(prompt - cache_read - cache_write, 0), output=output,
                           cache_read=cache_read, cache_write=cache_write,
                           billed=_billed(usage) if self.openrouter else None,
                           reasoning=reasoning)

    def finish(self, compat: OpenAICompat) -> None:
        out = self.out
        self.apply_details()
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
        native = self.native_reason
        if native is not None and native != reason:
            # OpenRouter's upstream reason: "stop.MALFORMED_RESPONSE" (pi-ai 1.6)
            out.set_response(raw_stop_reason=f"{reason}.{native}")
        if stop is None:
            msg = f"Provider finish_reason: {reason}"
            if native is not None and native != reason:
                msg += f" (native_finish_reason: {native})"
            raise ProviderError(msg)
        if stop == "stop" and has_tools:
            stop = "toolUse"  # some servers say "stop" after tool calls
        if (stop == "stop" and native is not None
                and native.lower() not in _CLEAN_NATIVE_STOPS and not _visible(out)):
            # OpenRouter reports an upstream failure it has no case for as "stop": without
            # visible output and a clean native reason it is an error (pi-ai 1.6), retryable
            msg = f"OpenRouter returned an empty response (native_finish_reason: {native})"
            raise ProviderError(msg)
        out.close_open_blocks()
        out.finish(stop)


# OpenRouter's native finish reasons that are a clean stop (pi-ai 1.6.1's allowlist: a
# missing one costs a retry of an empty turn, a missing failure would end a turn silently)
_CLEAN_NATIVE_STOPS = frozenset(("stop", "end_turn", "stop_sequence", "eos", "complete",
                                 "completed", "pause_turn", "compaction", "end_of_stream"))


def _cost(value: Any) -> float | None:
    """A valid reported cost (a finite number >= 0) as a float, else ``None``."""
    if (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0):
        return float(value)
    return None


def _billed(usage: dict[str, Any]) -> float | None:
    """What OpenRouter reports it charged (pi-ai 1.6): ``cost`` when not BYOK; with BYOK
    ``cost`` plus the upstream inference cost; ``None`` when the accounting is incomplete."""
    cost, byok = _cost(usage.get("cost")), usage.get("is_byok")
    if cost is None:
        return None
    if byok is False:
        return cost
    details = usage.get("cost_details")
    if byok is not True or not isinstance(details, dict):
        return None
    raw = details.get("upstream_inference_cost")
    if raw is None and "upstream_inference_cost" in details:  # null: the sum of the two parts
        prompt = _cost(details.get("upstream_inference_prompt_cost"))
        completion = _cost(details.get("upstream_inference_completions_cost"))
        if prompt is None or completion is None:
            return None
        return cost + prompt + completion
    upstream = _cost(raw)
    return None if upstream is None else cost + upstream


def _visible(out: MessageBuilder) -> bool:
    """Text that is not blank, or a tool call (thinking does not count)."""
    return any(isinstance(b, ToolCall) or (isinstance(b, TextContent) and b.text.strip())
               for b in out.message.content)


_DETAIL_FIELDS = {"reasoning.text": "text", "reasoning.summary": "summary",
                  "reasoning.encrypted": "data"}


def _is_detail(detail: Any) -> bool:
    """A ``reasoning_details`` entry pi-ai keeps: a known type with its string payload."""
    if not isinstance(detail, dict):
        return False
    field = _DETAIL_FIELDS.get(detail.get("type"))  # type: ignore[arg-type]
    if field is None or not isinstance(detail.get(field), str):
        return False
    ident, fmt, index = detail.get("id"), detail.get("format", ""), detail.get("index")
    return ((ident is None or isinstance(ident, str)) and isinstance(fmt, str)
            and (index is None or (isinstance(index, int) and not isinstance(index, bool))))


def _append_detail(details: list[dict[str, Any]], detail: dict[str, Any]) -> None:
    """Consecutive text (or summary) fragments are one entry; encrypted ones stay apart."""
    kind = detail["type"]
    last = details[-1] if details else None
    if last is None or kind == "reasoning.encrypted" or last.get("type") != kind:
        details.append(dict(detail))
        return
    field = _DETAIL_FIELDS[kind]
    last[field] += detail[field]
    # pi-ai's `||=` (signature, format: replaced when empty) and `??=` (id, index: when
    # missing); a key the newer fragment lacks is then dropped, as JSON.stringify drops it
    for key, empty in (("signature", not last.get("signature") and kind == "reasoning.text"),
                       ("format", not last.get("format")), ("id", last.get("id") is None),
                       ("index", last.get("index") is None)):
        if empty:
            if key in detail:
                last[key] = detail[key]
            else:
                last.pop(key, None)


def event_error(data: str) -> str:
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
