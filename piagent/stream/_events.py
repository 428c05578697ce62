"""The events of an assistant message stream, each a dataclass with pi's ``type`` string.

``type`` is a ``Literal`` class attribute, so ``if event.type == "text_delta":`` narrows
``AssistantMessageEvent`` to ``TextDeltaEvent`` for a type checker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias, Union, get_args

from ..messages import AssistantMessage, StopReason, ToolCall, now_ms
from ._eventstream import EventStream

__all__ = [
    "AssistantMessageEvent",
    "AssistantMessageEventStream",
    "DoneEvent",
    "ErrorEvent",
    "StartEvent",
    "TextDeltaEvent",
    "TextEndEvent",
    "TextStartEvent",
    "ThinkingDeltaEvent",
    "ThinkingEndEvent",
    "ThinkingStartEvent",
    "ToolCallDeltaEvent",
    "ToolCallEndEvent",
    "ToolCallStartEvent",
]

@dataclass(slots=True)
class StartEvent:
    """The provider started a response; ``partial`` is the message so far."""

    partial: AssistantMessage
    type: ClassVar[Literal["start"]] = "start"


@dataclass(slots=True)
class TextStartEvent:
    """A text block opened at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: ClassVar[Literal["text_start"]] = "text_start"


@dataclass(slots=True)
class TextDeltaEvent:
    """More text for the block at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: ClassVar[Literal["text_delta"]] = "text_delta"


@dataclass(slots=True)
class TextEndEvent:
    """The text block at ``content_index`` is complete; ``content`` is its text."""

    content_index: int
    content: str
    partial: AssistantMessage
    type: ClassVar[Literal["text_end"]] = "text_end"


@dataclass(slots=True)
class ThinkingStartEvent:
    """A thinking block opened at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: ClassVar[Literal["thinking_start"]] = "thinking_start"


@dataclass(slots=True)
class ThinkingDeltaEvent:
    """More reasoning for the block at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: ClassVar[Literal["thinking_delta"]] = "thinking_delta"


@dataclass(slots=True)
class ThinkingEndEvent:
    """The thinking block at ``content_index`` is complete."""

    content_index: int
    content: str
    partial: AssistantMessage
    type: ClassVar[Literal["thinking_end"]] = "thinking_end"


@dataclass(slots=True)
class ToolCallStartEvent:
    """A tool call opened at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: ClassVar[Literal["toolcall_start"]] = "toolcall_start"


@dataclass(slots=True)
class ToolCallDeltaEvent:
    """More argument JSON for the tool call at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: ClassVar[Literal["toolcall_delta"]] = "toolcall_delta"


@dataclass(slots=True)
class ToolCallEndEvent:
    """The tool call at ``content_index`` is complete."""

    content_index: int
    tool_call: ToolCall
    partial: AssistantMessage
    type: ClassVar[Literal["toolcall_end"]] = "toolcall_end"


@dataclass(slots=True)
class DoneEvent:
    """The response ended normally (``reason``: "stop", "length" or "toolUse")."""

    reason: StopReason
    message: AssistantMessage
    type: ClassVar[Literal["done"]] = "done"


@dataclass(slots=True)
class ErrorEvent:
    """The response failed or was aborted (``reason``: "error" or "aborted")."""

    reason: StopReason
    error: AssistantMessage
    type: ClassVar[Literal["error"]] = "error"


AssistantMessageEvent: TypeAlias = Union[
    StartEvent, TextStartEvent, TextDeltaEvent, TextEndEvent, ThinkingStartEvent,
    ThinkingDeltaEvent, ThinkingEndEvent, ToolCallStartEvent, ToolCallDeltaEvent,
    ToolCallEndEvent, DoneEvent, ErrorEvent,
]


# the event types that never end a stream (``_is_terminal`` is false for each)
_ONGOING: frozenset[type] = frozenset(get_args(AssistantMessageEvent)) - {DoneEvent, ErrorEvent}


def _is_terminal(event: AssistantMessageEvent) -> bool:
    return event.type == "done" or event.type == "error"


def _final_message(event: AssistantMessageEvent) -> AssistantMessage:
    if isinstance(event, DoneEvent):
        return event.message
    if isinstance(event, ErrorEvent):
        return event.error
    msg = f"{event.type!r} is not a terminal event"
    raise TypeError(msg)


def _timer() -> Callable[[AssistantMessage | None], None]:
    """pi-ai's response timing: ``time(message)`` sets ``duration_ms`` once, measured with a
    monotonic clock from now, unless the message has one or started before now.

    A closure rather than a method, so the stream holds no reference to itself (a cycle
    would keep an abandoned stream, and the connection its producer holds, alive until the
    cyclic garbage collector ran).
    """
    started_at = now_ms()
    started = time.perf_counter()

    def time_it(message: AssistantMessage | None) -> None:
        if message is None or message.duration_ms is not None or \
                message.timestamp < started_at:
            return
        message.duration_ms = max(0, round((time.perf_counter() - started) * 1000))

    return time_it


def _untimed(message: AssistantMessage | None) -> None:
    return None


class AssistantMessageEventStream(EventStream[AssistantMessageEvent, AssistantMessage]):
    """The stream a stream function returns: complete on ``done`` or ``error``.

    It times the response as pi-ai's does: the final message (of the ``done`` or ``error``
    event, or the result given to ``end()``) gets ``duration_ms``, measured with a monotonic
    clock from the stream's creation, unless it already has one or its ``timestamp`` is
    older than the stream (a response that started elsewhere stays untimed). Every stream
    function gets this without doing anything.
    """

    def __init__(self, *, _timed: bool = True) -> None:
        # _timed=False: a response replayed as it was made earlier (piagent.testing plays a
        # pre-built scripted message), deterministically untimed whatever its timestamp
        time_it = _timer() if _timed else _untimed

        def final_message(event: AssistantMessageEvent) -> AssistantMessage:
            message = _final_message(event)
            time_it(message)
            return message

        super().__init__(_is_terminal, final_message)
        self._ongoing = _ONGOING
        self._time_it = time_it

    def end(self, result: AssistantMessage | None = None) -> None:
        """End the stream; ``result`` (timed as above) becomes the result unless one was set."""
        if result is not None and not self.done:
            self._time_it(result)
        super().end(result)
