"""``agent_loop`` and ``agent_loop_continue``: the loop on a new worker thread, its events as
an ``EventStream`` returned at once."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence

from ..abort import AbortSignal
from ..errors import AgentLoopError
from ..events import AgentEvent
from ..messages import AgentMessage
from ..stream import EventStream, StreamFn
from ._config import AgentContext, AgentLoopConfig
from ._loop import Emit, check_can_continue, run_agent_loop, run_agent_loop_continue

__all__ = ["agent_loop", "agent_loop_continue"]


def agent_loop(prompts: Sequence[AgentMessage], context: AgentContext, config: AgentLoopConfig,
               signal: AbortSignal | None = None,
               stream_fn: StreamFn | None = None) -> EventStream[AgentEvent, list[AgentMessage]]:
    """``run_agent_loop`` on a new worker thread; returns its events as an ``EventStream``.

    The stream is observational: the loop does not wait for the reader. If a hook, the
    stream function or ``convert_to_llm`` raises, iteration and ``result()`` raise
    ``AgentLoopError`` chained to the cause.
    """
    prompts = list(prompts)
    if config.limits is not None:
        config.limits.check_model(config.model)  # here, at the call, not on the worker
    return _start_worker(lambda emit: run_agent_loop(prompts, context, config, emit, signal,
                                                     stream_fn))


def agent_loop_continue(context: AgentContext, config: AgentLoopConfig,
                        signal: AbortSignal | None = None, stream_fn: StreamFn | None = None
                        ) -> EventStream[AgentEvent, list[AgentMessage]]:
    """``run_agent_loop_continue`` on a new worker thread (guards raise here, at once)."""
    check_can_continue(context)
    if config.limits is not None:
        config.limits.check_model(config.model)
    return _start_worker(lambda emit: run_agent_loop_continue(context, config, emit, signal,
                                                              stream_fn))


def _start_worker(body: Callable[[Emit], list[AgentMessage]]
                  ) -> EventStream[AgentEvent, list[AgentMessage]]:
    worker: list[threading.Thread] = []

    def join() -> None:  # the stream's end was read: the worker is finishing, wait for it
        if worker and worker[0] is not threading.current_thread():
            worker[0].join()

    stream: EventStream[AgentEvent, list[AgentMessage]] = EventStream(
        _is_agent_end, _end_messages, on_finish=join)

    def work() -> None:
        try:
            stream.end(body(stream.push))
        except BaseException as exc:  # the stream must end, never hang: report the cause
            error = AgentLoopError(f"The agent loop stopped because {type(exc).__name__} was "
                                   f"raised: {exc}")
            error.__cause__ = exc
            stream.fail(error)

    # the worker runs in a copy of the caller's contextvars context (and so do its tools)
    worker.append(threading.Thread(target=contextvars.copy_context().run, args=(work,),
                                   name="piagent-loop", daemon=True))
    worker[0].start()
    return stream


def _is_agent_end(event: AgentEvent) -> bool:
    return event.type == "agent_end"


def _end_messages(event: AgentEvent) -> list[AgentMessage]:
    return list(event.messages) if event.type == "agent_end" else []
