"""Event streams and the stream-function contract.

``EventStream`` is a thread-safe push queue with one consumer and a ``result()``;
``AssistantMessageEventStream`` is the one a stream function returns. The assistant
event dataclasses carry pi's ``type`` strings. A stream function never raises for request,
model or runtime failures: it ends the stream with an ``ErrorEvent``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar, Union

from ..errors import StreamFnError
from ..messages import AgentMessage, AssistantMessage, ToolCall

if TYPE_CHECKING:
    from ..abort import AbortSignal
    from ..models import Model

__all__ = [
    "AssistantMessageEvent",
    "AssistantMessageEventStream",
    "Context",
    "DoneEvent",
    "ErrorEvent",
    "EventStream",
    "StartEvent",
    "StreamFn",
    "StreamOptions",
    "TextDeltaEvent",
    "TextEndEvent",
    "TextStartEvent",
    "ThinkingDeltaEvent",
    "ThinkingEndEvent",
    "ThinkingStartEvent",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallStartEvent",
    "get_default_stream_fn",
    "set_default_stream_fn",
]

T = TypeVar("T")
R = TypeVar("R")

_END = object()  # the sentinel that closes a stream's queue


class EventStream(Generic[T, R]):
    """A push queue of events with a final result, safe across threads.

    A producer thread calls ``push`` and ``end``; one consumer iterates (blocking) and/or
    calls ``result()``. Once an event satisfies ``is_complete`` the stream is done: its
    result is ``extract_result(event)`` and later pushes are ignored. ``fail(exc)`` ends
    the stream with an error that iteration and ``result()`` raise.

    Thread safety: ``push``, ``end`` and ``fail`` may be called from any thread;
    iterate from one thread at a time.
    """

    def __init__(self, is_complete: Callable[[T], bool], extract_result: Callable[[T], R]) -> None:
        self._is_complete = is_complete
        self._extract_result = extract_result
        # carries events, then _END, from the producer to the consumer
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # guards _done, _result, _error: the transition to done happens once
        self._lock = threading.Lock()
        self._done = False
        self._result: R | None = None
        self._error: BaseException | None = None
        self._has_result = threading.Event()

    @property
    def done(self) -> bool:
        """True once the stream has ended (its result may still be unread)."""
        return self._done

    def push(self, event: T) -> None:
        """Deliver an event; a completing event also sets the result and ends the stream."""
        with self._lock:
            if self._done:
                return
            if self._is_complete(event):
                self._done = True
                self._result = self._extract_result(event)
                self._has_result.set()
                self._queue.put(event)
                self._queue.put(_END)
                return
            self._queue.put(event)

    def end(self, result: R | None = None) -> None:
        """End the stream; ``result`` becomes the result unless one was already set."""
        with self._lock:
            if not self._has_result.is_set() and result is not None:
                self._result = result
                self._has_result.set()
            if self._done:
                return
            self._done = True
        self._queue.put(_END)

    def fail(self, error: BaseException) -> None:
        """End the stream with an error: iteration raises it after the queued events."""
        with self._lock:
            if self._done and self._has_result.is_set():
                return
            self._error = error
            already_done = self._done
            self._done = True
            self._has_result.set()
        if not already_done:
            self._queue.put(_END)

    def __iter__(self) -> Iterator[T]:
        get = self._queue.get
        while True:
            item = get()
            if item is _END:
                self._queue.put(_END)  # later iterations end at once too
                if self._error is not None:
                    raise self._error
                return
            yield item

    def result(self, timeout: float | None = None) -> R:
        """The final value; waits up to ``timeout`` seconds, then raises ``TimeoutError``."""
        if not self._has_result.wait(timeout):
            msg = f"The stream produced no result within {timeout} seconds."
            raise TimeoutError(msg)
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def has_result(self) -> bool:
        """True once ``result()`` would return (or raise) without waiting."""
        return self._has_result.is_set()


# --- assistant message events -----------------------------------------------------------


@dataclass
class StartEvent:
    """The provider started a response; ``partial`` is the message so far."""

    partial: AssistantMessage
    type: ClassVar[str] = "start"


@dataclass
class TextStartEvent:
    """A text block opened at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: ClassVar[str] = "text_start"


@dataclass
class TextDeltaEvent:
    """More text for the block at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: ClassVar[str] = "text_delta"


@dataclass
class TextEndEvent:
    """The text block at ``content_index`` is complete; ``content`` is its text."""

    content_index: int
    content: str
    partial: AssistantMessage
    type: ClassVar[str] = "text_end"


@dataclass
class ThinkingStartEvent:
    """A thinking block opened at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: ClassVar[str] = "thinking_start"


@dataclass
class ThinkingDeltaEvent:
    """More reasoning for the block at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: ClassVar[str] = "thinking_delta"


@dataclass
class ThinkingEndEvent:
    """The thinking block at ``content_index`` is complete."""

    content_index: int
    content: str
    partial: AssistantMessage
    type: ClassVar[str] = "thinking_end"


@dataclass
class ToolCallStartEvent:
    """A tool call opened at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: ClassVar[str] = "toolcall_start"


@dataclass
class ToolCallDeltaEvent:
    """More argument JSON for the tool call at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: ClassVar[str] = "toolcall_delta"


@dataclass
class ToolCallEndEvent:
    """The tool call at ``content_index`` is complete."""

    content_index: int
    tool_call: ToolCall
    partial: AssistantMessage
    type: ClassVar[str] = "toolcall_end"


@dataclass
class DoneEvent:
    """The response ended normally (``reason``: "stop", "length" or "toolUse")."""

    reason: str
    message: AssistantMessage
    type: ClassVar[str] = "done"


@dataclass
class ErrorEvent:
    """The response failed or was aborted (``reason``: "error" or "aborted")."""

    reason: str
    error: AssistantMessage
    type: ClassVar[str] = "error"


AssistantMessageEvent: TypeAlias = Union[
    StartEvent, TextStartEvent, TextDeltaEvent, TextEndEvent, ThinkingStartEvent,
    ThinkingDeltaEvent, ThinkingEndEvent, ToolCallStartEvent, ToolCallDeltaEvent,
    ToolCallEndEvent, DoneEvent, ErrorEvent,
]


def _is_terminal(event: AssistantMessageEvent) -> bool:
    return event.type == "done" or event.type == "error"


def _final_message(event: AssistantMessageEvent) -> AssistantMessage:
    if isinstance(event, DoneEvent):
        return event.message
    if isinstance(event, ErrorEvent):
        return event.error
    msg = f"{event.type!r} is not a terminal event"
    raise TypeError(msg)


class AssistantMessageEventStream(EventStream[AssistantMessageEvent, AssistantMessage]):
    """The stream a stream function returns: complete on ``done`` or ``error``."""

    def __init__(self) -> None:
        super().__init__(_is_terminal, _final_message)


# --- the stream-function contract ---------------------------------------------------------


@dataclass
class Context:
    """The normalised transcript sent to a model.

    The system prompt and the tool declarations travel only as system messages inside
    ``messages``.
    """

    messages: list[AgentMessage] = field(default_factory=list)


@dataclass(kw_only=True)
class StreamOptions:
    """Options a stream function receives (pi's serialisable options plus the signal)."""

    api_key: str | None = None
    signal: AbortSignal | None = None
    reasoning: str | None = None
    """The thinking level ("minimal" … "max"), or ``None`` for off."""
    session_id: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    headers: Mapping[str, str] | None = None
    max_retry_delay_ms: int | None = None
    """The longest server-requested retry delay to honour; longer ones fail at once."""
    cache_retention: str | None = None
    metadata: Mapping[str, Any] | None = None
    thinking_budgets: Mapping[str, int] | None = None
    transport: str | None = None
    sampling_params: Mapping[str, Any] | None = None


StreamFn: TypeAlias = Callable[["Model | None", Context, StreamOptions], AssistantMessageEventStream]

_UNSET: Any = object()
# the one piece of process-wide mutable state: the fallback stream function
_default_stream_fn: StreamFn | None = _UNSET


def set_default_stream_fn(stream_fn: StreamFn | None) -> None:
    """Set the fallback used when no stream function is given; ``None`` removes it."""
    global _default_stream_fn
    _default_stream_fn = stream_fn


def get_default_stream_fn() -> StreamFn:
    """The fallback stream function: ``piagent.providers.stream_simple`` unless changed."""
    if _default_stream_fn is _UNSET:
        from ..providers import stream_simple

        return stream_simple
    if _default_stream_fn is None:
        msg = ("No default stream function configured. Pass stream_fn explicitly or call "
               "set_default_stream_fn().")
        raise StreamFnError(msg)
    return _default_stream_fn
