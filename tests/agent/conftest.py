"""Shared helpers for the ``Agent`` tests (``tests/agent/``). ``WAIT``, ``Recorder`` and the
thread checks are the whole suite's, in ``tests/conftest.py``.

* ``GateTool``: a tool whose calls each set ``started[call_id]`` and then wait for
  ``release[call_id]`` (or, with ``until_abort=True``, for the run's signal).
* ``summary(events)``: the whole event sequence as readable tuples, with each run of
  ``message_update`` events collapsed into one ``("message_update*", role)`` entry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from piagent import (
    AbortSignal,
    Agent,
    AgentEvent,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    SystemMessage,
    TextContent,
    ToolResultMessage,
)
from piagent.testing import ScriptedResponse, ScriptedStreamFn
from tests.conftest import WAIT
from tests.tools.conftest import NO_PARAMS, make_tool, ok


def text_of(message: Any) -> str:
    """A short label for a message's content (user/assistant text, tool result text)."""
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif getattr(block, "type", None) == "toolCall":
            parts.append(f"call:{block.id}")
    return "|".join(parts)


def label(message: Any) -> tuple[str, str]:
    """``(role, text)``; assistant messages add their stop reason."""
    role = getattr(message, "role", "?")
    if isinstance(message, AssistantMessage):
        return role, f"{message.stop_reason}:{text_of(message)}"
    if isinstance(message, ToolResultMessage):
        return role, f"{message.tool_call_id}:{text_of(message)}"
    return role, text_of(message)


def summary(events: Iterable[AgentEvent]) -> list[tuple[Any, ...]]:
    """The event sequence as tuples; consecutive ``message_update`` events become one."""
    out: list[tuple[Any, ...]] = []
    for event in events:
        kind = event.type
        if kind == "message_update":
            entry: tuple[Any, ...] = ("message_update*", event.message.role)  # type: ignore[union-attr]
            if out and out[-1] == entry:
                continue
        elif kind in ("message_start", "message_end"):
            message = event.message  # type: ignore[union-attr]
            if isinstance(message, AssistantMessage) and kind == "message_start":
                entry = (kind, "assistant")  # the partial: its content is still growing
            else:
                entry = (kind, *label(message))
        elif kind == "turn_end":
            entry = (kind, *label(event.message),  # type: ignore[union-attr]
                     tuple(r.tool_call_id for r in event.tool_results))  # type: ignore[union-attr]
        elif kind in ("tool_execution_start", "tool_execution_end"):
            entry = (kind, event.tool_call_id)  # type: ignore[union-attr]
        elif kind == "agent_end":
            entry = (kind, tuple(label(m) for m in event.messages))  # type: ignore[union-attr]
        else:
            entry = (kind,)
        out.append(entry)
    return out


def labels(messages: Iterable[Any]) -> list[tuple[str, str]]:
    return [label(m) for m in messages]


class GateTool:
    """A tool whose calls wait: for ``release[call_id]``, or for the signal (``until_abort``).

    ``started[call_id]`` is set when a call begins, ``finished[call_id]`` when it returns.
    ``on_start(call_id, signal)`` runs first, on the tool's pool thread.
    """

    def __init__(self, name: str = "read", *, until_abort: bool = False,
                 on_start: Callable[[str, AbortSignal], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._events: dict[tuple[str, str], threading.Event] = {}
        self.until_abort = until_abort
        self.on_start = on_start
        self.tool = AgentTool(
            name=name, description=f"The {name} tool.",
            parameters={"type": "object", "properties": {"path": {"type": "string"}}},
            execute=self._execute)

    def _event(self, kind: str, call_id: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault((kind, call_id), threading.Event())

    def started(self, call_id: str) -> threading.Event:
        return self._event("started", call_id)

    def release(self, call_id: str) -> threading.Event:
        return self._event("release", call_id)

    def finished(self, call_id: str) -> threading.Event:
        return self._event("finished", call_id)

    def _execute(self, call_id: str, params: dict[str, Any], signal: AbortSignal,
                 on_update: Any) -> AgentToolResult:
        try:
            if self.on_start is not None:
                self.on_start(call_id, signal)
            self.started(call_id).set()
            if self.until_abort:
                got = signal.wait(WAIT)
                return AgentToolResult(content=[TextContent("stopped" if got else "timed out")])
            got = self.release(call_id).wait(WAIT)
            path = params.get("path", "")
            return AgentToolResult(content=[TextContent(f"{path}:{'ok' if got else 'timed out'}")])
        finally:
            self.finished(call_id).set()


def quick_tool(name: str = "noop") -> AgentTool:
    """A tool that returns "done" at once."""
    return make_tool(name, lambda *args: ok("done"), description="Returns at once.",
                     parameters=NO_PARAMS)


def make_agent(responses: Iterable[ScriptedResponse] = (), **kwargs: Any
               ) -> tuple[Agent, ScriptedStreamFn]:
    fn = ScriptedStreamFn(responses)
    kwargs.setdefault("model", fn.model)
    return Agent(stream_fn=fn, **kwargs), fn


def non_system(messages: Iterable[Any]) -> list[Any]:
    return [m for m in messages if not isinstance(m, SystemMessage)]


def texts(messages: list[Any]) -> list[str]:
    """The text of each message, as ``label`` gives it."""
    return [label(m)[1] for m in messages]
