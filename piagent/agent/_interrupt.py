"""Ctrl-C while a caller waits for a run, and what is said when the aborted run lingers.

The first ``KeyboardInterrupt`` aborts the run and waits for it to settle. A tool that does
not watch its signal keeps the run going until it returns; then, once, after
``NOTICE_AFTER_S``, a line on stderr names what has not returned (a notebook cell shows it,
instead of staying silent). A second interrupt stops waiting: the ``KeyboardInterrupt`` says
the agent stays busy until that part returns, and ``agent.wait_for_idle()`` waits for it.
A ``prompt()`` meanwhile gets an ``AgentBusyError`` naming the same part.

This module reads a run's ``RunRecord``, so ``AgentRun.wait`` and the Agent use it alike.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..events import (
    AgentEvent,
    MessageEndEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
)
from ._record import RunRecord

__all__ = ["NOTICE_AFTER_S", "busy_text", "still_running", "wait_after_interrupt",
           "wait_interruptibly"]

NOTICE_AFTER_S = 0.25  # seconds an aborted run may take to settle before the notice is printed


def still_running(run: RunRecord) -> str:
    """Which part of an aborted run has not returned, read from its events so far."""
    return _unreturned(list(run.events))  # a snapshot: the worker appends to it


def _unreturned(events: Sequence[AgentEvent]) -> str:
    tools: dict[str, str] = {}
    waiting_for_model = True  # until an assistant message ends, the model call comes next
    for event in events:
        if isinstance(event, ToolExecutionStartEvent):
            tools[event.tool_call_id] = event.tool_name
        elif isinstance(event, ToolExecutionEndEvent):
            tools.pop(event.tool_call_id, None)
        elif isinstance(event, MessageEndEvent):
            waiting_for_model = getattr(event.message, "role", None) != "assistant"
    if tools:
        names = ", ".join(repr(name) for name in tools.values())
        return f"tool {names}" if len(tools) == 1 else f"tools {names}"
    if waiting_for_model:
        return "the stream function (the model call)"
    return "a hook or listener"


def wait_after_interrupt(run: RunRecord) -> None:
    """After a ``KeyboardInterrupt``: abort ``run`` and wait until it settles.

    If it has not settled after ``NOTICE_AFTER_S``, one line on stderr says what it waits
    for. A second ``KeyboardInterrupt`` stops waiting; it is raised with a message naming
    the part that has not returned and ``agent.wait_for_idle()``.
    """
    run.abort()
    try:
        if run.wait(NOTICE_AFTER_S):
            return
        what = still_running(run)
        sys.stderr.write(f"piagent: aborting; waiting for {what} to return (it does not watch "
                         "its signal). Interrupt again to stop waiting; the agent stays busy "
                         "until it returns — agent.wait_for_idle().\n")
        sys.stderr.flush()
        run.wait(None)
    except KeyboardInterrupt:
        msg = (f"Stopped waiting for the aborted run: {still_running(run)} has not returned "
               "(it does not watch its signal). The agent stays busy until it returns; "
               "agent.wait_for_idle() waits for it.")
        raise KeyboardInterrupt(msg) from None


def wait_interruptibly(run: RunRecord, timeout: float | None) -> bool:
    """Wait until ``run`` settles; a ``KeyboardInterrupt`` meanwhile aborts it and waits for
    it to settle (``wait_after_interrupt``), then re-raises."""
    try:
        return run.wait(timeout)
    except KeyboardInterrupt:
        wait_after_interrupt(run)  # a second KeyboardInterrupt escapes from here at once
        raise


def busy_text(run: RunRecord | None, message: str) -> str:
    """``AgentBusyError``'s text; when the active run was aborted and lingers, it names
    the part that has not returned and ``agent.wait_for_idle()``."""
    if run is None or not run.signal.aborted or run.done:
        return message
    return (f"{message} The previous run was aborted, but {still_running(run)} has not "
            "returned yet (it does not watch its signal); the agent is busy until it does. "
            "agent.wait_for_idle() waits for it.")
