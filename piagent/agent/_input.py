"""What an Agent accepts (input, listeners), what a run starts from, and what it sends to the
model by default."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

from ..messages import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    ImageContent,
    Message,
    SystemMessage,
    TextContent,
    ToolResultMessage,
    UserMessage,
    sanitize_surrogates,
)
from ..tools import AgentTool
from ..transcript import create_initial_system_message, to_tool_declaration
from ._queues import QueueLedger, Takings

__all__ = [
    "RunInput",
    "as_message",
    "check_listener",
    "check_message",
    "continue_input",
    "default_convert_to_llm",
    "normalise_input",
    "starting_transcript",
]

# what a run starts from: (prompts or None to continue, skip the initial steering poll,
# and for resume() the ids of the tool calls the store marked started, else None)
RunInput = tuple["list[AgentMessage] | None", bool, "frozenset[str] | None"]

_LLM_ROLES = frozenset({"system", "user", "assistant", "toolResult"})
_LLM_TYPES = frozenset({SystemMessage, UserMessage, AssistantMessage, ToolResultMessage})


def default_convert_to_llm(messages: list[AgentMessage]) -> list[Message]:
    """Keep the messages a model understands: system, user, assistant and toolResult; a
    ``CompactionSummaryMessage`` becomes the user message pi's coding agent sends for it.

    An application message whose ``role`` is one of those passes through as it is (the
    providers read it by its role).
    """
    if type(messages) is list and all(map(_LLM_TYPES.__contains__, map(type, messages))):
        # the usual transcript: every message kept (checked in C)
        return list(messages)  # type: ignore[arg-type]  # each of an _LLM_TYPES type
    return [m.to_user_message() if type(m) is CompactionSummaryMessage else m  # type: ignore[misc]
            for m in messages  # kept: a Message, one by role, a summary as pi frames it
            if type(m) in _LLM_TYPES or getattr(m, "role", None) in _LLM_ROLES
            or type(m) is CompactionSummaryMessage]


_ACCEPTED = ("a str, a message (UserMessage, AssistantMessage, ToolResultMessage, "
             "SystemMessage, or a dataclass with a role registered with register_message_type)")


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_message(value: Any, where: str) -> AgentMessage:
    """``value`` if it is a message (a dataclass instance with a ``str`` role), else ``TypeError``.

    ``where`` names the call in the error text (``"prompt()"``, ``"steer()"``).
    """
    if (dataclasses.is_dataclass(value) and not isinstance(value, type)
            and isinstance(getattr(value, "role", None), str)):
        if type(value) is UserMessage:
            _clean_user_text(value)
        return value  # type: ignore[return-value]  # a message by shape: a dataclass with a role
    if isinstance(value, dict):
        hint = ("; for {'role': 'user', 'content': ...} pass the text as a str, or "
                "UserMessage(content=...)" if value.get("role") == "user" else
                "; build the message (UserMessage(...)) or load it with message_from_dict()")
        msg = f"{where} got a dict {_describe(value)}, not a message{hint}."
        raise TypeError(msg)
    msg = f"{where} got {type(value).__name__} {_describe(value)}; it accepts {_ACCEPTED}."
    raise TypeError(msg)


def _clean_user_text(message: UserMessage) -> None:
    """A user message's text without lone surrogates (pi-ai's ``sanitizeSurrogates``; UTF-8
    cannot encode them), changed in place only where one is found."""
    content = message.content
    if isinstance(content, str):
        message.content = sanitize_surrogates(content)
        return
    for block in content:
        if type(block) is TextContent:
            block.text = sanitize_surrogates(block.text)


def as_message(message: str | AgentMessage, where: str = "steer()") -> AgentMessage:
    """A queued message: a ``str`` becomes a user message; anything else must be a message.
    Lone surrogates are removed from a user message's text."""
    if isinstance(message, str):
        return UserMessage(content=[TextContent(sanitize_surrogates(message))])
    return check_message(message, where)


def normalise_input(input: str | AgentMessage | Sequence[AgentMessage],
                    images: Sequence[ImageContent] | None = None,
                    where: str = "prompt()") -> list[AgentMessage]:
    """The prompts of a run: a ``str`` (with optional images), a message or a list of them.

    ``where`` names the call in the error text (``"prompt()"``, a runner's ``"start()"``).

    Raises ``TypeError`` at once, naming what is accepted, for anything else (a dict, a
    number, ``None``, a list of str).
    """
    if isinstance(input, str):
        return [UserMessage(content=[TextContent(sanitize_surrogates(input)),
                                     *_images(images, where)])]
    if images:
        msg = f"{where}: images= goes with a str input, not {type(input).__name__}."
        raise TypeError(msg)
    if isinstance(input, (list, tuple)):
        for item in input:
            if isinstance(item, str):
                msg = (f"{where} got a list containing the str {_describe(item)}; pass one "
                       f"str, or a list of messages (UserMessage(content=...)).")
                raise TypeError(msg)
            check_message(item, where)
        return list(input)
    return [check_message(input, where)]


def _images(images: Any, where: str) -> list[ImageContent]:
    """``images`` as a list of ``ImageContent``, else ``TypeError`` naming the first other."""
    if not images:
        return []
    if isinstance(images, str | bytes | ImageContent) or not isinstance(images, list | tuple):
        msg = (f"{where}: images= must be a list of ImageContent, got "
               f"{type(images).__name__} {_describe(images)}.")
        raise TypeError(msg)
    for index, image in enumerate(images):
        if not isinstance(image, ImageContent):
            msg = (f"{where}: images[{index}] is {type(image).__name__} {_describe(image)}, "
                   f"not an ImageContent: read the file and pass "
                   f"ImageContent(data=base64.b64encode(data).decode(), mime_type='image/png').")
            raise TypeError(msg)
    return list(images)


def check_listener(listener: Any) -> None:
    """``TypeError`` unless ``listener`` is a callable taking ``(event, signal)``."""
    if not callable(listener):
        msg = (f"subscribe() takes a callable listener(event, signal), not "
               f"{type(listener).__name__}.")
        raise TypeError(msg)
    try:
        signature = inspect.signature(listener)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return
    try:
        signature.bind(None, None)
    except TypeError:
        msg = (f"subscribe(): the listener {getattr(listener, '__qualname__', listener)!r} must "
               f"take two arguments, (event, signal), but its signature is {signature}; write "
               f"e.g. 'def on_event(event, signal): ...' or 'lambda event, signal: ...'.")
        raise TypeError(msg) from None


def starting_transcript(messages: list[AgentMessage], system_prompt: str,
                        tools: list[AgentTool]) -> list[AgentMessage]:
    """A new Agent's transcript: ``messages`` (given, or the store's) led by the initial
    system message when they have none."""
    messages = list(messages)
    if not (messages and isinstance(messages[0], SystemMessage)):
        initial = create_initial_system_message(
            system_prompt, [to_tool_declaration(t) for t in tools])
        if initial is not None:
            messages.insert(0, initial)
    return messages


def continue_input(messages: list[AgentMessage], queues: QueueLedger,
                   takings: Takings) -> RunInput:
    """What ``continue_()`` runs: queued input as prompts, or the transcript as it is."""
    if not messages or all(isinstance(m, SystemMessage) for m in messages):
        msg = "No messages to continue from"
        raise ValueError(msg)
    last = len(messages) - 1
    while last > 0 and type(messages[last]) is CompactionSummaryMessage:
        last -= 1  # a summary records a compaction: what the model saw last comes before it
    if getattr(messages[last], "role", None) != "assistant":
        return None, False, None
    with queues.lock:
        steering = takings.take(queues.steering)
        if steering:
            return steering, True, None
        follow_ups = takings.take(queues.follow_up)
        if follow_ups:
            return follow_ups, False, None
    msg = "Cannot continue from message role: assistant"
    raise ValueError(msg)
