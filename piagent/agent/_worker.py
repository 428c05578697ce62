"""A run on its worker thread: the one emit path, the loop, the failure close.

Every event of a run, from the loop or from the failure path, goes through ``emitter``: the
reducer updates the state, a ``message_end`` is stored, the run records the event (waking its
iterators), then every listener runs in subscription order, each a barrier.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

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
    run_agent_loop,
    run_agent_loop_continue,
    run_agent_loop_resume,
)
from ..messages import AgentMessage, AssistantMessage, TextContent
from ._config import loop_config
from ._resume_warning import Persist, dropping_marks, started_unfinished
from ._setup import RunSetup

__all__ = ["emitter", "run_worker"]

_log = logging.getLogger("piagent.agent")
# marks the one WARNING of a failed run, so a front end that shows the failure itself (the
# CLI) can leave the log line out
_RUN_FAILED = {"piagent_run_failed": True}

def emitter(setup: RunSetup) -> Callable[[AgentEvent], None]:
    """The one emit path of a run: reducer, store, the run's record, listeners.

    The lookups are done once here: the loop emits dozens of events a turn.
    """
    run = setup.record
    apply, observe, signal, listeners = setup.writer.reducer(), run.observe, run.signal, \
        setup.listeners
    record = run.events.append_update
    link = setup.link
    persist: Persist | None = link.ended if link is not None else None
    if link is not None and run.drop_marks:  # prompt() after a stopped process's batch
        persist = dropping_marks(link, link.ended)

    def emit(event: AgentEvent) -> None:
        apply(event)  # the reducer
        if type(event) is MessageUpdateEvent:
            # the usual event, about 20 a turn: the run's record of it (RunRecord.observe's
            # last step, which is all it does for an update) inlined, one call fewer
            record(event)
            if run.readers:
                run.wake_readers()
        else:
            if persist is not None and event.type == "message_end":
                persist(run, event.message)  # before anyone sees it (docs/sessions.md)
            observe(event)
        for listener in listeners.all:  # a snapshot: the tuple is replaced, never changed
            listener(event, signal)

    return emit


def run_worker(setup: RunSetup) -> None:
    """The run's worker thread: the loop, failure handling, settling."""
    run = setup.record
    if run.worker_started is not None:  # a dedicated worker thread
        run.worker_started.set()
    try:
        state = setup.writer.state
        context = AgentContext(list(state.messages), list(state.tools))
        config = loop_config(setup)
        stream_fn = setup.options.stream_fn
        if setup.started is None and started_unfinished(setup.link, state.messages):
            run.drop_marks = True  # the abandoned batch's start marks go with the first reply
        emit = emitter(setup)
        if setup.options.compaction is not None:  # unset: nothing of it is loaded or run
            from ._compaction import run_hooks
            config, stream_fn = run_hooks(setup.options.compaction, state, setup.link, run,
                                          config, emit, stream_fn)
        if setup.started is not None:
            run_agent_loop_resume(context, config, emit, run.signal, stream_fn,
                                  started=setup.started, guard=run.guard)
        elif setup.prompts is None:
            run_agent_loop_continue(context, config, emit, run.signal, stream_fn,
                                    guard=run.guard)
        else:
            run_agent_loop(setup.prompts, context, config, emit, run.signal, stream_fn,
                           guard=run.guard)
        reply = _reply(run.messages)
        if reply is not None and reply.stop_reason == "error":  # one line; the run is data
            _log.warning("The agent run failed: %s", reply.error_message, extra=_RUN_FAILED)
    except BaseException as exc:  # the run must end with agent_end, whatever failed
        _log.warning("The agent run failed: %s: %s", type(exc).__name__, exc, exc_info=exc,
                     extra=_RUN_FAILED)
        fail_run(setup, exc)
    finally:
        run.takings.restore()
        setup.settle(run)


def _reply(messages: list[AgentMessage]) -> AssistantMessage | None:
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            return message
    return None


def fail_run(setup: RunSetup, error: BaseException) -> None:
    """The seed's handleRunFailure: a synthetic assistant message closes the run, through
    the same emit path; a listener that raises here is logged, so ``agent_end`` comes."""
    run = setup.record
    model = setup.writer.state.model
    message = AssistantMessage(
        content=[TextContent("")], api=model.api if model else "",
        provider=model.provider if model else "", model=model.id if model else "",
        stop_reason="aborted" if run.signal.aborted else "error",
        error_message=describe_failure(error))
    emit = emitter(setup)
    for event in (MessageStartEvent(message), MessageEndEvent(message),
                  TurnEndEvent(message, [])):
        _emit_closing(emit, event)
    _emit_closing(emit, AgentEndEvent(list(run.messages)))  # made now: with the message above


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
