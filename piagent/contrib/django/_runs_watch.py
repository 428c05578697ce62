"""``DjangoWatch``: one reader's view of a run kept by ``DjangoRunBackend``.

It reads through the reader's thread's Django connection. ``wait`` wakes at once when this
process commits to the run (the backend's Condition), and otherwise polls the run's state
and last event number every ``poll_s`` (one indexed query, in plain SQL), which is how a change made by
another process (a worker, a Celery task) is noticed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Protocol

from django.db import connections

from ...runs import RunInfo
from ...runs.backend import LIVE_STATES, WatchedRuns
from ._store import connected, from_column

__all__ = ["INFO_FIELDS", "DjangoWatch", "run_info"]


def run_info(row: Sequence[Any], now: float) -> RunInfo:
    """A ``RunInfo`` from ``(run_id, session_id, state, error_message, created_at,
    started_at, ended_at, lease_expires_at)``; a live run past its lease reads ``lost``."""
    run_id, session_id, state, error, created, started, ended, lease = row
    if state in LIVE_STATES and float(lease) < now:
        state = "lost"
    return RunInfo(str(run_id), from_column(session_id), state,
                   None if error is None else from_column(error), float(created),
                   None if started is None else float(started),
                   None if ended is None else float(ended))


INFO_FIELDS = ("run_id", "session_id", "state", "error_message", "created_at", "started_at",
               "ended_at", "lease_expires_at")


class _Backend(Protocol):
    """What a watch uses of its ``DjangoRunBackend`` (``_runs.py``)."""

    using: str
    poll_s: float
    watched: WatchedRuns

    def runs(self) -> Any: ...

    def events(self) -> Any: ...

    def poll_sql(self) -> str: ...


class DjangoWatch:
    """A reader of one run (owned by the reader's thread)."""

    def __init__(self, backend: _Backend, run_id: str) -> None:
        self._backend = backend
        self._run_id = run_id
        self._entered = False
        # what the reader has seen, to compare each poll with: this process's commits to
        # the run, the last event number read, the state read (None: not read yet)
        self._version = -1
        self._seq: int | None = None
        self._state: str | None = None

    def _mark(self) -> None:
        watched = self._backend.watched
        with watched.cond:
            self._version = watched.version(self._run_id)

    def read(self, after: int) -> list[tuple[int, str]]:
        self._mark()
        with connected(self._backend.using):
            rows = [(int(seq), str(data)) for seq, data in self._backend.events().filter(
                run_id=self._run_id, seq__gt=after).order_by("seq").values_list(
                "seq", "data")[:1000]]
        self._seq = max(after, rows[-1][0] if rows else after, self._seq or -1)
        return rows

    def info(self) -> RunInfo:
        self._mark()
        with connected(self._backend.using):
            row = self._backend.runs().filter(run_id=self._run_id).values_list(
                *INFO_FIELDS).first()
        if row is None or row[0] != self._run_id:
            msg = f"run {self._run_id!r} disappeared from {self._backend!r}"
            raise RuntimeError(msg)
        self._state = str(row[2])  # as stored: a lapsed lease changes nothing stored
        return run_info(row, time.time())

    def poll(self) -> tuple[str, int] | None:
        """The run's stored state and last event number (-1: none); ``None`` if it is gone."""
        backend = self._backend
        with connected(backend.using), connections[backend.using].cursor() as cursor:
            cursor.execute(backend.poll_sql(), [self._run_id])
            row = cursor.fetchone()
        return None if row is None else (str(row[0]), -1 if row[1] is None else int(row[1]))

    def _news(self, polled: tuple[str, int] | None) -> bool:
        if polled is None:
            return True  # purged: the reader's next read says so
        state, last = polled
        if self._seq is None and self._state is None:  # nothing read yet: from here on
            self._seq, self._state = last, state
            return False
        return (self._seq is not None and last > self._seq) or \
            (self._state is not None and state != self._state)

    def wait(self, timeout: float) -> bool:
        backend = self._backend
        deadline = time.monotonic() + timeout
        watched = backend.watched
        while True:
            with watched.cond:  # a reader that did not enter is not counted: it only polls
                if watched.cond.wait_for(lambda: watched.version(self._run_id) != self._version,
                                    max(0.0, min(backend.poll_s, deadline - time.monotonic()))):
                    return True
            if self._news(self.poll()):
                return True
            if time.monotonic() >= deadline:
                return False

    def __enter__(self) -> DjangoWatch:
        self._backend.watched.enter(self._run_id)
        self._entered = True
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._entered:
            self._entered = False
            self._backend.watched.leave(self._run_id)
