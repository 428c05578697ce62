"""One parallel execution of a tool batch: the records a batch's inbox carries to the run's
worker thread (``Update``, ``Done``, ``AbortNoticed``), what calls are handed to (an
executor: the run's pool or the caller's), and ``InFlight``, which submits the
calls, takes what comes back and emits each call's updates and end.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..abort import AbortSignal
from ..events import AgentEvent, ToolExecutionEndEvent, ToolExecutionUpdateEvent
from ._call import Finalized, Prepared, error_result

__all__ = ["ABORT_GRACE_S", "AbortNoticed", "Done", "Emit", "InFlight", "Inbox", "Submitter",
           "Update"]

_log = logging.getLogger("piagent.loop")

Emit = Callable[[AgentEvent], None]

ABORT_GRACE_S = 2.0
"""After an abort, how long tools may take to return before the run names the ones that have
not (once, as a warning on the ``piagent.loop`` logger)."""


# --- what a batch's inbox carries to the run's worker thread --------------------------------

@dataclass(slots=True)
class Update:
    """Call ``index`` of the batch reported progress (its ``on_update``)."""

    index: int
    partial: Any


@dataclass(slots=True)
class Done:
    """Call ``index`` finished. ``failure``: the ``on_tool_execute`` hook raised, so the call
    did not run and the run fails once the batch is recorded."""

    index: int
    done: Finalized
    failure: BaseException | None = None


@dataclass(slots=True)
class AbortNoticed:
    """The run's signal fired at ``at`` (``time.monotonic()``)."""

    at: float


Inbox = queue.SimpleQueue[Update | Done | AbortNoticed]


# --- one parallel execution: the pool side of a batch ----------------------------------------

class Submitter(Protocol):
    """What a batch hands its calls to: the run's pool or the caller's ``Executor``."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> object:
        """Run ``fn(*args)``; ``RuntimeError`` once shut down."""


class InFlight:
    """The calls of one batch handed to the pool, and what came back.

    Submits at most ``ahead`` calls beyond those finished (a caller's executor may have more
    workers than ``max_parallel_tools``); records each result and emits its updates and end
    as they arrive, also after a failure; keeps the first failure (a listener's or
    ``on_tool_execute``'s). If the executor refuses a call (it was shut down), every call not
    yet submitted gets an error result and the refusal becomes the batch's failure. Used
    only on the run's worker thread.
    """

    __slots__ = ("_emit", "_pool", "_task", "_prepared", "_inbox", "_submitted", "results",
                 "remaining", "failure", "refusal")

    def __init__(self, emit: Emit, pool: Submitter,
                 task: Callable[[Prepared, int, Inbox], None],
                 prepared: list[Prepared], inbox: Inbox, ahead: int,
                 start: bool = True) -> None:
        self._emit = emit
        self._pool = pool
        self._task = task
        self._prepared = prepared
        self._inbox = inbox
        self._submitted = 0
        self.results: list[Finalized | None] = [None] * len(prepared)
        self.remaining = len(prepared)
        self.failure: BaseException | None = None  # the first listener/hook failure
        self.refusal: BaseException | None = None  # the executor refused a call
        if start:
            self.start(ahead)

    def start(self, ahead: int) -> None:
        """Submit the first ``ahead`` calls."""
        for _ in range(min(ahead, len(self._prepared))):
            self._submit_next()

    def _submit_next(self) -> None:
        index = self._submitted
        if index >= len(self._prepared) or self.refusal is not None:
            return
        self._submitted += 1
        try:
            # in a copy of this (the run's worker) thread's contextvars context
            self._pool.submit(contextvars.copy_context().run, self._task,
                              self._prepared[index], index, self._inbox)
        except RuntimeError as exc:
            error = RuntimeError(f"The tool executor refused a tool call ({exc}); a "
                                 "caller-owned tool_executor must stay open while runs use it.")
            error.__cause__ = exc
            self.refusal = error
            for late in range(index, len(self._prepared)):
                self._inbox.put(Done(late, Finalized(self._prepared[late].tool_call,
                                                      error_result(str(error)), True)))

    def drain(self, signal: AbortSignal) -> None:
        """Take what the pool threads send until every call has finished. After an abort,
        names the calls that have not returned within ``ABORT_GRACE_S`` (once)."""
        inbox = self._inbox
        unregister = signal.on_abort(lambda: inbox.put(AbortNoticed(time.monotonic())))
        noticed_at: float | None = None  # when the abort was seen; None again once reported
        try:
            while self.remaining:
                if noticed_at is None:  # not aborted, or the laggards were named already
                    item = inbox.get()
                else:
                    try:
                        item = inbox.get(timeout=max(
                            noticed_at + ABORT_GRACE_S - time.monotonic(), 0.0))
                    except queue.Empty:
                        _log.warning("%s", self._not_returned_text())
                        noticed_at = None
                        continue
                kind = type(item)
                if kind is Update:
                    self.updated(item)  # type: ignore[arg-type]  # checked by class
                elif kind is Done:
                    self._finished(item)  # type: ignore[arg-type]  # checked by class
                else:
                    noticed_at = item.at  # type: ignore[union-attr]  # AbortNoticed
        finally:
            unregister()

    def updated(self, item: Update) -> None:
        if self.results[item.index] is not None:
            return  # it came after the call's completion: dropped
        call = self._prepared[item.index].tool_call
        self._send(ToolExecutionUpdateEvent(call.id, call.name, call.arguments, item.partial))

    def _finished(self, item: Done) -> None:
        self.results[item.index] = item.done
        done = item.done
        self._send(ToolExecutionEndEvent(done.tool_call.id, done.tool_call.name, done.result,
                                         done.is_error, done.duration_ms))
        if self.failure is None:
            self.failure = item.failure
        self.remaining -= 1
        self._submit_next()

    def _send(self, event: AgentEvent) -> None:
        """Emit; the first listener failure is kept (raised once every tool has finished)
        and the running tools' events still go out, as pi's do; a later failure is logged."""
        if self.failure is None:
            try:
                self._emit(event)
            except BaseException as exc:
                self.failure = exc
            return
        try:
            self._emit(event)
        except Exception:
            _log.exception("A listener raised again at %s after an earlier failure", event.type)

    def _not_returned_text(self) -> str:
        waiting = [p.tool_call for p, r in zip(self._prepared, self.results, strict=True)
                   if r is None]
        names = ", ".join(f"{c.name!r} (call {c.id})" for c in waiting)
        verb = "has" if len(waiting) == 1 else "have"
        return (f"The run was aborted {ABORT_GRACE_S:g} s ago and tool {names} {verb} not "
                f"returned yet; the run ends when it returns. A long-running tool should watch "
                f"its signal (signal.aborted, signal.wait(timeout), signal.on_abort).")
