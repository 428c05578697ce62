"""Agent events: what the loop reports, each a dataclass with pi's ``type`` string.

``type`` is a ``Literal`` class attribute, so ``if event.type == "message_end":`` narrows
``AgentEvent`` to ``MessageEndEvent`` for a type checker.

``event_to_dict`` gives pi's camelCase JSON of an event (for web pages, logs, proxies).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias, Union

from .messages import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    ToolResultMessage,
    Usage,
    content_to_dict,
    message_to_dict,
    usage_to_dict,
)
from .stream import AssistantMessageEvent
from .tools import AgentToolResult

__all__ = [
    "AgentEndEvent",
    "AgentEvent",
    "AgentStartEvent",
    "CompactionEndEvent",
    "CompactionStartEvent",
    "MessageEndEvent",
    "MessageStartEvent",
    "MessageUpdateEvent",
    "ToolApprovalRequestEvent",
    "ToolExecutionEndEvent",
    "ToolExecutionStartEvent",
    "ToolExecutionUpdateEvent",
    "TurnEndEvent",
    "TurnStartEvent",
    "assistant_event_to_dict",
    "event_to_dict",
]


@dataclass(slots=True)
class AgentStartEvent:
    """A run started."""

    type: ClassVar[Literal["agent_start"]] = "agent_start"


@dataclass(slots=True)
class AgentEndEvent:
    """A run ended; ``messages`` are all the messages it added, in order."""

    messages: list[AgentMessage] = field(default_factory=list)
    type: ClassVar[Literal["agent_end"]] = "agent_end"


@dataclass(slots=True)
class TurnStartEvent:
    """A turn (one model response plus the tools it calls) started."""

    type: ClassVar[Literal["turn_start"]] = "turn_start"


@dataclass(slots=True)
class TurnEndEvent:
    """A turn ended with its assistant message and tool results (source order)."""

    message: AssistantMessage
    tool_results: list[ToolResultMessage] = field(default_factory=list)
    type: ClassVar[Literal["turn_end"]] = "turn_end"


@dataclass(slots=True)
class MessageStartEvent:
    """A message is about to enter the transcript (assistant: streaming begins)."""

    message: AgentMessage
    type: ClassVar[Literal["message_start"]] = "message_start"


@dataclass(slots=True)
class MessageUpdateEvent:
    """The streaming assistant message changed; ``message`` is a shallow copy."""

    message: AssistantMessage
    assistant_message_event: AssistantMessageEvent
    type: ClassVar[Literal["message_update"]] = "message_update"


@dataclass(slots=True)
class MessageEndEvent:
    """A message entered the transcript."""

    message: AgentMessage
    type: ClassVar[Literal["message_end"]] = "message_end"


@dataclass(slots=True)
class ToolExecutionStartEvent:
    """A tool call is being prepared; ``args`` are the model's raw arguments."""

    tool_call_id: str
    tool_name: str
    args: Any
    type: ClassVar[Literal["tool_execution_start"]] = "tool_execution_start"


@dataclass(slots=True)
class ToolExecutionUpdateEvent:
    """A running tool reported progress."""

    tool_call_id: str
    tool_name: str
    args: Any
    partial_result: Any
    type: ClassVar[Literal["tool_execution_update"]] = "tool_execution_update"


@dataclass(slots=True)
class ToolExecutionEndEvent:
    """A tool call finished; ``result`` is the full ``AgentToolResult``."""

    tool_call_id: str
    tool_name: str
    result: AgentToolResult
    is_error: bool
    duration_ms: int | None = None
    """Milliseconds ``execute`` took (monotonic clock); ``None`` when the tool did not run."""
    type: ClassVar[Literal["tool_execution_end"]] = "tool_execution_end"


@dataclass(slots=True)
class ToolApprovalRequestEvent:
    """A tool call waits for a person's decision (``Agent.approve()``/``deny()``); ``args``
    are the model's arguments, ``digest`` their sha256, ``call_key`` the call's key
    (``PendingApproval.call_key``: unique in the session whatever the id; what a page
    sends to decide; docs/approvals.md). Sent once the rest of the batch is done, just
    before the run ends waiting. Not one of pi's events."""

    tool_call_id: str
    tool_name: str
    args: Any
    digest: str
    call_key: str = ""
    type: ClassVar[Literal["tool_approval_request"]] = "tool_approval_request"


@dataclass(slots=True)
class CompactionStartEvent:
    """The older part of the conversation is being summarised (docs/compaction.md):
    ``reason`` is ``"threshold"`` (the next request would not fit), ``"overflow"`` (the
    provider refused the request as too long; it is retried after) or ``"manual"``
    (``Agent.compact()``). pi-coding-agent's session event."""

    reason: Literal["threshold", "overflow", "manual"]
    type: ClassVar[Literal["compaction_start"]] = "compaction_start"


@dataclass(slots=True)
class CompactionEndEvent:
    """A compaction ended. On success ``summary`` is the ``CompactionSummaryMessage`` now
    in the transcript, ``tokens_before``/``tokens_after`` the estimated context before and
    after, ``usage`` what the summary requests spent (``usage.cost`` their cost). On failure
    ``summary`` is ``None``, the history is unchanged and ``error_message`` says why.
    ``will_retry``: the refused request is sent again."""

    reason: Literal["threshold", "overflow", "manual"]
    summary: CompactionSummaryMessage | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    usage: Usage | None = None
    error_message: str | None = None
    aborted: bool = False
    will_retry: bool = False
    type: ClassVar[Literal["compaction_end"]] = "compaction_end"


AgentEvent: TypeAlias = Union[
    AgentStartEvent, AgentEndEvent, TurnStartEvent, TurnEndEvent, MessageStartEvent,
    MessageUpdateEvent, MessageEndEvent, ToolExecutionStartEvent, ToolExecutionUpdateEvent,
    ToolExecutionEndEvent, ToolApprovalRequestEvent, CompactionStartEvent, CompactionEndEvent,
]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _jsonable(value: Any) -> Any:
    """A JSON-ready form of tool results, partial results and other free-form values."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if (getattr(value, "role", None) is not None and dataclasses.is_dataclass(value)
            and not isinstance(value, type)):
        return message_to_dict(value)  # type: ignore[arg-type]  # a message has a role
    if getattr(value, "type", None) in ("text", "image", "thinking", "toolCall"):
        return content_to_dict(value)
    if isinstance(value, Usage):  # pi's keys, extras included
        return usage_to_dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is not None and item is not False:
                out[_camel(f.name)] = _jsonable(item)
        return out
    return repr(value)


def assistant_event_to_dict(event: AssistantMessageEvent, *, partial: bool = True) -> dict[str, Any]:
    """pi's JSON of an assistant stream event; ``partial=False`` leaves the partial out."""
    out: dict[str, Any] = {"type": event.type}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if f.name == "partial":
            if partial:
                out["partial"] = message_to_dict(value)
        elif f.name in ("message", "error"):
            out[f.name] = message_to_dict(value)
        elif f.name == "tool_call":
            out["toolCall"] = content_to_dict(value)
        else:
            out[_camel(f.name)] = value
    return out


def event_to_dict(event: AgentEvent, *, partial: bool = True) -> dict[str, Any]:
    """pi's camelCase JSON form of an agent event.

    A ``message_update``'s ``assistantMessageEvent`` carries its ``partial`` message, as
    pi's does; ``partial=False`` leaves it out (it is the event's ``message`` again).
    """
    out: dict[str, Any] = {"type": event.type}
    if isinstance(event, (MessageStartEvent, MessageEndEvent)):
        out["message"] = message_to_dict(event.message)
    elif isinstance(event, MessageUpdateEvent):
        out["message"] = message_to_dict(event.message)
        out["assistantMessageEvent"] = assistant_event_to_dict(
            event.assistant_message_event, partial=partial)
    elif isinstance(event, AgentEndEvent):
        out["messages"] = [message_to_dict(m) for m in event.messages]
    elif isinstance(event, TurnEndEvent):
        out["message"] = message_to_dict(event.message)
        out["toolResults"] = [message_to_dict(m) for m in event.tool_results]
    elif isinstance(event, (ToolExecutionStartEvent, ToolExecutionUpdateEvent,
                            ToolExecutionEndEvent)):
        out["toolCallId"] = event.tool_call_id
        out["toolName"] = event.tool_name
        if not isinstance(event, ToolExecutionEndEvent):
            out["args"] = _jsonable(event.args)
        if isinstance(event, ToolExecutionUpdateEvent):
            out["partialResult"] = _jsonable(event.partial_result)
        if isinstance(event, ToolExecutionEndEvent):
            out["result"] = _jsonable(event.result)
            out["isError"] = event.is_error
            if event.duration_ms is not None:
                out["durationMs"] = event.duration_ms
    elif isinstance(event, ToolApprovalRequestEvent):
        out["toolCallId"] = event.tool_call_id
        out["toolName"] = event.tool_name
        out["args"] = _jsonable(event.args)
        out["digest"] = event.digest
        if event.call_key:
            out["callKey"] = event.call_key
    elif isinstance(event, CompactionStartEvent):
        out["reason"] = event.reason
    elif isinstance(event, CompactionEndEvent):
        out["reason"] = event.reason
        out["result"] = None if event.summary is None else {
            "summary": event.summary.summary, "firstKept": event.summary.first_kept,
            "tokensBefore": event.tokens_before, "estimatedTokensAfter": event.tokens_after,
            "usage": None if event.usage is None else usage_to_dict(event.usage),
            "details": event.summary.details}
        out["aborted"] = event.aborted
        out["willRetry"] = event.will_retry
        if event.error_message is not None:
            out["errorMessage"] = event.error_message
    return out
