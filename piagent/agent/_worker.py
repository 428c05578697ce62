"""A run on its worker thread: the listeners, the one emit path, the loop, the failure close.

Every event of a run, from the loop or from the failure path, goes through ``emitter``: the
reducer updates the state, a ``message_end`` is stored, the run records the event (waking its
iterators), then every listener runs in subscription order, each a barrier.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ..abort import AbortSignal
from ..events import (
    AgentEndEvent,
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    TurnEndEvent,
)
from ..loop import (
    AgentContext,
    AgentLoopConfig,
    run_agent_loop,
    run_agent_loop_continue,
    run_agent_loop_resume,
)
from ..messages import AgentMessage, AssistantMessage, TextContent
from ..stream import StreamFn, get_default_stream_fn
from ._interrupt import still_running
from ._persistence import StoreLink
from ._resume_warning import Persist, dropping_marks, started_unfinished
from ._run import AgentRun
from ._state import AgentState

__all__ = ["Listener", "Listeners", "RunHost", "emitter", "run_worker", "still_running"]

_log = logging.getLogger("piagent.agent")
# marks the one WARNING of a failed run, so a front end that shows the failure itself (the
# CLI) can leave the log line out
_RUN_FAILED = {"piagent_run_failed": True}

Listener = Callable[[AgentEvent, AbortSignal], Any]
"""``listener(event, signal)``: runs on the run's worker thread; the loop waits for it."""


class Listeners:
    """An Agent's listeners. ``all`` is a tuple replaced whole on each change, so the emit
    path reads it without a lock and a listener may (un)subscribe while an event is
    delivered (the delivery goes on with the tuple it started with)."""

    __slots__ = ("_lock", "all")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards changes to ``all`` (any thread subscribes)
        self.all: tuple[Listener, ...] = ()

    def add(self, listener: Listener) -> Callable[[], None]:
        """Add ``listener`` last; returns the function that removes it (once)."""
        with self._lock:
            self.all = (*self.all, listener)

        def unsubscribe() -> None:
            with self._lock:
                listeners = list(self.all)
                if listener in listeners:  # the first registration of it goes
                    listeners.remove(listener)
                    self.all = tuple(listeners)

        return unsubscribe


class RunHost(Protocol):
    """What a run reads from its Agent (``Agent`` is the one host)."""

    stream_fn: StreamFn | None
    _state: AgentState
    _link: StoreLink | None
    _listeners: Listeners

    def _loop_config(self, run: AgentRun, skip_initial_steering_poll: bool
                     ) -> AgentLoopConfig: ...

    def _settle(self, run: AgentRun) -> None: ...


def emitter(agent: RunHost, run: AgentRun) -> Callable[[AgentEvent], None]:
    """The one emit path of ``run``: reducer, store, the run's record, listeners.

    The lookups are done once here: the loop emits dozens of events a turn.
    """
    state = agent._state
    apply, observe, signal, listeners = state._apply, run._observe, run.signal, agent._listeners
    record = run._events.append
    link = agent._link
    persist: Persist | None = link.ended if link is not None else None
    if link is not None and run._drop_marks:  # prompt() after a stopped process's batch
        persist = dropping_marks(link, link.ended)

    def emit(event: AgentEvent) -> None:
        if type(event) is MessageUpdateEvent:
            # the usual event, about 20 a turn: the reducer's and the run's record of it
            # (AgentState._apply, AgentRun._observe) inlined, two calls fewer per update
            state._streaming_message = event.message
            record(event)
            if run._readers:
                run._wake_readers()
        else:
            apply(event)
            if persist is not None and event.type == "message_end":
                persist(run, event.message)  # before anyone sees it (docs/sessions.md)
            observe(event)
        for listener in listeners.all:  # a snapshot: the tuple is replaced, never changed
            listener(event, signal)

    return emit


def run_worker(agent: RunHost, run: AgentRun, prompts: list[AgentMessage] | None,
               skip_initial_steering_poll: bool, started: frozenset[str] | None) -> None:
    """The run's worker thread: the loop, failure handling, settling."""
    run._worker_started.set()
    try:
        state = agent._state
        context = AgentContext(list(state.messages), list(state.tools))
        config = agent._loop_config(run, skip_initial_steering_poll)
        stream_fn = agent.stream_fn if agent.stream_fn is not None else get_default_stream_fn()
        if started is None and started_unfinished(agent._link, state.messages):
            run._drop_marks = True  # the abandoned batch's start marks go with the first reply
        guard = run._guard
        if guard is not None:  # limits and typed output, through the loop's hooks
            context.tools = guard.tools(context.tools)
            config, stream_fn = guard.config(config), guard.stream_fn(stream_fn)
        emit = emitter(agent, run)
        if started is not None:
            run_agent_loop_resume(context, config, emit, run.signal, stream_fn, started=started)
        elif prompts is None:
            run_agent_loop_continue(context, config, emit, run.signal, stream_fn)
        else:
            run_agent_loop(prompts, context, config, emit, run.signal, stream_fn)
        reply = run.reply
        if reply is not None and reply.stop_reason == "error":  # one line; the run is data
            _log.warning("The agent run failed: %s", reply.error_message, extra=_RUN_FAILED)
    except BaseException as exc:  # the run must end with agent_end, whatever failed
        _log.warning("The agent run failed: %s: %s", type(exc).__name__, exc, exc_info=exc,
                     extra=_RUN_FAILED)
        fail_run(agent, run, exc)
    finally:
        if run._guard is not None:
            try:
                run._guard.close()  # charges a budget what the last response spent
            except Exception:
                _log.exception("The run's budget could not be charged at its end")
        run.takings.restore()
        agent._settle(run)


def fail_run(agent: RunHost, run: AgentRun, error: BaseException) -> None:
    """The seed's handleRunFailure: a synthetic assistant message closes the run, through
    the same emit path; a listener that raises here is logged, so ``agent_end`` comes."""
    model = agent._state.model
    message = AssistantMessage(
        content=[TextContent("")], api=model.api if model else "",
        provider=model.provider if model else "", model=model.id if model else "",
        stop_reason="aborted" if run.signal.aborted else "error",
        error_message=describe_failure(error))
    emit = emitter(agent, run)
    for event in (MessageStartEvent(message), MessageEndEvent(message),
                  TurnEndEvent(message, [])):
        _emit_closing(emit, event)
    _emit_closing(emit, AgentEndEvent(run.messages))  # made now: with the message above


def describe_failure(error: BaseException) -> str:
    """A failed run's ``error_message``: the exception's type and message, as a Python
    traceback's last line says it ("ZeroDivisionError: division by zero")."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _emit_closing(emit: Callable[[AgentEvent], None], event: AgentEvent) -> None:
    try:
        emit(event)
    except Exception:  # the failure path must reach agent_end; the error is logged
        _log.exception("A listener raised while the failed run was being closed")
