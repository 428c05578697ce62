"""What the admin shows of a conversation and of a run, as plain values for its templates
(``templates/piagent/admin/*.html``, which escape every one of them): a stored transcript
decoded message by message (text, thinking, tool calls and their arguments, tool results
with their images, errors, system messages), a run's state as the backends read it and a
one-line summary of each of its events.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...messages import (
    AssistantMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    message_to_dict,
)
from ...runs.backend import LIVE_STATES
from ...sessions import SessionCorruptError
from ...sessions.records import decode_message

__all__ = ["Block", "Item", "event_summary", "json_text", "run_state", "transcript_items",
           "when"]

# an image shown inline: a plain image type and base64 text (anything else is described)
_MIME = re.compile(r"image/[a-z0-9.+-]{1,40}")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_SUMMARY = 120  # characters of text in an event's summary


@dataclass
class Block:
    """One part of a message: ``kind`` ``text``, ``thinking``, ``call`` (``name``, ``call_id``
    and ``text`` the arguments' JSON), ``image`` (``mime``, ``data`` base64) or ``note``
    (``text``: what could not be shown as it is)."""

    kind: str
    text: str = ""
    name: str = ""
    call_id: str = ""
    mime: str = ""
    data: str = ""


@dataclass
class Item:
    """One record of the transcript: its sequence number, role, when it was stored, its
    blocks, and for an assistant message or tool result what the admin marks (``error``:
    the error message, an aborted or failed reply, a tool result that is an error)."""

    seq: int
    role: str
    stored: str
    blocks: list[Block] = field(default_factory=list)
    title: str = ""  # a tool result's tool and call, an assistant's model
    error: str = ""
    meta: str = ""  # stop reason, usage


def when(epoch: float | None) -> str:
    """An epoch time as UTC text (``""`` for none)."""
    if epoch is None:
        return ""
    moment = datetime.datetime.fromtimestamp(float(epoch), tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def json_text(value: Any) -> str:
    """``value`` as indented JSON (any non-JSON value by its ``repr``)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=repr)


def _image(image: ImageContent) -> Block:
    if _MIME.fullmatch(image.mime_type or "") and _BASE64.fullmatch(image.data or ""):
        return Block("image", mime=image.mime_type, data="".join(image.data.split()))
    return Block("note", text=f"an image of type {image.mime_type!r} that is not shown")


def _content(content: str | Iterable[Any]) -> list[Block]:
    if isinstance(content, str):
        return [Block("text", text=content)] if content else []
    blocks: list[Block] = []
    for part in content:
        if isinstance(part, TextContent):
            blocks.append(Block("text", text=part.text))
        elif isinstance(part, ImageContent):
            blocks.append(_image(part))
        elif isinstance(part, ThinkingContent):
            blocks.append(Block("thinking", text="(redacted thinking)" if part.redacted
                                and not part.thinking else part.thinking))
        elif isinstance(part, ToolCall):
            blocks.append(Block("call", name=part.name, call_id=part.id,
                                text=json_text(part.arguments)))
            if part.arguments_error:
                blocks.append(Block("note", text=f"arguments error: {part.arguments_error}"))
        else:
            blocks.append(Block("note", text=json_text(getattr(part, "__dict__", repr(part)))))
    return blocks


def _assistant(item: Item, message: AssistantMessage) -> None:
    item.blocks = _content(message.content)
    item.title = "/".join(p for p in (message.provider, message.model) if p)
    usage = message.usage
    item.meta = (f"stop reason {message.stop_reason}; {usage.total_tokens} tokens, "
                 f"${usage.cost.total:.6f}")
    if message.stop_reason in ("error", "aborted") or message.error_message:
        item.error = f"{message.stop_reason}: {message.error_message or '(no message)'}"


def _system(item: Item, message: SystemMessage) -> None:
    item.blocks = _content(message.content)
    for name, text in sorted((message.sections or {}).items()):
        item.blocks.append(Block("note", text=f"section {name}: "
                                 f"{'(removed)' if text is None else text}"))
    if message.tools_added:
        names = ", ".join(tool.name for tool in message.tools_added)
        item.blocks.append(Block("note", text=f"tools added: {names}"))
    if message.tools_removed:
        item.blocks.append(Block("note", text=f"tools removed: "
                                 f"{', '.join(message.tools_removed)}"))


def _item(session_id: str, seq: int, data: str | None, stored: float) -> Item:
    try:
        message = decode_message(session_id, seq, data)
    except SessionCorruptError as exc:
        return Item(seq, "unreadable", when(stored), error=str(exc))
    item = Item(seq, str(getattr(message, "role", "?")), when(stored))
    if isinstance(message, UserMessage):
        item.blocks = _content(message.content)
    elif isinstance(message, AssistantMessage):
        _assistant(item, message)
    elif isinstance(message, ToolResultMessage):
        item.blocks = _content(message.content)
        item.title = f"{message.tool_name} ({message.tool_call_id})"
        if message.is_error:
            item.error = "the tool's result is an error"
    elif isinstance(message, SystemMessage):
        _system(item, message)
    else:  # an application's own message, or a summary: its JSON
        item.blocks = [Block("note", text=json_text(message_to_dict(message)))]
    return item


def transcript_items(session_id: str, rows: Iterable[tuple[int, str, str | None, float]]
               ) -> list[Item]:
    """The stored messages of a session as the admin shows them, from its records
    ``(seq, kind, data, created_at)`` in order (start marks left out)."""
    return [_item(session_id, seq, data, stored) for seq, kind, data, stored in rows
            if kind != "started"]


def run_state(state: str, lease_expires_at: float, now: float | None = None) -> str:
    """A run's state as the backends read it: a live run past its lease is ``lost``."""
    now = time.time() if now is None else now
    return "lost" if state in LIVE_STATES and lease_expires_at < now else state


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SUMMARY else text[:_SUMMARY - 1] + "…"


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict):
            if part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif part.get("type") == "toolCall":
                parts.append(f"[call {part.get('name', '')}]")
            elif part.get("type") == "image":
                parts.append("[image]")
    return " ".join(parts)


def event_summary(data: str) -> tuple[str, str]:
    """A run event's ``type`` and a one-line summary of it, from its stored JSON."""
    try:
        event = json.loads(data)
    except ValueError as exc:
        return "?", f"undecodable event: {exc}"
    if not isinstance(event, dict):
        return "?", _short(repr(event))
    kind = str(event.get("type", "?"))
    message = event.get("message")
    if kind in ("message_start", "message_end") and isinstance(message, dict):
        summary = f"{message.get('role', '?')}: {_message_text(message)}"
        if message.get("errorMessage"):
            summary += f" (error: {message['errorMessage']})"
    elif kind == "message_update":
        update = event.get("assistantMessageEvent")
        update = update if isinstance(update, dict) else {}
        summary = f"{update.get('type', '')} {update.get('delta', '')}"
    elif kind in ("tool_execution_start", "tool_approval_request"):
        summary = f"{event.get('toolName', '')} {json.dumps(event.get('args'), default=repr)}"
    elif kind == "tool_execution_end":
        summary = f"{event.get('toolName', '')}{' (error)' if event.get('isError') else ''}"
    elif kind == "agent_end":
        summary = f"{len(event.get('messages') or [])} messages"
    else:
        rest = {k: v for k, v in event.items() if k not in ("type", "message", "messages")}
        summary = json.dumps(rest, ensure_ascii=False, default=repr) if rest else ""
    return kind, _short(summary)
