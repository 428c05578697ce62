"""What an Agent accepts as input, and what it sends to the model by default."""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import (
    AgentMessage,
    AssistantMessage,
    ImageContent,
    Message,
    SystemMessage,
    TextContent,
    ToolResultMessage,
    UserMessage,
)

__all__ = ["as_message", "default_convert_to_llm", "normalise_input"]

_LLM_ROLES = frozenset({"system", "user", "assistant", "toolResult"})
_LLM_TYPES = frozenset({SystemMessage, UserMessage, AssistantMessage, ToolResultMessage})


def default_convert_to_llm(messages: list[AgentMessage]) -> list[Message]:
    """Keep the messages a model understands: system, user, assistant and toolResult.

    An application message whose ``role`` is one of those passes through as it is (the
    providers read it by its role).
    """
    return [m for m in messages  # type: ignore[misc]  # kept: a Message, or one by role
            if type(m) in _LLM_TYPES or getattr(m, "role", None) in _LLM_ROLES]


def as_message(message: str | AgentMessage) -> AgentMessage:
    """A queued message: a ``str`` becomes a user message."""
    if isinstance(message, str):
        return UserMessage(content=[TextContent(message)])
    return message


def normalise_input(input: str | AgentMessage | Sequence[AgentMessage],
                    images: Sequence[ImageContent] | None) -> list[AgentMessage]:
    """The prompts of a run: a ``str`` (with optional images), a message or a list of them."""
    if isinstance(input, str):
        return [UserMessage(content=[TextContent(input), *(images or ())])]
    if isinstance(input, (list, tuple)):
        return list(input)
    return [input]  # type: ignore[list-item]  # a single message
