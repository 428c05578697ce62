"""The message and content dataclasses, pi's shapes with snake_case attributes.

Every dataclass has an ``extra`` dict, after its typed attributes (keyword-only): the JSON
keys it has no attribute for (a field a later pi adds) and explicit ``null``/``false``
values its attributes cannot tell from "absent" (``"details": null``, ``"redacted":
false``), by their JSON key. ``message_to_dict`` writes them back after the attributes' keys,
so a transcript pi wrote loads and dumps to the same JSON; a key an attribute writes wins.
"""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, Literal, Protocol, TypeAlias, TypedDict, Union

StopReason: TypeAlias = Literal["stop", "length", "toolUse", "error", "aborted", "pending",
                                "deferred"]
"""Why a response ended: the loop sees "stop", "length", "toolUse", "error" and "aborted";
"pending" marks a message still being built (pi's proxy client) and "deferred" a response
the provider continues asynchronously (``AssistantMessage.deferred`` holds its handle)."""
ThinkingLevel: TypeAlias = Literal["off", "minimal", "low", "medium", "high", "xhigh", "max"]


def now_ms() -> int:
    """The current wall-clock time in epoch milliseconds, pi's timestamp unit."""
    return round(time.time() * 1000)


# --- pi's JSON shapes kept as dicts (camelCase keys, as pi writes them) -------------------


class _DiagnosticKeys(TypedDict):
    type: str
    timestamp: int


class AssistantMessageDiagnostic(_DiagnosticKeys, total=False):
    """Something a provider adapter noted while answering (a retry, a recovered error).

    ``error`` is ``{"message", "name"?, "stack"?, "code"?}``; ``details`` any JSON object.
    """

    error: dict[str, Any]
    details: dict[str, Any]


class _DeferredKeys(TypedDict):
    provider: str
    modelId: str
    api: str
    id: str


class DeferredHandle(_DeferredKeys, total=False):
    """The handle of a response a provider continues asynchronously (``stopReason``
    "deferred"): ``id`` is the provider's token; ``data`` what it needs to rebuild the
    message later."""

    expiresAt: int
    pollAfterMs: int
    data: Any


class _NestedCallKeys(TypedDict):
    id: str
    name: str
    status: Literal["ok", "error", "unfinished"]


class NestedToolCallRecord(_NestedCallKeys, total=False):
    """One call a tool made to another tool while it ran. ``arguments`` is left out when
    too large (``argumentsBytes`` gives its size); ``error`` is the truncated error text."""

    arguments: dict[str, Any]
    argumentsBytes: int
    durationMs: int
    error: str


class NestedToolCalls(TypedDict):
    """The bounded record of a tool's nested calls; ``complete`` is False when calls were
    dropped, arguments left out, or calls had not finished."""

    calls: list[NestedToolCallRecord]
    complete: bool


# --- content blocks -------------------------------------------------------------------


@dataclass
class TextContent:
    """Text, from a user, a tool or the model."""

    text: str = ""
    text_signature: str | None = None
    """An opaque provider signature (OpenAI Responses item ids, proxy content signatures)."""
    _: KW_ONLY
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys and explicit nulls, written back as they were (module docstring)."""
    type: ClassVar[Literal["text"]] = "text"


@dataclass
class ThinkingContent:
    """The model's reasoning. ``redacted`` blocks carry opaque data valid only for one model."""

    thinking: str = ""
    thinking_signature: str | None = None
    redacted: bool = False
    _: KW_ONLY
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys, explicit nulls and an explicit ``"redacted": false``."""
    type: ClassVar[Literal["thinking"]] = "thinking"


@dataclass
class ImageContent:
    """An image as base64 ``data`` with its ``mime_type``."""

    data: str = ""
    mime_type: str = "image/png"
    _: KW_ONLY
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys and explicit nulls, written back as they were."""
    type: ClassVar[Literal["image"]] = "image"


@dataclass
class ToolCall:
    """A tool call the model asked for: ``arguments`` is the parsed JSON object."""

    id: str = ""
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    thought_signature: str | None = None
    _: KW_ONLY
    namespace: str | None = None
    """The OpenAI Responses namespace of a dynamically loaded or namespaced tool."""
    arguments_error: str | None = None
    """Set when the model's complete arguments text was not a JSON object (``arguments`` is
    then ``{}``): the problem and the text the model sent."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys and explicit nulls, written back as they were."""
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
    _: KW_ONLY
    total_from_provider: bool = False
    """``True`` when ``total`` is the cost the provider billed (OpenRouter reports it), not the
    catalogue's estimate (pi-ai 1.6's ``totalFromProvider``; in JSON only when true)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys, written back as they were."""


@dataclass
class Usage:
    """Token counts of one response, and what they cost."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: Cost = field(default_factory=Cost)
    _: KW_ONLY
    cache_write_1h: int | None = None
    """The part of ``cache_write`` written with 1-hour retention (Anthropic reports it)."""
    reasoning: int | None = None
    """Reasoning tokens, a part of ``output``, when the provider reports them."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys and explicit nulls, written back as they were."""


# --- messages -------------------------------------------------------------------------


@dataclass
class ToolDeclaration:
    """What the model is told about a tool: its name, description and JSON Schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    _: KW_ONLY
    constrained_sampling: Literal[False] | dict[str, Any] | None = None
    """Provider-side constrained sampling: ``False`` turns it off; ``{"type": "json_schema",
    "strict": "prefer" | "require"}`` or ``{"type": "grammar", "variants": {...}}``."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys and explicit nulls, written back as they were."""


@dataclass
class SystemMessage:
    """Instructions and tool declarations, carried in the transcript.

    ``content`` appends instructions (a string, or text blocks read as their texts joined
    by newlines, as pi reads them); ``sections`` patches named sections (a ``None`` value
    deletes one); ``tools_added`` declares tools from here on; ``tools_removed`` names tools
    that are gone. ``get_current_system_prompt`` and ``get_current_tools`` replay them.
    """

    content: str | list[TextContent] = ""
    sections: dict[str, str | None] | None = None
    tools_added: list[ToolDeclaration] | None = None
    tools_removed: list[str] | None = None
    timestamp: int = field(default_factory=now_ms)
    _: KW_ONLY
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys and explicit nulls, written back as they were."""
    role: ClassVar[Literal["system"]] = "system"

    @property
    def text(self) -> str:
        """The instructions this message appends: ``content`` itself when it is a str, else
        its text blocks joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(block.text for block in self.content if isinstance(block, TextContent))


@dataclass
class UserMessage:
    """A message from the user: a string or a list of text and image blocks."""

    content: str | list[UserContent] = ""
    timestamp: int = field(default_factory=now_ms)
    _: KW_ONLY
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys and explicit nulls, written back as they were."""
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
    """The thinking level the agent loop requested for this response."""
    timestamp: int = field(default_factory=now_ms)
    """When the request started (epoch milliseconds)."""
    _: KW_ONLY
    duration_ms: int | None = None
    """Milliseconds from ``timestamp`` until the response ended (a monotonic clock). Set by
    ``AssistantMessageEventStream`` on the final message of a response that started after
    the stream was made; ``None`` for older transcripts and responses that started elsewhere."""
    response_model: str | None = None
    """The model the provider says answered, when it differs in name from ``model``."""
    response_id: str | None = None
    """The provider's id of this response."""
    provider_thinking_level: str | None = None
    """The provider's own effort level used for this response."""
    raw_stop_reason: str | None = None
    """The provider's stop reason before it was mapped to ``stop_reason``."""
    end_turn: bool | None = None
    """Whether the provider says the model ended its turn (kept for debugging)."""
    diagnostics: list[AssistantMessageDiagnostic] | None = None
    """What the adapter noted while answering (retries, recovered errors), as pi's JSON."""
    deferred: DeferredHandle | None = None
    """The handle of a response the provider continues asynchronously (``stop_reason``
    "deferred"), as pi's JSON."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys and explicit nulls, written back as they were."""
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
    """The result of one tool call. ``details`` is for the UI and logs, never the model.

    ``details`` ``None`` is written as no key; an explicit ``"details": null`` (a tool that
    returned ``null``) is kept in ``extra``.
    """

    tool_call_id: str = ""
    tool_name: str = ""
    content: list[UserContent] = field(default_factory=list)
    details: Any = None
    usage: Usage | None = None
    is_error: bool = False
    duration_ms: int | None = None
    timestamp: int = field(default_factory=now_ms)
    _: KW_ONLY
    nested_calls: NestedToolCalls | None = None
    """The calls this tool made to other tools (a codemode script), as pi's JSON; kept for
    the record, never sent to the model."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Unknown JSON keys and explicit nulls (``"details": null``), written back as they were."""
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
