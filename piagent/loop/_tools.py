"""Tool batches (pi's ``executeToolCalls``): a ``Batch``, made per batch, runs its calls
through the phases of ``_call.py``, sequentially or in parallel, with the resume step before
and the approval step after (``_approval.py``). Calls are prepared on the run's worker
thread; ``execute`` and ``after_tool_call`` run on the pool (a one-call batch too, so the
worker stays free to emit updates live) and report through one inbox per execution: a
tool's updates before its end, ends in completion order, result messages in source order."""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..abort import AbortSignal
from ..events import (
    AgentEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent as _Start,
    ToolExecutionUpdateEvent,
)
from ..messages import AssistantMessage, ToolCall, ToolResultMessage, now_ms
from ..policy import PendingApproval
from ..tools import AgentToolResult
from ._approval import Answer, batch_keys, resumed_answers, wait_for_approval
from ._call import (
    Finalized,
    Prepared,
    Waiting,
    execute_prepared_tool_call,
    finalize_executed_tool_call,
    prepare_tool_call,
    tool_result_message,
)
from ._config import AgentContext, AgentLoopConfig
from ._emit import Emit, emit_messages, record_despite_failure
from ._inbox import Done, Inbox, Update, refused as _refused
from ._pool import RunPool
from ._results import ABORTED_TEXT, error_result, exception_text, failure_text, truncated_result
from ._timeout import execute_timed
from ._trace import UNTRACED, RunTrace

__all__ = ["ABORT_GRACE_S", "Batch", "Done", "ToolRunner", "Update", "emit_messages",
           "record_despite_failure"]

_log = logging.getLogger("piagent.loop")

ABORT_GRACE_S = 2.0  # after an abort, the tools not back this long after are named (once)




class ToolRunner:
    """One run's tool batches, each on a new ``Batch``, on the caller's executor (only
    submitted to) or the run's own pool: made at the first batch, shut down by ``close()``
    (no pool thread outlives its run). Used only from the run's worker thread."""

    def __init__(self, config: AgentLoopConfig, signal: AbortSignal, emit: Emit,
                 trace: RunTrace = UNTRACED) -> None:
        self.signal, self.emit, self.trace = signal, emit, trace
        self.cap, self.executor = config.max_parallel_tools, config.tool_executor
        self.own: RunPool | None = None  # runs execute/after_tool_call; close()
        self.timeout = config.tool_timeout  # the calls' default limit (a tool's own wins)
        # the threads of timed calls on the run's own side (_timeout.py), which close()
        # joins, and those of calls that timed out, which nothing joins
        self.timed: list[threading.Thread] = []
        self.abandoned: set[threading.Thread] = set()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the caller's executor or the run's own pool (``RuntimeError``
        when it refuses)."""
        if self.executor is not None:
            self.executor.submit(fn, *args)  # the caller's: it outlives the run
            return
        if self.own is None:
            self.own = RunPool(self.cap or 1024)
        self.own.post(fn, *args)

    def close(self) -> None:
        """Stop the run's own pool and wait for its threads (a caller's: untouched);
        the threads of timed-out calls are left running (docs/threading.md)."""
        if self.own is not None:
            self.own.close()
            self.own = None
        if self.timed:
            for thread in self.timed:
                if thread not in self.abandoned:
                    thread.join()  # it posted its result: it is ending
            self.timed.clear()

    def run_batch(self, context: AgentContext, message: AssistantMessage,
                  config: AgentLoopConfig, calls: list[ToolCall] | None = None,
                  unknown_outcome: frozenset[str] = frozenset()) -> Batch:
        """The calls of ``message``, or ``calls``: a resumed batch (``resumed_answers``)."""
        answers: dict[int, Answer] = {}
        if calls is None:
            calls = message.tool_calls
        else:
            answers = resumed_answers(message, calls, batch_keys(context.messages, message),
                                      config.approvals, config.held_results, unknown_outcome)
        return Batch(self, context, message, config, calls, answers).run()


class Batch:
    """One batch, made for it: its inputs, ``rest`` (held back from the first waiting call
    on) and, once run, its result ``messages``, ``terminate`` and ``waiting`` (or None)."""

    __slots__ = ("runner", "emit", "signal", "context", "message", "config", "calls",
                 "answers", "tools", "messages", "rest", "terminate", "waiting")

    def __init__(self, runner: ToolRunner, context: AgentContext, message: AssistantMessage,
                 config: AgentLoopConfig, calls: list[ToolCall], answers: dict[int, Answer]
                 ) -> None:
        self.runner, self.emit, self.signal = runner, runner.emit, runner.signal
        self.context, self.message, self.config = context, message, config
        self.calls, self.answers = calls, answers
        self.tools = {tool.name: tool for tool in reversed(context.tools)}  # first of a name
        self.messages: list[ToolResultMessage] = []
        self.rest: list[Finalized | Waiting] = []
        self.terminate = True  # until a recorded call does not ask to
        self.waiting: list[PendingApproval] | None = None

    def run(self) -> Batch:
        if self.message.stop_reason == "length":  # arguments may be cut: nothing runs
            for call in self.calls:
                self.emit(_Start(call.id, call.name, call.arguments))
                self.end(done := Finalized(call, truncated_result(call), True))
                self.record([done])
        elif self.config.tool_execution == "sequential" or any(
                getattr(self.tools.get(call.name), "execution_mode", None) == "sequential"
                for call in self.calls):
            for call in self.calls:  # each prepared, executed, finalized, recorded (aborted
                # ones too: no call of the batch is left without a result, pi's #9986)
                slot = self.prepare(call)
                failure = None
                if type(slot) is Prepared:
                    (slot,), failure = self.execute([slot])
                self.record([slot], failure)  # type: ignore[list-item]  # executed
        else:  # every call prepared in source order, then the prepared ones run together
            slots: list[Finalized | Prepared | Waiting] = [
                self.prepare(call) for call in self.calls]  # once aborted: each "aborted"
            prepared = [slot for slot in slots if type(slot) is Prepared]
            failure = None
            if prepared:
                results, failure = self.execute(prepared)
                executed = iter(results)
                slots = [next(executed) if type(slot) is Prepared else slot for slot in slots]
            self.record(slots, failure)  # type: ignore[arg-type]  # none Prepared now
        if self.rest:
            self.stop_waiting()
        self.terminate = self.terminate and bool(self.messages) and not self.rest
        return self

    def end(self, done: Finalized) -> None:
        self.emit(ToolExecutionEndEvent(done.tool_call.id, done.tool_call.name, done.result,
                                        done.is_error, done.duration_ms))

    def prepare(self, call: ToolCall) -> Finalized | Prepared | Waiting:
        """``tool_execution_start``, the resume step and phase 1 (a finished call's end)."""
        answer = self.answers.get(id(call)) if self.answers else None
        if type(answer) is Finalized:
            return answer  # held: its events were sent when it ran
        self.emit(_Start(call.id, call.name, call.arguments))
        slot = Finalized(call, answer, True) if type(answer) is AgentToolResult else (
            prepare_tool_call(self.context, self.message, call, self.config, self.signal,
                              self.tools.get(call.name), answer))  # type: ignore[arg-type]
        if type(slot) is Finalized:
            self.end(slot)
        return slot

    def record(self, slots: Sequence[Finalized | Waiting],
               failure: BaseException | None = None) -> None:
        """The result messages of ``slots`` (one timestamp), sent or, from the batch's first
        waiting call on, held back; with a ``failure``, those before a waiting call are
        recorded, then it is raised."""
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

    def stop_waiting(self) -> None:
        """The approval step; an aborted run waits for nothing: its waiting calls end as
        aborted and every result is recorded."""
        if not self.signal.is_set():
            self.waiting = wait_for_approval(
                self.rest, batch_keys(self.context.messages, self.message), self.config,
                self.emit)
            return
        rest, self.rest = self.rest, []
        for index, slot in enumerate(rest):
            if type(slot) is Waiting:
                rest[index] = done = Finalized(slot.tool_call, error_result(ABORTED_TEXT), True)
                self.end(done)
        self.record(rest)

    def execute(self, prepared: list[Prepared]) -> tuple[list[Finalized], BaseException | None]:
        """Phases 2 and 3 on the pool, each call in a copy of the worker's contextvars, at
        most ``ahead`` beyond those finished (a caller's executor may have more workers than
        ``max_parallel_tools``); updates and ends emitted as they arrive. The results and the
        first failure (a listener's, ``on_tool_execute``'s, or the executor's refusal)."""
        runner, inbox, count = self.runner, Inbox(), len(prepared)
        if runner.timeout is not None or any(p.tool.timeout is not None for p in prepared):
            return execute_timed(self, prepared, ABORT_GRACE_S, _not_returned_text)
        ahead = count if not runner.cap or runner.executor is None else runner.cap
        results: list[Finalized | None] = [None] * count
        submitted, finished = 0, 0
        failure: BaseException | None = None  # the first listener or hook failure
        refusal: BaseException | None = None  # the executor refused a call
        noticed_at: float | None = None  # when the abort was seen; None again once named
        unregister = self.signal.on_abort(lambda: inbox.put(None))  # wakes the worker
        try:
            while finished < count:
                while submitted < count and submitted - finished < ahead:
                    try:
                        runner.submit(contextvars.copy_context().run, self.execute_one,
                                      prepared[submitted], submitted, inbox)
                        submitted += 1
                    except RuntimeError as exc:
                        refusal = _refused(exc, prepared, submitted, inbox)
                        submitted = count
                if noticed_at is None:  # not aborted, or the laggards were named already
                    item = inbox.get()
                else:
                    try:
                        item = inbox.get(timeout=max(
                            noticed_at + ABORT_GRACE_S - time.monotonic(), 0.0))
                    except queue.Empty:
                        _log.warning("%s", _not_returned_text(prepared, results))
                        noticed_at = None
                        continue
                if type(item) is Done:
                    results[item.index] = done = item.done
                    failure = self.send(ToolExecutionEndEvent(
                        done.tool_call.id, done.tool_call.name, done.result, done.is_error,
                        done.duration_ms), failure) or item.failure
                    finished += 1
                elif type(item) is Update:
                    if results[item.index] is None:  # else: after the completion, dropped
                        call = prepared[item.index].tool_call
                        failure = self.send(ToolExecutionUpdateEvent(
                            call.id, call.name, call.arguments, item.partial), failure)
                else:
                    noticed_at = time.monotonic()
        finally:
            unregister()
        return results, failure or refusal  # type: ignore[return-value]  # all finished

    def send(self, event: AgentEvent, failure: BaseException | None) -> BaseException | None:
        """Emit; the first listener failure is kept (raised once every tool has finished,
        the running tools' events still going out, as pi's do), a later one logged."""
        try:
            self.emit(event)
        except BaseException as exc:
            if failure is None:
                return exc
            if not isinstance(exc, Exception):
                raise
            _log.exception("A listener raised again at %s after an earlier failure", event.type)
        return failure

    def execute_one(self, prepared: Prepared, index: int, inbox: Inbox,
                    signal: AbortSignal | None = None) -> None:
        """Pool thread: ``on_tool_execute`` (the durable start mark), phases 2 and 3; always
        posts the completion. No lock: an update slipping past ``accepting`` is dropped."""
        accepting = True

        def on_update(partial: Any) -> None:
            if accepting:
                inbox.put(Update(index, partial))

        call, hook = prepared.tool_call, self.config.on_tool_execute
        signal = self.signal if signal is None else signal  # a timed call's own (_timeout.py)
        done: Finalized | None = None
        failure: Exception | None = None  # on_tool_execute's: the run fails
        try:
            if signal.is_set():
                done = Finalized(call, error_result(ABORTED_TEXT), True)
                return
            try:
                if hook is not None:
                    hook(call)
            except Exception as exc:
                failure = exc
                done = Finalized(call, error_result(
                    f"Tool {call.name!r} was not executed: recording its start failed "
                    f"({failure_text(exc)})."), True)
                return
            with self.runner.trace.tool_scope(call):  # the call's span, if traced
                done = execute_prepared_tool_call(prepared, signal, on_update)
                accepting = False
                done = finalize_executed_tool_call(self.context, self.message, prepared, done,
                                                   self.config, signal)
        except BaseException as exc:
            _log.exception("Tool %r failed outside execute()", call.name)
            done = Finalized(call, error_result(exception_text(exc)), True)
            raise
        finally:
            accepting = False
            inbox.put(Done(index, done, failure))  # type: ignore[arg-type]  # set above


def _not_returned_text(prepared: list[Prepared], results: list[Finalized | None]) -> str:
    late = [p.tool_call for p, r in zip(prepared, results, strict=True) if r is None]
    names = ", ".join(f"{c.name!r} (call {c.id})" for c in late)
    return (f"The run was aborted {ABORT_GRACE_S:g} s ago and tool {names} "
            f"{'has' if len(late) == 1 else 'have'} not returned yet; the run ends when it "
            f"returns. A long-running tool should watch its signal (signal.aborted, "
            f"signal.wait(timeout), signal.on_abort).")
