"""Replaying the transcript's system messages into the current prompt and tool set.

System messages carry the system prompt and the tool declarations: ``content`` appends
instructions (joined with blank lines), ``sections`` patch named sections (``None``
deletes), ``tools_removed`` are applied before ``tools_added``, and a redefinition is a
removal plus an addition. Non-system roles are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .messages import AgentMessage, SystemMessage, ToolDeclaration

__all__ = [
    "ToolStateChanges",
    "apply_tool_changes",
    "collapse_system_messages",
    "create_initial_system_message",
    "get_current_system_message",
    "get_current_system_prompt",
    "get_current_tools",
    "get_system_message_text",
    "get_tool_state_changes",
    "has_non_additive_tool_changes",
    "has_tool_redefinitions",
    "render_system_message_update",
    "to_tool_declaration",
]


def to_tool_declaration(tool: Any) -> ToolDeclaration:
    """What the model sees of a tool: name, description, a copy of its parameters and its
    ``constrained_sampling`` (pi's ``toToolDeclaration``)."""
    if isinstance(tool, ToolDeclaration):
        return ToolDeclaration(tool.name, tool.description, json.loads(json.dumps(tool.parameters)),
                               constrained_sampling=tool.constrained_sampling)
    return ToolDeclaration(tool.name, tool.description or "",
                           json.loads(json.dumps(tool.parameters or {})),
                           constrained_sampling=getattr(tool, "constrained_sampling", None))


def create_initial_system_message(
    system_prompt: str | None, tools: Sequence[ToolDeclaration] | None = None
) -> SystemMessage | None:
    """The leading system message (timestamp 0), or ``None`` with no prompt and no tools."""
    if not system_prompt and not tools:
        return None
    return SystemMessage(content=system_prompt or "",
                         tools_added=list(tools) if tools else None, timestamp=0)


def apply_tool_changes(current: dict[str, ToolDeclaration], message: SystemMessage) -> None:
    """Fold one system message's tool changes into ``current`` (removals first)."""
    for name in message.tools_removed or ():
        current.pop(name, None)
    for declaration in message.tools_added or ():
        current[declaration.name] = declaration


def get_current_tools(messages: Iterable[AgentMessage]) -> list[ToolDeclaration]:
    """The tools declared by replaying every system message in order."""
    current: dict[str, ToolDeclaration] = {}
    # isinstance(message, SystemMessage) for each, in C: this runs before every request
    for message in filter(SystemMessage.__instancecheck__, messages):
        apply_tool_changes(current, message)  # type: ignore[arg-type]  # filtered by type
    return list(current.values())


def get_current_system_message(messages: Iterable[AgentMessage]) -> SystemMessage | None:
    """All system messages folded into one, or ``None`` when there is none and no tools."""
    contents: list[str] = []
    sections: dict[str, str] = {}
    tools: dict[str, ToolDeclaration] = {}
    timestamp: int | None = None
    for message in messages:
        if not isinstance(message, SystemMessage):
            continue
        if timestamp is None:
            timestamp = message.timestamp
        text = message.text
        if text:
            contents.append(text)
        for name, value in (message.sections or {}).items():
            if value is None:
                sections.pop(name, None)
            else:
                sections[name] = value
        apply_tool_changes(tools, message)
    if timestamp is None and not tools:
        return None
    return SystemMessage(
        content="\n\n".join(contents),
        sections=dict(sections) if sections else None,
        tools_added=list(tools.values()) if tools else None,
        timestamp=timestamp or 0,
    )


def get_system_message_text(message: SystemMessage | None) -> str:
    """A system message's content followed by its section values, joined by blank lines."""
    if message is None:
        return ""
    text = message.text
    parts = [text] if text else []
    parts.extend(value for value in (message.sections or {}).values() if value)
    return "\n\n".join(parts)


def get_current_system_prompt(messages: Iterable[AgentMessage]) -> str:
    """The system prompt the transcript's system messages add up to ("" when none)."""
    return get_system_message_text(get_current_system_message(messages))


def render_system_message_update(message: SystemMessage) -> str:
    """A mid-conversation section patch as text, one paragraph per section."""
    lines = []
    for name, value in (message.sections or {}).items():
        if value is None:
            lines.append(f'Removed system prompt section "{name}".')
        else:
            lines.append(f'Updated system prompt section "{name}":\n\n{value}')
    return "\n\n".join(lines)


def collapse_system_messages(messages: Sequence[AgentMessage]) -> list[AgentMessage]:
    """The replayed system message first, then every non-system message (idempotent)."""
    head = get_current_system_message(messages)
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    return [head, *rest] if head is not None else rest


@dataclass
class ToolStateChanges:
    """The declarations to add and the names to remove to go from one tool set to another."""

    tools_added: list[ToolDeclaration] = field(default_factory=list)
    tools_removed: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when nothing changes."""
        return not self.tools_added and not self.tools_removed


def get_tool_state_changes(
    previous: Sequence[ToolDeclaration], current: Sequence[ToolDeclaration]
) -> ToolStateChanges:
    """Added: new or changed tools in current order. Removed: gone or changed, previous order."""
    before = {t.name: t for t in previous}
    after = {t.name: t for t in current}
    added = [t for t in current if before.get(t.name) != t]
    removed = [t.name for t in previous if after.get(t.name) != t]
    return ToolStateChanges(added, removed)


def has_tool_redefinitions(messages: Iterable[AgentMessage]) -> bool:
    """True if some tool name was declared twice with different declarations."""
    seen: dict[str, ToolDeclaration] = {}
    for message in messages:
        if isinstance(message, SystemMessage):
            for declaration in message.tools_added or ():
                earlier = seen.setdefault(declaration.name, declaration)
                if earlier != declaration:
                    return True
    return False


def has_non_additive_tool_changes(messages: Iterable[AgentMessage]) -> bool:
    """True if any tool was removed or any name was declared twice."""
    seen: set[str] = set()
    for message in messages:
        if isinstance(message, SystemMessage):
            if message.tools_removed:
                return True
            for declaration in message.tools_added or ():
                if declaration.name in seen:
                    return True
                seen.add(declaration.name)
    return False
