"""The runs of a ``SQLAlchemyStore``: ``piagent_runs``, ``piagent_run_events`` and
``piagent_run_control`` (``_tables.py``) in the store's database, through the store's
transactions (``SQLAlchemyStore._write``: retried deadlocks and races, ``BEGIN IMMEDIATE`` on
SQLite) so ``LocalRunner``, ``QueuedRunner`` and ``CeleryRunner`` run on it.

One live run per session without a partial unique index (MariaDB has none): ``create_run``
first takes the session's row lock in ``piagent_store_sessions`` (as every store write
does), then looks for a live run in the same transaction. Lease times come from the
database server's clock (SQLite: this machine's), so machines whose clocks disagree agree.

Readers and an executing run in this process are woken at once (a Condition; ``Wakers``);
a change made by another process is found by polling, the same way on every database
(MariaDB has no LISTEN/NOTIFY): a reader waiting for news runs one small query every
``POLL_S`` (the run's state, owner and last event number), an executing run looks at its
inbox every ``CONTROL_POLL_S``. docs/sessions.md gives each database's measured cost.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from sqlalchemy import Double, delete, func, insert, literal, literal_column, or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from ...runs import RunInfo, RunState
from ...runs.backend import (
    LAPSED_BATCH,
    LIVE_STATES,
    RECOVERING,
    Control,
    ControlKind,
    SessionBusy,
    Take,
    Wakers,
    WatchedRuns,
)
from ._store import SQLAlchemyStore, lock_session
from ._tables import MYSQL, RUN_CONTROL, RUN_EVENTS, RUN_TRACES, RUNS

__all__ = ["SQLAlchemyRunBackend"]

POLL_S = 0.05  # how often a waiting reader asks the database whether its run changed
CONTROL_POLL_S = 0.05  # how often an executing run looks at its inbox (a steer, an abort)
PURGE_BATCH = 500  # runs deleted per transaction by purge()
EVENTS_PER_READ = 1000  # the most events one Watch.read returns
_LIVE = ("queued", "running")
_NOW_SQL = {
    "postgresql": "CAST(extract(epoch FROM clock_timestamp()) AS double precision)",
    # UTC_TIMESTAMP is the same in every session time zone; the difference is plain arithmetic
    "mysql": "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) / 1e6)",
}
_R, _E, _C = RUNS.c, RUN_EVENTS.c, RUN_CONTROL.c
_INFO = (_R.run_id, _R.session_id, _R.state, _R.error_message, _R.created_at, _R.started_at,
         _R.ended_at, _R.lease_expires_at)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _info(row: Sequence[Any]) -> RunInfo:
    run_id, session_id, state, error, created, started, ended, lease, now = row[:9]
    if state in LIVE_STATES and float(lease) < float(now):
        state = "lost"
    return RunInfo(str(run_id), str(session_id), state, error, float(created), _float(started),
                   _float(ended))


class _Changes:
    """This process's news of the runs on one engine: every backend on the engine (one per
    store object) shares it, so a reader wakes at once whichever store object wrote.

    ``watched`` counts the changes of the runs readers watch; ``wakers`` are the executing
    runs' inbox wake-ups.
    """

    def __init__(self) -> None:
        self.watched = WatchedRuns()
        self.wakers = Wakers()


# engine -> its _Changes; guarded by _SHARED_LOCK (any thread making a backend)
_SHARED: weakref.WeakKeyDictionary[Engine, _Changes] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def _changes_of(engine: Engine) -> _Changes:
    with _SHARED_LOCK:
        changes = _SHARED.get(engine)
        if changes is None:
            changes = _SHARED[engine] = _Changes()
        return changes


class SQLAlchemyRunBackend:
    """Runs, events and the control inbox in a ``SQLAlchemyStore``'s database (the
    module's docstring); made by ``backend_for(store)``, one per store object."""

    control_poll_s: float | None = CONTROL_POLL_S

    def __init__(self, store: SQLAlchemyStore) -> None:
        if not isinstance(store, SQLAlchemyStore):
            msg = f"SQLAlchemyRunBackend needs a SQLAlchemyStore, got {type(store).__name__}."
            raise TypeError(msg)
        self._store = store
        self._dialect = "mysql" if store.engine.dialect.name in MYSQL else \
            store.engine.dialect.name
        self._shared = _changes_of(store.engine)

    def __repr__(self) -> str:
        return f"SQLAlchemyRunBackend({self._store!r})"

    # --- plumbing --------------------------------------------------------------------------

    def _now(self) -> ColumnElement[float]:
        """The current time, epoch seconds, by the database's clock (SQLite: this one's)."""
        sql = _NOW_SQL.get(self._dialect)
        if sql is None:
            return literal(time.time(), Double())
        return literal_column(sql, Double())

    def _write(self, work: Callable[[Connection], Any]) -> Any:
        return self._store._write(work)

    def _read(self, work: Callable[[Connection], Any]) -> Any:
        return self._store._read(work)

    def _changed(self, run_id: str) -> None:
        self._shared.watched.changed(run_id)

    @staticmethod
    def _insert_events(conn: Connection, run_id: str, first_seq: int,
                       events: Sequence[str]) -> None:
        if events:
            conn.execute(insert(RUN_EVENTS), [{"run_id": run_id, "seq": first_seq + i,
                                               "data": text} for i, text in enumerate(events)])

    @staticmethod
    def _drop_controls(conn: Connection, run_id: str) -> None:
        """What the run took or was sent dies with it (at most once: it may have been used)."""
        conn.execute(delete(RUN_CONTROL).where(_C.claimed_by == run_id))  # each by its index
        conn.execute(delete(RUN_CONTROL).where(_C.run_id == run_id))

    # --- runs ------------------------------------------------------------------------------

    def create_run(self, run_id: str, session_id: str, owner: str, lease_s: float) -> None:
        def write(conn: Connection) -> None:
            lost.clear()  # a retried attempt starts again
            lock_session(self._store, conn, session_id)  # the session's row lock, held to commit
            now = self._now()
            live = conn.execute(select(_R.run_id, _R.lease_expires_at < now).where(
                _R.session_id == session_id, _R.state.in_(_LIVE)).with_for_update()).all()
            for live_id, expired in live:
                if not expired:
                    raise SessionBusy(session_id, live_id)
                conn.execute(update(RUNS).where(_R.run_id == live_id).values(
                    state="lost", ended_at=_R.lease_expires_at))
                self._drop_controls(conn, live_id)
            conn.execute(insert(RUNS).values(
                run_id=run_id, session_id=session_id, state="queued", owner=owner,
                lease_expires_at=now + lease_s, created_at=now))
            lost.extend(live_id for live_id, _ in live)
        lost: list[str] = []
        self._write(write)
        for run in (*lost, run_id):
            self._changed(run)

    def set_running(self, run_id: str, owner: str) -> None:
        self._write(lambda conn: conn.execute(update(RUNS).where(
            _R.run_id == run_id, _R.owner == owner, _R.state == "queued").values(
            state="running", started_at=self._now())))
        self._changed(run_id)

    def renew(self, run_id: str, owner: str, lease_s: float) -> bool:
        def write(conn: Connection) -> bool:
            now = self._now()
            return conn.execute(update(RUNS).where(
                _R.run_id == run_id, _R.owner == owner, _R.state.in_(_LIVE),
                _R.lease_expires_at >= now).values(lease_expires_at=now + lease_s)
            ).rowcount == 1
        return bool(self._write(write))

    def finish(self, run_id: str, owner: str, state: RunState, error_message: str | None,
               last_events: tuple[int, Sequence[str]] | None = None) -> None:
        def write(conn: Connection) -> None:
            self._drop_controls(conn, run_id)
            ended = conn.execute(update(RUNS).where(
                _R.run_id == run_id, _R.owner == owner, _R.state.in_(_LIVE)).values(
                state=state, error_message=error_message, ended_at=self._now())).rowcount
            if last_events is not None and ended == 1:  # one commit: both or neither
                self._insert_events(conn, run_id, *last_events)
        self._write(write)
        self._changed(run_id)

    def take_run(self, run_id: str, owner: str, lease_s: float) -> Take:
        """For an executor in any process: hold a queued run, or a running one whose owner's
        lease ran out (to recover it). A queued run nobody took in time is recorded ``lost``.
        (As ``SQLiteBackend.take_run``; the run's row locked while it decides.)"""
        def write(conn: Connection) -> Take:
            now = self._now()
            row = conn.execute(select(_R.state, _R.owner, _R.lease_expires_at - now).where(
                _R.run_id == run_id).with_for_update()).first()
            if row is None or row[0] not in LIVE_STATES:
                return Take("final")
            state, holder, left = row[0], str(row[1]), float(row[2])
            if state == "queued" and left < 0:
                conn.execute(update(RUNS).where(_R.run_id == run_id).values(
                    state="lost", ended_at=_R.lease_expires_at,
                    error_message="no worker took the run before its queue lease ran out"))
                return Take("final")
            if (state == "running" or holder == owner) and left >= 0 and \
                    not holder.startswith(RECOVERING):
                return Take("held", wait_s=left)  # a live executor (or this one, twice)
            conn.execute(update(RUNS).where(_R.run_id == run_id).values(
                owner=owner, lease_expires_at=now + lease_s))
            next_seq = conn.execute(select(func.coalesce(func.max(_E.seq) + 1, 0)).where(
                _E.run_id == run_id)).scalar()
            return Take("fresh" if state == "queued" else "recover", int(next_seq or 0))
        take: Take = self._write(write)
        if take.kind != "held":
            self._changed(run_id)
        return take

    def claim_lapsed(self, owner: str, hold_s: float) -> list[tuple[str, str]]:
        """The running runs whose lease ran out (their executor died), now held by ``owner``
        for ``hold_s`` (so one checker submits each recovery): ``(run_id, session_id)``.
        Each is taken by an UPDATE that checks its lease again, so of checkers racing for a
        run exactly one gets it."""
        lapsed = self._read(lambda conn: conn.execute(
            select(_R.run_id, _R.session_id).where(
                _R.state == "running", _R.lease_expires_at < self._now())
            .order_by(_R.run_id).limit(LAPSED_BATCH)).all())
        if not lapsed:  # the common case: one read, no write transaction
            return []

        def write(conn: Connection) -> list[tuple[str, str]]:
            taken = []
            for run_id, session_id in lapsed:  # in key order: checkers lock alike
                now = self._now()
                if conn.execute(update(RUNS).where(
                        _R.run_id == run_id, _R.state == "running",
                        _R.lease_expires_at < now).values(
                        owner=owner, lease_expires_at=now + hold_s)).rowcount == 1:
                    taken.append((str(run_id), str(session_id)))
            return taken
        claimed: list[tuple[str, str]] = self._write(write)
        for run_id, _ in claimed:
            self._changed(run_id)
        return claimed

    def append_events(self, run_id: str, first_seq: int, events: Sequence[str]) -> None:
        self._write(lambda conn: self._insert_events(conn, run_id, first_seq, events))
        self._changed(run_id)

    def info(self, run_id: str) -> RunInfo | None:
        row = self._read(lambda conn: conn.execute(
            select(*_INFO, self._now()).where(_R.run_id == run_id)).first())
        return None if row is None else _info(row)

    def watch(self, run_id: str) -> _Watch:
        return _Watch(self, run_id)

    def purge(self, older_than: float) -> list[str]:
        def write(conn: Connection) -> tuple[int, list[str]]:
            found = conn.execute(select(_R.run_id).where(
                _R.ended_at < self._now() - older_than, _R.state.not_in(_LIVE))
                .limit(PURGE_BATCH).with_for_update()).scalars().all()
            ids = [str(run_id) for run_id in found]
            if ids:
                conn.execute(delete(RUN_EVENTS).where(_E.run_id.in_(ids)))
                conn.execute(delete(RUN_CONTROL).where(_C.run_id.in_(ids)))
                conn.execute(delete(RUN_CONTROL).where(_C.claimed_by.in_(ids)))
                conn.execute(delete(RUNS).where(_R.run_id.in_(ids)))
                conn.execute(delete(RUN_TRACES).where(RUN_TRACES.c.run_id.in_(ids)))
            return len(found), ids
        removed: list[str] = []
        while True:  # each batch its own transaction: runs go on meanwhile
            found, ids = self._write(write)
            removed += ids
            if found < PURGE_BATCH:
                return removed

    # --- the trace context kept beside a queued run (piagent/runs/_traces.py) ----------------

    def keep_trace(self, run_id: str, carrier: str) -> None:
        """Record ``carrier`` (JSON text) as the run's trace context, replacing any."""
        def write(conn: Connection) -> None:
            conn.execute(delete(RUN_TRACES).where(RUN_TRACES.c.run_id == run_id))
            conn.execute(insert(RUN_TRACES).values(run_id=run_id, carrier=carrier))
        self._write(write)

    def kept_trace(self, run_id: str) -> str | None:
        """The trace context recorded for the run (JSON text), or ``None``."""
        found = self._read(lambda conn: conn.execute(select(RUN_TRACES.c.carrier).where(
            RUN_TRACES.c.run_id == run_id)).scalar())
        return None if found is None else str(found)

    # --- the control inbox -------------------------------------------------------------------

    @staticmethod
    def _open(session_id: str, run_id: str) -> Any:
        return select(_C.id, _C.kind, _C.payload).where(
            _C.session_id == session_id, _C.claimed_by.is_(None),
            or_(_C.run_id.is_(None), _C.run_id == run_id)).order_by(_C.id)

    def send_control(self, session_id: str, run_id: str | None, kind: ControlKind,
                     payload: str | None) -> None:
        self._write(lambda conn: conn.execute(insert(RUN_CONTROL).values(
            session_id=session_id, run_id=run_id, kind=kind, payload=payload,
            created_at=self._now())))
        self._shared.wakers.wake(session_id)  # this process: at once; others poll

    def claim_controls(self, session_id: str, run_id: str) -> list[Control]:
        waiting = self._read(lambda conn: conn.execute(
            self._open(session_id, run_id).limit(1)).first())
        if waiting is None:  # the common case: nothing waits, one read
            return []

        def write(conn: Connection) -> list[Control]:
            rows = conn.execute(self._open(session_id, run_id).with_for_update()).all()
            if rows:
                conn.execute(update(RUN_CONTROL).where(_C.id.in_([r[0] for r in rows]))
                             .values(claimed_by=run_id))
            return [Control(int(i), kind, payload) for i, kind, payload in rows]
        return list(self._write(write))

    def release_controls(self, ids: Sequence[int]) -> None:
        if ids:
            self._write(lambda conn: conn.execute(update(RUN_CONTROL).where(
                _C.id.in_(list(ids))).values(claimed_by=None)))

    def add_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        self._shared.wakers.add(session_id, wake)

    def remove_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        self._shared.wakers.remove(session_id, wake)


class _Watch:
    """A reader of one run (owned by its thread): queries through the store's pool, woken
    by this process's writes at once and by others' through a poll every ``POLL_S``."""

    def __init__(self, backend: SQLAlchemyRunBackend, run_id: str) -> None:
        self._backend = backend
        self._run_id = run_id
        self._registered = False  # counted in the shared versions (until __exit__)
        self._version = -1  # the in-process changes seen at the last read or info
        self._seen: tuple[Any, ...] | None = None  # the run as the last read or info saw it

    def _probe(self) -> Any:
        """What changes when the run does: state, owner, end, last event number."""
        return select(_R.state, _R.owner, _R.ended_at, select(func.max(_E.seq)).where(
            _E.run_id == self._run_id).scalar_subquery()).where(_R.run_id == self._run_id)

    def _mark(self) -> None:
        """Remember the in-process version before a read, so a change after it wakes."""
        watched = self._backend._shared.watched
        if not self._registered:
            watched.enter(self._run_id)
            self._registered = True
        with watched.cond:
            self._version = watched.version(self._run_id)

    def read(self, after: int) -> list[tuple[int, str]]:
        self._mark()

        def read(conn: Connection) -> list[tuple[int, str]]:
            row = conn.execute(self._probe()).first()
            self._seen = None if row is None else tuple(row)
            return [(int(seq), str(data)) for seq, data in conn.execute(
                select(_E.seq, _E.data).where(_E.run_id == self._run_id, _E.seq > after)
                .order_by(_E.seq).limit(EVENTS_PER_READ)).all()]
        rows: list[tuple[int, str]] = self._backend._read(read)
        return rows

    def info(self) -> RunInfo:
        self._mark()
        row = self._backend._read(lambda conn: conn.execute(
            select(*_INFO, self._backend._now(), _R.owner,
                   select(func.max(_E.seq)).where(_E.run_id == self._run_id).scalar_subquery())
            .where(_R.run_id == self._run_id)).first())
        if row is None:
            msg = f"run {self._run_id!r} disappeared from {self._backend._store!r}"
            raise RuntimeError(msg)
        self._seen = (row[2], row[9], row[6], row[10])  # as _probe: state, owner, end, last
        return _info(row)

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        watched = self._backend._shared.watched
        if not self._registered:
            self._mark()
        while True:
            with watched.cond:
                if watched.cond.wait_for(lambda: watched.version(self._run_id) != self._version,
                                        max(0.0, min(POLL_S, deadline - time.monotonic()))):
                    return True
            row = self._backend._read(lambda conn: conn.execute(self._probe()).first())
            if (None if row is None else tuple(row)) != self._seen:
                return True
            if time.monotonic() >= deadline:
                return False

    def __enter__(self) -> _Watch:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._registered:
            self._registered = False
            self._backend._shared.watched.leave(self._run_id)
