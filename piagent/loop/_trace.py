"""The tracing hook: what an installed tracer (``piagent.otel``) is told of each run.

Without one (the default) a run pays one read of a global at its start and one call of
``UNTRACED.run``; nothing per turn or per event. With one, ``Tracing.start_run`` gives the
run a ``RunTrace`` (``start_trace``): the run's events pass through it before the
listeners, its stream function is wrapped (the model call's span is current while the
request is made and read), its steering and follow-up polls are wrapped, each tool call
executes inside ``tool_scope`` on whichever thread runs it (so spans a tool opens nest under
the tool's span), and the loop itself runs inside ``RunTrace.run``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..events import AgentEvent
from ..messages import ToolCall
from ..stream import StreamFn, get_default_stream_fn
from ._config import AgentLoopConfig

__all__ = ["UNTRACED", "RunTrace", "Tracing", "get_tracing", "set_tracing", "start_trace"]

Emit = Callable[[AgentEvent], None]


class RunTrace(Protocol):
    """One run as a tracer sees it. Called on the run's worker thread, except
    ``tool_scope``, which is entered on the thread executing the tool."""

    def tool_scope(self, call: ToolCall) -> AbstractContextManager[object]:
        """Entered around the call's ``execute`` and ``after_tool_call``."""

    def run(self, body: Callable[..., None], *args: Any) -> None:
        """``body(*args)`` (the loop) inside the run's span; a raise ends the open spans."""


class Tracing(Protocol):
    """A process-wide tracer (``set_tracing``)."""

    def start_run(self, config: AgentLoopConfig, emit: Emit, stream_fn: StreamFn
                  ) -> tuple[RunTrace, AgentLoopConfig, Emit, StreamFn] | None:
        """A run starts: its trace, and the config (steering and follow-up polls wrapped),
        ``emit`` (the trace told of each event first) and stream function (each model call
        inside its span) it runs with; ``None``: leave this run alone."""

    def carrier(self) -> dict[str, str] | None:
        """The current trace context as text headers, to travel with a run to another
        thread or process; ``None`` when there is none."""

    def joined(self, carrier: dict[str, str] | None) -> AbstractContextManager[object]:
        """Make ``carrier`` (from ``carrier()``, maybe in another process) the current
        trace context inside the ``with`` block."""


_tracing: Tracing | None = None  # replaced whole by set_tracing; a run reads it once


def set_tracing(tracing: Tracing | None) -> Tracing | None:
    """Install ``tracing`` for the runs that start from now on (``None``: none); returns
    the one it replaces."""
    global _tracing
    previous, _tracing = _tracing, tracing
    return previous


def get_tracing() -> Tracing | None:
    """The installed tracer, or ``None``."""
    return _tracing


_NO_SCOPE = contextlib.nullcontext()  # stateless: shared by every call on every thread


class _Untraced:
    """The trace of a run no tracer watches: does nothing."""

    def tool_scope(self, call: ToolCall) -> AbstractContextManager[object]:
        return _NO_SCOPE

    def run(self, body: Callable[..., None], *args: Any) -> None:
        body(*args)


UNTRACED: RunTrace = _Untraced()


def start_trace(config: AgentLoopConfig, emit: Emit, stream_fn: StreamFn | None
                ) -> tuple[RunTrace, AgentLoopConfig, Emit, StreamFn]:
    """What a starting run runs with: its trace, config, emit and stream function (``None``:
    the process-wide default), as the installed tracer (if any) wraps them."""
    if stream_fn is None:
        stream_fn = get_default_stream_fn()
    tracing = _tracing
    started = tracing.start_run(config, emit, stream_fn) if tracing is not None else None
    return started if started is not None else (UNTRACED, config, emit, stream_fn)
