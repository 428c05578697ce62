"""``AgentRun`` (one ``prompt()`` or ``continue_()``) and ``AgentEventIterator`` (its events).

A run is the caller's view of its ``RunRecord`` (``_record.py``): the abort controller, the
buffered events, the messages it added, the queue input it took and the event its callers
wait on. The Agent's worker thread feeds the record; any thread may wait for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from ..abort import AbortSignal
from ..errors import AgentRunError
from ..events import AgentEvent
from ..messages import AgentMessage, AssistantMessage
from ._checks import check_timeout
from ._interrupt import wait_interruptibly
from ._queues import Takings
from ._record import RUN_SETTLED, RunRecord, RunSettled, on_main_thread

if TYPE_CHECKING:
    from ..loop import LimitHit, PendingApproval

__all__ = ["RUN_SETTLED", "AgentEventIterator", "AgentRun", "RunSettled", "TypedRun",
           "on_main_thread"]

T = TypeVar("T")


class AgentRun:
    """One ``prompt()`` or ``continue_()``: wait for it, abort it, read its events.

    Thread safety: every method may be called from any thread.
    """

    def __init__(self, record: RunRecord) -> None:
        self._record = record  # what the worker writes and the waiters read

    def __repr__(self) -> str:
        record = self._record
        state = "done" if self.done else "running"
        if self.done and record.pending:
            state = "waiting"
        elif self.done and record.error_message is not None:
            state = "aborted" if self.signal.aborted else "failed"
        error = record.error_message
        return (f"<AgentRun {state} messages={len(record.messages)} "
                f"events={len(record.events)}{f' error={error!r}' if error else ''}>")

    @property
    def takings(self) -> Takings:
        """The queue input the run took (the Agent's ledger of it)."""
        return self._record.takings

    @property
    def signal(self) -> AbortSignal:
        """The run's abort signal."""
        return self._record.controller.signal

    @property
    def done(self) -> bool:
        """True once the run has settled (its ``agent_end`` listeners returned)."""
        return self._record.settled.is_set()

    @property
    def waiting(self) -> bool:
        """True once the run has ended with tool calls waiting for approval."""
        return self.done and bool(self._record.pending)

    @property
    def pending_approvals(self) -> list[PendingApproval]:
        """The calls the run ended waiting for, as they were then (``[]`` if none); the
        decisions since: ``agent.pending_approvals()``."""
        return list(self._record.pending or ()) if self.done else []

    @property
    def messages(self) -> list[AgentMessage]:
        """The messages the run added, in order (complete once the run is done)."""
        return list(self._record.messages)

    @property
    def error_message(self) -> str | None:
        """The run's error (an error or aborted final message), or ``None``."""
        return self._record.error_message

    @property
    def output(self) -> Any:
        """The validated final result of a run with an ``output_type`` (a ``T`` instance for
        a dataclass ``T``), or ``None`` (no output type, or the model gave none)."""
        guard = self._record.guard
        return guard.value if guard is not None and self.done else None

    @property
    def limit_hit(self) -> LimitHit | None:
        """The limit that ended the run (``Limits``, ``Budget``, ``output_retries``), or
        ``None``; its ``message`` is the run's ``error_message``."""
        guard = self._record.guard
        return guard.hit if guard is not None and self.done else None

    @property
    def abandoned_tool_calls(self) -> int:
        """How many tool calls timed out so far (``AgentTool.timeout``, ``tool_timeout``):
        each was answered with an error result while its thread, which Python cannot stop,
        was left running (docs/tools.md, "Timeouts")."""
        return sum(1 for event in list(self._record.events)
                   if event.type == "tool_execution_end" and event.is_error
                   and type(details := event.result.details) is dict
                   and "timed_out_after_s" in details)  # piagent.loop's timed-out mark

    @property
    def reply(self) -> AssistantMessage | None:
        """The last assistant message the run added (its answer), or ``None``."""
        for message in reversed(self._record.messages):
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
        error = self._record.error_message
        if stop in ("error", "aborted") or error is not None:
            stop = stop if stop in ("error", "aborted") else "error"
            what = "was aborted" if stop == "aborted" else "failed"
            raise AgentRunError(f"The run {what}: {error or 'no reason given'}",
                                run=self, stop_reason=stop)
        return self

    def abort(self, reason: object = None) -> None:
        """Abort the run (no-op once it is done)."""
        self._record.controller.abort(reason)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the run settles; False if ``timeout`` seconds pass first.

        A ``KeyboardInterrupt`` while waiting aborts the run, waits for it to settle and
        re-raises; a second one stops waiting at once. A run that has not settled a
        quarter of a second after the abort is said on stderr, once (which tool it waits
        for).
        """
        return wait_interruptibly(self._record, check_timeout(timeout))

    def events(self) -> Iterator[AgentEvent]:
        """Every event of the run from ``agent_start``: buffered ones, then live ones.

        The iteration ends once the run has settled (its worker thread has finished).
        """
        return iter(AgentEventIterator(self, abort_on_close=False))

    def _next_event(self, index: int, timeout: float | None) -> AgentEvent | RunSettled | None:
        """Event ``index``; ``None`` if it does not arrive within ``timeout`` seconds;
        ``RUN_SETTLED`` once the run has settled and every event was read."""
        return self._record.next_event(index, timeout)


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
