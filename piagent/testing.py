"""Test helpers: a scripted stream function and message builders.

``ScriptedStreamFn`` plays back scripted assistant messages as realistic event streams
(text, thinking and tool-argument deltas), records every call, honours the abort signal,
and ends with an error message when the script runs out. It needs no network and starts
no threads: events are produced on the consuming thread, as the loop iterates.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias, Union

from .abort import AbortSignal
from .messages import (
    AssistantMessage,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
)
from .models import Model
from .stream import (
    AssistantMessageEvent,
    AssistantMessageEventStream,
    Context,
    DoneEvent,
    ErrorEvent,
    StartEvent,
    StreamingJsonParser,
    StreamOptions,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)

__all__ = [
    "ScriptedCall",
    "ScriptedResponse",
    "ScriptedStreamFn",
    "assistant_error",
    "assistant_text",
    "assistant_tool_calls",
]

ScriptedResponse: TypeAlias = Union[
    AssistantMessage, Callable[[Context, StreamOptions], AssistantMessage]
]

_SCRIPTED = "scripted"
_TEXT_CHUNK = re.compile(r"\S+\s*|\s+")


@dataclass
class ScriptedCall:
    """One request a ``ScriptedStreamFn`` received."""

    model: Model | None
    context: Context
    options: StreamOptions


def assistant_text(text: str, stop_reason: StopReason = "stop") -> AssistantMessage:
    """An assistant message with one text block."""
    return AssistantMessage(content=[TextContent(text)], api=_SCRIPTED, provider=_SCRIPTED,
                            model=_SCRIPTED, stop_reason=stop_reason)


def assistant_tool_calls(
    *calls: ToolCall | tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str],
    stop_reason: StopReason = "toolUse",
    text: str | None = None,
) -> AssistantMessage:
    """An assistant message that calls tools.

    Each call is a ``ToolCall``, ``(name, arguments)`` or ``(name, arguments, id)``; calls
    without an id get ``call_1``, ``call_2``, … in order. ``text`` adds a leading text block.
    """
    content: list[Any] = [TextContent(text)] if text else []
    for index, call in enumerate(calls, start=1):
        if isinstance(call, ToolCall):
            content.append(call)
        elif len(call) == 3:
            content.append(ToolCall(call[2], call[0], dict(call[1])))
        else:
            content.append(ToolCall(f"call_{index}", call[0], dict(call[1])))
    return AssistantMessage(content=content, api=_SCRIPTED, provider=_SCRIPTED, model=_SCRIPTED,
                            stop_reason=stop_reason)


def assistant_error(message: str, aborted: bool = False) -> AssistantMessage:
    """A failed (or aborted) response carrying ``message`` as its error."""
    return AssistantMessage(content=[], api=_SCRIPTED, provider=_SCRIPTED, model=_SCRIPTED,
                            stop_reason="aborted" if aborted else "error", error_message=message)


class ScriptedStreamFn:
    """A ``StreamFn`` that answers from a script of assistant messages.

    A response is an ``AssistantMessage`` or a callable ``(context, options) ->
    AssistantMessage`` that can look at the request. Each response is streamed as a copy,
    so one object can be scripted twice, with its own ``timestamp`` and without
    ``duration_ms`` (it started before the request; pi-ai's stream leaves such a message
    untimed). A callable's message and the error of a script that ran out start at the
    request: like every stream's response, they get ``duration_ms``. ``chunk_delay`` (seconds) waits between events,
    on the abort signal, for demos that show streaming. ``calls`` keeps the last
    ``keep_calls`` requests (``None`` keeps all); ``call_count`` counts every one.

    Thread safety: ``set_responses``, ``add_response``, ``calls`` and ``call_count`` may
    be used from any thread while a run streams.
    """

    def __init__(self, responses: Iterable[ScriptedResponse] = (), *,
                 chunk_delay: float = 0.0, keep_calls: int | None = 100) -> None:
        if keep_calls is not None and (not isinstance(keep_calls, int) or keep_calls < 0):
            msg = f"keep_calls must be None (keep all) or an int >= 0, not {keep_calls!r}."
            raise ValueError(msg)
        # guards _responses, _calls and _count, shared by the test thread and the run's worker
        self._lock = threading.Lock()
        self._responses: deque[ScriptedResponse] = deque(_checked(responses))
        self._calls: deque[ScriptedCall] = deque(maxlen=keep_calls)
        self._count = 0
        self.chunk_delay = chunk_delay
        self.model = Model(id=_SCRIPTED, api=_SCRIPTED, provider=_SCRIPTED,
                           base_url="https://example.invalid", name="Scripted model")

    def set_responses(self, responses: Iterable[ScriptedResponse]) -> None:
        """Replace the remaining script."""
        with self._lock:
            self._responses = deque(_checked(responses))

    def add_response(self, response: ScriptedResponse) -> None:
        """Append one response to the script."""
        _check_response(response, "add_response()")
        with self._lock:
            self._responses.append(response)

    @property
    def calls(self) -> list[ScriptedCall]:
        """The requests received, in order: the last ``keep_calls`` of them (100 by default,
        so a long-running demo does not keep every transcript it was sent)."""
        with self._lock:
            return list(self._calls)

    @property
    def call_count(self) -> int:
        """How many requests were received (all of them, not only those kept in ``calls``)."""
        with self._lock:
            return self._count

    def __repr__(self) -> str:
        with self._lock:
            return (f"ScriptedStreamFn(calls={self._count}, remaining={len(self._responses)}, "
                    f"keep_calls={self._calls.maxlen})")

    @property
    def remaining(self) -> int:
        """How many scripted responses are left."""
        with self._lock:
            return len(self._responses)

    def __call__(self, model: Model | None, context: Context,
                 options: StreamOptions | None = None) -> AssistantMessageEventStream:
        options = options if options is not None else StreamOptions()
        snapshot = Context(list(context.messages))
        with self._lock:
            self._calls.append(ScriptedCall(model, snapshot, options))
            self._count += 1
            number = self._count
            response = self._responses.popleft() if self._responses else None
        # made before the response: it times what starts after it (a callable's message, an
        # error made here); a pre-built message is played as made, untimed
        stream = AssistantMessageEventStream(_timed=not isinstance(response, AssistantMessage))
        final = self._plan(response, number, model, snapshot, options)
        stream.pull_from(_produce(final, options.signal, self.chunk_delay))
        return stream

    def _plan(self, response: ScriptedResponse | None, number: int, model: Model | None,
              context: Context, options: StreamOptions) -> AssistantMessage:
        if response is None:
            return _error(model, f"ScriptedStreamFn has no scripted response left for request "
                                 f"{number}; add one with add_response() or set_responses().")
        if callable(response):
            try:
                result = response(context, options)
            except Exception as exc:  # a stream function never raises: the error is the result
                return _error(model, f"Scripted response for request {number} raised "
                                     f"{type(exc).__name__}: {exc}")
            if not isinstance(result, AssistantMessage):
                return _error(model, f"Scripted response for request {number} returned "
                                     f"{type(result).__name__}, not an AssistantMessage.")
            response = result
        message = copy.deepcopy(response)
        if model is not None:
            message.api = message.api if message.api not in ("", _SCRIPTED) else model.api
            message.provider = (message.provider if message.provider not in ("", _SCRIPTED)
                                else model.provider)
            message.model = message.model if message.model not in ("", _SCRIPTED) else model.id
        return message


def _checked(responses: Iterable[ScriptedResponse]) -> list[ScriptedResponse]:
    if isinstance(responses, (str, AssistantMessage)) or callable(responses):
        msg = ("ScriptedStreamFn takes a list of responses; wrap the one you have: "
               "[assistant_text('...')].")
        raise TypeError(msg)
    checked = list(responses)
    for index, response in enumerate(checked):
        _check_response(response, f"response {index}")
    return checked


def _check_response(response: object, where: str) -> None:
    """``TypeError`` now, not a failed run later, for a response that cannot be played."""
    if isinstance(response, AssistantMessage):
        return
    if isinstance(response, str):
        msg = (f"ScriptedStreamFn: {where} is the str {response[:40]!r}; a response is an "
               f"AssistantMessage or a callable (context, options) -> AssistantMessage; "
               f"for text write assistant_text({response[:40]!r}).")
        raise TypeError(msg)
    if not callable(response):
        msg = (f"ScriptedStreamFn: {where} is {type(response).__name__}; a response is an "
               f"AssistantMessage or a callable (context, options) -> AssistantMessage.")
        raise TypeError(msg)
    try:
        signature = inspect.signature(response)
    except (TypeError, ValueError):  # no signature to check
        return
    try:
        signature.bind(None, None)
    except TypeError:
        msg = (f"ScriptedStreamFn: {where}, the callable "
               f"{getattr(response, '__qualname__', response)!r}, must take two arguments "
               f"(context, options), but its signature is {signature}; write "
               f"'lambda context, options: ...'.")
        raise TypeError(msg) from None


def _error(model: Model | None, text: str) -> AssistantMessage:
    return AssistantMessage(content=[], api=model.api if model else _SCRIPTED,
                            provider=model.provider if model else _SCRIPTED,
                            model=model.id if model else _SCRIPTED, stop_reason="error",
                            error_message=text)


def _chunks(text: str, size: int) -> list[str]:
    pieces: list[str] = []
    current = ""
    for match in _TEXT_CHUNK.finditer(text):
        current += match.group(0)
        if len(current) >= size:
            pieces.append(current)
            current = ""
    if current or not pieces:
        pieces.append(current)
    return pieces


def _events(final: AssistantMessage) -> Iterator[tuple[AssistantMessage, AssistantMessageEvent]]:
    """Events building ``partial`` block by block, ending with the final message's event.

    A failure with no content fails before any output, as a provider's rejected request does.
    """
    if final.stop_reason in ("error", "aborted") and not final.content:
        yield final, ErrorEvent(final.stop_reason, final)
        return
    partial = AssistantMessage(content=[], api=final.api, provider=final.provider,
                               model=final.model, usage=Usage(), stop_reason="stop",
                               timestamp=final.timestamp)
    yield partial, StartEvent(partial)
    for index, block in enumerate(final.content):
        if isinstance(block, TextContent):
            partial.content.append(TextContent("", block.text_signature))
            yield partial, TextStartEvent(index, partial)
            text = ""
            for piece in _chunks(block.text, 12):
                text += piece
                partial.content[index] = TextContent(text, block.text_signature)
                yield partial, TextDeltaEvent(index, piece, partial)
            partial.content[index] = block
            yield partial, TextEndEvent(index, block.text, partial)
        elif isinstance(block, ThinkingContent):
            partial.content.append(ThinkingContent("", block.thinking_signature, block.redacted))
            yield partial, ThinkingStartEvent(index, partial)
            thinking = ""
            for piece in _chunks(block.thinking, 12):
                thinking += piece
                partial.content[index] = ThinkingContent(
                    thinking, block.thinking_signature, block.redacted)
                yield partial, ThinkingDeltaEvent(index, piece, partial)
            partial.content[index] = block
            yield partial, ThinkingEndEvent(index, block.thinking, partial)
        elif isinstance(block, ToolCall):
            partial.content.append(ToolCall(block.id, block.name, {}, block.thought_signature))
            yield partial, ToolCallStartEvent(index, partial)
            text = json.dumps(block.arguments)
            parser = StreamingJsonParser()  # the partial arguments as pi-ai 1.6.1 shows them
            for start in range(0, len(text), 16):
                piece = text[start:start + 16]
                parser.append(piece)
                snapshot = parser.snapshot()
                partial.content[index] = ToolCall(
                    block.id, block.name,
                    snapshot.value if snapshot is not None and snapshot.is_object else {},
                    block.thought_signature)
                yield partial, ToolCallDeltaEvent(index, piece, partial)
            partial.content[index] = block
            yield partial, ToolCallEndEvent(index, block, partial)
        else:
            partial.content.append(block)
    if final.stop_reason in ("error", "aborted"):
        yield final, ErrorEvent(final.stop_reason, final)
    else:
        yield final, DoneEvent(final.stop_reason, final)


def _produce(final: AssistantMessage, signal: AbortSignal | None,
             delay: float) -> Iterator[AssistantMessageEvent]:
    # The signal is checked before the next event is built, so an aborted message holds
    # exactly the content its delivered events described.
    partial = AssistantMessage(content=[], api=final.api, provider=final.provider,
                               model=final.model, timestamp=final.timestamp)
    source = _events(final)
    started = False
    while True:
        if signal is not None and (signal.is_set() or (
                delay and started and signal.wait(delay))):
            break
        item = next(source, None)
        if item is None:
            return
        partial, event = item
        started = True
        yield event
    yield _aborted(partial, signal.reason)


def _aborted(partial: AssistantMessage, reason: object) -> ErrorEvent:
    message = copy.copy(partial)
    message.content = list(partial.content)
    message.stop_reason = "aborted"
    message.error_message = str(reason) if reason is not None else "Operation aborted"
    return ErrorEvent("aborted", message)
