"""The message and content dataclasses, pi's shapes with snake_case attributes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, TypeAlias, Union

StopReason: TypeAlias = Literal["stop", "length", "toolUse", "error", "aborted"]
ThinkingLevel: TypeAlias = Literal["off", "minimal", "low", "medium", "high", "xhigh", "max"]


def now_ms() -> int:
    """The current wall-clock time in epoch milliseconds, pi's timestamp unit."""
    return round(time.time() * 1000)


# --- content blocks -------------------------------------------------------------------


@dataclass
class TextContent:
    """Text, from a user, a tool or the model."""

    text: str = ""
    text_signature: str | None = None
    """An opaque provider signature (OpenAI Responses item ids, proxy content signatures)."""
    type: ClassVar[Literal["text"]] = "text"


@dataclass
class ThinkingContent:
    """The model's reasoning. ``redacted`` blocks carry opaque data valid only for one model."""

    thinking: str = ""
    thinking_signature: str | None = None
    redacted: bool = False
    type: ClassVar[Literal["thinking"]] = "thinking"


@dataclass
class ImageContent:
    """An image as base64 ``data`` with its ``mime_type``."""

    data: str = ""
    mime_type: str = "image/png"
    type: ClassVar[Literal["image"]] = "image"


@dataclass
class ToolCall:
    """A tool call the model asked for: ``arguments`` is the parsed JSON object."""

    id: str = ""
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    thought_signature: str | None = None
    type: ClassVar[Literal["toolCall"]] = "toolCall"


UserContent: TypeAlias = Union[TextContent, ImageContent]
AssistantContent: TypeAlias = Union[TextContent, ThinkingContent, ToolCall]


# --- usage ----------------------------------------------------------------------------


@dataclass
class Cost:
    """Dollars spent on one response, by kind of token."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    total: float = 0.0


@dataclass
class Usage:
    """Token counts of one response, and what they cost."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: Cost = field(default_factory=Cost)


# --- messages -------------------------------------------------------------------------


@dataclass
class ToolDeclaration:
    """What the model is told about a tool: its name, description and JSON Schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class SystemMessage:
    """Instructions and tool declarations, carried in the transcript.

    ``content`` appends instructions; ``sections`` patches named sections (a ``None`` value
    deletes one); ``tools_added`` declares tools from here on; ``tools_removed`` names tools
    that are gone. ``get_current_system_prompt`` and ``get_current_tools`` replay them.
    """

    content: str = ""
    sections: dict[str, str | None] | None = None
    tools_added: list[ToolDeclaration] | None = None
    tools_removed: list[str] | None = None
    timestamp: int = field(default_factory=now_ms)
    role: ClassVar[Literal["system"]] = "system"

    @property
    def text(self) -> str:
        """The instructions this message appends (``content``)."""
        return self.content


@dataclass
class UserMessage:
    """A message from the user: a string or a list of text and image blocks."""

    content: str | list[UserContent] = ""
    timestamp: int = field(default_factory=now_ms)
    role: ClassVar[Literal["user"]] = "user"

    @property
    def text(self) -> str:
        """The text: ``content`` itself when it is a str, else its text blocks joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(block.text for block in self.content if isinstance(block, TextContent))


@dataclass
class AssistantMessage:
    """One response of the model, final or being streamed."""

    content: list[AssistantContent] = field(default_factory=list)
    api: str = ""
    provider: str = ""
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    thinking_level: ThinkingLevel | None = None
    timestamp: int = field(default_factory=now_ms)
    role: ClassVar[Literal["assistant"]] = "assistant"

    @property
    def text(self) -> str:
        """The text blocks joined together (thinking and tool calls left out)."""
        return "".join(block.text for block in self.content if isinstance(block, TextContent))

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool-call blocks, in source order."""
        return [block for block in self.content if isinstance(block, ToolCall)]


@dataclass
class ToolResultMessage:
    """The result of one tool call. ``details`` is for the UI and logs, never the model."""

    tool_call_id: str = ""
    tool_name: str = ""
    content: list[UserContent] = field(default_factory=list)
    details: Any = None
    usage: Usage | None = None
    is_error: bool = False
    duration_ms: int | None = None
    timestamp: int = field(default_factory=now_ms)
    role: ClassVar[Literal["toolResult"]] = "toolResult"

    @property
    def text(self) -> str:
        """The text blocks joined together."""
        return "".join(block.text for block in self.content if isinstance(block, TextContent))


Message: TypeAlias = Union[SystemMessage, UserMessage, AssistantMessage, ToolResultMessage]


class CustomAgentMessage(Protocol):
    """An application message: a dataclass with a ``role`` of its own (notes, UI events).

    ``register_message_type(role, cls)`` makes it serialisable. The default
    ``convert_to_llm`` leaves it out of model requests.
    """

    @property
    def role(self) -> str: ...


AgentMessage: TypeAlias = Union[Message, CustomAgentMessage]
"""A standard ``Message`` or an application message. Narrow with ``isinstance``."""
