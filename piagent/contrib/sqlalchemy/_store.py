"""``SQLAlchemyStore``: transcripts, start marks, approvals and budgets in the tables of
``_tables.py``, through a SQLAlchemy ``Engine`` the application already has.

Every write is one transaction whose first statement updates (or creates) the session's row
in ``piagent_store_sessions``: that row lock queues the writers of one session on every
database, process and machine, and ``next_seq`` hands out the records' sequence numbers. On
SQLite the transaction opens with ``BEGIN IMMEDIATE`` (SQLite locks the whole file; a
deferred transaction that read first could not take the write lock without failing). Two
transactions creating the same new row at once, a deadlock the database broke, or SQLite's
lock timing out are retried from the start, a few times.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from ...messages import AgentMessage, AssistantMessage, ToolResultMessage
from ...policy import (
    ApprovalDecision,
    BudgetSpend,
    PendingApproval,
    check_budget_key,
    check_charge,
    check_decision,
)
from ...sessions.records import (
    check_messages,
    check_session_id,
    decision_to_json,
    decode_message,
    encode_message,
    live_rows,
    marked_call_id,
    pending_from_json,
    pending_to_json,
    unanswered_call_ids,
)
from ._tables import (
    APPROVALS,
    BUDGETS,
    MYSQL,
    RECORDS,
    SCHEMA,
    SCHEMA_VERSION,
    SESSIONS,
    metadata,
)

__all__ = ["SQLAlchemyStore"]

_DIALECTS = ("sqlite", "postgresql", *MYSQL)
_ATTEMPTS = 20  # tries of one write when it is retried (see the module's docstring)
_T = TypeVar("_T")


def _kind(message: AgentMessage) -> str:
    return "assistant" if isinstance(message, AssistantMessage) else "message"


def _rows(messages: object) -> list[tuple[str, str | None, str]]:
    """(kind, answered tool-call id or None, JSON) per message, all encoded before any write."""
    return [(_kind(m), m.tool_call_id if isinstance(m, ToolResultMessage) else None,
             encode_message(m)) for m in check_messages(messages)]


def lock_session(store: SQLAlchemyStore, conn: Connection, session_id: str) -> None:
    """Inside ``conn``'s transaction: lock the session's row (creating it) until it ends, as
    every write of the store does first (the runs backend's one live run)."""
    store._reserve(conn, session_id, 0)


class SQLAlchemyStore:
    """A ``SessionStore`` (and ``ApprovalStore``, ``BudgetStore``) on a SQLAlchemy
    ``Engine``: SQLite, PostgreSQL or MariaDB/MySQL (docs/sessions.md).

    ``create_tables=True`` creates the store's tables if they are missing
    (``metadata.create_all(engine)``); pass ``False`` when migrations (Alembic) own them.
    Safe from any thread, process and machine; ``append`` and ``replace`` are atomic.
    """

    def __init__(self, engine: Engine, *, create_tables: bool = True) -> None:
        if not isinstance(engine, Engine):
            msg = (f"SQLAlchemyStore needs a sqlalchemy.engine.Engine (create_engine(url), "
                   f"Flask-SQLAlchemy's db.engine), got {type(engine).__name__}.")
            raise TypeError(msg)
        if engine.dialect.name not in _DIALECTS:
            msg = (f"SQLAlchemyStore speaks {', '.join(_DIALECTS)}; the engine's database is "
                   f"{engine.dialect.name!r}.")
            raise ValueError(msg)
        self._sqlite = engine.dialect.name == "sqlite"
        database = engine.url.database or ":memory:"
        if self._sqlite and (database == ":memory:" or database.startswith("file::memory:")):
            msg = ("SQLAlchemyStore needs a SQLite file (each connection of the engine's pool "
                   "to an in-memory database is a database of its own); use MemoryStore for "
                   "a store in memory.")
            raise ValueError(msg)
        self.engine = engine
        self._returning = bool(engine.dialect.update_returning)
        if create_tables:
            self.create_tables()

    def __repr__(self) -> str:
        return f"SQLAlchemyStore({self.engine.url.render_as_string(hide_password=True)!r})"

    def create_tables(self) -> None:
        """Create the store's tables that do not exist yet and record their version
        (idempotent; another process doing the same at the same moment is no error).
        ``RuntimeError`` if the database holds a newer version (an older piagent)."""
        with self.engine.connect() as conn, _schema_lock(conn):
            for attempt in range(_ATTEMPTS):
                try:
                    metadata.create_all(conn)
                    conn.commit()
                    break
                except Exception as exc:  # SQLite, which has no lock to queue on: look again
                    conn.rollback()
                    if attempt + 1 == _ATTEMPTS or "exist" not in str(exc).lower():
                        raise
            version = conn.execute(select(SCHEMA.c.version).where(
                SCHEMA.c.component == "sessions")).scalar()
            if version is None:
                try:
                    conn.execute(insert(SCHEMA).values(component="sessions",
                                                       version=SCHEMA_VERSION))
                    conn.commit()
                except IntegrityError:  # another process recorded it first
                    conn.rollback()
            elif version > SCHEMA_VERSION:
                msg = (f"{self!r} holds piagent's store tables of version {version}; this "
                       f"piagent reads version {SCHEMA_VERSION}. Upgrade piagent.")
                raise RuntimeError(msg)

    # --- transactions ----------------------------------------------------------------------

    def _write(self, work: Callable[[Connection], _T]) -> _T:
        """``work(connection)`` in one write transaction, retried as the docstring says."""
        for attempt in range(_ATTEMPTS):
            try:
                with self.engine.connect() as conn:  # closing it rolls back on an error
                    if self._sqlite:
                        conn.exec_driver_sql("BEGIN IMMEDIATE")
                    result = work(conn)
                    conn.commit()
                return result
            except IntegrityError:
                if attempt + 1 == _ATTEMPTS:
                    raise
            except OperationalError as exc:
                text = str(exc).lower()
                if attempt + 1 == _ATTEMPTS or not any(
                        w in text for w in ("deadlock", "locked", "busy", "1213", "1205")):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, work: Callable[[Connection], _T]) -> _T:
        with self.engine.connect() as conn:
            return work(conn)

    def _reserve(self, conn: Connection, session_id: str, count: int) -> int:
        """Lock the session's row (creating it) and take ``count`` sequence numbers; the next
        free one. The lock holds until the transaction ends."""
        bump = (update(SESSIONS).where(SESSIONS.c.session_id == session_id)
                .values(next_seq=SESSIONS.c.next_seq + count))
        if self._returning:
            end = conn.execute(bump.returning(SESSIONS.c.next_seq)).scalar()
            if end is not None:
                return int(end)
        # the UPDATE's own count says whether it found the row: a read-back could see a row
        # another writer created since, and go on without the lock (or, for a budget, without
        # the charge). SQLAlchemy's MySQL dialects count rows matched (CLIENT.FOUND_ROWS).
        elif conn.execute(bump).rowcount:  # MariaDB/MySQL: rows matched
            return int(conn.execute(select(SESSIONS.c.next_seq).where(
                SESSIONS.c.session_id == session_id)).scalar_one())
        # a new session; another writer creating it at once fails one of the two, retried
        conn.execute(insert(SESSIONS).values(session_id=session_id, next_seq=count))
        return count

    @staticmethod
    def _insert(conn: Connection, session_id: str, first: int,
                rows: Sequence[tuple[str, str | None, str | None]]) -> None:
        if rows:
            now = time.time()
            conn.execute(insert(RECORDS), [
                {"session_id": session_id, "seq": first + i, "kind": kind,
                 "tool_call_id": call_id, "data": data, "created_at": now}
                for i, (kind, call_id, data) in enumerate(rows)])

    @staticmethod
    def _last_ask(session_id: str) -> Any:
        """The sequence number of the session's last assistant message, -1 when none: a mark
        or a waiting call belongs to its batch, and only a later tool result answers one."""
        return select(func.coalesce(func.max(RECORDS.c.seq), -1)).where(
            RECORDS.c.session_id == session_id, RECORDS.c.kind == "assistant").scalar_subquery()

    def _unanswered(self, conn: Connection, session_id: str) -> list[str]:
        """The last batch's start marks no tool result stored after it answers, in order."""
        rows = conn.execute(select(RECORDS.c.kind, RECORDS.c.tool_call_id).where(
            RECORDS.c.session_id == session_id, RECORDS.c.seq > self._last_ask(session_id),
            RECORDS.c.tool_call_id.is_not(None)).order_by(RECORDS.c.seq)).all()
        answered = {call_id for kind, call_id in rows if kind != "started"}
        marks = [call_id for kind, call_id in rows if kind == "started"]
        return [m for i, m in enumerate(marks) if m not in answered and m not in marks[:i]]

    # --- the SessionStore protocol ---------------------------------------------------------

    def load(self, session_id: str) -> list[AgentMessage]:
        check_session_id(session_id)
        rows = self._read(lambda conn: conn.execute(
            select(RECORDS.c.seq, RECORDS.c.data).where(
                RECORDS.c.session_id == session_id, RECORDS.c.kind != "started")
            .order_by(RECORDS.c.seq)).all())
        return [decode_message(session_id, seq, data) for seq, data in rows]

    def append(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        rows = _rows(messages)
        if not rows:
            return
        asks = any(kind == "assistant" for kind, _, _ in rows)

        def write(conn: Connection) -> None:
            end = self._reserve(conn, session_id, len(rows))
            self._insert(conn, session_id, end - len(rows), rows)
            if asks:  # a new reply: any waiting batch is over (completed or gone past)
                conn.execute(delete(APPROVALS).where(APPROVALS.c.session_id == session_id))
        self._write(write)

    def replace(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        rows = _rows(messages)
        asked = unanswered_call_ids(list(messages))

        def write(conn: Connection) -> None:
            self._reserve(conn, session_id, 0)  # the row lock; the numbers start again below
            marks = [m for m in self._unanswered(conn, session_id) if marked_call_id(m) in asked]
            conn.execute(delete(RECORDS).where(RECORDS.c.session_id == session_id))
            conn.execute(delete(APPROVALS).where(APPROVALS.c.session_id == session_id,
                                                 APPROVALS.c.kind == "since"))  # renumbered
            self._insert(conn, session_id, 0,
                         [*rows, *(("started", mark, None) for mark in marks)])
            conn.execute(update(SESSIONS).where(SESSIONS.c.session_id == session_id)
                         .values(next_seq=len(rows) + len(marks)))
        self._write(write)

    def delete(self, session_id: str) -> None:
        check_session_id(session_id)

        def write(conn: Connection) -> None:
            conn.execute(delete(SESSIONS).where(SESSIONS.c.session_id == session_id))
            conn.execute(delete(RECORDS).where(RECORDS.c.session_id == session_id))
            conn.execute(delete(APPROVALS).where(APPROVALS.c.session_id == session_id))
        self._write(write)

    def session_ids(self) -> list[str]:
        rows = self._read(lambda conn: conn.execute(
            select(RECORDS.c.session_id).distinct()).scalars().all())
        return sorted(rows)

    def mark_started(self, session_id: str, tool_call_id: str) -> None:
        check_session_id(session_id)
        if not isinstance(tool_call_id, str):
            msg = f"tool_call_id must be a str, got {type(tool_call_id).__name__}."
            raise TypeError(msg)

        def write(conn: Connection) -> None:
            seq = self._reserve(conn, session_id, 0)  # the row lock first: twice is once
            if tool_call_id in self._unanswered(conn, session_id):
                return
            conn.execute(update(SESSIONS).where(SESSIONS.c.session_id == session_id)
                         .values(next_seq=seq + 1))
            self._insert(conn, session_id, seq, [("started", tool_call_id, None)])
        self._write(write)

    def started(self, session_id: str) -> set[str]:
        check_session_id(session_id)
        return set(self._read(lambda conn: self._unanswered(conn, session_id)))

    def last_activity(self, session_id: str) -> float | None:
        """When the session's last record was written (epoch seconds), ``None`` if unknown."""
        check_session_id(session_id)
        value = self._read(lambda conn: conn.execute(select(func.max(RECORDS.c.created_at))
                           .where(RECORDS.c.session_id == session_id)).scalar())
        return None if value is None else float(value)

    # --- approvals (piagent.policy.ApprovalStore) ------------------------------------------

    def _batch(self, conn: Connection, session_id: str
               ) -> list[tuple[int, str, str, str | None]]:
        """The waiting batch's open rows, (position, kind, data, decision) in source order:
        those no tool result stored since the batch waited answers (``live_rows``; for a
        batch a ``replace`` renumbered, since the last assistant message)."""
        rows = conn.execute(select(APPROVALS.c.position, APPROVALS.c.kind,
                                   APPROVALS.c.tool_call_id, APPROVALS.c.data,
                                   APPROVALS.c.decision)
                            .where(APPROVALS.c.session_id == session_id)
                            .order_by(APPROVALS.c.position)).all()
        if not rows:
            return []
        since = next((int(r[3]) for r in rows if r[1] == "since"), None)
        rows = [r for r in rows if r[1] != "since"]
        after = (RECORDS.c.seq > self._last_ask(session_id) if since is None
                 else RECORDS.c.seq >= since)
        answered = conn.execute(select(RECORDS.c.tool_call_id).where(
            RECORDS.c.session_id == session_id, RECORDS.c.kind == "message",
            RECORDS.c.tool_call_id.is_not(None), after).order_by(RECORDS.c.seq)
        ).scalars().all()
        live = live_rows([r[2] for r in rows], list(answered))
        return [(int(rows[i][0]), rows[i][1], rows[i][3], rows[i][4]) for i in live]

    def mark_waiting(self, session_id: str, pending: Sequence[PendingApproval],
                     held: Sequence[ToolResultMessage]) -> None:
        check_session_id(session_id)
        rows = [("pending", p.tool_call_id, pending_to_json(p)) for p in pending]
        rows += [("held", m.tool_call_id, encode_message(m)) for m in held]

        def write(conn: Connection) -> None:
            since = self._reserve(conn, session_id, 0)  # the row lock; results from here on
            conn.execute(delete(APPROVALS).where(APPROVALS.c.session_id == session_id))
            conn.execute(insert(APPROVALS), [
                {"session_id": session_id, "position": i, "kind": kind,
                 "tool_call_id": call_id, "data": data, "decision": None}
                for i, (kind, call_id, data) in [*enumerate(rows), (-1, ("since", "",
                                                                         str(since)))]])
        self._write(write)

    def decide(self, session_id: str, tool_call_id: str, decision: ApprovalDecision,
               digest: str | None) -> bool:
        check_session_id(session_id)

        def write(conn: Connection) -> bool:
            self._reserve(conn, session_id, 0)  # the row lock: one decision at a time
            rows = [r for r in self._batch(conn, session_id) if r[1] == "pending"]
            entries = [pending_from_json(data, made) for _, _, data, made in rows]
            index = check_decision(session_id, entries, tool_call_id, decision, digest)
            conn.execute(update(APPROVALS).where(
                APPROVALS.c.session_id == session_id, APPROVALS.c.position == rows[index][0])
                .values(decision=decision_to_json(decision)))
            return all(e.decision is not None for i, e in enumerate(entries) if i != index)
        return self._write(write)

    def approvals(self, session_id: str) -> list[PendingApproval]:
        check_session_id(session_id)
        rows = self._read(lambda conn: self._batch(conn, session_id))
        return [pending_from_json(data, made) for _, kind, data, made in rows
                if kind == "pending"]

    def held_results(self, session_id: str) -> list[ToolResultMessage]:
        check_session_id(session_id)
        rows = self._read(lambda conn: self._batch(conn, session_id))
        return [decode_message(session_id, seq, data)  # type: ignore[misc]  # tool results
                for seq, kind, data, _ in rows if kind == "held"]

    def clear_approvals(self, session_id: str) -> None:
        check_session_id(session_id)
        self._write(lambda conn: conn.execute(
            delete(APPROVALS).where(APPROVALS.c.session_id == session_id)))

    # --- budgets (piagent.policy.BudgetStore) -----------------------------------------------

    def charge_budget(self, key: str, *, cost: float = 0.0, tokens: int = 0,
                      requests: int = 0) -> BudgetSpend:
        """Add to what has been spent under ``key`` and return the new totals, atomically
        (every process sees the other's charges); a charge of nothing reads the totals."""
        spent, used, asked = check_charge(cost, tokens, requests)
        key = check_budget_key(key)
        b = BUDGETS.c

        def write(conn: Connection) -> tuple[Any, ...]:
            now = time.time()
            bump = conn.execute(update(BUDGETS).where(b.budget_key == key).values(
                cost=b.cost + spent, tokens=b.tokens + used, requests=b.requests + asked,
                updated_at=now))
            if not bump.rowcount:  # a new key; two creating it at once: one is retried
                conn.execute(insert(BUDGETS).values(budget_key=key, cost=spent, tokens=used,
                                                    requests=asked, updated_at=now))
            return tuple(conn.execute(select(b.cost, b.tokens, b.requests)
                                      .where(b.budget_key == key)).one())
        total = self._write(write)
        return BudgetSpend(float(total[0]), int(total[1]), int(total[2]))


_SCHEMA_LOCK = "piagent_store_schema"  # the name of the lock create_tables queues on
_SCHEMA_LOCK_S = 60  # seconds: how long create_tables waits for another process's


@contextmanager
def _schema_lock(conn: Connection) -> Iterator[None]:
    """Queue the processes that create the tables at the same moment (four gunicorn workers
    booting) on a lock of the database server: MariaDB/MySQL's ``GET_LOCK``, PostgreSQL's
    advisory lock. ``CREATE TABLE`` is not transactional on MariaDB, so without it each
    process could fail on a different table another one had just made. SQLite has no such
    lock: ``create_tables`` looks again when a table appeared under it."""
    dialect = conn.dialect.name
    if dialect in ("mysql", "mariadb"):
        got = conn.execute(text("SELECT GET_LOCK(:name, :wait)"),
                           {"name": _SCHEMA_LOCK, "wait": _SCHEMA_LOCK_S}).scalar()
        conn.commit()
        if got != 1:
            msg = (f"creating the store's tables: another process held the lock "
                   f"{_SCHEMA_LOCK!r} for {_SCHEMA_LOCK_S} s")
            raise TimeoutError(msg)
        try:
            yield
        finally:
            conn.rollback()
            conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": _SCHEMA_LOCK})
            conn.commit()
    elif dialect == "postgresql":
        conn.execute(text("SELECT pg_advisory_lock(hashtext(:name))"), {"name": _SCHEMA_LOCK})
        conn.commit()
        try:
            yield
        finally:
            conn.rollback()
            conn.execute(text("SELECT pg_advisory_unlock(hashtext(:name))"),
                         {"name": _SCHEMA_LOCK})
            conn.commit()
    else:
        yield
