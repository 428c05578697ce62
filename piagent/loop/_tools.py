"""Tool execution: prepare → execute → finalize, in sequential and parallel batches.

Preparation (lookup, ``prepare_arguments``, coercion and validation, ``before_tool_call``)
runs on the run's worker thread in source order. ``execute`` and ``after_tool_call`` run
on the run's tool pool. Progress updates and completions travel back to the worker thread
through one FIFO queue, and only the worker emits events: a tool's updates come before
its end, ends come in completion order, and result messages in source order.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..abort import AbortSignal
from ..events import (
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
)
from ..messages import (
    AgentMessage,
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    now_ms,
)
from ..tools import AgentTool, AgentToolResult, validate_tool_arguments
from ._config import (
    AfterToolCallContext,
    AgentContext,
    AgentLoopConfig,
    AgentToolCallOutcome,
    BeforeToolCallContext,
)

_log = logging.getLogger("piagent.loop")

Emit = Callable[[AgentEvent], None]

_ABORTED = "Operation aborted"

ABORT_GRACE_S = 2.0
"""After an abort, how long tools may take to return before the run names the ones that have
not (once, as a warning on the ``piagent.loop`` logger)."""


def error_result(text: str) -> AgentToolResult:
    """A failed tool result carrying ``text`` for the model."""
    return AgentToolResult(content=[TextContent(text)], details={}, is_error=True)


def _exception_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _failure_text(exc: BaseException) -> str:
    """What the model reads when a tool raised: ``KeyError: 'file'``, the type first."""
    name = type(exc).__name__
    text = str(exc)
    return f"{name}: {text}" if text else name


def tool_failure_result(tool_name: str, exc: BaseException) -> AgentToolResult:
    """The error result of a tool that raised; the traceback is logged and kept in details.

    ``details["error"]`` holds ``type``, ``message`` and ``traceback`` (text), so a
    listener, the transcript or a test can show where the tool failed.
    """
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    _log.debug("Tool %r raised %s", tool_name, _failure_text(exc), exc_info=exc)
    result = error_result(_failure_text(exc))
    result.details = {"error": {"type": type(exc).__name__, "message": str(exc),
                                "traceback": trace}}
    return result


@dataclass(slots=True)
class _Prepared:
    tool_call: ToolCall
    tool: AgentTool
    args: Any


@dataclass(slots=True)
class _Immediate:
    result: AgentToolResult


@dataclass(slots=True)
class Finalized:
    """A finished tool call: what ``tool_execution_end`` and the result message carry."""

    tool_call: ToolCall
    result: AgentToolResult
    is_error: bool
    duration_ms: int | None = None


@dataclass(slots=True)
class ToolBatch:
    """The result messages of one batch (source order) and whether it asked to stop."""

    messages: list[ToolResultMessage]
    terminate: bool


def find_tool(tools: Sequence[AgentTool], name: str) -> AgentTool | None:
    """The first tool of ``tools`` called ``name``."""
    return next((t for t in tools if t.name == name), None)


def tools_by_name(tools: Sequence[AgentTool]) -> dict[str, AgentTool]:
    """``find_tool`` as a dict: each name maps to the first tool of that name."""
    return {tool.name: tool for tool in reversed(tools)}


def prepare_tool_call(context: AgentContext, assistant_message: AssistantMessage,
                      tool_call: ToolCall, config: AgentLoopConfig | None, signal: AbortSignal,
                      tool: AgentTool | None) -> _Prepared | _Immediate:
    """Validate the arguments of a call to ``tool`` (``None``: not found, an immediate error
    result), then run ``before_tool_call``; a failure is an immediate error result."""
    if tool is None:
        return _Immediate(error_result(f"Tool {tool_call.name} not found"))
    if signal.is_set():  # an aborted run prepares nothing and runs no hook
        return _Immediate(error_result(_ABORTED))
    try:
        arguments = tool_call.arguments
        if tool.prepare_arguments is not None:
            arguments = tool.prepare_arguments(arguments)
        args = validate_tool_arguments(tool, arguments)
        before_tool_call = config.before_tool_call if config is not None else None
        if before_tool_call is not None:
            decision = before_tool_call(
                BeforeToolCallContext(assistant_message, tool_call, args, context), signal)
            if signal.is_set():
                return _Immediate(error_result(_ABORTED))
            if decision is not None and decision.block:
                result = error_result(decision.reason or "Tool execution was blocked")
                result.terminate = decision.terminate is True
                return _Immediate(result)
        if signal.is_set():
            return _Immediate(error_result(_ABORTED))
    except Exception as exc:  # hook and validation failures are results the model can read
        return _Immediate(error_result(_exception_text(exc)))
    return _Prepared(tool_call, tool, args)


def _coerce_result(value: Any) -> AgentToolResult:
    if isinstance(value, AgentToolResult):
        return value
    if value is None:
        return AgentToolResult(content=[])
    if isinstance(value, str):
        return AgentToolResult(content=[TextContent(value)])
    msg = (f"Tool execute() returned {type(value).__name__}; return an AgentToolResult "
           "(or use the @tool decorator, which converts return values).")
    raise TypeError(msg)


def execute_prepared(prepared: _Prepared, signal: AbortSignal,
                     on_update: Callable[[Any], None]) -> Finalized:
    """Run ``execute``; an exception becomes an error result. Times only ``execute``."""
    call = prepared.tool_call
    started = time.monotonic()
    try:
        result = _coerce_result(prepared.tool.execute(call.id, prepared.args, signal,
                                                      on_update))
    except Exception as exc:  # a failing tool is a result the model can read
        return Finalized(call, tool_failure_result(call.name, exc), True,
                         round((time.monotonic() - started) * 1000))
    return Finalized(call, result, result.is_error is True,
                     round((time.monotonic() - started) * 1000))


def finalize(context: AgentContext, assistant_message: AssistantMessage, prepared: _Prepared,
             executed: Finalized, config: AgentLoopConfig | None,
             signal: AbortSignal) -> Finalized:
    """Apply ``after_tool_call`` field by field; a raising hook makes the result an error.
    Without the hook, ``executed`` itself is the final form."""
    after_tool_call = config.after_tool_call if config is not None else None
    if after_tool_call is None:
        return executed
    result, is_error = executed.result, executed.is_error
    try:
        override = after_tool_call(
            AfterToolCallContext(assistant_message, prepared.tool_call, prepared.args,
                                 result, is_error, context), signal)
        if override is not None:
            # structured content not replaced along with the content may no longer match it
            structured = override.structured_content
            if structured is None and override.content is None:
                structured = result.structured_content
            result = AgentToolResult(
                content=override.content if override.content is not None else result.content,
                details=override.details if override.details is not None else result.details,
                structured_content=structured,
                usage=override.usage if override.usage is not None else result.usage,
                is_error=result.is_error,
                terminate=(override.terminate if override.terminate is not None
                           else result.terminate),
            )
            if override.is_error is not None:
                is_error = override.is_error
    except Exception as exc:  # the hook's failure becomes this call's error result
        result, is_error = error_result(_exception_text(exc)), True
    return Finalized(prepared.tool_call, result, is_error, executed.duration_ms)


def run_tool_call(tool_call: ToolCall, *, tools: Sequence[AgentTool],
                  assistant_message: AssistantMessage, context: AgentContext,
                  config: AgentLoopConfig | None = None, signal: AbortSignal | None = None,
                  on_update: Callable[[Any], None] | None = None) -> AgentToolCallOutcome:
    """Run one call through the same prepare → execute → finalize path as a model's call.

    For tools that call other tools: the hooks (permission checks, say) apply to the nested
    call too. Runs on the calling thread, emits no events, adds no messages, and never
    raises for tool failures (they come back with ``is_error=True``).
    """
    signal = signal if signal is not None else AbortSignal()
    prepared = prepare_tool_call(context, assistant_message, tool_call, config, signal,
                                 find_tool(tools, tool_call.name))
    if isinstance(prepared, _Immediate):
        return AgentToolCallOutcome(tool_call, prepared.result, True)
    # as in a batch, updates sent after execute() returned are ignored
    gate = threading.Lock()  # guards `accepting`, as in a batch
    accepting = True

    def forward(partial: Any) -> None:
        with gate:
            if accepting and on_update is not None:
                on_update(partial)

    executed = execute_prepared(prepared, signal, forward)
    with gate:
        accepting = False
    done = finalize(context, assistant_message, prepared, executed, config, signal)
    return AgentToolCallOutcome(tool_call, done.result, done.is_error)


def tool_result_message(done: Finalized, timestamp: int | None = None) -> ToolResultMessage:
    """The transcript's record of a call (``terminate`` and structured content stay out),
    stamped ``timestamp`` (default: now)."""
    result = done.result
    content = result.content
    # positional, which costs half of keywords: the fields in ToolResultMessage's order
    return ToolResultMessage(done.tool_call.id, done.tool_call.name,
                             [*content] if content else [], result.details, result.usage,
                             done.is_error, done.duration_ms,
                             now_ms() if timestamp is None else timestamp)


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


def _not_returned_text(prepared: list[_Prepared], results: list[Finalized | None]) -> str:
    waiting = [p.tool_call for p, r in zip(prepared, results, strict=True) if r is None]
    names = ", ".join(f"{c.name!r} (call {c.id})" for c in waiting)
    verb = "has" if len(waiting) == 1 else "have"
    return (f"The run was aborted {ABORT_GRACE_S:g} s ago and tool {names} {verb} not returned "
            f"yet; the run ends when it returns. A long-running tool should watch its signal "
            f"(signal.aborted, signal.wait(timeout), signal.on_abort).")


def unknown_outcome_result(call: ToolCall) -> AgentToolResult:
    """The result of a call that was running when its process stopped and is not replayed."""
    return error_result(
        f"The process stopped while tool {call.name!r} was running (call {call.id}), so its "
        f"outcome is unknown; it was not run again. Check whether it took effect before "
        f"calling it again, or ask the user.")


def _should_terminate(done: Sequence[Finalized]) -> bool:
    return bool(done) and all(d.result.terminate is True for d in done)


class ToolRunner:
    """Executes one run's tool batches on the caller's executor or the run's own pool.

    Without ``config.tool_executor`` the run's pool is created at the first batch and shut
    down by ``close()`` when the run ends, so no pool thread outlives its run. A caller's
    executor is only submitted to, never shut down. Used only from the run's worker thread.
    """

    def __init__(self, config: AgentLoopConfig, signal: AbortSignal, emit: Emit) -> None:
        self._config = config
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

    def _get_pool(self) -> Executor:
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
            done = Finalized(call, error_result(
                f'Tool call "{call.name}" was not executed: the response hit the output token '
                "limit, so its arguments may be truncated. Re-issue the tool call with complete "
                "arguments."), True)
            _emit_end(self._emit, done)
            result_message = tool_result_message(done)
            emit_message(self._emit, result_message)
            messages.append(result_message)
        return ToolBatch(messages, terminate=False)

    def _preflight(self, context: AgentContext, message: AssistantMessage, call: ToolCall,
                   by_name: dict[str, AgentTool]) -> Finalized | _Prepared:
        """``tool_execution_start``, then the call prepared to run, or already finished
        (unknown tool, invalid arguments, blocked) with its ``tool_execution_end`` sent."""
        self._emit(ToolExecutionStartEvent(call.id, call.name, call.arguments))
        if call.id in self._unknown:
            done = Finalized(call, unknown_outcome_result(call), True)
            _emit_end(self._emit, done)
            return done
        prepared = prepare_tool_call(context, message, call, self._config, self._signal,
                                     by_name.get(call.name))
        if isinstance(prepared, _Prepared):
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
        slots: list[Finalized | _Prepared] = []
        for call in calls:  # phase 1: preflight in source order
            slots.append(self._preflight(context, message, call, by_name))
            if self._signal.is_set():
                break
        deferred = [slot for slot in slots if isinstance(slot, _Prepared)]
        results, failure = self._execute_all(context, message, deferred)  # phase 2
        executed = iter(results)
        finished = [slot if isinstance(slot, Finalized) else next(executed) for slot in slots]
        messages = _emit_results(self._emit, finished, failure)  # phase 3, in source order
        return ToolBatch(messages, _should_terminate(finished))

    def _execute_all(self, context: AgentContext, message: AssistantMessage,
                     prepared: list[_Prepared]) -> tuple[list[Finalized], BaseException | None]:
        """Run the calls on the pool; emit updates and ends here, as they arrive. Returns
        every result and the first listener failure (the caller records, then raises it)."""
        if not prepared:
            return [], None
        # carries ("update", index, partial) and ("done", index, Finalized) to this thread
        inbox: queue.SimpleQueue[tuple[str, int, Any]] = queue.SimpleQueue()
        pool = self._get_pool()
        cap = self._config.max_parallel_tools
        # a caller's executor may have more workers than the cap: submit at most `cap` ahead
        ahead = len(prepared) if not cap or self._config.tool_executor is None else cap
        results: list[Finalized | None] = [None] * len(prepared)
        remaining = len(prepared)
        failure: BaseException | None = None
        refusal: BaseException | None = None  # the executor refused a call (it was shut down)
        submitted = 0
        while submitted < min(ahead, len(prepared)) and refusal is None:
            refusal = self._submit(pool, context, message, prepared, submitted, inbox)
            submitted += 1
        unregister = self._signal.on_abort(lambda: inbox.put(("abort", -1, time.monotonic())))
        noticed_at: float | None = None  # when the abort was seen; None again once reported
        try:
            while remaining:
                if noticed_at is None:  # not aborted, or the laggards were named already
                    kind, index, payload = inbox.get()
                else:
                    wait = noticed_at + ABORT_GRACE_S - time.monotonic()
                    try:
                        kind, index, payload = inbox.get(timeout=max(wait, 0.0))
                    except queue.Empty:
                        _log.warning("%s", _not_returned_text(prepared, results))
                        noticed_at = None
                        continue
                if kind == "abort":
                    noticed_at = payload
                    continue
                failure = self._deliver(prepared, results, kind, index, payload, failure)
                if kind != "update":
                    remaining -= 1
                    if submitted < len(prepared) and refusal is None:
                        refusal = self._submit(pool, context, message, prepared, submitted,
                                               inbox)
                        submitted += 1
        finally:
            unregister()
        return [r for r in results if r is not None], failure or refusal

    def _submit(self, pool: Executor, context: AgentContext, message: AssistantMessage,
                prepared: list[_Prepared], index: int,
                inbox: queue.SimpleQueue[tuple[str, int, Any]]) -> BaseException | None:
        """Submit call ``index``; if the executor refuses (it was shut down), every call
        not yet submitted gets an error result and the refusal is returned as the failure."""
        try:
            pool.submit(self._execute_one, context, message, prepared[index], index, inbox)
        except RuntimeError as exc:
            error = RuntimeError(f"The tool executor refused a tool call ({exc}); a "
                                 "caller-owned tool_executor must stay open while runs use it.")
            error.__cause__ = exc
            for late in range(index, len(prepared)):
                inbox.put(("done", late, Finalized(prepared[late].tool_call,
                                                   error_result(str(error)), True)))
            return error
        return None

    def _deliver(self, prepared: list[_Prepared], results: list[Finalized | None], kind: str,
                 index: int, payload: Any, failure: BaseException | None) -> BaseException | None:
        """Record and emit one message from a pool thread; returns the first listener failure
        (or ``on_tool_execute`` failure: kind "unstarted", payload ``(Finalized, exception)``)."""
        hook_failure: BaseException | None = None
        if kind == "unstarted":
            payload, hook_failure = payload
        if kind != "update":
            results[index] = payload
        if failure is not None:
            return failure  # a listener failed: wait for the running tools, emit nothing more
        try:
            if kind != "update":
                _emit_end(self._emit, payload)
            elif results[index] is None:  # else it came after the call's completion: dropped
                call = prepared[index].tool_call
                self._emit(ToolExecutionUpdateEvent(call.id, call.name, call.arguments,
                                                    payload))
        except BaseException as exc:  # re-raised by _execute_all once every tool has finished
            return exc
        return hook_failure

    def _execute_one(self, context: AgentContext, message: AssistantMessage,
                     prepared: _Prepared, index: int,
                     inbox: queue.SimpleQueue[tuple[str, int, Any]]) -> None:
        """Pool thread: execute and finalize one call, always posting its completion."""
        # No lock: an update that slips past `accepting` as execute() returns is queued after
        # the completion, and _deliver drops an update whose call has its result already.
        accepting = True

        def on_update(partial: Any) -> None:
            if accepting:
                inbox.put(("update", index, partial))

        done: Finalized | None = None
        kind = "done"
        failure: Exception | None = None  # on_tool_execute's, if it raised
        try:
            if self._signal.is_set():
                done = Finalized(prepared.tool_call, error_result(_ABORTED), True)
            elif (failure := self._mark_started(prepared.tool_call)) is not None:
                kind = "unstarted"
                done = Finalized(prepared.tool_call, error_result(
                    f"Tool {prepared.tool_call.name!r} was not executed: recording its start "
                    f"failed ({_failure_text(failure)})."), True)
            else:
                done = execute_prepared(prepared, self._signal, on_update)
                accepting = False
                done = finalize(context, message, prepared, done, self._config, self._signal)
        except BaseException as exc:
            _log.exception("Tool %r failed outside execute()", prepared.tool_call.name)
            done = Finalized(prepared.tool_call, error_result(_exception_text(exc)), True)
            raise
        finally:
            accepting = False
            inbox.put((kind, index, (done, failure) if kind == "unstarted" else done))

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
