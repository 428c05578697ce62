"""``RunPool``: the threads one run's parallel tool calls execute on.

A run without a caller-owned ``tool_executor`` hands each call of a parallel batch to
this pool. It is a ``ThreadPoolExecutor`` without what a batch does not use (a ``Future``
per call, the cancellation states, the interpreter-exit hooks): the batch learns of each
result through its own inbox. A thread starts when a call finds no idle one (at most
``max_workers``) and then waits for the next call of the run; ``shutdown()`` ends and
joins them all, so no pool thread outlives its run. Each call runs in a copy of the
submitting thread's contextvars context.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["RunPool", "Submitter"]


class Submitter(Protocol):
    """What a batch submits its calls to: a ``concurrent.futures.Executor`` or a ``RunPool``."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> object:
        """Run ``fn(*args)`` on another thread; ``RuntimeError`` once shut down."""


_Work = tuple[contextvars.Context, Callable[..., Any], tuple[Any, ...]] | None


class RunPool:
    """Threads named ``<prefix>_<n>`` running submitted calls; owned by one run.

    Thread safety: ``submit`` and ``shutdown`` are called by the run's worker thread only.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        if max_workers < 1:
            msg = f"max_workers must be at least 1, not {max_workers}"
            raise ValueError(msg)
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._work: queue.SimpleQueue[_Work] = queue.SimpleQueue()  # calls, then a None each
        self._threads: list[threading.Thread] = []  # the run's worker thread's alone
        self._idle_lock = threading.Lock()  # guards _idle (pool threads and the submitter)
        self._idle = 0  # threads waiting for work that no queued call has claimed
        self._shut = False  # set by shutdown(), read by submit() (same thread)

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> object:
        """Queue ``fn(*args)``; start a thread if none is idle (up to ``max_workers``)."""
        if self._shut:
            msg = "cannot schedule new calls after shutdown"
            raise RuntimeError(msg)
        self._work.put((contextvars.copy_context(), fn, args))
        with self._idle_lock:
            if self._idle:
                self._idle -= 1  # that thread takes this call
                return None
        if len(self._threads) < self._max_workers:
            thread = threading.Thread(target=self._serve, daemon=True,
                                      name=f"{self._prefix}_{len(self._threads)}")
            self._threads.append(thread)
            thread.start()
        return None

    def _serve(self) -> None:
        work = self._work
        while True:
            item = work.get()
            if item is None:
                return
            context, fn, args = item
            try:
                context.run(fn, *args)
            except BaseException:  # a call reports its own failures; nothing may end the thread
                pass
            del item, context, fn, args  # nothing of the call outlives it on this thread
            with self._idle_lock:
                self._idle += 1

    def shutdown(self) -> None:
        """Let queued calls finish, then end and join every thread."""
        self._shut = True
        for _ in self._threads:
            self._work.put(None)
        for thread in self._threads:
            thread.join()
        self._threads.clear()
