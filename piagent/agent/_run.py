"""``AgentRun`` (one ``prompt()`` or ``continue_()``) and ``AgentEventIterator`` (its events).

A run owns its abort controller, its buffered events, the messages it added, the queue input
it took (``Takings``) and the event its callers wait on. The Agent's worker thread feeds it
through ``_observe`` and settles it through ``_settle``; any thread may wait for it.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar

from ..abort import AbortController, AbortSignal
from ..errors import AgentRunError
from ..events import AgentEvent
from ..messages import AgentMessage, AssistantMessage
from ._checks import check_timeout
from ._interrupt import wait_after_interrupt
from ._queues import Takings

if TYPE_CHECKING:
    from ..loop import LimitHit, PendingApproval, RunGuard

__all__ = ["RUN_SETTLED", "AgentEventIterator", "AgentRun", "RunSettled", "TypedRun",
           "on_main_thread"]

T = TypeVar("T")

WAIT_SLICE = 0.05  # seconds: blocking waits on the main thread wake this often (Ctrl-C)


def on_main_thread() -> bool:
    """True on the thread that receives ``KeyboardInterrupt``: only its waits are sliced.

    Python runs signal handlers (and ``_thread.interrupt_main()``) on the main thread alone,
    so a wait anywhere else sleeps until it is woken, with no periodic wake-ups.
    """
    return threading.current_thread() is threading.main_thread()


class RunSettled(enum.Enum):
    """The type of ``RUN_SETTLED``."""

    SETTLED = "settled"


RUN_SETTLED: Final = RunSettled.SETTLED
"""What ``AgentEventIterator.poll()`` returns once the run has settled and every event was read."""


class AgentRun:
    """One ``prompt()`` or ``continue_()``: wait for it, abort it, read its events.

    Thread safety: every method may be called from any thread.
    """

    def __init__(self, takings: Takings) -> None:
        self.takings = takings
        self._controller = AbortController()
        self._settled = threading.Event()
        # the thread the run executes on: its own worker, or (a blocking call off the main
        # thread) the caller's; _dedicated tells which, so a waiter joins only a worker
        self._thread: threading.Thread | None = None
        self._dedicated = True
        self._worker_started = threading.Event()  # set first thing on the worker thread
        # guards _closed and the readers count; notified on recorded events and at settle
        self._events_cond = threading.Condition()
        self._readers = 0  # iterators waiting on _events_cond (guarded by it)
        self._events: list[AgentEvent] = []  # appended by the worker only
        self._closed = False
        self._messages: list[AgentMessage] = []
        self._error_message: str | None = None
        self._guard: RunGuard | None = None  # limits and output (_guard); read once settled
        # set by the worker when the run goes on past a stopped process's unfinished batch:
        # its start marks are dropped once the first assistant message is stored
        self._drop_marks = False
        self._pending: list[PendingApproval] | None = None  # set when it ends waiting

    def __repr__(self) -> str:
        state = "done" if self.done else "running"
        if self.done and self._pending:
            state = "waiting"
        elif self.done and self._error_message is not None:
            state = "aborted" if self.signal.aborted else "failed"
        return (f"<AgentRun {state} messages={len(self._messages)} events={len(self._events)}"
                f"{f' error={self._error_message!r}' if self._error_message else ''}>")

    @property
    def signal(self) -> AbortSignal:
        """The run's abort signal."""
        return self._controller.signal

    @property
    def done(self) -> bool:
        """True once the run has settled (its ``agent_end`` listeners returned)."""
        return self._settled.is_set()

    @property
    def waiting(self) -> bool:
        """True once the run has ended with tool calls waiting for approval."""
        return self.done and bool(self._pending)

    @property
    def pending_approvals(self) -> list[PendingApproval]:
        """The calls the run ended waiting for, as they were then (``[]`` if none); the
        decisions since: ``agent.pending_approvals()``."""
        return list(self._pending or ()) if self.done else []

    @property
    def messages(self) -> list[AgentMessage]:
        """The messages the run added, in order (complete once the run is done)."""
        return list(self._messages)

    @property
    def error_message(self) -> str | None:
        """The run's error (an error or aborted final message), or ``None``."""
        return self._error_message

    @property
    def output(self) -> Any:
        """The validated final result of a run with an ``output_type`` (a ``T`` instance for
        a dataclass ``T``), or ``None`` (no output type, or the model gave none)."""
        guard = self._guard
        return guard.value if guard is not None and self.done else None

    @property
    def limit_hit(self) -> LimitHit | None:
        """The limit that ended the run (``Limits``, ``Budget``, ``output_retries``), or
        ``None``; its ``message`` is the run's ``error_message``."""
        guard = self._guard
        return guard.hit if guard is not None and self.done else None

    @property
    def reply(self) -> AssistantMessage | None:
        """The last assistant message the run added (its answer), or ``None``."""
        for message in reversed(self._messages):
            if isinstance(message, AssistantMessage):
                return message
        return None

    @property
    def text(self) -> str:
        """The text of ``reply`` ("" when the run added no assistant message)."""
        reply = self.reply
        return reply.text if reply is not None else ""

    def raise_for_error(self, timeout: float | None = None) -> AgentRun:
        """Wait for the run, then raise ``AgentRunError`` if it ended in an error or was
        aborted; return the run otherwise, so ``agent.prompt(q).raise_for_error().text`` is
        the answer or an exception (failures are data otherwise: ``error_message``)."""
        if not self.wait(timeout):
            raise TimeoutError(f"The run did not end within {timeout} s.")
        reply = self.reply
        stop = reply.stop_reason if reply is not None else None
        if stop in ("error", "aborted") or self._error_message is not None:
            stop = stop if stop in ("error", "aborted") else "error"
            what = "was aborted" if stop == "aborted" else "failed"
            raise AgentRunError(f"The run {what}: {self._error_message or 'no reason given'}",
                                run=self, stop_reason=stop)
        return self

    def abort(self, reason: object = None) -> None:
        """Abort the run (no-op once it is done)."""
        self._controller.abort(reason)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the run settles; False if ``timeout`` seconds pass first.

        A ``KeyboardInterrupt`` while waiting aborts the run, waits for it to settle and
        re-raises; a second one stops waiting at once. A run that has not settled a
        quarter of a second after the abort is said on stderr, once (which tool it waits
        for).
        """
        timeout = check_timeout(timeout)
        try:
            return self._wait(timeout)
        except KeyboardInterrupt:
            wait_after_interrupt(self)  # a second KeyboardInterrupt escapes from here at once
            raise

    def events(self) -> Iterator[AgentEvent]:
        """Every event of the run from ``agent_start``: buffered ones, then live ones.

        The iteration ends once the run has settled (its worker thread has finished).
        """
        return iter(AgentEventIterator(self, abort_on_close=False))

    # --- for the Agent and the iterator --------------------------------------------------

    def _wait(self, timeout: float | None) -> bool:
        if not on_main_thread():  # nothing to interrupt it: one wake-up, when the run settles
            if not self._settled.wait(timeout):
                return False
            self._join_worker()
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            slice_ = WAIT_SLICE
            if deadline is not None:
                slice_ = min(slice_, max(0.0, deadline - time.monotonic()))
            if self._settled.wait(slice_):
                self._join_worker()
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _join_worker(self) -> None:
        thread = self._thread
        if self._dedicated and thread is not None and thread is not threading.current_thread():
            thread.join()  # settling is its last act: this returns at once

    def _next_event(self, index: int, timeout: float | None) -> AgentEvent | RunSettled | None:
        """Event ``index``; ``None`` if it does not arrive within ``timeout`` seconds;
        ``RUN_SETTLED`` once the run has settled and every event was read."""
        deadline = None if timeout is None else time.monotonic() + timeout
        sliced = on_main_thread()  # elsewhere: woken by the next event (or the settling)
        with self._events_cond:
            self._readers += 1  # before the check, so _observe cannot miss a waiter
            try:
                while index >= len(self._events) and not self._closed:
                    slice_: float | None = WAIT_SLICE if sliced else None
                    if deadline is not None:
                        slice_ = deadline - time.monotonic()
                        if slice_ <= 0:
                            return None
                        slice_ = min(slice_, WAIT_SLICE) if sliced else slice_
                    self._events_cond.wait(slice_)
            finally:
                self._readers -= 1
            if index < len(self._events):
                return self._events[index]
        self._wait(None)  # closed just before settling: returns at once
        return RUN_SETTLED

    def _observe(self, event: AgentEvent) -> None:
        """The worker thread's record of one event, before the listeners see it."""
        if event.type == "message_end":  # (a message_update is recorded by the emit path)
            self._messages.append(event.message)
            self.takings.delivered(event.message)
        elif event.type == "turn_end":
            if event.message.error_message:
                self._error_message = event.message.error_message
        elif event.type == "agent_end":
            self.takings.restore()  # before listeners, so they see the queues right
        self._events.append(event)
        if self._readers:  # nobody waiting (the usual case): no lock, no notify
            self._wake_readers()

    def _wake_readers(self) -> None:
        """Wake the iterators waiting for the next event (the worker thread, after
        recording one)."""
        with self._events_cond:
            self._events_cond.notify_all()

    def _kept(self, message: AgentMessage) -> None:
        """A message that reached the transcript but whose ``message_end`` failed before
        the listeners saw it (its store raised): the run added it, and it was delivered."""
        self._messages.append(message)
        self.takings.delivered(message)

    def _settle(self) -> None:
        """The worker thread's last act: close the event buffer, wake every waiter."""
        with self._events_cond:
            self._closed = True
            self._events_cond.notify_all()
        self._settled.set()


class TypedRun(AgentRun, Generic[T]):
    """An ``AgentRun`` of ``prompt(..., output_type=T)``: ``output`` is typed ``T | None``."""

    @property
    def output(self) -> T | None:
        """The validated final result (a ``T``), or ``None`` if the model gave none."""
        value: T | None = super().output
        return value


class AgentEventIterator:
    """The events of a run, from ``agent_start`` until it settles.

    From ``Agent.stream()``, closing it aborts the run if it is still going: web frameworks
    call ``close()`` when the client goes away, and so does leaving a ``with`` block. An
    iterator from ``stream()`` that is dropped without being closed aborts its run when it
    is garbage-collected, as an abandoned generator would be closed. ``poll(timeout)`` waits
    at most ``timeout`` seconds for the next event, so a server can send keep-alives while a
    tool works silently.
    """

    def __init__(self, run: AgentRun, *, abort_on_close: bool = True) -> None:
        self.run = run
        self._index = 0
        self._abort_on_close = abort_on_close

    def __repr__(self) -> str:
        return f"<AgentEventIterator at event {self._index} of {self.run!r}>"

    def __iter__(self) -> AgentEventIterator:
        return self

    def __next__(self) -> AgentEvent:
        event = self.run._next_event(self._index, None)
        if event is None or event is RUN_SETTLED:  # no timeout: never None
            raise StopIteration
        self._index += 1
        return event

    def poll(self, timeout: float | None) -> AgentEvent | Literal[RunSettled.SETTLED] | None:
        """The next event; ``None`` after ``timeout`` seconds without one; ``RUN_SETTLED``
        once the run has settled and every event was read."""
        event = self.run._next_event(self._index, timeout)
        if event is not None and event is not RUN_SETTLED:
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
