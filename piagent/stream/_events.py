"""The events of an assistant message stream, each a dataclass with pi's ``type`` string.

``type`` is a ``Literal`` class attribute, so ``if event.type == "text_delta":`` narrows
``AssistantMessageEvent`` to ``TextDeltaEvent`` for a type checker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias, Union

from ..messages import AssistantMessage, StopReason, ToolCall
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
