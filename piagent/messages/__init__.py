"""Messages and content blocks, and their JSON form.

The dataclasses use snake_case attributes; the JSON form uses pi's camelCase keys and
``role``/``type`` strings, so a transcript written by piagent reads the same as one written
by pi, and back. Decoding dispatches on ``role`` and ``type``, never on the shape.

Application messages are dataclasses with their own ``role``; ``register_message_type``
makes them serialisable (through dataclasses-json). Every field pi writes survives a load and
a dump; keys piagent has no attribute for are kept in each object's ``extra``. This module
knows nothing of the loop.
"""

from __future__ import annotations

from ._json import (
    content_from_dict,
    content_to_dict,
    message_from_dict,
    message_to_dict,
    messages_from_json,
    messages_to_json,
    register_message_type,
    usage_from_dict,
    usage_to_dict,
)
from ._summary import COMPACTION_SUMMARY_PREFIX, COMPACTION_SUMMARY_SUFFIX, CompactionSummaryMessage
from ._types import (
    AgentMessage,
    AssistantContent,
    AssistantMessage,
    AssistantMessageDiagnostic,
    Cost,
    CustomAgentMessage,
    DeferredHandle,
    ImageContent,
    Message,
    NestedToolCallRecord,
    NestedToolCalls,
    StopReason,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ThinkingLevel,
    ToolCall,
    ToolDeclaration,
    ToolResultMessage,
    Usage,
    UserContent,
    UserMessage,
    now_ms,
)
from ._unicode import has_surrogates, sanitize_surrogates, sanitize_surrogates_in

__all__ = [
    "COMPACTION_SUMMARY_PREFIX",
    "COMPACTION_SUMMARY_SUFFIX",
    "AgentMessage",
    "AssistantContent",
    "AssistantMessage",
    "AssistantMessageDiagnostic",
    "CompactionSummaryMessage",
    "Cost",
    "CustomAgentMessage",
    "DeferredHandle",
    "ImageContent",
    "Message",
    "NestedToolCallRecord",
    "NestedToolCalls",
    "StopReason",
    "SystemMessage",
    "TextContent",
    "ThinkingContent",
    "ThinkingLevel",
    "ToolCall",
    "ToolDeclaration",
    "ToolResultMessage",
    "Usage",
    "UserContent",
    "UserMessage",
    "content_from_dict",
    "content_to_dict",
    "has_surrogates",
    "message_from_dict",
    "message_to_dict",
    "messages_from_json",
    "messages_to_json",
    "now_ms",
    "register_message_type",
    "sanitize_surrogates",
    "sanitize_surrogates_in",
    "usage_from_dict",
    "usage_to_dict",
]
