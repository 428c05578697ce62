"""The Google Gemini adapter (api ``google-generative-ai``): ``stream_google``.

Owns the wire mapping only: the ``streamGenerateContent?alt=sse`` request body built from a
``Context`` (``systemInstruction``, ``contents``, function declarations, thinking config)
and the chunk → pi event mapping (thought parts, thought signatures, whole function calls,
``usageMetadata``, the bare JSON error tail Gemini appends to a broken stream). Transport,
retries and abort live in ``kit`` (``_call``, ``_start``); replay rules in ``_transform``.
"""

from __future__ import annotations

import itertools
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
    ToolDeclaration,
    ToolResultMessage,
    UserMessage,
    now_ms,
)
from ..models import Model
from ..stream import AssistantMessageEventStream, Context, StreamOptions
from ..transcript import get_current_tools
from ._errors import clip
from ._keys import is_local_url, missing_key_message, resolve_api_key
from ._transform import leading_system_text, system_update_text, transform_messages
from .kit import (
    HttpClient,
    MessageBuilder,
    ProviderCall,
    SSERequest,
    format_http_error,
    parse_event_json,
    start_stream,
)

__all__ = ["build_google_request", "stream_google"]

API = "google-generative-ai"
LABEL = "Google"
_CLIENT = HttpClient("google")

_GEMINI_VERSION = re.compile(r"gemini-(\d+)(?:\.(\d+))?")
_BASE64 = re.compile(r"^[A-Za-z0-9+/_-]+={0,2}$")
_INVALID_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
# Gemini 3 insists on a signature on replayed function calls in thinking mode; calls that
# have none (from another provider) carry this documented sentinel instead.
_SKIP_SIGNATURE = "skip_thought_signature_validator"
# pi's thinking budgets (tokens) for Gemini 2.5
_BUDGETS_PRO = {"minimal": 128, "low": 2048, "medium": 8192, "high": 32768}
_BUDGETS_FLASH = {"minimal": 128, "low": 2048, "medium": 8192, "high": 24576}
_LEVELS = {"minimal": "MINIMAL", "low": "LOW", "medium": "MEDIUM", "high": "HIGH",
           "xhigh": "HIGH", "max": "HIGH"}
_PRO_LEVELS = {"minimal": "LOW", "low": "LOW", "medium": "HIGH", "high": "HIGH",
               "xhigh": "HIGH", "max": "HIGH"}
_FINISH_REASONS: dict[str, StopReason] = {"STOP": "stop", "MAX_TOKENS": "length"}
_tool_call_counter = itertools.count(1)  # generated ids; next() on a count is atomic in CPython


def stream_google(model: Model | None, context: Context,
                  options: StreamOptions | None = None) -> AssistantMessageEventStream:
    """Stream one response from the Gemini API (a ``StreamFn``).

    The key comes from ``options.api_key``, else ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``,
    and travels in the ``x-goog-api-key`` header. Never raises: failures end the stream
    with an ``ErrorEvent`` whose message never contains the key; an abort ends it
    ``"aborted"`` with the partial content kept.
    """
    return start_stream(model, options, _run, context=context, client=_CLIENT, api=API,
                        label=LABEL)


# --- the request --------------------------------------------------------------------------


def _gemini_major(model: Model) -> int:
    found = _GEMINI_VERSION.search(model.id)
    return int(found.group(1)) if found else 0


def _needs_call_ids(model: Model) -> bool:
    """Function-call ids are only sent to models that match calls and results by id."""
    return (model.id.startswith(("claude-", "gpt-oss-")) or _gemini_major(model) >= 3)


def _normalize_tool_call_id(call_id: str) -> str:
    return _INVALID_ID_CHARS.sub("_", call_id)[:64]


def _valid_signature(signature: str | None) -> str | None:
    if signature and len(signature) % 4 == 0 and _BASE64.match(signature):
        return signature
    return None


def build_google_request(model: Model, messages: Sequence[AgentMessage],
                         options: StreamOptions) -> dict[str, Any]:
    """The JSON body of ``:streamGenerateContent`` for a context's messages.

    The transcript is first made safe to replay (``_transform.transform_messages``).
    """
    messages = transform_messages(messages, model, _normalize_tool_call_id)
    prompt, leading = leading_system_text(messages)
    body: dict[str, Any] = {"contents": _convert_messages(model, messages[leading:])}
    if prompt:
        body["systemInstruction"] = {"parts": [{"text": prompt}]}
    tools = get_current_tools(messages)
    if tools:
        body["tools"] = [{"functionDeclarations": [_declaration(t) for t in tools]}]
    config: dict[str, Any] = {}
    if options.temperature is not None:
        config["temperature"] = options.temperature
    if options.max_tokens is not None:
        config["maxOutputTokens"] = options.max_tokens
    thinking = _thinking_config(model, options)
    if thinking is not None:
        config["thinkingConfig"] = thinking
    if config:
        body["generationConfig"] = config
    return body


def _declaration(tool: ToolDeclaration) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name, "description": tool.description}
    if tool.parameters:
        out["parametersJsonSchema"] = tool.parameters
    return out


def _thinking_config(model: Model, options: StreamOptions) -> dict[str, Any] | None:
    if not model.reasoning:
        return None
    level = options.reasoning if options.reasoning != "off" else None
    major = _gemini_major(model)
    is_pro = "pro" in model.id
    if major >= 3:
        if level is None:  # Gemini 3 cannot stop thinking: think least, and show none of it
            return {"thinkingLevel": "LOW" if is_pro else "MINIMAL"}
        levels = _PRO_LEVELS if is_pro else _LEVELS
        return {"includeThoughts": True, "thinkingLevel": levels.get(level, "HIGH")}
    if level is None:
        # 2.5 Pro cannot turn thinking off; the others stop with a zero budget
        return None if is_pro else {"thinkingBudget": 0}
    budgets = {**(_BUDGETS_PRO if is_pro else _BUDGETS_FLASH), **(options.thinking_budgets or {})}
    budget = budgets.get(level, budgets["high"])
    return {"includeThoughts": True, "thinkingBudget": budget}


def _convert_messages(model: Model, messages: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    contents: list[dict[str, Any]] = []
    with_ids = _needs_call_ids(model)
    gemini3 = _gemini_major(model) >= 3
    for message in messages:
        if isinstance(message, UserMessage):
            _append(contents, "user", _user_parts(message.content))
        elif isinstance(message, AssistantMessage):
            _append(contents, "model", _model_parts(message, with_ids, gemini3))
        elif isinstance(message, ToolResultMessage):
            parts = _tool_result_parts(message, with_ids, gemini3)
            _append(contents, "user", parts)
        elif isinstance(message, SystemMessage):
            text = _system_update_text(message)
            if text:
                _append(contents, "user", [{"text": text}])
    return contents


def _append(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    """Add a turn; Gemini wants alternating roles, so adjacent same-role turns merge."""
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _system_update_text(message: SystemMessage) -> str:
    text = system_update_text(message)
    return f"<system_update>\n{text}\n</system_update>" if text else ""


def _inline(image: ImageContent) -> dict[str, Any]:
    return {"inlineData": {"mimeType": image.mime_type, "data": image.data}}


def _user_parts(content: str | Sequence[Any]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent):
            if block.text:
                parts.append({"text": block.text})
        elif isinstance(block, ImageContent):
            parts.append(_inline(block))
    return parts


def _model_parts(message: AssistantMessage, with_ids: bool,
                 gemini3: bool) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    # of parallel calls only the first carries a signature; the sentinel is for messages
    # whose calls carry none at all (replayed from another provider)
    needs_sentinel = gemini3 and not any(
        isinstance(b, ToolCall) and _valid_signature(b.thought_signature)
        for b in message.content)
    for block in message.content:
        if isinstance(block, TextContent):
            signature = _valid_signature(block.text_signature)
            # an empty part that carries a signature keeps Gemini's reasoning chain intact
            if block.text or signature:
                part: dict[str, Any] = {"text": block.text}
                if signature:
                    part["thoughtSignature"] = signature
                parts.append(part)
        elif isinstance(block, ThinkingContent):
            signature = _valid_signature(block.thinking_signature)
            if block.thinking or signature:
                part = {"thought": True, "text": block.thinking}
                if signature:
                    part["thoughtSignature"] = signature
                parts.append(part)
        elif isinstance(block, ToolCall):
            call: dict[str, Any] = {"name": block.name, "args": block.arguments}
            if with_ids and block.id:
                call["id"] = _normalize_tool_call_id(block.id)
            part = {"functionCall": call}
            signature = _valid_signature(block.thought_signature)
            if signature:
                part["thoughtSignature"] = signature
            elif needs_sentinel:
                part["thoughtSignature"] = _SKIP_SIGNATURE
            parts.append(part)
    return parts


def _tool_result_parts(result: ToolResultMessage, with_ids: bool,
                       gemini3: bool) -> list[dict[str, Any]]:
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
    images = [b for b in result.content if isinstance(b, ImageContent)]
    if not text and images:
        text = "(see attached image)"
    response: dict[str, Any] = {"name": result.tool_name,
                                "response": {"error" if result.is_error else "output": text}}
    if with_ids and result.tool_call_id:
        response["id"] = _normalize_tool_call_id(result.tool_call_id)
    parts: list[dict[str, Any]] = [{"functionResponse": response}]
    if images:
        if gemini3:  # Gemini 3 takes images inside the function response
            response["parts"] = [_inline(image) for image in images]
        else:
            parts.append({"text": "Tool result image:"})
            parts.extend(_inline(image) for image in images)
    return parts


# --- the response -------------------------------------------------------------------------


def _run(call: ProviderCall) -> Iterator[None]:
    options = call.options
    model = call.model
    api_key = resolve_api_key("google", options.api_key)
    headers: dict[str, str] = {}
    if api_key:
        call.add_secret(api_key)
        headers["x-goog-api-key"] = api_key  # a header, never ?key=, so URLs stay key-free
    elif not is_local_url(model.base_url):
        raise ProviderError(missing_key_message("google"), provider=model.provider)
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    body = build_google_request(model, call.messages, options)
    url = f"{model.base_url.rstrip('/')}/models/{model.id}:streamGenerateContent?alt=sse"
    state = _StreamState(call.out)
    with call.open_sse(SSERequest(url=url, body=body, headers=headers)) as sse:
        for event in sse.events():
            state.handle(parse_event_json(event, call.label))
            yield  # hand the queued events to the consumer
        tail = sse.trailing_text
    state.finish(tail)


class _StreamState:
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

    def handle(self, chunk: Any) -> None:
        if isinstance(chunk, list):  # some gateways send the chunks as a JSON array
            for item in chunk:
                self.handle(item)
            return
        if not isinstance(chunk, dict):
            return
        if "error" in chunk:
            raise _error_from_body(chunk)
        candidates = chunk.get("candidates") or []
        candidate = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
        for part in (candidate.get("content") or {}).get("parts") or ():
            if isinstance(part, dict):
                self._part(part)
        if candidate.get("finishReason"):
            self.finish_reason = candidate["finishReason"]
        feedback = chunk.get("promptFeedback") or {}
        if feedback.get("blockReason"):
            self.block_reason = feedback["blockReason"]
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
            out.add_tool_arguments(index, json.dumps(args if isinstance(args, dict) else {}))
            out.close_block(index)

    def _continue_call(self, call: dict[str, Any]) -> None:
        """Apply a streamed call's ``partialArgs``; close the call when it says so."""
        assert self.streaming is not None
        changed = False
        for piece in call.get("partialArgs") or ():
            if isinstance(piece, dict) and isinstance(piece.get("jsonPath"), str):
                changed |= _apply_partial(self.streaming_args, piece)
        if changed:
            self.out.replace_tool_arguments(self.streaming, json.dumps(self.streaming_args))
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
                           total_tokens=total if isinstance(total, int) else None)

    def finish(self, tail: str) -> None:
        self._close_current()
        self.out.close_open_blocks()
        if self.finish_reason is None:
            if tail:
                raise _error_from_tail(tail)
            if self.block_reason is not None:
                msg = f"Google blocked the prompt (blockReason {self.block_reason})."
                raise ProviderError(msg, provider="google")
            raise ProviderError("Google stream ended without a finish reason. "
                                "Retry the request.", provider="google")
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
