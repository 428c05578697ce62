"""Tool batches: sequential and parallel, on the caller's executor or the run's own pool.

Each call is prepared on the run's worker thread in source order (``_call.py``).
``execute`` and ``after_tool_call`` run on the pool, a batch of one call too, so the worker
stays free to emit a call's updates live whatever thread sends them. Progress updates and completions travel back to the worker
thread through one FIFO inbox per batch, as typed records (``Update``, ``Done``,
``AbortNoticed``), and only the worker emits events: a tool's updates come before its end,
ends come in completion order, and result messages in source order.
"""

from __future__ import annotations

import functools
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
    ToolApprovalRequestEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
)
from ..messages import AgentMessage, AssistantMessage, ToolCall, ToolResultMessage, now_ms
from ..policy import PendingApproval
from ..tools import AgentTool
from ._approval import (
    NOTHING_RESUMED,
    ResumedCalls,
    batch_keys,
    denied_result,
    held_done,
    keep_key,
    pending_of,
)
from ._call import (
    ABORTED_TEXT,
    Finalized,
    Immediate,
    Prepared,
    Waiting,
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
from ._inflight import (
    Done,
    Emit,
    Inbox,
    InFlight,
    Submitter,
    Update,
)
from ._trace import UNTRACED, RunTrace

__all__ = ["ToolBatch", "ToolRunner", "emit_message", "emit_messages",
           "record_despite_failure", "tool_failure_result"]

_log = logging.getLogger("piagent.loop")



@dataclass(slots=True)
class ToolBatch:
    """The result messages of one batch (source order) and whether it asked to stop;
    ``waiting``: the calls waiting for approval (the run ends), else ``None``."""

    messages: list[ToolResultMessage]
    terminate: bool
    waiting: list[PendingApproval] | None = None


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
    for finished in done:  # a loop, not all(<generator>): this runs after every batch
        if finished.result.terminate is not True:
            return False
    return bool(done)


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
        # a resumed batch's held results, decisions and unknown-outcome calls; ``_special``
        # their calls' object ids (empty for any other batch: one set lookup per call)
        self._resumed = NOTHING_RESUMED
        self._special: frozenset[int] = frozenset()
        self._waits = 0  # calls of the current batch waiting for approval

    def close(self) -> None:
        """Shut the run's own pool down and wait for its threads (a caller's: untouched)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _get_pool(self) -> Submitter:
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

        The calls whose start marks (``start_mark``) are in ``unknown_outcome`` do not run
        (unless a held result answers them): each gets
        ``unknown_outcome_result`` with the usual start and end events. Given ``calls`` (a
        resumed batch), ``config.held_results`` and ``config.approvals`` apply to them.
        """
        self._config = config
        self._waits = 0
        if calls is None:
            calls = message.tool_calls
            if self._special:
                self._resumed, self._special = NOTHING_RESUMED, frozenset()
        else:
            self._resumed = ResumedCalls.of(message, calls, batch_keys(context.messages, message),
                                            config.approvals, config.held_results,
                                            unknown_outcome)
            self._special = self._resumed.ids
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
                   by_name: dict[str, AgentTool]) -> Finalized | Prepared | Waiting:
        """``tool_execution_start``, then the call prepared to run, waiting for approval, or
        already finished (unknown tool, invalid arguments, blocked) with its
        ``tool_execution_end`` sent."""
        if id(call) in self._special:
            return self._resumed_slot(context, message, call, by_name)
        self._emit(ToolExecutionStartEvent(call.id, call.name, call.arguments))
        prepared = prepare_tool_call(context, message, call, self._config, self._signal,
                                     by_name.get(call.name))
        if isinstance(prepared, Prepared):
            return prepared
        return self._not_running(call, prepared)

    def _not_running(self, call: ToolCall, prepared: Immediate | Waiting
                     ) -> Finalized | Waiting:
        if isinstance(prepared, Waiting):
            self._waits += 1
            return prepared
        done = Finalized(call, prepared.result, True)
        _emit_end(self._emit, done)
        return done

    def _resumed_slot(self, context: AgentContext, message: AssistantMessage, call: ToolCall,
                      by_name: dict[str, AgentTool]) -> Finalized | Prepared | Waiting:
        """A call of a resumed batch: its held result (no events: they were sent when it
        ran), an unknown outcome, a denial, or the approved call prepared to run."""
        resumed = self._resumed
        held = resumed.held.get(id(call))
        if held is not None:
            return held_done(call, held)
        self._emit(ToolExecutionStartEvent(call.id, call.name, call.arguments))
        decision = resumed.decisions.get(id(call))
        if id(call) in resumed.unknown:
            prepared: Immediate | Waiting = Immediate(unknown_outcome_result(call))
        elif decision is not None and not decision.approved:
            prepared = Immediate(denied_result(decision.reason))
        else:
            ready = prepare_tool_call(context, message, call, self._config, self._signal,
                                      by_name.get(call.name), decision)
            if isinstance(ready, Prepared):
                return ready
            prepared = ready
        return self._not_running(call, prepared)

    def _run_sequential(self, context: AgentContext, message: AssistantMessage,
                        calls: list[ToolCall], by_name: dict[str, AgentTool]) -> ToolBatch:
        finished: list[Finalized] = []
        messages: list[ToolResultMessage] = []
        rest: list[Finalized | Waiting] = []  # from the first waiting call on: held back
        for call in calls:
            slot = self._preflight(context, message, call, by_name)
            failure = None
            if isinstance(slot, Finalized):
                done = slot
            elif isinstance(slot, Waiting):
                rest.append(slot)
                continue
            else:
                results, failure = self._execute_all(context, message, [slot])
                done = results[0]
            if self._waits and failure is None:
                rest.append(done)
            else:
                messages.extend(_emit_results(self._emit, [done], failure))
            finished.append(done)
            if self._signal.is_set():
                break
        if self._waits:
            return self._stop_waiting(context, message, rest, messages)
        return ToolBatch(messages, _should_terminate(finished))

    def _run_parallel(self, context: AgentContext, message: AssistantMessage,
                      calls: list[ToolCall], by_name: dict[str, AgentTool]) -> ToolBatch:
        slots: list[Finalized | Prepared | Waiting] = []
        for call in calls:  # phase 1: preflight in source order
            slots.append(self._preflight(context, message, call, by_name))
            if self._signal.is_set():
                break
        deferred = [slot for slot in slots if isinstance(slot, Prepared)]
        results, failure = self._execute_all(context, message, deferred)  # phase 2
        executed = iter(results)
        if self._waits:
            ordered = [next(executed) if isinstance(s, Prepared) else s for s in slots]
            first = next(i for i, s in enumerate(ordered) if isinstance(s, Waiting))
            prefix: list[Finalized] = ordered[:first]  # type: ignore[assignment]  # no Waiting
            return self._stop_waiting(context, message, ordered[first:],
                                      _emit_results(self._emit, prefix, failure))
        finished = [slot if isinstance(slot, Finalized) else next(executed) for slot in slots]
        messages = _emit_results(self._emit, finished, failure)  # phase 3, in source order
        return ToolBatch(messages, _should_terminate(finished))

    def _stop_waiting(self, context: AgentContext, message: AssistantMessage,
                      rest: Sequence[Finalized | Waiting],
                      messages: list[ToolResultMessage]) -> ToolBatch:
        """The batch ends with calls waiting: ``rest`` (from the first waiting call on) is
        held back and handed to ``on_approval_wait``, then each waiting call is reported
        (``tool_approval_request``). An aborted run waits for nothing: its waiting calls
        end as aborted and every result is recorded."""
        if self._signal.is_set():
            finished: list[Finalized] = []
            for slot in rest:
                if isinstance(slot, Waiting):
                    slot = Finalized(slot.tool_call, error_result(ABORTED_TEXT), True)
                    _emit_end(self._emit, slot)
                finished.append(slot)
            messages.extend(_emit_results(self._emit, finished))
            return ToolBatch(messages, terminate=False)
        timestamp = now_ms()
        keys = batch_keys(context.messages, message)
        held = [keep_key(tool_result_message(s, timestamp), keys.get(id(s.tool_call), ""))
                for s in rest if isinstance(s, Finalized)]
        pending = [pending_of(s.tool_call, keys.get(id(s.tool_call), ""))
                   for s in rest if isinstance(s, Waiting)]
        hook = self._config.on_approval_wait
        if hook is not None:
            hook(list(pending), list(held))  # kept (the Agent's store) before anyone is asked
        for entry in pending:
            self._emit(ToolApprovalRequestEvent(entry.tool_call_id, entry.tool_name,
                                                entry.args, entry.digest, entry.call_key))
        return ToolBatch(messages, terminate=False, waiting=pending)

    def _execute_all(self, context: AgentContext, message: AssistantMessage,
                     prepared: list[Prepared]) -> tuple[list[Finalized], BaseException | None]:
        """Run the calls on the pool; emit updates and ends here, as they arrive. Returns
        every result and the first failure (the caller records, then raises it)."""
        if not prepared:
            return [], None
        inbox: Inbox = queue.SimpleQueue()
        cap = self._config.max_parallel_tools
        ahead = len(prepared) if not cap or self._config.tool_executor is None else cap
        # every call on the pool, the worker free to emit updates live whatever thread
        # sends them (a tool's own threads, an MCP server's reader)
        task = functools.partial(self._execute_one, context, message)  # no Python frame
        flight = InFlight(self._emit, self._get_pool(), task, prepared, inbox, ahead)
        flight.drain(self._signal)
        return [r for r in flight.results if r is not None], flight.failure or flight.refusal

    def _execute_one(self, context: AgentContext, message: AssistantMessage,
                     prepared: Prepared, index: int, inbox: Inbox) -> None:
        """Pool thread: execute and finalize one call, always posting its completion."""
        # No lock: an update that slips past `accepting` as execute() returns is queued after
        # the completion, and InFlight drops an update whose call has its result already.
        accepting = True

        def on_update(partial: Any) -> None:
            if accepting:
                inbox.put(Update(index, partial))

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
            inbox.put(Done(index, done, failure))  # type: ignore[arg-type]  # set above

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
