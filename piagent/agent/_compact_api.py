"""``Agent.compact()``: a compaction on demand, between runs (docs/compaction.md).

The module that does the work (``_compaction``, with ``piagent.compaction``) is loaded on
the first call, so an agent that never compacts never imports it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..errors import AgentBusyError
from ..stream import get_default_stream_fn
from ._queues import QueueLedger
from ._record import RunRecord, RunSlot
from ._setup import Listeners
from ._state import AgentState

if TYPE_CHECKING:
    from ..compaction import Compaction
    from ..events import AgentEvent, CompactionEndEvent
    from ._persistence import StoreLink

__all__ = ["CompactionMethods"]

_BUSY_COMPACT = "Agent is already processing. Wait for completion before compacting."


class CompactionMethods:
    """The Agent's ``compact()`` (a mixin: the attributes below are the Agent's)."""

    _compaction: Compaction | None
    _state: AgentState
    _link: StoreLink | None
    _slot: RunSlot
    _listeners: Listeners
    _queues: QueueLedger

    @property
    def compaction(self) -> Compaction | None:
        """The compaction settings (docs/compaction.md), read when a run starts; ``None``:
        no compaction. Anything but a ``piagent.compaction.Compaction`` or ``None`` is
        refused with a ``TypeError``."""
        return self._compaction

    @compaction.setter
    def compaction(self, value: Compaction | None) -> None:
        if value is not None:  # the module that checks it loads only when one is given
            from ._compaction import check_compaction
            check_compaction(value)
        self._compaction = value

    def compact(self, instructions: str | None = None) -> CompactionEndEvent:
        """Summarise the older part of the transcript now, as an automatic compaction
        would (``compaction=`` settings, else pi's defaults), with ``instructions`` as an
        extra focus. Listeners get ``compaction_start`` and ``compaction_end``; the summary
        is appended to the transcript and its store. Returns the ``compaction_end`` event.

        Raises ``CompactionError`` (the transcript unchanged) when there is nothing to
        summarise or the summary fails, ``AgentBusyError`` while a run is active, and
        ``ValueError`` without a model. ``abort()`` stops it.
        """
        from ..compaction import Compaction, CompactionError
        from ._compaction import compact_transcript, summary_options

        if instructions is not None and not isinstance(instructions, str):
            msg = f"compact(instructions=...) must be a str or None, not {type(instructions).__name__}."
            raise TypeError(msg)
        settings = self.compaction if self.compaction is not None else Compaction()
        model = settings.model or self._state.model
        if model is None:
            msg = "compact() needs a model: set state.model or Compaction(model=...)."
            raise ValueError(msg)
        record = RunRecord(self._queues.takings(), None)  # holds the slot: no run meanwhile
        with self._slot.lock:
            if self._slot.active is not None:
                raise AgentBusyError(_BUSY_COMPACT)
            self._slot.active = record
        record.thread, record.dedicated = threading.current_thread(), False
        signal = record.signal
        listeners = self._listeners

        def emit(event: AgentEvent) -> None:
            for listener in listeners.all:
                listener(event, signal)

        try:
            stream_fn = getattr(self, "stream_fn", None) or get_default_stream_fn()
            end = compact_transcript(self._state, self._link, None, settings, "manual",
                                     model=model, stream_fn=stream_fn,
                                     options=summary_options(self, model,
                                                             self._state.thinking_level),
                                     signal=signal,
                                     emit=emit, instructions=instructions)
        finally:
            with self._slot.lock:
                self._slot.active = None
            record.settle()
        if end.summary is None:
            raise CompactionError(end.error_message or "Compaction failed.")
        return end
