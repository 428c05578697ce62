"""The state and the runs of an ``Agent``: ``AgentState``, ``AgentRun``, ``AgentEventIterator``.

``AgentState`` is the live state the reducer updates; an ``AgentRun`` is one ``prompt()`` or
``continue_()`` (its abort controller, its buffered events, the queue input it took, and
the event its caller waits on). ``piagent.agent`` drives both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ..abort import AbortController, AbortSignal
from ..events import AgentEvent
from ..messages import AgentMessage
from ..models import Model
from ..tools import AgentTool
from ..transcript import get_current_system_prompt
from ._queues import PendingQueue

if TYPE_CHECKING:
    from . import Agent

__all__ = ["AgentEventIterator", "AgentRun", "AgentState"]

WAIT_SLICE = 0.05  # seconds: blocking waits wake this often so Ctrl-C arrives promptly


class AgentState:
    """The agent's live state. ``messages`` and ``tools`` assignments copy the list.

    ``system_prompt`` is replayed from the transcript's system messages; to change it,
    append a system message. The streaming fields are read-only and change only through
    events. ``model`` and ``thinking_level`` are read when a run starts.
    """

    def __init__(self, model: Model | None, thinking_level: str, tools: Iterable[AgentTool],
                 messages: Iterable[AgentMessage]) -> None:
        self.model = model
        self.thinking_level = thinking_level
        self._tools: list[AgentTool] = list(tools)
        self._messages: list[AgentMessage] = list(messages)
        self._is_streaming = False
        self._streaming_message: AgentMessage | None = None
        self._pending_tool_calls: frozenset[str] = frozenset()
        self._error_message: str | None = None

    @property
    def system_prompt(self) -> str:
        """The current system prompt, replayed from the transcript."""
        return get_current_system_prompt(self._messages)

    @property
    def tools(self) -> list[AgentTool]:
        """The executable tools (the live list)."""
        return self._tools

    @tools.setter
    def tools(self, tools: Iterable[AgentTool]) -> None:
        self._tools = list(tools)

    @property
    def messages(self) -> list[AgentMessage]:
        """The transcript (the live list)."""
        return self._messages

    @messages.setter
    def messages(self, messages: Iterable[AgentMessage]) -> None:
        self._messages = list(messages)

    @property
    def is_streaming(self) -> bool:
        """True from the start of a run until its ``agent_end`` listeners have returned."""
        return self._is_streaming

    @property
    def streaming_message(self) -> AgentMessage | None:
        """The message being streamed (a shallow copy of the partial), if any."""
        return self._streaming_message

    @property
    def pending_tool_calls(self) -> frozenset[str]:
        """The ids of the tool calls executing now (a new frozenset per change)."""
        return self._pending_tool_calls

    @property
    def error_message(self) -> str | None:
        """The error of the most recent failed or aborted turn, if any."""
        return self._error_message


class AgentRun:
    """One ``prompt()`` or ``continue_()``: wait for it, abort it, read its events.

    Thread safety: every method may be called from any thread.
    """

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        self._controller = AbortController()
        self._settled = threading.Event()
        self._thread: threading.Thread | None = None
        self._worker_started = threading.Event()  # set first thing on the worker thread
        # guards _events and _closed; notified on every recorded event and at settle
        self._events_cond = threading.Condition()
        self._readers = 0  # events() iterators waiting on _events_cond (guarded by it)
        self._events: list[AgentEvent] = []
        self._closed = False
        self._messages: list[AgentMessage] = []
        self._error_message: str | None = None
        # queue input taken by this run: (queue, message), in the order taken. Delivery is
        # tracked per taking (one message object may be queued twice): _undelivered maps
        # id(message) to the indexes in _taken not yet delivered, oldest first
        self._taken: list[tuple[PendingQueue, AgentMessage]] = []
        self._undelivered: dict[int, list[int]] = {}
        self._restored = False

    @property
    def signal(self) -> AbortSignal:
        """The run's abort signal."""
        return self._controller.signal

    @property
    def done(self) -> bool:
        """True once the run has settled (its ``agent_end`` listeners returned)."""
        return self._settled.is_set()

    @property
    def messages(self) -> list[AgentMessage]:
        """The messages the run added, in order (complete once the run is done)."""
        return list(self._messages)

    @property
    def error_message(self) -> str | None:
        """The run's error (an error or aborted final message), or ``None``."""
        return self._error_message

    def abort(self, reason: object = None) -> None:
        """Abort the run (no-op once it is done)."""
        self._controller.abort(reason)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the run settles; False if ``timeout`` seconds pass first.

        A ``KeyboardInterrupt`` while waiting aborts the run, waits for it to settle and
        re-raises; a second one stops waiting at once.
        """
        try:
            return self._wait(timeout)
        except KeyboardInterrupt:
            self.abort()
            self._wait(None)  # a second KeyboardInterrupt escapes from here at once
            raise

    def _wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            slice_ = WAIT_SLICE
            if deadline is not None:
                slice_ = min(slice_, max(0.0, deadline - time.monotonic()))
            if self._settled.wait(slice_):
                thread = self._thread
                if thread is not None and thread is not threading.current_thread():
                    thread.join()  # settled is its last act: this returns at once
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def events(self) -> Iterator[AgentEvent]:
        """Every event of the run from ``agent_start``: buffered ones, then live ones.

        The iteration ends once the run has settled (its worker thread has finished).
        """
        return iter(AgentEventIterator(self, abort_on_close=False))

    def _next_event(self, index: int, timeout: float | None) -> AgentEvent | None:
        """Event ``index``; ``None`` if it does not arrive within ``timeout`` seconds;
        ``StopIteration`` once the run has settled and every event was read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._events_cond:
            self._readers += 1  # before the check, so _record cannot miss a waiter
            try:
                while index >= len(self._events) and not self._closed:
                    slice_ = WAIT_SLICE
                    if deadline is not None:
                        slice_ = deadline - time.monotonic()
                        if slice_ <= 0:
                            return None
                        slice_ = min(slice_, WAIT_SLICE)
                    self._events_cond.wait(slice_)
            finally:
                self._readers -= 1
            if index < len(self._events):
                return self._events[index]
        self._wait(None)  # closed just before settling: returns at once
        raise StopIteration

    # --- called by the Agent on the worker thread -------------------------------------

    def _took(self, source: PendingQueue, messages: list[AgentMessage]) -> None:
        """Record queue input taken by this run (under the Agent's queue lock)."""
        for message in messages:
            self._undelivered.setdefault(id(message), []).append(len(self._taken))
            self._taken.append((source, message))

    def _record(self, event: AgentEvent) -> None:
        self._events.append(event)
        if self._readers:  # nobody waiting (the usual case): no lock, no notify
            with self._events_cond:
                self._events_cond.notify_all()

    def _close(self) -> None:
        with self._events_cond:
            self._closed = True
            self._events_cond.notify_all()


class AgentEventIterator:
    """The events of a run, from ``agent_start`` until it settles.

    From ``Agent.stream()`` closing it aborts the run: web frameworks call ``close()``
    when the client goes away; so does leaving a ``with`` block. ``poll(timeout)`` waits
    for the next event at most ``timeout`` seconds (``None`` if none came), so a server
    can send keep-alives while a tool works silently.
    """

    def __init__(self, run: AgentRun, *, abort_on_close: bool = True) -> None:
        self.run = run
        self._index = 0
        self._abort_on_close = abort_on_close

    def __iter__(self) -> AgentEventIterator:
        return self

    def __next__(self) -> AgentEvent:
        event = self.run._next_event(self._index, None)
        self._index += 1
        return event  # type: ignore[return-value]  # no timeout: never None

    def poll(self, timeout: float | None) -> AgentEvent | None:
        """The next event, or ``None`` after ``timeout`` seconds without one.

        Raises ``StopIteration`` once the run has settled and every event was read.
        """
        event = self.run._next_event(self._index, timeout)
        if event is not None:
            self._index += 1
        return event

    def close(self) -> None:
        """Abort the run if it is still going (from ``stream()``), and wait until it settles."""
        if self._abort_on_close and not self.run.done:
            self.run.abort()
            self.run.wait()

    def __enter__(self) -> AgentEventIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        run = getattr(self, "run", None)
        if getattr(self, "_abort_on_close", False) and run is not None and not run.done:
            run.abort()
