"""Tool calls with a time limit (``AgentTool.timeout``, ``tool_timeout``): ``execute_timed``
runs an execution of a batch (``Batch.execute``) in which some call has one. Past its
limit a call gets an error result naming it, its own signal is aborted (a cooperative tool
stops) and its thread is abandoned: Python cannot stop a thread, so it is left to finish on
its own, reported once, and joined by nothing (docs/threading.md). So that a thread that
never returns cannot hold the interpreter's exit (the run's pool is joined then, as a
``ThreadPoolExecutor`` is), a timed call on the run's side runs on a daemon thread of its
own, not on the run's pool; on a caller's ``tool_executor`` it runs there, and that thread
stays the caller's."""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..abort import AbortController
from ..events import ToolExecutionEndEvent, ToolExecutionUpdateEvent
from ._call import Finalized, Prepared
from ._inbox import Done, Inbox, Update, refused
from ._results import ABORTED_TEXT, error_result

__all__ = ["TIMED_OUT_KEY", "execute_timed", "timeout_text"]

_log = logging.getLogger("piagent.loop")

TIMED_OUT_KEY = "timed_out_after_s"
"""The key of a timed-out call's result ``details`` (``{TIMED_OUT_KEY: seconds}``)."""


def timeout_text(name: str, seconds: float) -> str:
    return (f"Tool {name!r} timed out after {seconds:g} s; it was abandoned and its result "
            f"will not be used.")


def execute_timed(batch: Any, prepared: list[Prepared], grace: float,
                  late_text: Callable[[list[Prepared], list[Finalized | None]], str]
                  ) -> tuple[list[Finalized], BaseException | None]:
    """``Batch.execute`` for calls of which some have a time limit: each limit counted from
    when the call is handed to its thread (a caller's executor's queue included); a call
    past it finished with an error result, the others as ``Batch.execute`` does (``batch``
    is that ``Batch``; after an abort, the calls not back ``grace`` seconds later are named
    once, in ``late_text``)."""

    runner, inbox, count = batch.runner, Inbox(), len(prepared)
    default = runner.timeout
    limits = [default if (own := p.tool.timeout) is None else own for p in prepared]
    ahead = runner.cap or count
    results: list[Finalized | None] = [None] * count
    deadlines: list[float | None] = [None] * count  # a timed call's, once handed over
    handed: list[float] = [0.0] * count
    controllers: dict[int, AbortController] = {}  # a timed call's own signal
    threads: dict[int, threading.Thread] = {}  # a timed call's thread on the run's side
    unlink: list[Callable[[], None]] = []
    submitted = finished = 0
    failure: BaseException | None = None
    refusal: BaseException | None = None
    noticed_at: float | None = None
    unregister = batch.signal.on_abort(lambda: inbox.put(None))
    try:
        while finished < count:
            while submitted < count and submitted - finished < ahead:
                index, limit = submitted, limits[submitted]
                submitted += 1
                run = contextvars.copy_context().run
                handed[index] = time.monotonic()
                if limit is None:
                    try:
                        runner.submit(run, batch.execute_one, prepared[index], index, inbox)
                    except RuntimeError as exc:
                        refusal, submitted = refused(exc, prepared, index, inbox), count
                    continue
                controllers[index] = controller = AbortController()
                unlink.append(batch.signal.on_abort(  # the run's abort, with its reason
                    lambda controller=controller: controller.abort(batch.signal.reason)))
                deadlines[index] = handed[index] + limit
                args = (batch.execute_one, prepared[index], index, inbox, controller.signal)
                if runner.executor is None:
                    thread = threading.Thread(target=run, args=args, daemon=True,
                                              name=f"piagent-tool-timed-{index}")
                    threads[index] = thread
                    runner.timed.append(thread)
                    thread.start()
                else:
                    try:
                        runner.executor.submit(run, batch.execute_one, prepared[index], index,
                                               inbox, controller.signal)
                    except RuntimeError as exc:
                        refusal, submitted = refused(exc, prepared, index, inbox), count
            waits = [d for i, d in enumerate(deadlines) if d is not None and results[i] is None]
            if noticed_at is not None:
                waits.append(noticed_at + grace)
            try:
                item = inbox.get(timeout=max(min(waits) - time.monotonic(), 0.0)) \
                    if waits else inbox.get()
            except queue.Empty:
                now = time.monotonic()
                for index, deadline in enumerate(deadlines):
                    if deadline is None or results[index] is not None or now < deadline:
                        continue
                    results[index] = done = _time_out(prepared[index], limits[index],
                                                      handed[index], now,
                                                      batch.signal.is_set())
                    controllers[index].abort(TimeoutError(done.result.content[0].text))  # type: ignore[union-attr]
                    if index in threads:
                        runner.abandoned.add(threads[index])
                    failure = batch.send(ToolExecutionEndEvent(
                        done.tool_call.id, done.tool_call.name, done.result, done.is_error,
                        done.duration_ms), failure)
                    finished += 1
                if noticed_at is not None and now >= noticed_at + grace:
                    _log.warning("%s", late_text(prepared, results))
                    noticed_at = None
                continue
            if type(item) is Done:
                if results[item.index] is not None:
                    continue  # it timed out before: its late result is dropped
                results[item.index] = done = item.done
                failure = batch.send(ToolExecutionEndEvent(
                    done.tool_call.id, done.tool_call.name, done.result, done.is_error,
                    done.duration_ms), failure) or item.failure
                finished += 1
            elif type(item) is Update:
                if results[item.index] is None:
                    call = prepared[item.index].tool_call
                    failure = batch.send(ToolExecutionUpdateEvent(
                        call.id, call.name, call.arguments, item.partial), failure)
            elif noticed_at is None and batch.signal.is_set():
                noticed_at = time.monotonic()
    finally:
        unregister()
        for undo in unlink:
            undo()
    return results, failure or refusal  # type: ignore[return-value]  # all finished


def _time_out(prepared: Prepared, limit: float | None, handed: float, now: float,
              aborted: bool) -> Finalized:
    """A call past its limit, finished: with the timeout text, or, when the run was aborted
    meanwhile, "Operation aborted" as every aborted call is answered (pi-agent-core 1.6)."""
    call = prepared.tool_call
    text = timeout_text(call.name, limit or 0.0)
    if aborted:
        _log.warning("Tool %r (call id %s) passed its %g s limit after the run was aborted; "
                     "it is still running on its thread and is abandoned (its signal was "
                     "aborted).", call.name, call.id, limit or 0.0)
        return Finalized(call, error_result(ABORTED_TEXT), True, round((now - handed) * 1000))
    _log.warning("%s The call (id %s) is still running on its thread; Python cannot stop a "
                 "thread, so it is abandoned: its signal was aborted, and a tool that watches "
                 "it stops. It does not hold the run, its pool or the interpreter's exit.",
                 text, call.id)
    result = error_result(text)
    result.details = {TIMED_OUT_KEY: limit}
    return Finalized(call, result, True, round((now - handed) * 1000))
