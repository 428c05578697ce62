"""Anthropic Messages' SSE events mapped onto the ``MessageBuilder`` (``AnthropicStreamState``):
text, thinking with signatures, redacted thinking, ``input_json`` deltas, usage with cache
and 1-hour cache writes, stop reasons and stream errors in piagent's words."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import ProviderError
from ..messages import StopReason
from ._errors import clip
from .kit import MessageBuilder, SSEEvent, parse_event_json

__all__ = ["AnthropicStreamState"]

_REDACTED_TEXT = "[Reasoning redacted]"
_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
    "tool_use": "toolUse"}


def _provider_error(message: str) -> ProviderError:
    return ProviderError(message, provider="anthropic")


class AnthropicStreamState:
    """Maps Anthropic's SSE events onto the ``MessageBuilder``.

    Thread safety: used only by the worker thread running ``_run``.
    """

    def __init__(self, out: MessageBuilder, label: str,
                 parse: Callable[[SSEEvent, str], Any] = parse_event_json) -> None:
        self.out = out
        self.label = label
        self.parse = parse
        self.blocks: dict[int, int] = {}  # provider block index → content index
        self.started = False
        self.stopped = False
        self.stop_reason: str | None = None
        self.stop_details: Any = None
        self.usage = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0,
                      "reasoning": 0}  # and "cache_write_1h" once reported

    def handle(self, event: SSEEvent) -> None:
        """Apply one event."""
        if event.event == "ping":
            return
        data = self.parse(event, self.label)
        if not isinstance(data, dict):
            return
        kind = data.get("type") or event.event
        if kind == "content_block_delta":
            self._delta(data)
        elif kind == "content_block_start":
            self._block_start(data)
        elif kind == "content_block_stop":
            index = self.blocks.get(data.get("index", -1))
            if index is not None:
                self.out.close_block(index)
        elif kind == "message_start":
            self.started = True
            message = data.get("message") or {}
            model = message.get("model")
            self.out.set_response(response_id=message.get("id"),
                                  model=model if isinstance(model, str) else None)
            self._usage(message.get("usage") or {})
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop_reason = delta["stop_reason"]
                self.stop_details = delta.get("stop_details")
                self.out.set_response(raw_stop_reason=str(delta["stop_reason"]))
            self._usage(data.get("usage") or {})
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise _provider_error(_stream_error_text(data))

    def _block_start(self, data: dict[str, Any]) -> None:
        block = data.get("content_block") or {}
        btype = block.get("type")
        out = self.out
        if btype == "text":
            index = out.open_text()
            if block.get("text"):
                out.add_text(index, block["text"])
        elif btype == "thinking":
            index = out.open_thinking(block.get("signature") or None)
            if block.get("thinking"):
                out.add_thinking(index, block["thinking"])
        elif btype == "redacted_thinking":
            index = out.open_thinking(block.get("data") or "", redacted=True)
            if not out.ended:  # visible placeholder text; pi sends no delta for it
                out.block(index).thinking = _REDACTED_TEXT
        elif btype == "tool_use":
            initial = block.get("input")
            arguments = json.dumps(initial) if isinstance(initial, dict) and initial else ""
            index = out.open_tool_call(block.get("id") or "", block.get("name") or "",
                                       arguments)
        else:
            return  # server tools and other block kinds are not part of pi's message
        self.blocks[data.get("index", len(self.blocks))] = index

    def _delta(self, data: dict[str, Any]) -> None:
        index = self.blocks.get(data.get("index", -1))
        if index is None or self.out.ended:
            return
        delta = data.get("delta") or {}
        dtype = delta.get("type")
        if dtype == "text_delta":
            self.out.add_text(index, delta.get("text") or "")
        elif dtype == "thinking_delta":
            self.out.add_thinking(index, delta.get("thinking") or "")
        elif dtype == "input_json_delta":
            self.out.add_tool_arguments(index, delta.get("partial_json") or "")
        elif dtype == "signature_delta":
            self.out.set_signature(index, delta.get("signature") or "", append=True)

    def _usage(self, usage: dict[str, Any]) -> None:
        # each field is overwritten only when present (proxies omit the input counts)
        fields = (("input_tokens", "input"), ("output_tokens", "output"),
                  ("cache_read_input_tokens", "cache_read"),
                  ("cache_creation_input_tokens", "cache_write"))
        changed = False
        for wire, ours in fields:
            value = usage.get(wire)
            if isinstance(value, int):
                self.usage[ours] = value
                changed = True
        creation = usage.get("cache_creation")
        if isinstance(creation, dict) and isinstance(
                creation.get("ephemeral_1h_input_tokens"), int):
            self.usage["cache_write_1h"] = creation["ephemeral_1h_input_tokens"]
            changed = True
        details = usage.get("output_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("thinking_tokens"), int):
            self.usage["reasoning"] = details["thinking_tokens"]  # a part of output
            changed = True
        if changed:
            self.out.set_usage(**self.usage)

    def finish(self) -> None:
        self.out.close_open_blocks()
        if not self.stopped:
            where = "message_stop" if self.started else "message_start"
            raise _provider_error(f"Anthropic stream ended before {where}. Retry the request.")
        if self.stop_reason is None:
            raise _provider_error("Anthropic stream ended without a stop reason. "
                                  "Retry the request.")
        mapped = _STOP_REASONS.get(self.stop_reason)
        if mapped is None:
            raise _provider_error(self._stop_error_text())
        self.out.finish(mapped)

    def _stop_error_text(self) -> str:
        reason = self.stop_reason
        if reason == "refusal":
            details = self.stop_details if isinstance(self.stop_details, dict) else {}
            explanation = details.get("explanation")
            return str(explanation) if explanation else "The model refused to complete the request"
        if reason == "sensitive":
            return "The response was stopped because it was flagged as sensitive"
        return f"Unhandled stop reason: {reason}"


def _stream_error_text(data: dict[str, Any]) -> str:
    error = data.get("error")
    if isinstance(error, dict):
        etype = error.get("type") or "error"
        message = error.get("message") or json.dumps(error)
        return f"Anthropic stream error ({etype}): {message}"
    return f"Anthropic stream error: {clip(json.dumps(data), 500)}"
