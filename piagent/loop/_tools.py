"""Tool batches: sequential and parallel, on the caller's executor or the run's own pool.

Each call is prepared on the run's worker thread in source order (``_call.py``).
``execute`` and ``after_tool_call`` run on the pool (a batch of one call on the run's own
pool executes on the worker thread itself: no hand-over, and no pool thread for runs whose
batches are all of one call). Progress updates and completions travel back to the worker
thread through one FIFO inbox per batch, as typed records (``_Update``, ``_Done``,
``_AbortNoticed``), and only the worker emits events: a tool's updates come before its end,
ends come in completion order, and result messages in source order.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from ..abort import AbortSignal
from ..events import (
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
)
from ..messages import AgentMessage, AssistantMessage, ToolCall, ToolResultMessage, now_ms
from ..tools import AgentTool
from ._call import (
    ABORTED_TEXT,
    Finalized,
    Prepared,
    error_result,
    exception_text,
    execute_prepared,
    failure_text,
    finalize,
    prepare_tool_call,
    tool_failure_result,
    tool_result_message,
    tools_by_name,
    truncated_result,
    unknown_outcome_result,
)
from ._config import AgentContext, AgentLoopConfig
from ._trace import UNTRACED, RunTrace

__all__ = ["ABORT_GRACE_S", "ToolBatch", "ToolRunner", "emit_message", "emit_messages",
           "record_despite_failure", "tool_failure_result"]

_log = logging.getLogger("piagent.loop")

Emit = Callable[[AgentEvent], None]

ABORT_GRACE_S = 2.0
"""After an abort, how long tools may take to return before the run names the ones that have
not (once, as a warning on the ``piagent.loop`` logger)."""


@dataclass(slots=True)
class ToolBatch:
    """The result messages of one batch (source order) and whether it asked to stop."""

    messages: list[ToolResultMessage]
    terminate: bool


# --- what a batch's inbox carries to the run's worker thread --------------------------------

@dataclass(slots=True)
class _Update:
    """Call ``index`` of the batch reported progress (its ``on_update``)."""

    index: int
    partial: Any


@dataclass(slots=True)
class _Done:
    """Call ``index`` finished. ``failure``: the ``on_tool_execute`` hook raised, so the call
    did not run and the run fails once the batch is recorded."""

    index: int
    done: Finalized
    failure: BaseException | None = None


@dataclass(slots=True)
class _AbortNoticed:
    """The run's signal fired at ``at`` (``time.monotonic()``)."""

    at: float


_Inbox = queue.SimpleQueue[_Update | _Done | _AbortNoticed]


# --- emitting -------------------------------------------------------------------------------

def _emit_end(emit: Emit, done: Finalized) -> None:
    emit(ToolExecutionEndEvent(done.tool_call.id, done.tool_call.name, done.result,
                               done.is_error, done.duration_ms))


def emit_message(emit: Emit, message: AgentMessage) -> None:
    """``message_start`` then ``message_end``; if a listener fails at the start, the end is
    still sent (so the message is recorded), then the failure is raised."""
    try:
        emit(MessageStartEvent(message))
    except BaseException:
        try:
            emit(MessageEndEvent(message))
        except Exception:
            _log.exception("A listener raised again while %s was being recorded after "
                           "an earlier failure", getattr(message, "role", "a message"))
        raise
    emit(MessageEndEvent(message))


def emit_messages(emit: Emit, messages: Sequence[AgentMessage]) -> None:
    """``emit_message`` for each; after a listener failure the rest are still recorded
    (``record_despite_failure``), then the failure is raised."""
    for index, message in enumerate(messages):
        try:
            emit_message(emit, message)
        except BaseException:
            record_despite_failure(emit, messages[index + 1:])
            raise


def record_despite_failure(emit: Emit, messages: Sequence[AgentMessage]) -> None:
    """After a listener failed: still send each message's start and end (every event on its
    own), so the transcript keeps the user's input and every executed call's result. The
    first failure is what the run reports; a failure here is logged."""
    for message in messages:
        for event in (MessageStartEvent(message), MessageEndEvent(message)):
            try:
                emit(event)
            except Exception:
                _log.exception("A listener raised again while %s was being recorded after "
                               "an earlier failure", getattr(message, "role", "a message"))


def _emit_results(emit: Emit, finished: Sequence[Finalized],
                  failure: BaseException | None = None) -> list[ToolResultMessage]:
    """The result messages of ``finished`` in source order; if a listener fails (here or,
    as ``failure``, earlier in the batch) the rest are still recorded, then it is raised."""
    timestamp = now_ms()  # created together, so one time for all
    messages = [tool_result_message(done, timestamp) for done in finished]
    if failure is not None:
        record_despite_failure(emit, messages)
        raise failure
    emit_messages(emit, messages)
    return messages


def _should_terminate(done: Sequence[Finalized]) -> bool:
    return bool(done) and all(d.result.terminate is True for d in done)


# --- one parallel execution: the pool side of a batch ----------------------------------------

class _Submitter(Protocol):
    """What a batch hands its calls to: an ``Executor``, or ``_HERE``."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> object:
        """Run ``fn(*args)``; ``RuntimeError`` once shut down."""


class _Here:
    """A ``_Submitter`` that runs the call at once, on the submitting thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> object:
        try:
            fn(*args)
        except Exception:  # logged and reported by the call itself, as on a pool thread
            pass
        return None


_HERE = _Here()


class _GraceWatch:
    """For a call executing on the worker thread: once the run is aborted, a timer thread
    names the call if it has not returned ``ABORT_GRACE_S`` later (the worker cannot)."""

    def __init__(self, flight: _InFlight) -> None:
        self._flight = flight
        self._lock = threading.Lock()  # guards _timer and _stopped (aborting thread, worker)
        self._timer: threading.Timer | None = None
        self._stopped = False

    def start(self) -> None:
        """On abort (the aborting thread): start the timer."""
        with self._lock:
            if self._stopped or self._timer is not None:
                return
            self._timer = threading.Timer(ABORT_GRACE_S, self._warn)
            self._timer.name, self._timer.daemon = "piagent-abort-watch", True
            self._timer.start()

    def _warn(self) -> None:
        _log.warning("%s", self._flight._not_returned_text())

    def stop(self) -> None:
        """The call returned (the worker): cancel the timer and wait for its thread."""
        with self._lock:
            self._stopped = True
            timer = self._timer
        if timer is not None:
            timer.cancel()
            timer.join()

class _InFlight:
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

    def __init__(self, emit: Emit, pool: _Submitter,
                 task: Callable[[Prepared, int, _Inbox], None],
                 prepared: list[Prepared], inbox: _Inbox, ahead: int,
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
                self._inbox.put(_Done(late, Finalized(self._prepared[late].tool_call,
                                                      error_result(str(error)), True)))

    def drain(self, signal: AbortSignal) -> None:
        """Take what the pool threads send until every call has finished. After an abort,
        names the calls that have not returned within ``ABORT_GRACE_S`` (once)."""
        inbox = self._inbox
        unregister = signal.on_abort(lambda: inbox.put(_AbortNoticed(time.monotonic())))
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
                if kind is _Update:
                    self.updated(item)  # type: ignore[arg-type]  # checked by class
                elif kind is _Done:
                    self._finished(item)  # type: ignore[arg-type]  # checked by class
                else:
                    noticed_at = item.at  # type: ignore[union-attr]  # _AbortNoticed
        finally:
            unregister()

    def update_here(self, item: _Update) -> None:
        """An update from the call executing on the worker thread itself: the updates other
        threads queued before it first, then this one, so they keep their order."""
        while True:
            try:
                queued = self._inbox.get_nowait()
            except queue.Empty:
                break
            if type(queued) is _Update:
                self.updated(queued)
        self.updated(item)

    def updated(self, item: _Update) -> None:
        if self.results[item.index] is not None:
            return  # it came after the call's completion: dropped
        call = self._prepared[item.index].tool_call
        self._send(ToolExecutionUpdateEvent(call.id, call.name, call.arguments, item.partial))

    def _finished(self, item: _Done) -> None:
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


class ToolRunner:
    """Executes one run's tool batches on the caller's executor or the run's own pool.

    Without ``config.tool_executor`` the run's pool is created at the first batch and shut
    down by ``close()`` when the run ends, so no pool thread outlives its run. A caller's
    executor is only submitted to, never shut down. Used only from the run's worker thread.
    """

    def __init__(self, config: AgentLoopConfig, signal: AbortSignal, emit: Emit,
                 trace: RunTrace = UNTRACED) -> None:
        self._config = config
        self._tool_scope = trace.tool_scope
        self._signal = signal
        self._emit = emit
        self._pool: ThreadPoolExecutor | None = None
        # ids of the calls of the current batch that get an unknown-outcome result instead
        # of running (a resumed run's calls that started before the crash, not replayable)
        self._unknown: frozenset[str] = frozenset()

    def close(self) -> None:
        """Shut the run's own pool down and wait for its threads (a caller's: untouched)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _get_pool(self) -> _Submitter:
        executor = self._config.tool_executor
        if executor is not None:
            return executor  # the caller's: it outlives the run and caps nothing itself
        if self._pool is None:
            cap = self._config.max_parallel_tools
            # owned by this run: runs execute/after_tool_call; shut down by close()
            self._pool = ThreadPoolExecutor(max_workers=cap if cap else 1024,
                                            thread_name_prefix="piagent-tool")
        return self._pool

    def run_batch(self, context: AgentContext, message: AssistantMessage,
                  config: AgentLoopConfig, calls: list[ToolCall] | None = None,
                  unknown_outcome: frozenset[str] = frozenset()) -> ToolBatch:
        """Execute the tool calls of ``message`` (or ``calls``, some of them).

        The calls whose ids are in ``unknown_outcome`` do not run: each gets
        ``unknown_outcome_result`` with the usual start and end events.
        """
        self._config = config
        self._unknown = unknown_outcome
        calls = message.tool_calls if calls is None else calls
        if message.stop_reason == "length":
            return self._fail_truncated(calls)
        by_name = tools_by_name(context.tools)
        sequential = config.tool_execution == "sequential" or any(
            getattr(by_name.get(call.name), "execution_mode", None) == "sequential"
            for call in calls)
        if sequential:
            return self._run_sequential(context, message, calls, by_name)
        return self._run_parallel(context, message, calls, by_name)

    def _fail_truncated(self, calls: list[ToolCall]) -> ToolBatch:
        messages = []
        for call in calls:
            self._emit(ToolExecutionStartEvent(call.id, call.name, call.arguments))
            done = Finalized(call, truncated_result(call), True)
            _emit_end(self._emit, done)
            result_message = tool_result_message(done)
            emit_message(self._emit, result_message)
            messages.append(result_message)
        return ToolBatch(messages, terminate=False)

    def _preflight(self, context: AgentContext, message: AssistantMessage, call: ToolCall,
                   by_name: dict[str, AgentTool]) -> Finalized | Prepared:
        """``tool_execution_start``, then the call prepared to run, or already finished
        (unknown tool, invalid arguments, blocked) with its ``tool_execution_end`` sent."""
        self._emit(ToolExecutionStartEvent(call.id, call.name, call.arguments))
        if call.id in self._unknown:
            done = Finalized(call, unknown_outcome_result(call), True)
            _emit_end(self._emit, done)
            return done
        prepared = prepare_tool_call(context, message, call, self._config, self._signal,
                                     by_name.get(call.name))
        if isinstance(prepared, Prepared):
            return prepared
        done = Finalized(call, prepared.result, True)
        _emit_end(self._emit, done)
        return done

    def _run_sequential(self, context: AgentContext, message: AssistantMessage,
                        calls: list[ToolCall], by_name: dict[str, AgentTool]) -> ToolBatch:
        finished: list[Finalized] = []
        messages: list[ToolResultMessage] = []
        for call in calls:
            slot = self._preflight(context, message, call, by_name)
            failure = None
            if isinstance(slot, Finalized):
                done = slot
            else:
                results, failure = self._execute_all(context, message, [slot])
                done = results[0]
            messages.extend(_emit_results(self._emit, [done], failure))
            finished.append(done)
            if self._signal.is_set():
                break
        return ToolBatch(messages, _should_terminate(finished))

    def _run_parallel(self, context: AgentContext, message: AssistantMessage,
                      calls: list[ToolCall], by_name: dict[str, AgentTool]) -> ToolBatch:
        slots: list[Finalized | Prepared] = []
        for call in calls:  # phase 1: preflight in source order
            slots.append(self._preflight(context, message, call, by_name))
            if self._signal.is_set():
                break
        deferred = [slot for slot in slots if isinstance(slot, Prepared)]
        results, failure = self._execute_all(context, message, deferred)  # phase 2
        executed = iter(results)
        finished = [slot if isinstance(slot, Finalized) else next(executed) for slot in slots]
        messages = _emit_results(self._emit, finished, failure)  # phase 3, in source order
        return ToolBatch(messages, _should_terminate(finished))

    def _execute_all(self, context: AgentContext, message: AssistantMessage,
                     prepared: list[Prepared]) -> tuple[list[Finalized], BaseException | None]:
        """Run the calls on the pool; emit updates and ends here, as they arrive. Returns
        every result and the first failure (the caller records, then raises it)."""
        if not prepared:
            return [], None
        inbox: _Inbox = queue.SimpleQueue()
        cap = self._config.max_parallel_tools
        ahead = len(prepared) if not cap or self._config.tool_executor is None else cap
        # one call and no caller's executor: it executes here, on the run's worker thread;
        # its updates from this thread are emitted as they come (others', when it returns)
        if len(prepared) == 1 and self._config.tool_executor is None:
            pool: _Submitter = _HERE
            worker = threading.get_ident()
        else:
            pool, worker = self._get_pool(), None

        task = functools.partial(self._execute_one, context, message)  # no Python frame
        flight = _InFlight(self._emit, pool, task, prepared, inbox, ahead, start=False)
        if worker is None:
            flight.start(ahead)
        else:  # the worker is busy with the call: a timer names it if it outlasts an abort
            flight._task = functools.partial(self._execute_one, context, message,
                                             flight=flight, worker=worker)
            watch = _GraceWatch(flight)
            unregister = self._signal.on_abort(watch.start)
            try:
                flight.start(ahead)
            finally:
                unregister()
                watch.stop()
        flight.drain(self._signal)
        return [r for r in flight.results if r is not None], flight.failure or flight.refusal

    def _execute_one(self, context: AgentContext, message: AssistantMessage,
                     prepared: Prepared, index: int, inbox: _Inbox,
                     flight: _InFlight | None = None, worker: int | None = None) -> None:
        """Pool thread (or, with ``flight``, the run's worker thread ``worker``): execute and
        finalize one call, always posting its completion."""
        # No lock: an update that slips past `accepting` as execute() returns is queued after
        # the completion, and _InFlight drops an update whose call has its result already.
        accepting = True

        def on_update(partial: Any) -> None:
            if accepting:
                if flight is not None and threading.get_ident() == worker:
                    flight.update_here(_Update(index, partial))  # on the worker: now
                else:
                    inbox.put(_Update(index, partial))

        done: Finalized | None = None
        failure: Exception | None = None  # on_tool_execute's, if it raised
        try:
            if self._signal.is_set():
                done = Finalized(prepared.tool_call, error_result(ABORTED_TEXT), True)
            elif (failure := self._mark_started(prepared.tool_call)) is not None:
                done = Finalized(prepared.tool_call, error_result(
                    f"Tool {prepared.tool_call.name!r} was not executed: recording its start "
                    f"failed ({failure_text(failure)})."), True)
            else:
                with self._tool_scope(prepared.tool_call):  # the call's span, if traced
                    done = execute_prepared(prepared, self._signal, on_update)
                    accepting = False
                    done = finalize(context, message, prepared, done, self._config,
                                    self._signal)
        except BaseException as exc:
            _log.exception("Tool %r failed outside execute()", prepared.tool_call.name)
            done = Finalized(prepared.tool_call, error_result(exception_text(exc)), True)
            raise
        finally:
            accepting = False
            inbox.put(_Done(index, done, failure))  # type: ignore[arg-type]  # set above

    def _mark_started(self, call: ToolCall) -> Exception | None:
        """``on_tool_execute(call)``; the exception it raised, if any (the run then fails)."""
        hook = self._config.on_tool_execute
        if hook is None:
            return None
        try:
            hook(call)
        except Exception as exc:  # reported by the worker thread as the run's failure
            return exc
        return None
