"""``RunPool``: a run's own tool threads (``piagent-tool_N``), made as its calls need them,
reused by its later batches, stopped and joined when the run ends.

Why not a ``ThreadPoolExecutor``: its ``submit`` holds a process-wide lock (the standard
library's ``_global_shutdown_lock``) for every call of every pool, and holds it while it
starts a new thread, which waits until that thread is scheduled. With a thousand runs in
one process, every run's call queued behind another run's thread start (at N = 1,000, a
third of all thread samples waited there). A ``RunPool`` call takes only its own run's
lock, and a new thread starts outside it. What stays the same: at most ``cap`` threads,
calls taken in the order given, a thread made only when none is idle, and the
interpreter's exit waits for a call still running (as the standard library's pools do:
the threads are not daemons, and an exit hook stops the idle ones).
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["RunPool"]

_log = logging.getLogger("piagent.loop")

# every open pool, for the exit hook; guarded by _LIVE_LOCK (any run's thread, the exit hook)
_LIVE: weakref.WeakSet[RunPool] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()
_exiting = False  # set once by the exit hook, under _LIVE_LOCK


def _at_exit() -> None:
    """Before the interpreter joins its threads: stop every pool's idle threads (a running
    call finishes first, and is waited for)."""
    global _exiting
    with _LIVE_LOCK:
        _exiting = True
        pools = list(_LIVE)
    for pool in pools:
        pool.stop()


_register = getattr(threading, "_register_atexit", None)  # what concurrent.futures uses
if _register is not None:
    _register(_at_exit)


class RunPool:
    """At most ``cap`` threads running the calls ``post`` hands over, in order. ``post`` and
    ``close`` are called from the run's worker thread only."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        # the calls waiting for a thread, and one None per thread when the pool stops
        self._work: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = \
            queue.SimpleQueue()
        # guards _idle, _threads and _stopped (the run's thread posts and closes; the pool's
        # threads count themselves idle; the exit hook stops)
        self._lock = threading.Lock()
        self._idle = 0  # threads done with a call and not yet handed another
        self._threads: list[threading.Thread] = []
        self._stopped = False
        with _LIVE_LOCK:
            if _exiting:
                self._stopped = True
            else:
                _LIVE.add(self)

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a thread of the pool (``RuntimeError`` once it stopped)."""
        with self._lock:
            if self._stopped:
                msg = "cannot schedule new calls after the pool was shut down"
                raise RuntimeError(msg)
            self._work.put((fn, args))
            if self._idle:
                self._idle -= 1  # that thread takes it
                return
            if len(self._threads) >= self._cap:
                return  # the next thread that finishes takes it
            thread = threading.Thread(target=self._serve,
                                      name=f"piagent-tool_{len(self._threads)}")
            self._threads.append(thread)
        thread.start()

    def _serve(self) -> None:
        work, lock = self._work, self._lock
        while True:
            item = work.get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except BaseException:  # the calls report through the inbox: this is a defect
                _log.exception("a tool thread's call raised")
            del item, fn, args  # nothing of the call kept while idle
            with lock:
                self._idle += 1

    def stop(self) -> None:
        """No more calls; every thread ends after the calls already handed over."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            count = len(self._threads)
        for _ in range(count):
            self._work.put(None)

    def close(self) -> None:
        """``stop``, then wait for every thread."""
        self.stop()
        for thread in self._threads:
            thread.join()
        with _LIVE_LOCK:
            _LIVE.discard(self)
