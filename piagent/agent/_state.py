"""``AgentState``: the live state of an Agent, changed only by its reducer."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from ..events import AgentEvent
from ..messages import AgentMessage, ThinkingLevel
from ..models import Model
from ..tools import AgentTool
from ..transcript import get_current_system_prompt
from ._checks import check_messages, check_model, check_thinking_level, check_tools

__all__ = ["AgentState", "StateWriter", "reduce"]


class AgentState:
    """The agent's live state. ``messages`` and ``tools`` assignments copy the list.

    Assignments to ``model``, ``thinking_level``, ``tools`` and ``messages`` are checked as
    ``Agent(...)`` checks them (``TypeError``/``ValueError`` naming ``state.<field>``); a
    change made in place to the live lists is not.

    With a session store, assigning ``messages`` replaces the stored transcript first (a
    store that raises leaves the state as it was); while a run is live it is refused with
    ``AgentBusyError``, except from the run's own thread (a listener). In-place changes to the live list that
    add or remove messages are caught when the next message is stored (the whole list then
    replaces the stored transcript); assign the list to store any other edit at once.

    ``system_prompt`` is replayed from the transcript's system messages; to change it,
    append a system message. The streaming fields are read-only and change only through
    events. ``model`` and ``thinking_level`` are read when a run starts.

    Thread safety: the reducer runs on the run's worker thread; readers on other threads
    see each field replaced whole (a new frozenset, a new message), never half-changed.
    """

    def __init__(self, model: Model | None, thinking_level: ThinkingLevel,
                 tools: Iterable[AgentTool], messages: Iterable[AgentMessage]) -> None:
        self._model = model
        self._thinking_level: ThinkingLevel = thinking_level
        self._tools: list[AgentTool] = list(tools)
        self._messages: list[AgentMessage] = list(messages)
        self._is_streaming = False
        self._streaming_message: AgentMessage | None = None
        self._pending_tool_calls: frozenset[str] = frozenset()
        self._error_message: str | None = None
        # set by the Agent when it has a session store: an assignment to ``messages`` is
        # handed to it, and it stores the new transcript, then assigns it (a raising
        # store, or a live run on another thread, refuses the assignment)
        self._replace: Callable[[list[AgentMessage]], None] | None = None

    def __repr__(self) -> str:
        model = self._model.id if self._model is not None else None
        return (f"<AgentState model={model!r} messages={len(self._messages)} "
                f"tools={[t.name for t in self._tools]} streaming={self._is_streaming} "
                f"error={self._error_message!r}>")

    @property
    def system_prompt(self) -> str:
        """The current system prompt, replayed from the transcript."""
        return get_current_system_prompt(self._messages)

    @property
    def model(self) -> Model | None:
        """The model of the next run; a ``"PROVIDER/MODEL"`` str assigned is resolved."""
        return self._model

    @model.setter
    def model(self, model: Model | str | None) -> None:
        self._model = check_model(model, "state.model")

    @property
    def thinking_level(self) -> ThinkingLevel:
        """The thinking level of the next run ("off", "minimal" … "max")."""
        return self._thinking_level

    @thinking_level.setter
    def thinking_level(self, level: ThinkingLevel) -> None:
        check_thinking_level(level, "state.thinking_level")
        self._thinking_level = level

    @property
    def tools(self) -> list[AgentTool]:
        """The executable tools (the live list)."""
        return self._tools

    @tools.setter
    def tools(self, tools: Iterable[AgentTool]) -> None:
        self._tools = check_tools(tools, "state.tools")

    @property
    def messages(self) -> list[AgentMessage]:
        """The transcript (the live list)."""
        return self._messages

    @messages.setter
    def messages(self, messages: Iterable[AgentMessage]) -> None:
        new = check_messages(messages, "state.messages")
        if self._replace is not None:
            self._replace(new)  # the session store's transcript is replaced first
        else:
            self._messages = new

    @property
    def is_streaming(self) -> bool:
        """True from the start of a run until its ``agent_end`` listeners have returned."""
        return self._is_streaming

    @property
    def streaming_message(self) -> AgentMessage | None:
        """The message being streamed (assistant: a shallow copy of the partial), if any."""
        return self._streaming_message

    @property
    def pending_tool_calls(self) -> frozenset[str]:
        """The ids of the tool calls executing now (a new frozenset per change)."""
        return self._pending_tool_calls

    @property
    def error_message(self) -> str | None:
        """The error of the most recent failed or aborted turn, if any."""
        return self._error_message


class StateWriter:
    """The one writer of an ``AgentState``: the reducer (``reduce``, one event's change)
    and the run's start and end, for the Agent and its run's worker; ``reset`` and
    ``assign`` replace the transcript.

    Thread safety: as ``AgentState`` says (the worker thread during a run, the caller under
    the Agent's run lock between runs).
    """

    __slots__ = ("state",)

    def __init__(self, state: AgentState) -> None:
        self.state = state

    def reducer(self) -> Callable[[AgentEvent], None]:
        """The reducer bound to the state (``reduce``), for a run's emit path: a partial, so
        each event costs one Python frame."""
        return functools.partial(reduce, self.state)

    def run_started(self) -> None:
        state = self.state
        state._is_streaming = True
        state._streaming_message = None
        state._error_message = None

    def run_settled(self) -> None:
        state = self.state
        state._is_streaming = False
        state._streaming_message = None
        state._pending_tool_calls = frozenset()

    def reset(self, messages: list[AgentMessage]) -> None:
        """``messages`` become the transcript; the streaming fields and the error clear."""
        state = self.state
        state._messages = messages
        state._streaming_message = None
        state._pending_tool_calls = frozenset()
        state._error_message = None

    def assign(self, messages: list[AgentMessage]) -> None:
        """``messages`` become the transcript (an assignment the session store accepted)."""
        self.state._messages = messages

    def hand_assignments_to(self, replace: Callable[[list[AgentMessage]], None]) -> None:
        """An assignment to ``state.messages`` goes to ``replace`` from now on (which stores
        it, then calls ``assign``)."""
        self.state._replace = replace


def reduce(state: AgentState, event: AgentEvent) -> None:
    """The reducer: one event's change to ``state`` (through ``StateWriter.reducer``)."""
    if event.type == "message_update" or event.type == "message_start":
        state._streaming_message = event.message
    elif event.type == "message_end":
        state._streaming_message = None
        state._messages.append(event.message)
    elif event.type == "tool_execution_start":
        state._pending_tool_calls = state._pending_tool_calls | {event.tool_call_id}
    elif event.type == "tool_execution_end":
        state._pending_tool_calls = state._pending_tool_calls - {event.tool_call_id}
    elif event.type == "turn_end":
        if event.message.error_message:
            state._error_message = event.message.error_message
    elif event.type == "agent_end":
        state._streaming_message = None
