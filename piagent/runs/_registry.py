"""Which runs backend lives beside a session store: a small registry by store type.

Each kind of store that can keep runs registers the backend class built on it; a store's
backend is made once per store object and shared by every runner on it in this process, so
in-process readers and senders wake at once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..sessions import MemoryStore, PostgresStore, SQLiteStore
from ._backend import RunBackend
from ._memory_backend import MemoryBackend
from ._postgres_backend import PostgresBackend
from ._sqlite_backend import SQLiteBackend

__all__ = ["backend_for", "register_backend"]

# store type -> the factory of its backend; written at import (and by register_backend),
# read by backend_for under _BACKENDS_LOCK
_FACTORIES: dict[type, Callable[[Any], RunBackend]] = {}
# one backend per store object. Guarded by _BACKENDS_LOCK (any thread creating a runner).
_BACKENDS: weakref.WeakKeyDictionary[object, RunBackend] = weakref.WeakKeyDictionary()
_BACKENDS_LOCK = threading.Lock()


def register_backend(store_type: type, factory: Callable[[Any], RunBackend]) -> None:
    """Keep the runs of ``store_type`` stores (and their subclasses) in ``factory(store)``."""
    with _BACKENDS_LOCK:
        _FACTORIES[store_type] = factory


register_backend(MemoryStore, lambda store: MemoryBackend())
register_backend(SQLiteStore, SQLiteBackend)
register_backend(PostgresStore, PostgresBackend)


def backend_for(store: object) -> RunBackend:
    """The runs backend that lives beside ``store`` (``TypeError`` for stores without one)."""
    with _BACKENDS_LOCK:
        backend = _BACKENDS.get(store)
        if backend is None:
            factory = next((_FACTORIES[cls] for cls in type(store).__mro__
                            if cls in _FACTORIES), None)
            if factory is None:
                msg = (f"a runner keeps its runs beside a MemoryStore, an SQLiteStore, a "
                       f"PostgresStore or a store with a registered runs backend "
                       f"(piagent.runs.backend.register_backend; piagent.contrib.django's "
                       f"DjangoStore has one); {type(store).__name__} has none.")
                raise TypeError(msg)
            backend = _BACKENDS[store] = factory(store)
        return backend
