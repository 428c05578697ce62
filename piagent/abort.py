"""Cancellation: ``AbortController`` and ``AbortSignal`` on top of ``threading.Event``.

The signal is what tools, hooks and providers receive. Providers register ``on_abort``
callbacks that close an in-flight HTTP response, so a blocked socket read returns at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["AbortController", "AbortSignal"]

_log = logging.getLogger(__name__)


class AbortSignal(threading.Event):
    """A ``threading.Event`` that is set when its controller aborts.

    ``wait(timeout)`` sleeps until the signal fires, which makes it the right way to sleep
    inside a tool or a retry loop. Callbacks registered with ``on_abort`` run once, on the
    aborting thread; registering on an aborted signal runs the callback at once.

    Thread safety: every method may be called from any thread.
    """

    def __init__(self) -> None:
        super().__init__()
        self._reason: object = None
        # guards _callbacks and the abort transition, so each callback runs exactly once
        self._callbacks_lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    @property
    def aborted(self) -> bool:
        """True once the signal has fired."""
        return self.is_set()

    @property
    def reason(self) -> object:
        """The reason given to ``abort()``, or ``None``."""
        return self._reason

    def on_abort(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` when the signal fires; returns a function that unregisters it."""
        with self._callbacks_lock:
            if not self.is_set():
                self._callbacks.append(callback)

                def unregister() -> None:
                    with self._callbacks_lock:
                        try:
                            self._callbacks.remove(callback)
                        except ValueError:
                            pass

                return unregister
        _run_callback(callback)
        return _noop

    def set(self) -> None:  # an Event API call on a signal means "abort"
        self._fire(None)

    def _fire(self, reason: object) -> None:
        with self._callbacks_lock:
            if self.is_set():
                return
            self._reason = reason
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _run_callback(callback)

    def clear(self) -> None:
        msg = "An AbortSignal cannot be reset; create a new AbortController for a new run."
        raise RuntimeError(msg)


def _noop() -> None:
    return None


def _run_callback(callback: Callable[[], None]) -> None:
    # An abort must reach every callback, so one that fails is logged, not propagated.
    try:
        callback()
    except Exception:
        _log.exception("An on_abort callback raised; the signal is aborted regardless")


class AbortController:
    """Owns one ``AbortSignal``; ``abort()`` fires it (once; later calls do nothing)."""

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: object = None) -> None:
        """Fire the signal with an optional reason."""
        self.signal._fire(reason)
