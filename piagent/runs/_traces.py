"""The trace context a queued run keeps beside its record (``piagent.otel``).

``QueuedRunner.start`` keeps the starting request's trace context (W3C ``traceparent``, as
text headers) here as well as in the payload it submits, so any executor of the run,
including one that recovers it from a payload that does not carry it, joins that trace.
One table per medium (``piagent_run_traces``; PostgreSQL ``run_traces``), created with the
runs tables: additive, so the schema version is unchanged and an older piagent ignores it;
``purge`` deletes a run's row with the run. Written and read only while ``piagent.otel`` is on.
A backend built outside the package keeps it through its own ``keep_trace(run_id, text)``
and ``kept_trace(run_id) -> text | None`` (the JSON text), if it has them.
"""

from __future__ import annotations

import json
from typing import Any

from ._postgres_backend import PostgresBackend
from ._sqlite_backend import SQLiteBackend

__all__ = ["keep_trace", "kept_trace"]


def keep_trace(backend: object, run_id: str, carrier: dict[str, str]) -> None:
    """Record ``carrier`` as the run's trace context (SQLite, PostgreSQL; else nothing)."""
    text = json.dumps(carrier, sort_keys=True)
    if isinstance(backend, SQLiteBackend):
        with backend.writing() as conn:
            conn.execute("INSERT OR REPLACE INTO piagent_run_traces VALUES (?, ?)",
                         (run_id, text))
    elif isinstance(backend, PostgresBackend):
        def write(cur: Any) -> None:
            cur.execute(backend.sql("INSERT INTO {s}.run_traces VALUES (%s, %s) "
                                     "ON CONFLICT (run_id) DO UPDATE SET carrier = %s"),
                        (run_id, text, text))
        backend.transact(write)
    elif callable(keep := getattr(backend, "keep_trace", None)):
        keep(run_id, text)


def kept_trace(backend: object, run_id: str) -> dict[str, str] | None:
    """The trace context recorded for the run, or ``None``."""
    row: Any = None
    if isinstance(backend, SQLiteBackend):
        with backend.reading() as conn:
            row = conn.execute("SELECT carrier FROM piagent_run_traces WHERE run_id = ?",
                               (run_id,)).fetchone()
    elif isinstance(backend, PostgresBackend):
        def read(cur: Any) -> Any:
            cur.execute(backend.sql("SELECT carrier FROM {s}.run_traces WHERE run_id = %s"),
                        (run_id,))
            return cur.fetchone()
        row = backend.transact(read)
    elif callable(kept := getattr(backend, "kept_trace", None)):
        text = kept(run_id)
        row = None if text is None else (text,)
    if row is None:
        return None
    carrier = json.loads(row[0])
    return carrier if isinstance(carrier, dict) else None
