"""``SQLiteStore``: the embedded default store — stdlib ``sqlite3`` in WAL mode.

One file holds every session. Any thread and any process on the machine may use it at once:
writes run in ``BEGIN IMMEDIATE`` transactions (SQLite's file lock serialises writers across
processes; the busy timeout makes a writer wait for another instead of failing), and WAL lets
readers go on while one writes.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

from ..messages import AgentMessage, AssistantMessage, ToolResultMessage
from ..policy import (
    ApprovalDecision,
    BudgetSpend,
    PendingApproval,
    check_budget_key,
    check_charge,
    check_decision,
)
from ._approvals import decision_to_json, live_rows, pending_from_json, pending_to_json
from ._budgets import BUDGETS_SCHEMA_VERSION, SQLITE_CHARGE, SQLITE_SCHEMA
from ._protocol import (
    check_messages,
    check_session_id,
    decode_message,
    encode_message,
    marked_call_id,
    unanswered_call_ids,
)

SCHEMA_VERSION = 1
_IDLE_CONNECTIONS = 4  # connections kept open between calls; more are closed after use
_SETUP_RETRY_S = 0.01  # first pause between setup attempts on a new file; doubles to 0.2 s

_SCHEMA_TABLE = """CREATE TABLE IF NOT EXISTS piagent_schema (
    component TEXT PRIMARY KEY,
    version INTEGER NOT NULL
)"""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS piagent_records (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,          -- per session, from 0, one per record
    kind TEXT NOT NULL,            -- 'message' (data: its pi-JSON) or 'started' (data: a tool-call id)
    data TEXT NOT NULL,
    tool_call_id TEXT,             -- a toolResult message's toolCallId, else NULL
    created_at REAL NOT NULL,      -- epoch seconds when the record was written
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS piagent_approvals (
    session_id TEXT NOT NULL,
    position INTEGER NOT NULL,     -- source order within the waiting batch
    kind TEXT NOT NULL,            -- 'pending' (data: the call's JSON), 'held' (data: a result's
                                   -- pi-JSON) or 'since' (position -1, data: the seq from which
                                   -- stored tool results answer the batch's calls)
    tool_call_id TEXT NOT NULL,
    data TEXT NOT NULL,
    decision TEXT,                 -- a pending call's decision as JSON, NULL while undecided
    PRIMARY KEY (session_id, position)
) WITHOUT ROWID;
"""

# The sequence number of the session's last assistant message (-1 when it has none): a start
# mark or a waiting call belongs to the batch that message asked for, and only a tool result
# stored after it answers one (tool-call ids repeat across batches). Every stored assistant
# message's JSON begins with its role (encode_message); the walk goes back from the end.
_LAST_ASK = ("COALESCE((SELECT l.seq FROM piagent_records l WHERE l.session_id = ? AND"
             " l.kind = 'message' AND l.tool_call_id IS NULL AND"
             " l.data LIKE '{\"role\":\"assistant\"%' ORDER BY l.seq DESC LIMIT 1), -1)")
# the start marks of the last batch that no tool result stored after it answers
# (parameters: the session id three times)
_STARTED = ("WITH last(seq) AS (SELECT " + _LAST_ASK + ") SELECT DISTINCT m.data FROM"
            " piagent_records m, last WHERE m.session_id = ? AND m.kind = 'started' AND"
            " m.seq > last.seq AND m.data NOT IN (SELECT a.tool_call_id FROM piagent_records"
            " a WHERE a.session_id = ? AND a.tool_call_id IS NOT NULL AND a.seq > last.seq)")


class SQLiteStore:
    """Transcripts in one SQLite file (docs/sessions.md), safe from threads and processes.

    ``synchronous="NORMAL"`` (the default, with WAL) keeps every committed append through a
    crash of the process; ``"FULL"`` also through a power cut, at an fsync per append.
    ``busy_timeout_s`` is how long a write waits for another process's write.

    Code that keeps its own tables in the same file (``piagent.runs`` does) builds on
    ``open()``, ``connection()``, ``write()`` and ``ensure_schema()``: the store's
    connections, set up as its own, and its versioned schema bootstrap.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0,
                 synchronous: Literal["NORMAL", "FULL"] = "NORMAL") -> None:
        if not isinstance(path, (str, os.PathLike)):
            msg = f"SQLiteStore needs a file path (str or os.PathLike), got {type(path).__name__}."
            raise TypeError(msg)
        self.path = os.fspath(path)
        if self.path == ":memory:" or self.path.startswith("file::memory:"):
            msg = ("SQLiteStore needs a file (each connection to ':memory:' is a separate "
                   "database); use MemoryStore for a store in memory.")
            raise ValueError(msg)
        if synchronous not in ("NORMAL", "FULL"):
            msg = f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}."
            raise ValueError(msg)
        if not isinstance(busy_timeout_s, (int, float)) or busy_timeout_s < 0:
            msg = f"busy_timeout_s must be a number of seconds >= 0, got {busy_timeout_s!r}."
            raise ValueError(msg)
        self._busy_timeout_s = float(busy_timeout_s)
        self._synchronous = synchronous
        # guards _idle, _schema_ready and _closed. A connection is owned by the one thread
        # that took it from _idle (or opened it) until it puts it back: sqlite3 objects are
        # never used by two threads at once, and none is bound to a thread that may die.
        self._lock = threading.Lock()
        # held by the thread opening a connection before the schema is known to exist
        self._setup_lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._schema_ready = False
        self._closed = False
        # the budgets table is known to exist (charge_budget); set once, without the lock:
        # two threads that both see False only run ensure_schema's idempotent DDL twice
        self._budgets_ready = False

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # --- connections ---------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                msg = f"SQLiteStore could not put {self.path!r} in WAL mode (it is in {mode!r})."
                raise sqlite3.OperationalError(msg)
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        except BaseException:
            conn.close()
            raise
        return conn

    def open(self) -> sqlite3.Connection:
        """A new connection to the file, set up as the store's own (WAL, the busy timeout,
        ``synchronous``; autocommit: open transactions with ``BEGIN``), the sessions'
        tables in place. The caller owns it and closes it; any thread may use it, one at a
        time. ``RuntimeError`` once the store is closed."""
        with self._lock:
            self._check_open()
            ready = self._schema_ready
        if ready:
            return self._open()
        # the first connections open one at a time: switching a new file to WAL from two
        # connections at once can fail with "database is locked" at once
        with self._setup_lock:
            return self._set_up()

    def _check_open(self) -> None:
        if self._closed:
            msg = f"{self!r} is closed."
            raise RuntimeError(msg)

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection from the store's pool for the ``with`` block, owned by the calling
        thread until it ends. One the block leaves by an exception is rolled back and
        closed, never reused; at most a few idle ones are kept."""
        with self._lock:
            self._check_open()
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self.open()
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            conn.close()  # a connection that failed is not reused
            raise
        with self._lock:
            if not self._closed and len(self._idle) < _IDLE_CONNECTIONS:
                self._idle.append(conn)
                return
        conn.close()

    def _set_up(self) -> sqlite3.Connection:
        """The first connection: opened, switched to WAL, the schema created. Another process
        doing the same to a new file at the same moment can make SQLite answer "database is
        locked" at once, without waiting on the busy timeout (the journal-mode switch and the
        first WAL-index setup take locks the busy handler does not cover); such an attempt is
        retried, with growing pauses, until ``busy_timeout_s`` has passed."""
        deadline = time.monotonic() + self._busy_timeout_s
        pause = _SETUP_RETRY_S
        while True:
            conn: sqlite3.Connection | None = None
            try:
                conn = self._open()
                with self._lock:
                    ready = self._schema_ready
                if not ready:
                    self._create_schema(conn)
                return conn
            except sqlite3.OperationalError as exc:
                if conn is not None:
                    conn.close()
                text = str(exc).lower()
                if ("locked" not in text and "busy" not in text) \
                        or time.monotonic() + pause > deadline:
                    raise
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        self._apply_schema(conn, "sessions", SCHEMA_VERSION, _SCHEMA)
        with self._lock:
            self._schema_ready = True

    def ensure_schema(self, component: str, version: int, ddl: str) -> None:
        """Create a component's tables in the file once, in one ``BEGIN IMMEDIATE``
        transaction: ``ddl`` is ``;``-separated idempotent statements (``CREATE TABLE IF
        NOT EXISTS ...``); ``component`` is recorded at ``version`` in ``piagent_schema``.
        ``RuntimeError`` if the file holds a newer version of it (an older piagent)."""
        with self.connection() as conn:
            self._apply_schema(conn, component, version, ddl)

    def _apply_schema(self, conn: sqlite3.Connection, component: str, version: int,
                      ddl: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in (_SCHEMA_TABLE, *ddl.split(";")):
                if statement.strip():
                    conn.execute(statement)
            row = conn.execute("SELECT version FROM piagent_schema WHERE component = ?",
                               (component,)).fetchone()
            if row is None:
                conn.execute("INSERT INTO piagent_schema VALUES (?, ?)", (component, version))
            elif row[0] > version:
                msg = (f"{self.path!r} holds {component} schema version {row[0]}; this "
                       f"piagent reads version {version}. Upgrade piagent.")
                raise RuntimeError(msg)
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A pooled connection inside ``BEGIN IMMEDIATE``: committed when the block ends,
        rolled back if it raises (SQLite's file lock orders writers across processes)."""
        with self.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close the idle connections; the store refuses calls afterwards."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the protocol --------------------------------------------------------------------

    def load(self, session_id: str) -> list[AgentMessage]:
        check_session_id(session_id)
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT seq, data FROM piagent_records WHERE session_id = ? AND kind = 'message'"
                " ORDER BY seq", (session_id,)).fetchall()
        return [decode_message(session_id, seq, data) for seq, data in rows]

    @staticmethod
    def _rows(session_id: str, start: int, messages: Sequence[AgentMessage]
              ) -> list[tuple[str, int, str, str, str | None, float]]:
        now = time.time()
        return [(session_id, start + i, "message", encode_message(m),
                 m.tool_call_id if isinstance(m, ToolResultMessage) else None, now)
                for i, m in enumerate(messages)]

    @staticmethod
    def _next_seq(conn: sqlite3.Connection, session_id: str) -> int:
        row = conn.execute("SELECT MAX(seq) FROM piagent_records WHERE session_id = ?",
                           (session_id,)).fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    _INSERT = "INSERT INTO piagent_records VALUES (?, ?, ?, ?, ?, ?)"

    def append(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        items = check_messages(messages)
        if not items:
            return
        rows = self._rows(session_id, 0, items)  # encoded before the transaction opens
        asks = any(isinstance(m, AssistantMessage) for m in items)
        with self.write() as conn:
            start = self._next_seq(conn, session_id)
            conn.executemany(self._INSERT, [(r[0], start + r[1], *r[2:]) for r in rows])
            if asks:  # a new reply: any waiting batch is over (completed or gone past)
                conn.execute("DELETE FROM piagent_approvals WHERE session_id = ?",
                             (session_id,))

    def replace(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        items = check_messages(messages)
        rows = self._rows(session_id, 0, items)
        keep = unanswered_call_ids(items)
        with self.write() as conn:
            marks = sorted(r[0] for r in conn.execute(_STARTED, (session_id,) * 3)
                           if marked_call_id(r[0]) in keep)
            conn.execute("DELETE FROM piagent_records WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM piagent_approvals WHERE session_id = ? AND kind = 'since'",
                         (session_id,))  # renumbered: results after the last ask answer
            now = time.time()
            rows += [(session_id, len(rows) + i, "started", mark, None, now)
                     for i, mark in enumerate(marks)]
            conn.executemany(self._INSERT, rows)

    def delete(self, session_id: str) -> None:
        check_session_id(session_id)
        with self.write() as conn:
            conn.execute("DELETE FROM piagent_records WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM piagent_approvals WHERE session_id = ?", (session_id,))

    def session_ids(self) -> list[str]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT session_id FROM piagent_records ORDER BY session_id").fetchall()
        return [r[0] for r in rows]

    def mark_started(self, session_id: str, tool_call_id: str) -> None:
        check_session_id(session_id)
        if not isinstance(tool_call_id, str):
            msg = f"tool_call_id must be a str, got {type(tool_call_id).__name__}."
            raise TypeError(msg)
        with self.write() as conn:
            if conn.execute(f"SELECT 1 FROM piagent_records WHERE session_id = ? AND kind = "
                            f"'started' AND data = ? AND seq > {_LAST_ASK}",
                            (session_id, tool_call_id, session_id)).fetchone() is None:
                conn.execute(self._INSERT, (session_id, self._next_seq(conn, session_id),
                                            "started", tool_call_id, None, time.time()))

    def started(self, session_id: str) -> set[str]:
        check_session_id(session_id)
        with self.connection() as conn:
            rows = conn.execute(_STARTED, (session_id,) * 3).fetchall()
        return {r[0] for r in rows}

    def last_activity(self, session_id: str) -> float | None:
        """When the session's last record was written (epoch seconds), ``None`` if unknown."""
        check_session_id(session_id)
        with self.connection() as conn:
            row = conn.execute("SELECT MAX(created_at) FROM piagent_records WHERE session_id = ?",
                               (session_id,)).fetchone()
        return None if row[0] is None else float(row[0])

    # --- approvals (piagent.policy.ApprovalStore) ------------------------------------------

    def _batch(self, conn: sqlite3.Connection, session_id: str
               ) -> list[tuple[int, str, str, str | None]]:
        """The waiting batch's open rows, (position, kind, data, decision) in source order:
        those no tool result stored since the batch waited answers (``live_rows``; for a
        batch an older piagent stored, or one a ``replace`` renumbered, since the last
        assistant message)."""
        rows = conn.execute("SELECT position, kind, tool_call_id, data, decision FROM"
                            " piagent_approvals WHERE session_id = ? ORDER BY position",
                            (session_id,)).fetchall()
        if not rows:
            return []
        since = next((int(r[3]) for r in rows if r[1] == "since"), None)
        rows = [r for r in rows if r[1] != "since"]
        if since is None:
            answered = conn.execute(
                "SELECT tool_call_id FROM piagent_records WHERE session_id = ? AND"
                f" tool_call_id IS NOT NULL AND seq > {_LAST_ASK} ORDER BY seq",
                (session_id, session_id)).fetchall()
        else:
            answered = conn.execute(
                "SELECT tool_call_id FROM piagent_records WHERE session_id = ? AND"
                " tool_call_id IS NOT NULL AND seq >= ? ORDER BY seq",
                (session_id, since)).fetchall()
        live = live_rows([r[2] for r in rows], [a[0] for a in answered])
        return [(rows[i][0], rows[i][1], rows[i][3], rows[i][4]) for i in live]

    def mark_waiting(self, session_id: str, pending: Sequence[PendingApproval],
                     held: Sequence[ToolResultMessage]) -> None:
        check_session_id(session_id)
        rows = [("pending", p.tool_call_id, pending_to_json(p)) for p in pending]
        rows += [("held", m.tool_call_id, encode_message(m)) for m in held]
        with self.write() as conn:
            since = self._next_seq(conn, session_id)  # results from here on answer calls
            conn.execute("DELETE FROM piagent_approvals WHERE session_id = ?", (session_id,))
            conn.executemany("INSERT INTO piagent_approvals VALUES (?, ?, ?, ?, ?, NULL)",
                             [(session_id, i, *row) for i, row in enumerate(rows)])
            conn.execute("INSERT INTO piagent_approvals VALUES (?, -1, 'since', '', ?, NULL)",
                         (session_id, str(since)))

    def decide(self, session_id: str, tool_call_id: str, decision: ApprovalDecision,
               digest: str | None) -> bool:
        check_session_id(session_id)
        with self.write() as conn:  # BEGIN IMMEDIATE: one decision at a time, any process
            rows = [r for r in self._batch(conn, session_id) if r[1] == "pending"]
            entries = [pending_from_json(data, made) for _, _, data, made in rows]
            index = check_decision(session_id, entries, tool_call_id, decision, digest)
            conn.execute("UPDATE piagent_approvals SET decision = ? WHERE session_id = ? AND "
                         "position = ?", (decision_to_json(decision), session_id, rows[index][0]))
            return all(e.decision is not None for i, e in enumerate(entries) if i != index)

    def approvals(self, session_id: str) -> list[PendingApproval]:
        check_session_id(session_id)
        with self.connection() as conn:
            rows = self._batch(conn, session_id)
        return [pending_from_json(data, made) for _, kind, data, made in rows
                if kind == "pending"]

    def held_results(self, session_id: str) -> list[ToolResultMessage]:
        check_session_id(session_id)
        with self.connection() as conn:
            rows = self._batch(conn, session_id)
        return [decode_message(session_id, seq, data)  # type: ignore[misc]  # tool results
                for seq, kind, data, _ in rows if kind == "held"]

    def clear_approvals(self, session_id: str) -> None:
        check_session_id(session_id)
        with self.write() as conn:
            conn.execute("DELETE FROM piagent_approvals WHERE session_id = ?", (session_id,))

    # --- budgets (piagent.policy.BudgetStore) -----------------------------------------------

    def charge_budget(self, key: str, *, cost: float = 0.0, tokens: int = 0,
                      requests: int = 0) -> BudgetSpend:
        """Add to what has been spent under ``key`` and return the new totals, atomically
        (every process sees the other's charges); a charge of nothing reads the totals."""
        amounts = check_charge(cost, tokens, requests)
        key = check_budget_key(key)
        if not self._budgets_ready:  # the table, once per store (the schema hook)
            self.ensure_schema("budgets", BUDGETS_SCHEMA_VERSION, SQLITE_SCHEMA)
            self._budgets_ready = True
        with self.write() as conn:
            total = conn.execute(SQLITE_CHARGE, (key, *amounts, time.time())).fetchone()
        return BudgetSpend(float(total[0]), int(total[1]), int(total[2]))
