"""The execute phase of a batch on the pool: the records an execution's inbox carries to the
run's worker thread (``Update``, ``Done``, ``AbortNoticed``) and ``InFlight``, which submits
the prepared calls, takes what comes back and emits each call's updates and end.
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


@dataclass(slots=True)
class Update:
    """Call ``index`` reported progress (its ``on_update``)."""

    index: int
    partial: Any


@dataclass(slots=True)
class Done:
    """Call ``index`` finished. ``failure``: ``on_tool_execute`` raised, so the call did not
    run and the run fails once the batch is recorded."""

    index: int
    done: Finalized
    failure: BaseException | None = None


@dataclass(slots=True)
class AbortNoticed:
    """The run's signal fired at ``at`` (``time.monotonic()``)."""

    at: float


Inbox = queue.SimpleQueue[Update | Done | AbortNoticed]


class Submitter(Protocol):
    """What calls are handed to: the run's pool or the caller's ``Executor``."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> object:
        """Run ``fn(*args)``; ``RuntimeError`` once shut down."""


class InFlight:
    """Prepared calls handed to the pool, and what came back; made per execution and used
    only on the run's worker thread.

    Submits at most ``ahead`` calls beyond those finished (a caller's executor may have more
    workers than ``max_parallel_tools``), each in a copy of the worker's contextvars; emits
    each call's updates and end as they arrive, also after a failure; keeps the first
    failure (a listener's or ``on_tool_execute``'s). If the executor refuses a call (it was
    shut down), every call not yet submitted gets an error result and the refusal is kept.
    """

    __slots__ = ("emit", "pool", "task", "prepared", "inbox", "submitted", "results",
                 "remaining", "failure", "refusal")

    def __init__(self, emit: Emit, pool: Submitter,
                 task: Callable[[Prepared, int, Inbox], None],
                 prepared: list[Prepared], inbox: Inbox, ahead: int) -> None:
        self.emit, self.pool, self.task, self.inbox = emit, pool, task, inbox
        self.prepared = prepared
        self.submitted = 0
        self.results: list[Finalized | None] = [None] * len(prepared)
        self.remaining = len(prepared)
        self.failure: BaseException | None = None  # the first listener/hook failure
        self.refusal: BaseException | None = None  # the executor refused a call
        for _ in range(min(ahead, len(prepared))):
            self.submit_next()

    def submit_next(self) -> None:
        index = self.submitted
        if index >= len(self.prepared) or self.refusal is not None:
            return
        self.submitted += 1
        try:
            self.pool.submit(contextvars.copy_context().run, self.task, self.prepared[index],
                             index, self.inbox)
        except RuntimeError as exc:
            error = RuntimeError(f"The tool executor refused a tool call ({exc}); a "
                                 "caller-owned tool_executor must stay open while runs use it.")
            error.__cause__ = exc
            self.refusal = error
            for late in range(index, len(self.prepared)):
                self.inbox.put(Done(late, Finalized(self.prepared[late].tool_call,
                                                    error_result(str(error)), True)))

    def drain(self, signal: AbortSignal) -> list[Finalized]:
        """Take what the pool threads send until every call has finished; the results in
        source order. After an abort, names the calls not returned within ``ABORT_GRACE_S``."""
        inbox = self.inbox
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
                        _log.warning("%s", self.not_returned_text())
                        noticed_at = None
                        continue
                kind = type(item)
                if kind is Update:
                    self.updated(item)  # type: ignore[arg-type]  # checked by class
                elif kind is Done:
                    self.finished(item)  # type: ignore[arg-type]  # checked by class
                else:
                    noticed_at = item.at  # type: ignore[union-attr]  # AbortNoticed
        finally:
            unregister()
        return self.results  # type: ignore[return-value]  # every call finished

    def updated(self, item: Update) -> None:
        if self.results[item.index] is None:  # else: it came after the completion, dropped
            call = self.prepared[item.index].tool_call
            self.send(ToolExecutionUpdateEvent(call.id, call.name, call.arguments,
                                               item.partial))

    def finished(self, item: Done) -> None:
        self.results[item.index] = done = item.done
        self.send(ToolExecutionEndEvent(done.tool_call.id, done.tool_call.name, done.result,
                                        done.is_error, done.duration_ms))
        if self.failure is None:
            self.failure = item.failure
        self.remaining -= 1
        self.submit_next()

    def send(self, event: AgentEvent) -> None:
        """Emit; the first listener failure is kept (raised once every tool has finished) and
        the running tools' events still go out, as pi's do; a later failure is logged."""
        if self.failure is None:
            try:
                self.emit(event)
            except BaseException as exc:
                self.failure = exc
            return
        try:
            self.emit(event)
        except Exception:
            _log.exception("A listener raised again at %s after an earlier failure", event.type)

    def not_returned_text(self) -> str:
        late = [p.tool_call for p, r in zip(self.prepared, self.results, strict=True)
                if r is None]
        names = ", ".join(f"{c.name!r} (call {c.id})" for c in late)
        return (f"The run was aborted {ABORT_GRACE_S:g} s ago and tool {names} "
                f"{'has' if len(late) == 1 else 'have'} not returned yet; the run ends when "
                f"it returns. A long-running tool should watch its signal (signal.aborted, "
                f"signal.wait(timeout), signal.on_abort).")
