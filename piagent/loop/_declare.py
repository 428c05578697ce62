"""``ToolDeclarations``: keep the transcript's tool declarations equal to the runnable set.

Before each request the difference between the tools declared by the transcript's system
messages and the executable ``context.tools`` becomes ``tools_added``/``tools_removed`` on
a system message. A pending system message's tool fields are treated as intent and
overwritten with the real delta; otherwise a new system message goes before the first
non-system pending message.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from ..messages import AgentMessage, SystemMessage, ToolDeclaration, now_ms
from ..transcript import (
    ToolStateChanges,
    apply_tool_changes,
    get_tool_state_changes,
    to_tool_declaration,
)


class ToolDeclarations:
    """The tool declarations of one run's transcript, replayed incrementally but checked.

    Before each request the transcript's declared set must be what replaying it from the
    first message gives (pi's ``declareToolChanges`` replays it every time). Replaying a
    long transcript costs more than the rest of a turn, so the set is folded in only from
    the messages appended since the last request, after checking what that assumes: the
    list still starts with the messages replayed before (compared in C, identity first),
    and each system message among them still declares what it declared then. Whatever a hook
    did to the list or those fields, in place or not, a failed check replays from the start.
    Also caches each executable tool's declaration. Owned by one run's worker thread.
    """

    def __init__(self) -> None:
        self._seen: list[AgentMessage] = []  # the transcript as last replayed (a copy)
        # its system messages with the tool fields they had then
        self._systems: list[tuple[SystemMessage, tuple[ToolDeclaration, ...],
                                  tuple[str, ...]]] = []
        self._declared: dict[str, ToolDeclaration] = {}
        self._executable: dict[int, tuple[Any, ToolDeclaration]] = {}

    def _unchanged(self, messages: list[AgentMessage]) -> bool:
        seen = self._seen
        if len(messages) < len(seen) or messages[:len(seen)] != seen:
            return False
        return all(tuple(m.tools_added or ()) == added and tuple(m.tools_removed or ()) == removed
                   for m, added, removed in self._systems)

    def _replay(self, messages: list[AgentMessage]) -> dict[str, ToolDeclaration]:
        if not self._unchanged(messages):
            self._seen, self._systems, self._declared = [], [], {}
        declared, systems = self._declared, self._systems
        appended = messages[len(self._seen):]
        for message in appended:
            if isinstance(message, SystemMessage):
                apply_tool_changes(declared, message)
                systems.append((message, tuple(message.tools_added or ()),
                                tuple(message.tools_removed or ())))
        self._seen.extend(appended)
        return declared

    def executable(self, tools: Sequence[Any]) -> list[ToolDeclaration]:
        """The declarations of the executable tools, built once per tool object."""
        out = []
        for tool in tools:
            cached = self._executable.get(id(tool))
            if cached is None or cached[0] is not tool:
                cached = (tool, to_tool_declaration(tool))
                self._executable[id(tool)] = cached
            out.append(cached[1])
        return out

    def _adopt(self, tools: Sequence[Any], declared: dict[str, ToolDeclaration]) -> None:
        """No change: keep the transcript's own (equal) declarations as the tools' cached
        ones, so the next turn's check is by identity, not a comparison of every field."""
        for tool in tools:
            same = declared.get(tool.name)
            cached = self._executable.get(id(tool))
            if same is not None and cached is not None and cached[0] is tool \
                    and cached[1] is not same:
                self._executable[id(tool)] = (tool, same)

    def declare(self, messages: list[AgentMessage], tools: Sequence[Any],
                pending: list[AgentMessage]) -> list[AgentMessage]:
        """The pending messages with the tool changes declared (see the module docstring)."""
        system_index = -1
        for index in range(len(pending) - 1, -1, -1):
            if isinstance(pending[index], SystemMessage):
                system_index = index
                break
        declared = dict(self._replay(messages))
        for index, message in enumerate(pending):
            # the last pending system message's tool fields are intent, replaced below
            if isinstance(message, SystemMessage) and index != system_index:
                apply_tool_changes(declared, message)
        changes = _changes(list(declared.values()), self.executable(tools))
        if changes.empty:
            self._adopt(tools, declared)
        if system_index >= 0:
            target = pending[system_index]
            assert isinstance(target, SystemMessage)
            if changes.empty and not target.tools_added and not target.tools_removed:
                return pending
            result = list(pending)
            result[system_index] = SystemMessage(
                content=target.content, sections=target.sections,
                tools_added=changes.tools_added or None, tools_removed=changes.tools_removed or None,
                timestamp=target.timestamp)
            return result
        if changes.empty:
            return pending
        update = SystemMessage(content="", tools_added=changes.tools_added or None,
                               tools_removed=changes.tools_removed or None, timestamp=now_ms())
        insert_at = next((i for i, m in enumerate(pending) if not isinstance(m, SystemMessage)),
                         len(pending))
        return [*pending[:insert_at], update, *pending[insert_at:]]


def _changes(previous: list[ToolDeclaration], current: list[ToolDeclaration]) -> ToolStateChanges:
    if len(previous) == len(current) and all(map(operator.is_, previous, current)):
        return ToolStateChanges()
    return get_tool_state_changes(previous, current)

