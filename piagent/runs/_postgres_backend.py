"""The runs of a ``PostgresStore``: three tables in the store's schema, woken by LISTEN/NOTIFY.

Every write that a reader or an executing run may wait for sends ``pg_notify`` in its own
transaction (delivered at commit): ``e:<run_id>`` when a run's events or state change,
``c:<session_id>`` when control is sent to a session. Each process keeps one listening
connection per store (``_Listener``, owned by its thread ``piagent-pg-listen``) while
anything in the process waits: readers wake on their run's notices, an executing run's
supervisor on its session's, so nothing polls the database in a tight loop. The listener
stops when its last subscriber leaves, so a finished run leaves no thread behind. Lease
times come from the database server's clock, so machines whose clocks disagree still agree.
"""

from __future__ import annotations

import hashlib
import logging
import select
import socket
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, cast

from ..sessions import PostgresStore
from ._backend import (
    LAPSED_BATCH,
    RECOVERING,
    Control,
    ControlKind,
    SessionBusy,
    Take,
    Wakers,
    WatchedRuns,
)
from ._types import LIVE_STATES, RunInfo, RunState

logger = logging.getLogger("piagent.runs")

SCHEMA_VERSION = 1
PURGE_BATCH = 500  # runs deleted per transaction by purge()
CONTROL_POLL_S = 2.0  # the safety net of an executing run's inbox: NOTIFY wakes it at once
LISTEN_SLICE_S = 1.0  # the listener looks at its stop flag at least this often
_STOP_JOIN_S = 5.0  # the bound on joining a stopped listener
_RECONNECT_S = 0.5  # between attempts of a listener whose connection broke
_LIVE = "('queued', 'running')"
_NOW = "extract(epoch from clock_timestamp())"
_COLUMNS = (f"run_id, session_id, state, error_message, created_at, started_at, ended_at, "
            f"lease_expires_at, {_NOW}")

_TABLES = (
    "CREATE TABLE IF NOT EXISTS {s}.runs (run_id text PRIMARY KEY, session_id text NOT NULL, "
    "state text NOT NULL, error_message text, owner text NOT NULL, "
    "lease_expires_at double precision NOT NULL, created_at double precision NOT NULL, "
    "started_at double precision, ended_at double precision)",
    "CREATE UNIQUE INDEX IF NOT EXISTS runs_one_live ON {s}.runs (session_id) "
    "WHERE state IN ('queued', 'running')",
    "CREATE TABLE IF NOT EXISTS {s}.run_events (run_id text NOT NULL, seq bigint NOT NULL, "
    "data text NOT NULL, PRIMARY KEY (run_id, seq))",
    "CREATE TABLE IF NOT EXISTS {s}.run_control (id bigserial PRIMARY KEY, "
    "session_id text NOT NULL, run_id text, kind text NOT NULL, payload text, "
    "claimed_by text, created_at double precision NOT NULL)",
    "CREATE INDEX IF NOT EXISTS run_control_open ON {s}.run_control (session_id, id) "
    "WHERE claimed_by IS NULL",
    "CREATE TABLE IF NOT EXISTS {s}.run_traces (run_id text PRIMARY KEY, carrier text NOT NULL)",
)


def _info(row: Sequence[Any]) -> RunInfo:
    run_id, session_id, state, error, created, started, ended, lease, now = row
    if state in LIVE_STATES and float(lease) < float(now):
        state = "lost"
    return RunInfo(str(run_id), str(session_id), state, error, float(created),
                   None if started is None else float(started),
                   None if ended is None else float(ended))


class PostgresBackend:
    """Runs, events and the control inbox in the ``PostgresStore``'s schema."""

    control_poll_s: float | None = CONTROL_POLL_S

    def __init__(self, store: PostgresStore) -> None:
        import psycopg  # the store imported it already; here for psycopg.sql and errors

        self._psycopg = psycopg
        self._store = store
        self.schema = store.schema
        digest = hashlib.sha1(store.schema.encode()).hexdigest()[:16]
        self.channel = f"piagent_runs_{digest}"
        self._setup_lock = threading.Lock()  # guards _ready: the tables are made once
        self._ready = False
        self._wakers = Wakers()
        # the notices per watched run; its cond also guards _epoch and is notified when the
        # listener (re)connects
        self._watched = WatchedRuns()
        self._changes = self._watched.cond
        self._epoch = 0
        self._listener = _Listener(store, self.channel, self._on_notice, self._on_reset)

    def __repr__(self) -> str:
        return f"PostgresBackend({self._store!r})"

    # --- plumbing ------------------------------------------------------------------------

    def sql(self, text: str) -> Any:  # ``text`` with ``{s}`` as this backend's schema
        sql = self._psycopg.sql
        return sql.SQL(text).format(s=sql.Identifier(self.schema))

    def transact(self, work: Callable[[Any], Any]) -> Any:  # work(cursor), tables made first
        if not self._ready:
            with self._setup_lock:
                if not self._ready:
                    self._store.run(self._create)
                    self._ready = True
        return self._store.run(work)

    def _create(self, cur: Any) -> None:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"piagent:{self.schema}",))
        for statement in _TABLES:
            cur.execute(self.sql(statement))
        cur.execute(self.sql("SELECT value FROM {s}.meta WHERE key = 'runs'"))
        row = cur.fetchone()
        if row is None:
            cur.execute(self.sql("INSERT INTO {s}.meta VALUES ('runs', %s)"),
                        (str(SCHEMA_VERSION),))
        elif row[0] != str(SCHEMA_VERSION):
            msg = (f"schema {self.schema!r} holds piagent runs tables of version {row[0]}; "
                   f"this piagent reads version {SCHEMA_VERSION}")
            raise RuntimeError(msg)

    def _notify(self, cur: Any, payload: str) -> None:
        cur.execute("SELECT pg_notify(%s, %s)", (self.channel, payload))

    def _on_notice(self, payload: str) -> None:
        kind, _, key = payload.partition(":")
        if kind == "c":
            self._wakers.wake(key)
        elif kind == "e":
            self._watched.changed(key)

    def _on_reset(self) -> None:
        """The listener (re)connected or lost its connection: notices may have been missed,
        so every waiter looks again."""
        with self._changes:
            self._epoch += 1
            self._changes.notify_all()
        self._wakers.wake_all()

    # --- runs ----------------------------------------------------------------------------

    def create_run(self, run_id: str, session_id: str, owner: str, lease_s: float) -> None:
        def write(cur: Any) -> None:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                        (f"piagent-run:{self.schema}:{session_id}",))
            cur.execute(self.sql(f"SELECT run_id, lease_expires_at < {_NOW} FROM {{s}}.runs "
                                  f"WHERE session_id = %s AND state IN {_LIVE}"), (session_id,))
            for live_id, expired in cur.fetchall():
                if not expired:
                    raise SessionBusy(session_id, live_id)
                cur.execute(self.sql("UPDATE {s}.runs SET state = 'lost', "
                                      "ended_at = lease_expires_at WHERE run_id = %s"),
                            (live_id,))
                self._notify(cur, f"e:{live_id}")
                # what the lost run had taken died with it (at most once: it may have been used)
                cur.execute(self.sql("DELETE FROM {s}.run_control WHERE claimed_by = %s OR "
                                      "run_id = %s"), (live_id, live_id))
            cur.execute(self.sql(f"INSERT INTO {{s}}.runs VALUES (%s, %s, 'queued', NULL, %s, "
                                  f"{_NOW} + %s, {_NOW}, NULL, NULL)"),
                        (run_id, session_id, owner, lease_s))
            self._notify(cur, f"e:{run_id}")
        self.transact(write)

    def set_running(self, run_id: str, owner: str) -> None:
        def write(cur: Any) -> None:
            cur.execute(self.sql(f"UPDATE {{s}}.runs SET state = 'running', started_at = {_NOW}"
                                  " WHERE run_id = %s AND owner = %s AND state = 'queued'"),
                        (run_id, owner))
            self._notify(cur, f"e:{run_id}")
        self.transact(write)

    def renew(self, run_id: str, owner: str, lease_s: float) -> bool:
        def write(cur: Any) -> bool:
            cur.execute(self.sql(f"UPDATE {{s}}.runs SET lease_expires_at = {_NOW} + %s "
                                  f"WHERE run_id = %s AND owner = %s AND state IN {_LIVE} "
                                  f"AND lease_expires_at >= {_NOW}"), (lease_s, run_id, owner))
            return bool(cur.rowcount == 1)
        return bool(self.transact(write))

    def finish(self, run_id: str, owner: str, state: RunState, error_message: str | None,
               last_events: tuple[int, Sequence[str]] | None = None) -> None:
        def write(cur: Any) -> None:
            cur.execute(self.sql("DELETE FROM {s}.run_control WHERE claimed_by = %s OR "
                                  "run_id = %s"), (run_id, run_id))
            cur.execute(self.sql(f"UPDATE {{s}}.runs SET state = %s, error_message = %s, "
                                  f"ended_at = {_NOW} WHERE run_id = %s AND owner = %s "
                                  f"AND state IN {_LIVE}"), (state, error_message, run_id, owner))
            if last_events is not None and cur.rowcount == 1:  # one commit: both or neither
                self._insert_events(cur, run_id, *last_events)
            self._notify(cur, f"e:{run_id}")  # one notice: PostgreSQL folds a repeat
        self.transact(write)

    def take_run(self, run_id: str, owner: str, lease_s: float) -> Take:
        """As ``SQLiteBackend.take_run``, its rows locked while it decides."""
        def write(cur: Any) -> Take:
            cur.execute(self.sql(f"SELECT state, owner, lease_expires_at - {_NOW} FROM "
                                  f"{{s}}.runs WHERE run_id = %s FOR UPDATE"), (run_id,))
            row = cur.fetchone()
            if row is None or row[0] not in LIVE_STATES:
                return Take("final")
            state, holder, left = row[0], row[1], float(row[2])
            if state == "queued" and left < 0:
                cur.execute(self.sql("UPDATE {s}.runs SET state = 'lost', error_message = %s, "
                                      "ended_at = lease_expires_at WHERE run_id = %s"),
                            ("no worker took the run before its queue lease ran out", run_id))
                self._notify(cur, f"e:{run_id}")
                return Take("final")
            if (state == "running" or holder == owner) and left >= 0 and \
                    not str(holder).startswith(RECOVERING):
                return Take("held", wait_s=left)  # a live executor (or this one, twice)
            cur.execute(self.sql(f"UPDATE {{s}}.runs SET owner = %s, lease_expires_at = "
                                  f"{_NOW} + %s WHERE run_id = %s"), (owner, lease_s, run_id))
            cur.execute(self.sql("SELECT coalesce(max(seq) + 1, 0) FROM {s}.run_events "
                                  "WHERE run_id = %s"), (run_id,))
            next_seq = int(cur.fetchone()[0])
            self._notify(cur, f"e:{run_id}")
            return Take("fresh" if state == "queued" else "recover", next_seq)
        return cast(Take, self.transact(write))

    def claim_lapsed(self, owner: str, hold_s: float) -> list[tuple[str, str]]:
        """As ``SQLiteBackend.claim_lapsed`` (runs another checker holds are skipped)."""
        def write(cur: Any) -> list[tuple[str, str]]:
            cur.execute(self.sql(f"UPDATE {{s}}.runs SET owner = %s, lease_expires_at = "
                                  f"{_NOW} + %s WHERE run_id IN (SELECT run_id FROM {{s}}.runs "
                                  f"WHERE state = 'running' AND lease_expires_at < {_NOW} "
                                  f"LIMIT {LAPSED_BATCH} FOR UPDATE SKIP LOCKED) "
                                  f"RETURNING run_id, session_id"), (owner, hold_s))
            return [(str(run_id), str(session_id)) for run_id, session_id in cur.fetchall()]
        return list(self.transact(write))

    def append_events(self, run_id: str, first_seq: int, events: Sequence[str]) -> None:
        self.transact(lambda cur: self._insert_events(cur, run_id, first_seq, events))

    def _insert_events(self, cur: Any, run_id: str, first_seq: int, events: Sequence[str]) -> None:
        cur.executemany(self.sql("INSERT INTO {s}.run_events VALUES (%s, %s, %s)"),
                        [(run_id, first_seq + i, text) for i, text in enumerate(events)])
        self._notify(cur, f"e:{run_id}")

    def purge(self, older_than: float) -> list[str]:
        def write(cur: Any) -> list[str]:
            cur.execute(self.sql(f"DELETE FROM {{s}}.runs WHERE run_id IN (SELECT run_id FROM "
                                  f"{{s}}.runs WHERE state NOT IN {_LIVE} AND ended_at < "
                                  f"{_NOW} - %s LIMIT {PURGE_BATCH} FOR UPDATE SKIP LOCKED) "
                                  f"RETURNING run_id"), (older_than,))
            ids = [str(row[0]) for row in cur.fetchall()]
            cur.execute(self.sql("DELETE FROM {s}.run_events WHERE run_id = ANY(%s)"), (ids,))
            cur.execute(self.sql("DELETE FROM {s}.run_traces WHERE run_id = ANY(%s)"), (ids,))
            cur.execute(self.sql("DELETE FROM {s}.run_control WHERE run_id = ANY(%s) OR "
                                  "claimed_by = ANY(%s)"), (ids, ids))
            return ids
        removed: list[str] = []
        while True:
            ids: list[str] = self.transact(write)
            removed += ids
            if len(ids) < PURGE_BATCH:
                return removed

    def info(self, run_id: str) -> RunInfo | None:
        def read(cur: Any) -> RunInfo | None:
            cur.execute(self.sql(f"SELECT {_COLUMNS} FROM {{s}}.runs WHERE run_id = %s"), [run_id])
            row = cur.fetchone()
            return None if row is None else _info(row)
        return cast(RunInfo | None, self.transact(read))

    def read_events(self, run_id: str, after: int) -> list[tuple[int, str]]:
        def read(cur: Any) -> list[tuple[int, str]]:
            cur.execute(self.sql("SELECT seq, data FROM {s}.run_events WHERE run_id = %s AND "
                                  "seq > %s ORDER BY seq LIMIT 1000"), (run_id, after))
            return [(int(seq), str(data)) for seq, data in cur.fetchall()]
        return list(self.transact(read))

    def watch(self, run_id: str) -> _PostgresWatch:
        return _PostgresWatch(self, run_id)

    def _watch(self, run_id: str) -> None:
        self._watched.enter(run_id)
        try:
            self._listener.subscribe()
        except BaseException:
            self._unwatch(run_id, listening=False)
            raise

    def _unwatch(self, run_id: str, listening: bool = True) -> None:
        self._watched.leave(run_id)
        if listening:
            self._listener.unsubscribe()

    # --- the control inbox -----------------------------------------------------------------

    _OPEN = ("SELECT id, kind, payload FROM {s}.run_control WHERE session_id = %s AND "
             "claimed_by IS NULL AND (run_id IS NULL OR run_id = %s) ORDER BY id")

    def send_control(self, session_id: str, run_id: str | None, kind: ControlKind,
                     payload: str | None) -> None:
        def write(cur: Any) -> None:
            cur.execute(self.sql(f"INSERT INTO {{s}}.run_control (session_id, run_id, kind, "
                                  f"payload, created_at) VALUES (%s, %s, %s, %s, {_NOW})"),
                        (session_id, run_id, kind, payload))
            self._notify(cur, f"c:{session_id}")
        self.transact(write)
        self._wakers.wake(session_id)  # same process: at once, before the notice comes back

    def claim_controls(self, session_id: str, run_id: str) -> list[Control]:
        def write(cur: Any) -> list[Control]:
            cur.execute(self.sql(self._OPEN + " FOR UPDATE SKIP LOCKED"), (session_id, run_id))
            rows = cur.fetchall()
            if rows:
                cur.execute(self.sql("UPDATE {s}.run_control SET claimed_by = %s "
                                      "WHERE id = ANY(%s)"), (run_id, [row[0] for row in rows]))
            return [Control(int(i), kind, payload) for i, kind, payload in rows]
        return list(self.transact(write))

    def release_controls(self, ids: Sequence[int]) -> None:
        self.transact(lambda cur: cur.execute(self.sql(
            "UPDATE {s}.run_control SET claimed_by = NULL WHERE id = ANY(%s)"), (list(ids),)))

    def add_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        self._wakers.add(session_id, wake)
        try:
            self._listener.subscribe()
        except BaseException:
            self._wakers.remove(session_id, wake)
            raise

    def remove_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        self._wakers.remove(session_id, wake)
        self._listener.unsubscribe()


class _PostgresWatch:
    """A reader of one run: queries through the store's pool, waits for the run's notices."""

    def __init__(self, backend: PostgresBackend, run_id: str) -> None:
        self._backend = backend
        self._run_id = run_id
        self._seen = (-1, -1)  # (epoch, version) at the last read or info; reader's thread only
        self._open = False

    def _mark(self) -> None:
        backend = self._backend
        with backend._changes:
            self._seen = (backend._epoch, backend._watched.version(self._run_id))

    def _now(self) -> tuple[int, int]:
        backend = self._backend
        return backend._epoch, backend._watched.version(self._run_id)

    def read(self, after: int) -> list[tuple[int, str]]:
        self._mark()
        return self._backend.read_events(self._run_id, after)

    def info(self) -> RunInfo:
        self._mark()
        info = self._backend.info(self._run_id)
        if info is None:
            msg = f"run {self._run_id!r} disappeared from {self._backend._store!r}"
            raise RuntimeError(msg)
        return info

    def wait(self, timeout: float) -> bool:
        changes = self._backend._changes
        with changes:
            changed = changes.wait_for(lambda: self._now() != self._seen, timeout)
            self._seen = self._now()
        error = self._backend._listener.error
        if error is not None:  # the server went away: the reader's next query says so
            return True
        return bool(changed)

    def __enter__(self) -> _PostgresWatch:
        self._backend._watch(self._run_id)
        self._open = True
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._open:
            self._open = False
            self._backend._unwatch(self._run_id)


class _Listener:
    """One LISTEN connection of this process for one channel, while anyone subscribes.

    Owned by its thread ``piagent-pg-listen``, which connects, listens, hands every notice's
    payload to ``on_notice`` and, when the connection breaks, calls ``on_reset`` and
    reconnects. ``subscribe`` returns once the channel is listened to (so no notice sent
    after it is missed) or raises ``ConnectionError`` after the store's timeout. The last
    ``unsubscribe`` stops the thread through a socket pair it selects on, and joins it.
    """

    def __init__(self, store: PostgresStore, channel: str, on_notice: Callable[[str], None],
                 on_reset: Callable[[], None]) -> None:
        self._store = store
        self._channel = channel
        self._on_notice = on_notice
        self._on_reset = on_reset
        # guards _count and _current; held by any subscribing or unsubscribing thread
        self._lock = threading.Lock()
        self._count = 0
        self._current: _ListenThread | None = None
        self.error: Exception | None = None  # the last connection failure, None when listening

    def subscribe(self) -> None:
        with self._lock:
            self._count += 1
            if self._current is None:
                self._current = _ListenThread(self)
            current = self._current
        if not current.listening.wait(self._store.timeout):
            error = self.error
            self.unsubscribe()
            raise ConnectionError(
                f"could not listen for run notices on {self._store!r} within "
                f"{self._store.timeout:g} s ({type(error).__name__ if error else 'no answer'}"
                f": {error}); is the server running and reachable?")

    def unsubscribe(self) -> None:
        with self._lock:
            self._count -= 1
            current = None
            if self._count <= 0:
                self._count = 0
                current, self._current = self._current, None
        if current is not None:
            current.stop()


class _ListenThread:
    """One incarnation of the listener: its thread, its stop flag and wake-up socket pair.

    The thread owns the connection and the reading end; ``stop`` (any thread) sets the flag,
    writes one byte to wake the ``select`` and joins the thread (bounded)."""

    def __init__(self, listener: _Listener) -> None:
        self.listener = listener
        self.listening = threading.Event()  # set while the channel is listened to
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self.thread = threading.Thread(target=self._serve, name="piagent-pg-listen",
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # the thread ended already and closed the pair
        self.thread.join(_STOP_JOIN_S)
        if self.thread.is_alive():
            logger.warning("the run notice listener did not stop within %g s", _STOP_JOIN_S)

    def _serve(self) -> None:
        import psycopg

        listener = self.listener
        store = listener._store
        try:
            while not self._stop.is_set():
                try:
                    with psycopg.connect(store.dsn, autocommit=True,
                                         connect_timeout=max(1, int(store.timeout))) as conn:
                        conn.execute(psycopg.sql.SQL("LISTEN {}").format(
                            psycopg.sql.Identifier(listener._channel)))
                        listener.error = None
                        self.listening.set()
                        listener._on_reset()
                        while not self._stop.is_set():
                            ready, _, _ = select.select([conn.fileno(), self._wake_r.fileno()], [], [],
                                                        LISTEN_SLICE_S)
                            if conn.fileno() in ready:
                                for notice in conn.notifies(timeout=0):
                                    listener._on_notice(notice.payload)
                except psycopg.Error as exc:
                    listener.error = exc
                    self.listening.clear()
                    logger.warning("run notices from %r: %s; reconnecting", store, exc)
                    listener._on_reset()
                    self._stop.wait(_RECONNECT_S)
                except Exception:
                    logger.exception("run notices from %r: the listener failed", store)
                    listener._on_reset()
                    self._stop.wait(_RECONNECT_S)
        finally:
            self._wake_r.close()
            self._wake_w.close()
