"""Gemini's response chunks onto pi's assistant events (``google-generative-ai``).

Thought parts and their signatures, whole function calls and streamed ``partialArgs``,
``usageMetadata``, finish and block reasons, and the bare JSON error tail Gemini appends to
a stream it gives up on. The request side and the stream function are in ``google``.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from ..errors import ProviderError
from ..messages import StopReason, now_ms
from ._errors import clip
from .kit import MessageBuilder, format_http_error

__all__ = ["LABEL", "GoogleStreamState"]

LABEL = "Google"
# CONTINUATION: the per-request token limit was reached with a continuation token; pi-ai 1.6
# reads it as "length" and does not resume (nor does piagent)
_FINISH_REASONS: dict[str, StopReason] = {"STOP": "stop", "MAX_TOKENS": "length",
                                          "CONTINUATION": "length"}
_tool_call_counter = itertools.count(1)  # generated ids; next() on a count is atomic in CPython

class GoogleStreamState:
    """Maps Gemini's response chunks onto the ``MessageBuilder``.

    Thread safety: used only by the worker thread running ``_run``.
    """

    def __init__(self, out: MessageBuilder) -> None:
        self.out = out
        self.current: int | None = None  # index of the open text/thinking block
        self.current_kind = ""
        self.finish_reason: str | None = None
        self.block_reason: str | None = None
        self.call_ids: set[str] = set()
        self.streaming: int | None = None  # the call whose arguments arrive as partialArgs
        self.streaming_args: dict[str, Any] = {}
        self.identified = False  # the response's id is recorded (the first chunk's)

    def handle(self, chunk: Any) -> None:
        if isinstance(chunk, list):  # some gateways send the chunks as a JSON array
            for item in chunk:
                self.handle(item)
            return
        if not isinstance(chunk, dict):
            return
        if "error" in chunk:
            raise _error_from_body(chunk)
        if not self.identified:
            response_id = chunk.get("responseId")
            if isinstance(response_id, str) and response_id:
                self.identified = True
                self.out.set_response(response_id=response_id)
        candidates = chunk.get("candidates") or []
        candidate = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
        for part in (candidate.get("content") or {}).get("parts") or ():
            if isinstance(part, dict):
                self._part(part)
        if candidate.get("finishReason"):
            self.finish_reason = candidate["finishReason"]
        feedback = chunk.get("promptFeedback")
        if feedback and self.block_reason is None and feedback.get("blockReason"):
            self.block_reason = _blocked_text(feedback)
        usage = chunk.get("usageMetadata")
        if isinstance(usage, dict):
            self._usage(usage)

    def _part(self, part: dict[str, Any]) -> None:
        out = self.out
        signature = part.get("thoughtSignature") or None
        if "text" in part:
            text = part.get("text") or ""
            kind = "thinking" if part.get("thought") is True else "text"
            if self.current is None or self.current_kind != kind:
                if not text and not signature:
                    return
                self._close_current()
                self.current = out.open_thinking() if kind == "thinking" else out.open_text()
                self.current_kind = kind
            if text:
                if kind == "thinking":
                    out.add_thinking(self.current, text)
                else:
                    out.add_text(self.current, text)
            if signature:  # the last one of a block wins; never moved to another block
                out.set_signature(self.current, signature)
        elif isinstance(part.get("functionCall"), dict):
            self._close_current()
            call = part["functionCall"]
            if self.streaming is not None and not call.get("name"):
                self._continue_call(call)
                return
            self._end_streaming_call()
            name = str(call.get("name") or "")
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id or call_id in self.call_ids:
                call_id = f"{name}_{now_ms()}_{next(_tool_call_counter)}"
            self.call_ids.add(call_id)
            index = out.open_tool_call(call_id, name)
            if signature:
                out.set_signature(index, signature)
            args = call.get("args")
            if call.get("willContinue") is True and not isinstance(args, dict):
                # streamed arguments (streamFunctionCallArguments): partialArgs follow,
                # until a functionCall part without willContinue
                self.streaming, self.streaming_args = index, {}
                self._continue_call(call)
                return
            out.add_tool_arguments(index, _compact(args if isinstance(args, dict) else {}))
            out.close_block(index)

    def _continue_call(self, call: dict[str, Any]) -> None:
        """Apply a streamed call's ``partialArgs``; close the call when it says so."""
        assert self.streaming is not None
        changed = False
        for piece in call.get("partialArgs") or ():
            if isinstance(piece, dict) and isinstance(piece.get("jsonPath"), str):
                changed |= _apply_partial(self.streaming_args, piece)
        if changed:
            self.out.replace_tool_arguments(self.streaming, _compact(self.streaming_args))
        if call.get("willContinue") is not True:
            self._end_streaming_call()

    def _end_streaming_call(self) -> None:
        if self.streaming is not None:
            self.out.close_block(self.streaming)
            self.streaming = None

    def _close_current(self) -> None:
        if self.current is not None:
            self.out.close_block(self.current)
            self.current = None
            self.current_kind = ""

    def _usage(self, usage: dict[str, Any]) -> None:
        prompt = _count(usage, "promptTokenCount")
        cached = _count(usage, "cachedContentTokenCount")
        output = _count(usage, "candidatesTokenCount") + _count(usage, "thoughtsTokenCount")
        total = usage.get("totalTokenCount")
        self.out.set_usage(input=max(prompt - cached, 0), output=output, cache_read=cached,
                           total_tokens=total if isinstance(total, int) else None,
                           reasoning=_count(usage, "thoughtsTokenCount"))

    def finish(self, tail: str) -> None:
        self._close_current()
        self.out.close_open_blocks()
        if self.finish_reason is None:
            if tail:
                raise _error_from_tail(tail)
            if self.block_reason is not None:
                raise ProviderError(self.block_reason, provider="google")
            raise ProviderError("Google stream ended without a finish reason. "
                                "Retry the request.", provider="google")
        self.out.set_response(raw_stop_reason=self.finish_reason)
        mapped = _FINISH_REASONS.get(self.finish_reason)
        if mapped is None:
            msg = f"Provider stopped with: {self.finish_reason}"
            raise ProviderError(msg, provider="google")
        if mapped == "stop" and self.out.message.tool_calls:
            mapped = "toolUse"  # Gemini says STOP even when the turn ends with calls
        self.out.finish(mapped)


_PATH_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def _apply_partial(args: dict[str, Any], piece: dict[str, Any]) -> bool:
    """Set one ``partialArgs`` entry (``jsonPath`` like ``$.a.b[0]``) into ``args``;
    string values arrive in pieces and are appended. False if the path is not understood."""
    path = piece["jsonPath"]
    steps: list[str | int] = []
    position = 1 if path.startswith("$") else 0
    for match in _PATH_STEP.finditer(path, position):
        if match.start() != position:
            return False
        steps.append(match.group(1) if match.group(1) is not None else int(match.group(2)))
        position = match.end()
    if not steps or position != len(path):
        return False
    if "stringValue" in piece:
        value: Any = str(piece["stringValue"])
    elif "numberValue" in piece:
        value = piece["numberValue"]
    elif "boolValue" in piece:
        value = bool(piece["boolValue"])
    elif "nullValue" in piece:
        value = None
    else:
        return False
    node: Any = args
    for step, following in zip(steps, [*steps[1:], None], strict=True):
        if following is None:
            break
        empty: Any = [] if isinstance(following, int) else {}
        if isinstance(step, int):
            if not isinstance(node, list):
                return False
            while len(node) <= step:
                node.append(None)
            if not isinstance(node[step], (dict, list)):
                node[step] = empty
            node = node[step]
        else:
            if not isinstance(node, dict):
                return False
            if not isinstance(node.get(step), (dict, list)):
                node[step] = empty
            node = node[step]
    last = steps[-1]
    if isinstance(last, int):
        if not isinstance(node, list):
            return False
        while len(node) <= last:
            node.append(None)
        previous = node[last]
        node[last] = previous + value if isinstance(previous, str) and isinstance(
            value, str) else value
    else:
        if not isinstance(node, dict):
            return False
        previous = node.get(last)
        node[last] = previous + value if isinstance(previous, str) and isinstance(
            value, str) else value
    return True


def _blocked_text(feedback: dict[str, Any]) -> str:
    """pi-ai 1.6's sentence for a prompt Gemini refused (``promptFeedback``): the block
    reason, Google's explanation and the safety ratings that decided it."""
    details = [f"Google prompt blocked: {feedback.get('blockReason') or 'unknown reason'}"]
    if feedback.get("blockReasonMessage"):
        details.append(str(feedback["blockReasonMessage"]))
    ratings = [f"{r['category']}" + (f" ({r['probability']})" if r.get("probability") else "")
               for r in feedback.get("safetyRatings") or () if isinstance(r, dict)
               and r.get("category")]
    if ratings:
        details.append(f"Safety rating{'' if len(ratings) == 1 else 's'}: {', '.join(ratings)}")
    return ". ".join(details)


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) else 0


def _error_from_body(data: dict[str, Any]) -> ProviderError:
    error = data.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    status = code if isinstance(code, int) else 500
    return ProviderError(format_http_error(LABEL, status, json.dumps(data)), provider="google",
                         status_code=status, body=data)


def _error_from_tail(tail: str) -> ProviderError:
    """Gemini appends a bare (not SSE-framed) JSON error object to a stream it gives up on."""
    try:
        data = json.loads(tail)
    except ValueError:
        msg = (f"Google stream ended without a finish reason; it ended with text that is "
               f"not an event: {clip(tail, 500)!r}")
        return ProviderError(msg, provider="google")
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]
    if isinstance(data, dict) and "error" in data:
        return _error_from_body(data)
    msg = f"Google stream ended without a finish reason: {clip(tail, 500)}"
    return ProviderError(msg, provider="google")


def _compact(value: Any) -> str:
    """JSON as pi-ai's ``JSON.stringify`` writes it (no spaces, non-ASCII kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
