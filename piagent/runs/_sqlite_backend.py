"""The runs of an ``SQLiteStore``: three tables in the store's own file (WAL), reached through
the store's connections (``SQLiteStore.connection``/``write``/``open``/``ensure_schema``).

Any process on the machine reads and controls a run here. Readers in the process that
writes are woken by a Condition at once; readers elsewhere notice a commit by polling
``PRAGMA data_version`` (a read of a counter in shared memory, no query) every
``POLL_S``. Writes are short ``BEGIN IMMEDIATE`` transactions; SQLite's file lock orders them
between processes and the busy timeout makes a writer wait instead of failing.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType

from ..sessions import SQLiteStore
from ._backend import LAPSED_BATCH, RECOVERING, Control, ControlKind, SessionBusy, Take, Wakers
from ._types import LIVE_STATES, RunInfo, RunState

SCHEMA_VERSION = 1
POLL_S = 0.01  # how often a reader checks for commits by other processes
PURGE_BATCH = 500  # runs deleted per write transaction by purge()

_SCHEMA = """
CREATE TABLE IF NOT EXISTS piagent_runs (
    run_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    state TEXT NOT NULL,            -- queued running done error aborted lost waiting
    error_message TEXT,
    owner TEXT NOT NULL,            -- host:pid:runner of the process executing it
    lease_expires_at REAL NOT NULL, -- epoch seconds, a live run past it is lost
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS piagent_runs_one_live
    ON piagent_runs (session_id) WHERE state IN ('queued', 'running');
CREATE TABLE IF NOT EXISTS piagent_run_events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,           -- from 0, the event id is seq in 10 digits
    data TEXT NOT NULL,             -- the event's pi-JSON
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS piagent_run_control (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    run_id TEXT,                    -- the run an abort is for, NULL for steer and follow_up
    kind TEXT NOT NULL,             -- steer follow_up abort
    payload TEXT,                   -- a message's pi-JSON, or the abort reason
    claimed_by TEXT,                -- the run that took it, NULL while it waits
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS piagent_run_control_open ON piagent_run_control (session_id, id)
    WHERE claimed_by IS NULL;
CREATE TABLE IF NOT EXISTS piagent_run_traces (
    run_id TEXT PRIMARY KEY,
    carrier TEXT NOT NULL           -- the starting request's trace context (runs/_traces.py)
) WITHOUT ROWID;
"""

_LIVE = "('queued', 'running')"
_COLUMNS = "run_id, session_id, state, error_message, created_at, started_at, ended_at, " \
           "lease_expires_at"


def _info(row: tuple[object, ...], now: float) -> RunInfo:
    run_id, session_id, state, error, created, started, ended, lease = row
    if state in LIVE_STATES and float(lease) < now:  # type: ignore[arg-type]
        state = "lost"
    return RunInfo(str(run_id), str(session_id), state, error, created, started,  # type: ignore[arg-type]
                   ended)  # type: ignore[arg-type]


class SQLiteBackend:
    """Runs, events and the control inbox in the ``SQLiteStore``'s file."""

    control_poll_s: float | None = 0.02  # senders in other processes: a run looks at the inbox this often

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self.path = store.path
        # held while the first use makes the runs' tables; guards _ready
        self._setup_lock = threading.Lock()
        self._ready = False
        # notified after this process commits events or a state: same-process readers wake
        # at once. _generation (guarded by it) counts those commits.
        self._changes = threading.Condition()
        self._generation = 0
        self._wakers = Wakers()

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"

    # --- connections: the store's, the runs' tables made on first use ------------------

    def _set_up(self) -> None:
        if not self._ready:
            with self._setup_lock:
                if not self._ready:
                    self._store.ensure_schema("runs", SCHEMA_VERSION, _SCHEMA)
                    self._ready = True

    def open(self) -> sqlite3.Connection:
        """A connection a watch owns (and closes)."""
        self._set_up()
        return self._store.open()

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A connection to read with (the tables made first)."""
        self._set_up()
        with self._store.connection() as conn:
            yield conn

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """The connection to write with, in one transaction (the tables made first)."""
        self._set_up()
        with self._store.write() as conn:
            yield conn

    def _changed(self) -> None:
        with self._changes:
            self._generation += 1
            self._changes.notify_all()

    # --- runs ----------------------------------------------------------------------------

    def create_run(self, run_id: str, session_id: str, owner: str, lease_s: float) -> None:
        with self.writing() as conn:
            now = time.time()
            for live_id, lease in conn.execute(
                    f"SELECT run_id, lease_expires_at FROM piagent_runs WHERE session_id = ? "
                    f"AND state IN {_LIVE}", (session_id,)).fetchall():
                if lease >= now:
                    raise SessionBusy(session_id, live_id)
                conn.execute("UPDATE piagent_runs SET state = 'lost', ended_at = ? "
                             "WHERE run_id = ?", (lease, live_id))
                # what the lost run had taken died with it (at most once: it may have been used)
                conn.execute("DELETE FROM piagent_run_control WHERE claimed_by = ? OR run_id = ?",
                             (live_id, live_id))
            conn.execute("INSERT INTO piagent_runs VALUES (?, ?, 'queued', NULL, ?, ?, ?, NULL, "
                         "NULL)", (run_id, session_id, owner, now + lease_s, now))
        self._changed()

    def set_running(self, run_id: str, owner: str) -> None:
        with self.writing() as conn:
            conn.execute("UPDATE piagent_runs SET state = 'running', started_at = ? WHERE "
                         "run_id = ? AND owner = ? AND state = 'queued'",
                         (time.time(), run_id, owner))
        self._changed()

    def renew(self, run_id: str, owner: str, lease_s: float) -> bool:
        with self.writing() as conn:
            now = time.time()
            cursor = conn.execute(
                f"UPDATE piagent_runs SET lease_expires_at = ? WHERE run_id = ? AND owner = ? "
                f"AND state IN {_LIVE} AND lease_expires_at >= ?",
                (now + lease_s, run_id, owner, now))
            return cursor.rowcount == 1

    def finish(self, run_id: str, owner: str, state: RunState, error_message: str | None,
               last_events: tuple[int, Sequence[str]] | None = None) -> None:
        with self.writing() as conn:
            conn.execute("DELETE FROM piagent_run_control WHERE claimed_by = ? OR run_id = ?",
                         (run_id, run_id))
            cursor = conn.execute(f"UPDATE piagent_runs SET state = ?, error_message = ?, "
                                  f"ended_at = ? WHERE run_id = ? AND owner = ? AND state IN "
                                  f"{_LIVE}", (state, error_message, time.time(), run_id, owner))
            if last_events is not None and cursor.rowcount == 1:  # one commit: both or neither
                first_seq, events = last_events
                conn.executemany("INSERT INTO piagent_run_events VALUES (?, ?, ?)",
                                 [(run_id, first_seq + i, text) for i, text in enumerate(events)])
        self._changed()

    def take_run(self, run_id: str, owner: str, lease_s: float) -> Take:
        """For an executor in any process: hold a queued run, or a running one whose owner's
        lease ran out (to recover it). A queued run nobody took in time is recorded ``lost``."""
        with self.writing() as conn:
            now = time.time()
            row = conn.execute("SELECT state, owner, lease_expires_at FROM piagent_runs "
                               "WHERE run_id = ?", (run_id,)).fetchone()
            if row is None or row[0] not in LIVE_STATES:
                return Take("final")
            state, holder, left = row[0], row[1], float(row[2]) - now
            if state == "queued" and left < 0:
                conn.execute("UPDATE piagent_runs SET state = 'lost', error_message = ?, "
                             "ended_at = lease_expires_at WHERE run_id = ?",
                             ("no worker took the run before its queue lease ran out", run_id))
                take = Take("final")
            elif (state == "running" or holder == owner) and left >= 0 and \
                    not str(holder).startswith(RECOVERING):
                return Take("held", wait_s=left)
            else:
                conn.execute("UPDATE piagent_runs SET owner = ?, lease_expires_at = ? "
                             "WHERE run_id = ?", (owner, now + lease_s, run_id))
                next_seq = conn.execute("SELECT coalesce(max(seq) + 1, 0) FROM "
                                        "piagent_run_events WHERE run_id = ?",
                                        (run_id,)).fetchone()[0]
                take = Take("fresh" if state == "queued" else "recover", int(next_seq))
        self._changed()
        return take

    def claim_lapsed(self, owner: str, hold_s: float) -> list[tuple[str, str]]:
        """The running runs whose lease ran out (their executor died), now held by ``owner``
        for ``hold_s`` (so one checker submits each recovery): ``(run_id, session_id)``."""
        # the live runs' partial index finds them (the WHERE repeats its condition)
        lapsed = (f"SELECT run_id, session_id FROM piagent_runs WHERE state IN {_LIVE} AND "
                  f"state = 'running' AND lease_expires_at < ? LIMIT {LAPSED_BATCH}")
        with self.reading() as conn:  # the common case: none, and no write lock taken
            if not conn.execute(lapsed, (time.time(),)).fetchall():
                return []
        with self.writing() as conn:
            now = time.time()
            rows = conn.execute(lapsed, (now,)).fetchall()
            conn.executemany("UPDATE piagent_runs SET owner = ?, lease_expires_at = ? "
                             "WHERE run_id = ?", [(owner, now + hold_s, r[0]) for r in rows])
        if rows:
            self._changed()
        return [(str(run_id), str(session_id)) for run_id, session_id in rows]

    def append_events(self, run_id: str, first_seq: int, events: Sequence[str]) -> None:
        with self.writing() as conn:
            conn.executemany("INSERT INTO piagent_run_events VALUES (?, ?, ?)",
                             [(run_id, first_seq + i, text) for i, text in enumerate(events)])
        self._changed()

    def info(self, run_id: str) -> RunInfo | None:
        with self.reading() as conn:
            return self._read_info(conn, run_id)

    @staticmethod
    def _read_info(conn: sqlite3.Connection, run_id: str) -> RunInfo | None:
        row = conn.execute(f"SELECT {_COLUMNS} FROM piagent_runs WHERE run_id = ?",
                           (run_id,)).fetchone()
        return None if row is None else _info(row, time.time())

    def watch(self, run_id: str) -> _SQLiteWatch:
        return _SQLiteWatch(self, run_id)

    def purge(self, older_than: float) -> list[str]:
        cutoff = time.time() - older_than
        removed: list[str] = []
        while True:
            with self.writing() as conn:
                ids = [(row[0],) for row in conn.execute(
                    f"SELECT run_id FROM piagent_runs WHERE state NOT IN {_LIVE} AND "
                    f"ended_at < ? LIMIT {PURGE_BATCH}", (cutoff,))]
                conn.executemany("DELETE FROM piagent_run_events WHERE run_id = ?", ids)
                conn.executemany("DELETE FROM piagent_run_control WHERE run_id = ?1 OR "
                                 "claimed_by = ?1", ids)
                conn.executemany("DELETE FROM piagent_runs WHERE run_id = ?", ids)
                conn.executemany("DELETE FROM piagent_run_traces WHERE run_id = ?", ids)
            removed += [run_id for run_id, in ids]
            if len(ids) < PURGE_BATCH:
                return removed

    # --- the control inbox -----------------------------------------------------------------

    _OPEN = ("SELECT id, kind, payload FROM piagent_run_control WHERE session_id = ? AND "
             "claimed_by IS NULL AND (run_id IS NULL OR run_id = ?) ORDER BY id")

    def send_control(self, session_id: str, run_id: str | None, kind: ControlKind,
                     payload: str | None) -> None:
        with self.writing() as conn:
            conn.execute("INSERT INTO piagent_run_control (session_id, run_id, kind, payload, "
                         "created_at) VALUES (?, ?, ?, ?, ?)",
                         (session_id, run_id, kind, payload, time.time()))
        self._wakers.wake(session_id)

    def claim_controls(self, session_id: str, run_id: str) -> list[Control]:
        with self.reading() as conn:  # the common case: nothing waits, no write lock
            if conn.execute(self._OPEN, (session_id, run_id)).fetchone() is None:
                return []
        with self.writing() as conn:
            rows = conn.execute(self._OPEN, (session_id, run_id)).fetchall()
            conn.executemany("UPDATE piagent_run_control SET claimed_by = ? WHERE id = ?",
                             [(run_id, row[0]) for row in rows])
        return [Control(int(i), kind, payload) for i, kind, payload in rows]

    def release_controls(self, ids: Sequence[int]) -> None:
        with self.writing() as conn:
            conn.executemany("UPDATE piagent_run_control SET claimed_by = NULL WHERE id = ?",
                             [(i,) for i in ids])

    def add_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        self._wakers.add(session_id, wake)

    def remove_waker(self, session_id: str, wake: Callable[[], None]) -> None:
        self._wakers.remove(session_id, wake)


class _SQLiteWatch:
    """A reader of one run: its own connection, woken in-process or by ``data_version``."""

    def __init__(self, backend: SQLiteBackend, run_id: str) -> None:
        self._backend = backend
        self._run_id = run_id
        self._conn: sqlite3.Connection | None = None  # owned by the reader's thread
        self._generation = -1
        self._data_version = -1

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._backend.open()
        return self._conn

    def _mark(self) -> None:
        """Remember where the world was, before a read, so a change after it wakes ``wait``."""
        with self._backend._changes:
            self._generation = self._backend._generation
        self._data_version = self._connection().execute("PRAGMA data_version").fetchone()[0]

    def read(self, after: int) -> list[tuple[int, str]]:
        self._mark()
        return self._connection().execute(
            "SELECT seq, data FROM piagent_run_events WHERE run_id = ? AND seq > ? ORDER BY seq "
            "LIMIT 1000", (self._run_id, after)).fetchall()

    def info(self) -> RunInfo:
        self._mark()
        info = self._backend._read_info(self._connection(), self._run_id)
        if info is None:
            msg = f"run {self._run_id!r} disappeared from {self._backend.path!r}"
            raise RuntimeError(msg)
        return info

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        changes = self._backend._changes
        conn = self._connection()
        while True:
            with changes:
                if changes.wait_for(lambda: self._backend._generation != self._generation,
                                    max(0.0, min(POLL_S, deadline - time.monotonic()))):
                    return True
            if conn.execute("PRAGMA data_version").fetchone()[0] != self._data_version:
                return True
            if time.monotonic() >= deadline:
                return False

    def __enter__(self) -> _SQLiteWatch:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
