"""Tool batches (pi's ``executeToolCalls``): a ``Batch`` made per batch runs its calls
through the phases of ``_call.py``, sequentially or in parallel, with the resume step before
and the approval step after (``_approval.py``); ``ToolRunner`` owns the run's pool.

Each call is prepared on the run's worker thread in source order; ``execute`` and
``after_tool_call`` run on the pool (``_inflight.py``), a batch of one call too, so the
worker stays free to emit a call's updates live whatever thread sends them. Only the worker
emits events: a tool's updates come before its end, ends in completion order, result
messages in source order.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..abort import AbortSignal
from ..events import (
    MessageEndEvent,
    MessageStartEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent as _Start,
)
from ..messages import AgentMessage, AssistantMessage, ToolCall, ToolResultMessage, now_ms
from ..sessions import ApprovalDecision, PendingApproval
from ._approval import NOTHING_RESUMED, ResumedCalls, batch_keys, wait_for_approval
from ._call import (
    ABORTED_TEXT,
    Finalized,
    Prepared,
    Waiting,
    error_result,
    exception_text,
    execute_prepared_tool_call,
    failure_text,
    finalize_executed_tool_call,
    prepare_tool_call,
    tool_failure_result,
    tool_result_message,
    tools_by_name,
    truncated_result,
)
from ._config import AgentContext, AgentLoopConfig
from ._inflight import Done, Emit, Inbox, InFlight, Submitter, Update
from ._trace import UNTRACED, RunTrace

__all__ = ["Batch", "ToolBatch", "ToolRunner", "emit_message", "emit_messages",
           "record_despite_failure", "tool_failure_result"]

_log = logging.getLogger("piagent.loop")


def emit_message(emit: Emit, message: AgentMessage) -> None:
    """``message_start`` then ``message_end``; if a listener fails at the start, the end is
    still sent (so the message is recorded), then the failure is raised."""
    try:
        emit(MessageStartEvent(message))
    except BaseException:
        record_despite_failure(emit, [message], start=False)
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


def record_despite_failure(emit: Emit, messages: Sequence[AgentMessage],
                           start: bool = True) -> None:
    """After a listener failed: still send each message's start (unless ``start`` is false)
    and end, every event on its own, so the transcript keeps the user's input and every
    executed call's result. The first failure is what the run reports; one here is logged."""
    for message in messages:
        events = (MessageStartEvent(message), MessageEndEvent(message))
        for event in events if start else events[1:]:
            try:
                emit(event)
            except Exception:
                _log.exception("A listener raised again while %s was being recorded after "
                               "an earlier failure", getattr(message, "role", "a message"))


@dataclass(slots=True)
class ToolBatch:
    """The result messages of one batch (source order) and whether it asked to stop;
    ``waiting``: the calls waiting for approval (the run ends), else ``None``."""

    messages: list[ToolResultMessage]
    terminate: bool
    waiting: list[PendingApproval] | None = None


class ToolRunner:
    """Runs one run's tool batches: each on a new ``Batch``, on the caller's executor
    (``config.tool_executor``: only submitted to, never shut down) or the run's own pool,
    created at the first batch and shut down by ``close()`` when the run ends, so no pool
    thread outlives its run. Used only from the run's worker thread."""

    def __init__(self, config: AgentLoopConfig, signal: AbortSignal, emit: Emit,
                 trace: RunTrace = UNTRACED) -> None:
        self.signal, self.emit, self.trace = signal, emit, trace
        self.cap = config.max_parallel_tools
        self.executor = config.tool_executor
        self.own: ThreadPoolExecutor | None = None  # runs execute/after_tool_call; close()

    def pool(self) -> Submitter:
        if self.executor is not None:
            return self.executor  # the caller's: it outlives the run and caps nothing itself
        if self.own is None:
            self.own = ThreadPoolExecutor(max_workers=self.cap or 1024,
                                          thread_name_prefix="piagent-tool")
        return self.own

    def close(self) -> None:
        """Shut the run's own pool down and wait for its threads (a caller's: untouched)."""
        if self.own is not None:
            self.own.shutdown(wait=True)
            self.own = None

    def run_batch(self, context: AgentContext, message: AssistantMessage,
                  config: AgentLoopConfig, calls: list[ToolCall] | None = None,
                  unknown_outcome: frozenset[str] = frozenset()) -> ToolBatch:
        """Execute the tool calls of ``message``, or ``calls`` (a resumed batch, some of
        them: ``config.held_results`` and ``config.approvals`` apply to them, and those whose
        start marks are in ``unknown_outcome`` get ``unknown_outcome_result`` unless a held
        result answers them)."""
        resumed = NOTHING_RESUMED
        if calls is None:
            calls = message.tool_calls
        else:
            resumed = ResumedCalls.of(message, calls, batch_keys(context.messages, message),
                                      config.approvals, config.held_results, unknown_outcome)
        return Batch(self, context, message, config, calls, resumed).run()


class Batch:
    """One batch of tool calls, made for it and dropped after: its inputs, the results
    recorded so far, and ``rest``, from the first waiting call on (held back)."""

    __slots__ = ("runner", "emit", "signal", "context", "message", "config", "calls",
                 "resumed", "tools", "messages", "rest", "terminate")

    def __init__(self, runner: ToolRunner, context: AgentContext, message: AssistantMessage,
                 config: AgentLoopConfig, calls: list[ToolCall], resumed: ResumedCalls) -> None:
        self.runner, self.emit, self.signal = runner, runner.emit, runner.signal
        self.context, self.message, self.config = context, message, config
        self.calls, self.resumed = calls, resumed
        self.tools = tools_by_name(context.tools)
        self.messages: list[ToolResultMessage] = []
        self.rest: list[Finalized | Waiting] = []
        self.terminate = True  # until a recorded call does not ask to

    def run(self) -> ToolBatch:
        if self.message.stop_reason == "length":  # arguments may be cut: nothing runs
            for call in self.calls:
                self.emit(_Start(call.id, call.name, call.arguments))
                self.end(done := Finalized(call, truncated_result(call), True))
                self.record([done])
            return ToolBatch(self.messages, terminate=False)
        if self.config.tool_execution == "sequential" or any(
                getattr(self.tools.get(call.name), "execution_mode", None) == "sequential"
                for call in self.calls):
            for call in self.calls:  # each call prepared, executed, finalized and recorded
                slot = self.prepare(call)
                failure = None
                if type(slot) is Prepared:
                    (slot,), failure = self.execute([slot])
                self.record([slot], failure)  # type: ignore[list-item]  # executed
                if self.signal.is_set() and type(slot) is not Waiting:
                    break
        else:
            self.run_parallel()
        if self.rest:
            return self.stop_waiting()
        return ToolBatch(self.messages, self.terminate and bool(self.messages))

    def run_parallel(self) -> None:
        """Every call prepared in source order, then the prepared ones executed together."""
        slots: list[Finalized | Prepared | Waiting] = []
        for call in self.calls:
            slots.append(self.prepare(call))
            if self.signal.is_set():
                break
        prepared = [slot for slot in slots if type(slot) is Prepared]
        failure = None
        if prepared:
            results, failure = self.execute(prepared)
            executed = iter(results)
            slots = [next(executed) if type(slot) is Prepared else slot for slot in slots]
        self.record(slots, failure)  # type: ignore[arg-type]  # none Prepared now

    def end(self, done: Finalized) -> None:
        self.emit(ToolExecutionEndEvent(done.tool_call.id, done.tool_call.name, done.result,
                                        done.is_error, done.duration_ms))

    def prepare(self, call: ToolCall) -> Finalized | Prepared | Waiting:
        """``tool_execution_start`` and phase 1 (after the resume step for a resumed call):
        the call ready to run, waiting, or finished (its ``tool_execution_end`` sent)."""
        decision: ApprovalDecision | None = None
        if id(call) in self.resumed.ids:
            done = self.resumed.held_done(call)
            if done is not None:
                return done  # no events: they were sent when it ran
            self.emit(_Start(call.id, call.name, call.arguments))
            settled = self.resumed.settled(call)
            if isinstance(settled, Finalized):
                self.end(settled)
                return settled
            decision = settled
        else:
            self.emit(_Start(call.id, call.name, call.arguments))
        slot = prepare_tool_call(self.context, self.message, call, self.config, self.signal,
                                 self.tools.get(call.name), decision)
        if type(slot) is Finalized:
            self.end(slot)
        return slot

    def record(self, slots: Sequence[Finalized | Waiting],
               failure: BaseException | None = None) -> None:
        """The result messages of ``slots`` in source order (one timestamp): sent, or held
        back from the first waiting call of the batch on. With a ``failure`` (a listener's
        or a hook's, earlier in the batch) those before a waiting call are still recorded,
        then it is raised."""
        timestamp = now_ms()
        if failure is not None:
            cut = next((i for i, s in enumerate(slots) if type(s) is Waiting), len(slots))
            record_despite_failure(self.emit, [tool_result_message(s, timestamp)  # type: ignore[arg-type]
                                               for s in slots[:cut]])
            raise failure
        now: list[ToolResultMessage] = []
        for slot in slots:
            if self.rest or isinstance(slot, Waiting):
                self.rest.append(slot)
                continue
            now.append(tool_result_message(slot, timestamp))
            if slot.result.terminate is not True:
                self.terminate = False
        emit_messages(self.emit, now)
        self.messages.extend(now)

    def stop_waiting(self) -> ToolBatch:
        """The batch ends with calls waiting: the approval step (``wait_for_approval``). An
        aborted run waits for nothing: its waiting calls end as aborted, all is recorded."""
        rest, self.rest = self.rest, []
        if not self.signal.is_set():
            waiting = wait_for_approval(rest, batch_keys(self.context.messages, self.message),
                                        self.config, self.emit)
            return ToolBatch(self.messages, terminate=False, waiting=waiting)
        for index, slot in enumerate(rest):
            if type(slot) is Waiting:
                rest[index] = Finalized(slot.tool_call, error_result(ABORTED_TEXT), True)
                self.end(rest[index])  # type: ignore[arg-type]  # just set
        self.record(rest)
        return ToolBatch(self.messages, terminate=False)

    def execute(self, prepared: list[Prepared]) -> tuple[list[Finalized], BaseException | None]:
        """Phases 2 and 3 of ``prepared`` on the pool; updates and ends emitted here as they
        arrive. Every result, and the first failure (the caller records, then raises it)."""
        cap = self.runner.cap
        ahead = len(prepared) if not cap or self.runner.executor is None else cap
        flight = InFlight(self.emit, self.runner.pool(), self.execute_one, prepared,
                          queue.SimpleQueue(), ahead)
        return flight.drain(self.signal), flight.failure or flight.refusal

    def execute_one(self, prepared: Prepared, index: int, inbox: Inbox) -> None:
        """Pool thread: ``on_tool_execute``, execute and finalize one call, always posting
        its completion."""
        # No lock: an update that slips past `accepting` as execute() returns is queued after
        # the completion, and InFlight drops an update whose call has its result already.
        accepting = True

        def on_update(partial: Any) -> None:
            if accepting:
                inbox.put(Update(index, partial))

        call, signal = prepared.tool_call, self.signal
        done: Finalized | None = None
        failure: Exception | None = None  # on_tool_execute's, if it raised
        try:
            if signal.is_set():
                done = Finalized(call, error_result(ABORTED_TEXT), True)
            elif (failure := self.mark_started(call)) is not None:
                done = Finalized(call, error_result(
                    f"Tool {call.name!r} was not executed: recording its start failed "
                    f"({failure_text(failure)})."), True)
            else:
                with self.runner.trace.tool_scope(call):  # the call's span, if traced
                    done = execute_prepared_tool_call(prepared, signal, on_update)
                    accepting = False
                    done = finalize_executed_tool_call(self.context, self.message, prepared,
                                                       done, self.config, signal)
        except BaseException as exc:
            _log.exception("Tool %r failed outside execute()", call.name)
            done = Finalized(call, error_result(exception_text(exc)), True)
            raise
        finally:
            accepting = False
            inbox.put(Done(index, done, failure))  # type: ignore[arg-type]  # set above

    def mark_started(self, call: ToolCall) -> Exception | None:
        """``on_tool_execute(call)`` (the durable start mark); what it raised (the run fails)."""
        hook = self.config.on_tool_execute
        if hook is not None:
            try:
                hook(call)
            except Exception as exc:  # reported by the worker thread as the run's failure
                return exc
        return None
