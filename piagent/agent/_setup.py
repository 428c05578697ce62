"""``RunSetup``: the one collaborator of an ``Agent`` run, built once when the run starts and
handed to its worker and its configuration builder; ``Listeners``; ``AgentOptions``, the
public options a run reads from its Agent.

The Agent owns its state (``StateWriter``), its session link, its queues, its listeners and
its run slot; a run gets them through its ``RunSetup`` alone, so no part of a run reads the
Agent's private attributes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from ..abort import AbortSignal
from ..events import AgentEvent
from ..loop import (
    AfterToolCallContext,
    AfterToolCallResult,
    AgentLoopTurnUpdate,
    AgentTurnContext,
    BeforeToolCallContext,
    BeforeToolCallResult,
    PrepareRequestContext,
    RequestUpdate,
    TurnDecision,
)
from ..messages import AgentMessage, Message
from ..models import Model
from ..stream import ClientIdentity, ProviderResponse, StreamFn
from ..tools import ToolExecutionMode
from ._persistence import StoreLink
from ._queues import QueueLedger
from ._record import RunRecord
from ._state import StateWriter

__all__ = ["AgentOptions", "Listener", "Listeners", "RunSetup"]

Listener = Callable[[AgentEvent, AbortSignal], Any]
"""``listener(event, signal)``: runs on the run's worker thread; the loop waits for it."""


class Listeners:
    """An Agent's listeners. ``all`` is a tuple replaced whole on each change, so the emit
    path reads it without a lock and a listener may (un)subscribe while an event is
    delivered (the delivery goes on with the tuple it started with)."""

    __slots__ = ("_lock", "all")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards changes to ``all`` (any thread subscribes)
        self.all: tuple[Listener, ...] = ()

    def add(self, listener: Listener) -> Callable[[], None]:
        """Add ``listener`` last; returns the function that removes it (once)."""
        with self._lock:
            self.all = (*self.all, listener)

        def unsubscribe() -> None:
            with self._lock:
                listeners = list(self.all)
                if listener in listeners:  # the first registration of it goes
                    listeners.remove(listener)
                    self.all = tuple(listeners)

        return unsubscribe


class AgentOptions(Protocol):
    """The public options and hooks of an ``Agent`` a run reads when it starts."""

    stream_fn: StreamFn | None
    convert_to_llm: Callable[[list[AgentMessage]], Sequence[Message]]
    transform_context: Callable[[list[AgentMessage], AbortSignal], list[AgentMessage]] | None
    before_tool_call: Callable[[BeforeToolCallContext, AbortSignal],
                               BeforeToolCallResult | None] | None
    after_tool_call: Callable[[AfterToolCallContext, AbortSignal],
                              AfterToolCallResult | None] | None
    finish_turn: Callable[[AgentTurnContext, AbortSignal], TurnDecision | None] | None
    prepare_request: Callable[[PrepareRequestContext, AbortSignal], RequestUpdate | None] | None
    prepare_next_turn: Callable[[AgentTurnContext, AbortSignal],
                                AgentLoopTurnUpdate | None] | None
    get_api_key: Callable[[str], str | None] | None
    tool_execution: ToolExecutionMode
    max_parallel_tools: int | None
    tool_timeout: float | None
    session_id: str | None
    api_key: str | None
    max_tokens: int | None
    temperature: float | None
    max_retry_delay_ms: int | None
    on_payload: Callable[[Any, Model], Any] | None
    on_response: Callable[[ProviderResponse, Model], None] | None
    on_provider_stream_event: Callable[[Any, Model], None] | None
    identity: ClientIdentity | None
    timeout_ms: float | None
    env: Mapping[str, str] | None
    telemetry: Any
    before_poll: Callable[[], None] | None
    compaction: Any  # a piagent.compaction.Compaction, or None

    @property
    def tool_executor(self) -> Executor | None: ...


@dataclass(slots=True)
class RunSetup:
    """One run of an Agent, as its worker sees it: built once by the Agent when the run
    starts (under its run lock), then read by the worker thread alone.

    ``prompts``/``skip_initial_steering_poll``/``started`` say what the run does (a prompt,
    a continuation, or a resumed batch with the store's start marks); ``approval_options``
    are the loop options of the Agent's approvals for this run; ``settle`` is the Agent's
    end of the run (the slot freed, then the record settled).
    """

    record: RunRecord
    writer: StateWriter
    options: AgentOptions
    link: StoreLink | None
    listeners: Listeners
    queues: QueueLedger
    approval_options: dict[str, Any]
    settle: Callable[[RunRecord], None]
    prompts: list[AgentMessage] | None
    skip_initial_steering_poll: bool
    started: frozenset[str] | None
