"""The runs in progress in this process, and what is done when the last one ends.

The loop counts its runs (``run_started`` when a run begins, ``run_ended`` when it has
ended); a connection pool asks ``runs_in_progress()`` and registers ``when_no_runs`` to
close the idle connections a passed load left (``piagent.providers``' ``HttpClient``). A
pool cannot tell that on its own: between two turns no request is in flight even while a
thousand conversations go on.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable

__all__ = ["run_ended", "run_started", "runs_in_progress", "when_no_runs"]

_log = logging.getLogger("piagent.stream")
_lock = threading.Lock()  # guards _count and _hooks (any thread starts and ends runs)
_count = 0  # runs started and not yet ended
_hooks: list[weakref.WeakMethod[Callable[[], None]] | Callable[[], object]] = []


def runs_in_progress() -> int:
    """How many runs of the loop are going on in this process now."""
    return _count


def run_started() -> None:
    """A run begins (the loop calls it; a loop of your own that calls stream functions may)."""
    global _count
    with _lock:
        _count += 1


def run_ended() -> None:
    """A run has ended; the last one to end calls the ``when_no_runs`` hooks, on its thread.

    A hook that raises is logged (``piagent.stream``) and stops neither the others nor the
    run."""
    global _count
    with _lock:
        if _count == 0:
            msg = "run_ended() without a run_started()"
            raise RuntimeError(msg)
        _count -= 1
        if _count:
            return
        hooks = list(_hooks)
    for entry in hooks:
        hook = entry() if isinstance(entry, weakref.WeakMethod) else entry
        if hook is None:
            continue
        try:
            hook()
        except Exception:  # one pool's failure to close is not the run's
            _log.exception("a when_no_runs hook failed: %r", hook)


def when_no_runs(hook: Callable[[], object]) -> Callable[[], None]:
    """Call ``hook()`` each time the last run in progress ends; returns the function that
    stops it. A bound method is held weakly (the hook goes with its object); any other
    callable is held until removed."""
    if not callable(hook):
        msg = f"hook must be callable, not {type(hook).__name__}"
        raise TypeError(msg)
    entry: weakref.WeakMethod[Callable[[], None]] | Callable[[], object]
    entry = weakref.WeakMethod(hook) if hasattr(hook, "__self__") and hasattr(
        hook, "__func__") else hook
    with _lock:
        _hooks[:] = [h for h in _hooks
                     if not (isinstance(h, weakref.WeakMethod) and h() is None)]
        _hooks.append(entry)

    def remove() -> None:
        with _lock:
            if entry in _hooks:
                _hooks.remove(entry)

    return remove
