"""What a runs backend is, for backends built outside this package (``piagent.contrib``).

A runner keeps its runs beside its session store, in a backend found by the store's type
(``register_backend(StoreType, factory)``). A backend keeps the runs (state, lease, times),
each run's events (pi-JSON text, numbered from 0) and the control inbox; the runner above it
owns the threads. ``RunBackend`` and ``Watch`` are the protocol; ``Control`` and ``Take``
what its methods return; ``Wakers`` the in-process wake-ups every backend keeps and
``WatchedRuns`` the changes its readers in this process wait for;
``SessionBusy`` what ``create_run`` raises for a session with a live run; ``RECOVERING`` and
``LAPSED_BATCH`` the recovery's owner prefix and batch size. The backends in this package
(memory, SQLite, PostgreSQL) are built on the same names.
"""

from __future__ import annotations

from ._backend import (
    CONTROL_KINDS,
    LAPSED_BATCH,
    RECOVERING,
    Control,
    ControlKind,
    RunBackend,
    SessionBusy,
    Take,
    Wakers,
    Watch,
    WatchedRuns,
    busy_message,
)
from ._registry import backend_for, register_backend
from ._types import LIVE_STATES

__all__ = [
    "CONTROL_KINDS",
    "LAPSED_BATCH",
    "LIVE_STATES",
    "RECOVERING",
    "Control",
    "ControlKind",
    "RunBackend",
    "SessionBusy",
    "Take",
    "Wakers",
    "Watch",
    "WatchedRuns",
    "backend_for",
    "busy_message",
    "register_backend",
]
