"""``PostgresStore``: session transcripts in PostgreSQL, shared by every machine that reaches it.

psycopg 3 with a ``psycopg_pool.ConnectionPool``; installed with ``pip install
'piagent[postgres]'`` and imported only when a store is built, so the core works without it.

The tables live in one schema (``piagent`` unless told otherwise), created on first use under
an advisory lock with a schema version:

* ``sessions(session_id, next_seq)``: one row per session. Every write to a session first
  upserts this row, which takes its row lock until the transaction commits: writers of one
  session queue behind each other (from any process or machine), writers of different
  sessions do not, and ``next_seq`` hands out the sequence numbers.
* ``records(session_id, seq, kind, tool_call_id, body)``: one row per message (``kind``
  ``'message'``, ``body`` its pi JSON as text, so a record reads back byte for byte) and per
  durable intent (``kind`` ``'started'``, the tool call's id). ``tool_call_id`` of a message
  row is set for tool results: it is what answers an intent.
* ``approvals(session_id, position, kind, tool_call_id, data, decision)``: the session's
  batch waiting for approval (``kind`` ``'pending'``: a call, its decision once made;
  ``'held'``: a result held back; ``'since'``, position -1: the sequence number from which
  stored tool results answer the batch's calls), written under the session's row lock.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

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
from ._budgets import BUDGETS_SCHEMA_VERSION, PG_CHARGE, PG_CREATE, PG_SET_VERSION, PG_VERSION
from ._protocol import (
    check_messages,
    check_session_id,
    decode_message,
    encode_message,
    marked_call_id,
    unanswered_call_ids,
)

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["PostgresStore"]

SCHEMA_VERSION = 1
# The sequence number of a session's last assistant message (-1 when none; parameter: the
# session id): a start mark or a waiting call belongs to the batch that message asked for,
# and only a tool result stored after it answers one (tool-call ids repeat across batches).
# A stored assistant message's JSON begins with its role (encode_message).
_LAST_ASK = ("COALESCE((SELECT l.seq FROM {s}.records l WHERE l.session_id = %s AND "
             "l.kind = 'message' AND l.tool_call_id IS NULL AND left(l.body, 19) = "
             "'{{\"role\":\"assistant\"' ORDER BY l.seq DESC LIMIT 1), -1)")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_T = TypeVar("_T")


def import_psycopg() -> tuple[Any, Any]:
    """psycopg and psycopg_pool, or an ImportError saying which extra installs them."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        msg = ("PostgresStore needs psycopg 3 and psycopg_pool: "
               "pip install 'piagent[postgres]'")
        raise ImportError(msg) from exc
    return psycopg, psycopg_pool


def to_column(text: str) -> str:
    """``text`` as a PostgreSQL ``text`` value: that type refuses NUL, so a backslash becomes
    two and NUL becomes backslash-zero (session ids and tool-call ids may hold either)."""
    if "\\" not in text and "\x00" not in text:
        return text
    return text.replace("\\", "\\\\").replace("\x00", "\\0")


def from_column(text: str) -> str:
    """The inverse of :func:`to_column`."""
    if "\\" not in text:
        return text
    return re.sub(r"\\(.)", lambda m: "\x00" if m.group(1) == "0" else m.group(1), text,
                  flags=re.DOTALL)


def redact_dsn(dsn: str) -> str:
    """The DSN without its password (for error messages)."""
    dsn = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn)


class PostgresStore:
    """A ``SessionStore`` in PostgreSQL: atomic appends and replaces, per-session sequence
    numbers, durable tool-call intents; safe from any thread, process and machine.

    ``dsn`` is a libpq connection string or URL. ``schema`` names the schema that holds the
    tables (lower-case letters, digits and ``_``). ``max_connections`` bounds the pool;
    ``timeout`` bounds the wait for a connection (a server that is down fails the call after
    it with a ``ConnectionError`` naming the server). Call ``close()`` (or use the store as a
    context manager) to close the pool.
    """

    def __init__(self, dsn: str, *, schema: str = "piagent", max_connections: int = 4,
                 timeout: float = 10.0) -> None:
        if not isinstance(dsn, str) or not dsn:
            msg = f"dsn must be a non-empty libpq connection string or URL, got {dsn!r}"
            raise ValueError(msg)
        if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
            msg = (f"schema must be lower-case letters, digits and '_' (at most 63, not "
                   f"starting with a digit), got {schema!r}")
            raise ValueError(msg)
        if not isinstance(max_connections, int) or max_connections < 1:
            msg = f"max_connections must be an int >= 1, got {max_connections!r}"
            raise ValueError(msg)
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            msg = f"timeout must be a positive number of seconds, got {timeout!r}"
            raise ValueError(msg)
        self._psycopg, pool_module = import_psycopg()
        self.dsn = dsn
        self.schema = schema
        self.timeout = float(timeout)
        self._where = redact_dsn(dsn)
        connect_timeout = max(1, int(timeout))
        # the pool owns every connection of this store; psycopg_pool guards it itself
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = (
            pool_module.ConnectionPool(
                dsn, min_size=1, max_size=max_connections, open=True, timeout=self.timeout,
                name=f"piagent-store-{schema}", reconnect_timeout=self.timeout,
                kwargs={"connect_timeout": connect_timeout, "autocommit": True}))
        # guards _ready: the schema is created once per store, by the first call that needs it
        self._schema_lock = threading.Lock()
        self._ready = False
        # the budgets table is known to exist (charge_budget); set once, without the lock:
        # two threads that both see False only run the idempotent creation twice
        self._budgets_ready = False

    # --- the SessionStore protocol -------------------------------------------------------

    def load(self, session_id: str) -> list[AgentMessage]:
        check_session_id(session_id)
        rows = self._run(lambda cur: cur.execute(
            self._sql("SELECT seq, body FROM {s}.records WHERE session_id = %s "
                      "AND kind = 'message' ORDER BY seq"), (to_column(session_id),)).fetchall())
        return [decode_message(session_id, seq, body) for seq, body in rows]

    def append(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        rows = self._encode(messages)
        if not rows:
            return

        asks = any(isinstance(m, AssistantMessage) for m in messages)

        def write(cur: Any) -> None:
            end = self._reserve(cur, session_id, len(rows))
            self._insert(cur, session_id, end - len(rows), rows)
            if asks:  # a new reply: any waiting batch is over (completed or gone past)
                cur.execute(self._sql("DELETE FROM {s}.approvals WHERE session_id = %s"),
                            (to_column(session_id),))
        self._run(write)

    def replace(self, session_id: str, messages: Sequence[AgentMessage]) -> None:
        check_session_id(session_id)
        items = check_messages(messages)
        rows = self._encode(items)
        asked = unanswered_call_ids(items)

        def write(cur: Any) -> None:
            self._reserve(cur, session_id, 0)  # the row lock; the numbers start again below
            marks = [m for m in self._unanswered(cur, session_id) if marked_call_id(m) in asked]
            cur.execute(self._sql("DELETE FROM {s}.records WHERE session_id = %s"),
                        (to_column(session_id),))
            cur.execute(self._sql("DELETE FROM {s}.approvals WHERE session_id = %s AND "
                                  "kind = 'since'"), (to_column(session_id),))  # renumbered
            self._insert(cur, session_id, 0, rows)
            for seq, call_id in enumerate(marks, start=len(rows)):
                self._insert_mark(cur, session_id, seq, call_id)
            cur.execute(self._sql("UPDATE {s}.sessions SET next_seq = %s WHERE session_id = %s"),
                        (len(rows) + len(marks), to_column(session_id)))
        self._run(write)

    def delete(self, session_id: str) -> None:
        check_session_id(session_id)
        self._run(lambda cur: cur.execute(
            self._sql("DELETE FROM {s}.sessions WHERE session_id = %s"),
            (to_column(session_id),)))

    def session_ids(self) -> list[str]:
        # COLLATE "C": code point order, as Python's sorted() (the database's collation may
        # be a locale's)
        rows = self._run(lambda cur: cur.execute(self._sql(
            "SELECT t.session_id FROM {s}.sessions t WHERE EXISTS (SELECT 1 FROM {s}.records r "
            "WHERE r.session_id = t.session_id) ORDER BY t.session_id COLLATE \"C\"")).fetchall())
        return sorted(from_column(row[0]) for row in rows)

    def mark_started(self, session_id: str, tool_call_id: str) -> None:
        check_session_id(session_id)
        if not isinstance(tool_call_id, str):
            msg = f"tool_call_id must be a str, got {type(tool_call_id).__name__}."
            raise TypeError(msg)

        def write(cur: Any) -> None:
            self._reserve(cur, session_id, 0)  # the row lock first: marking twice is once
            if tool_call_id in self._unanswered(cur, session_id):
                return
            seq = self._reserve(cur, session_id, 1) - 1
            self._insert_mark(cur, session_id, seq, tool_call_id)
        self._run(write)

    def started(self, session_id: str) -> set[str]:
        check_session_id(session_id)
        return set(self._run(lambda cur: self._unanswered(cur, session_id)))

    # --- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Close the pool (idempotent). The store cannot be used afterwards."""
        self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, schema={self.schema!r})"

    # --- plumbing ------------------------------------------------------------------------

    def _sql(self, text: str) -> Any:
        """A statement with ``{s}`` bound to this store's schema (quoted)."""
        sql = self._psycopg.sql
        return sql.SQL(text).format(s=sql.Identifier(self.schema))

    def run(self, work: Callable[[Any], _T]) -> _T:
        """Run ``work(cursor)`` in one transaction on a pooled connection (for the modules
        of this package that keep more tables in the same schema)."""
        return self._run(work)

    def _run(self, work: Callable[[Any], _T]) -> _T:
        """``work(cursor)`` in one transaction. A connection the server dropped while idle in
        the pool fails before anything was sent in this transaction: that is retried once on
        a fresh connection. Any other failure propagates (a dead server as ConnectionError)."""
        self._ensure_schema()
        psycopg = self._psycopg
        for attempt in (0, 1):
            committing = False
            try:
                with self._pool.connection() as conn, conn.transaction():
                    with conn.cursor() as cur:
                        result = work(cur)
                    committing = True
                return result
            except psycopg.OperationalError as exc:
                if attempt == 0 and not committing and self._is_disconnect(exc):
                    continue
                raise self._unavailable(exc) from exc
            except Exception as exc:
                if type(exc).__name__ == "PoolTimeout":
                    raise self._unavailable(exc) from exc
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _is_disconnect(self, exc: Exception) -> bool:
        text = str(exc).lower()
        return any(w in text for w in ("terminat", "closed", "connection", "server"))

    def _unavailable(self, exc: Exception) -> ConnectionError:
        return ConnectionError(
            f"PostgreSQL at {self._where} is unavailable ({type(exc).__name__}: "
            f"{str(exc).strip() or 'no detail'}); is the server running and reachable?")

    def _ensure_schema(self) -> None:
        with self._schema_lock:
            if self._ready:
                return
            try:
                with self._pool.connection() as conn, conn.transaction():
                    self._create(conn)
            except self._psycopg.OperationalError as exc:
                raise self._unavailable(exc) from exc
            except Exception as exc:
                if type(exc).__name__ == "PoolTimeout":
                    raise self._unavailable(exc) from exc
                raise
            self._ready = True

    def _create(self, conn: Any) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"piagent:{self.schema}",))
        conn.execute(self._sql("CREATE SCHEMA IF NOT EXISTS {s}"))
        conn.execute(self._sql("CREATE TABLE IF NOT EXISTS {s}.meta "
                               "(key text PRIMARY KEY, value text NOT NULL)"))
        row = conn.execute(self._sql("SELECT value FROM {s}.meta WHERE key = 'sessions'")
                           ).fetchone()
        if row is not None and row[0] != str(SCHEMA_VERSION):
            msg = (f"schema {self.schema!r} holds piagent session tables of version {row[0]}; "
                   f"this piagent reads version {SCHEMA_VERSION}")
            raise RuntimeError(msg)
        conn.execute(self._sql(
            "CREATE TABLE IF NOT EXISTS {s}.sessions (session_id text PRIMARY KEY, "
            "next_seq bigint NOT NULL)"))
        conn.execute(self._sql(
            "CREATE TABLE IF NOT EXISTS {s}.records (session_id text NOT NULL "
            "REFERENCES {s}.sessions ON DELETE CASCADE, seq bigint NOT NULL, "
            "kind text NOT NULL, tool_call_id text, body text, PRIMARY KEY (session_id, seq))"))
        conn.execute(self._sql(
            "CREATE TABLE IF NOT EXISTS {s}.approvals (session_id text NOT NULL "
            "REFERENCES {s}.sessions ON DELETE CASCADE, position int NOT NULL, "
            "kind text NOT NULL, tool_call_id text NOT NULL, data text NOT NULL, "
            "decision text, PRIMARY KEY (session_id, position))"))
        conn.execute(self._sql(
            "INSERT INTO {s}.meta VALUES ('sessions', %s) ON CONFLICT DO NOTHING"),
            (str(SCHEMA_VERSION),))

    def _reserve(self, cur: Any, session_id: str, count: int) -> int:
        """Lock the session's row (creating it) and take ``count`` sequence numbers; return
        the next free one. The lock holds until the transaction ends."""
        cur.execute(self._sql(
            "INSERT INTO {s}.sessions AS t (session_id, next_seq) VALUES (%s, %s) "
            "ON CONFLICT (session_id) DO UPDATE SET next_seq = t.next_seq + EXCLUDED.next_seq "
            "RETURNING next_seq"), (to_column(session_id), count))
        end: int = cur.fetchone()[0]
        return end

    def _unanswered(self, cur: Any, session_id: str) -> list[str]:
        """Tool-call ids marked started in the last batch that no tool result stored after
        its assistant message answers, in mark order."""
        sid = to_column(session_id)
        cur.execute(self._sql(
            "WITH last(seq) AS (SELECT " + _LAST_ASK + ") SELECT r.tool_call_id FROM "
            "{s}.records r, last WHERE r.session_id = %s AND r.kind = 'started' AND "
            "r.seq > last.seq AND NOT EXISTS (SELECT 1 FROM {s}.records a WHERE a.session_id "
            "= r.session_id AND a.kind = 'message' AND a.tool_call_id = r.tool_call_id AND "
            "a.seq > last.seq) ORDER BY r.seq"), (sid, sid))
        return [from_column(row[0]) for row in cur.fetchall()]

    def _insert_mark(self, cur: Any, session_id: str, seq: int, call_id: str) -> None:
        cur.execute(self._sql("INSERT INTO {s}.records (session_id, seq, kind, tool_call_id)"
                              " VALUES (%s, %s, 'started', %s)"),
                    (to_column(session_id), seq, to_column(call_id)))

    def _insert(self, cur: Any, session_id: str, first: int,
                rows: list[tuple[str | None, str]]) -> None:
        if rows:
            cur.executemany(self._sql(
                "INSERT INTO {s}.records (session_id, seq, kind, tool_call_id, body) "
                "VALUES (%s, %s, 'message', %s, %s)"),
                [(to_column(session_id), first + i, None if call_id is None else to_column(call_id),
                  body) for i, (call_id, body) in enumerate(rows)])

    @staticmethod
    def _encode(messages: Sequence[AgentMessage]) -> list[tuple[str | None, str]]:
        """(answered tool-call id or None, JSON) per message; all encoded before any write."""
        return [(m.tool_call_id if isinstance(m, ToolResultMessage) else None, encode_message(m))
                for m in check_messages(messages)]

    # --- approvals (piagent.policy.ApprovalStore) ------------------------------------------

    def mark_waiting(self, session_id: str, pending: Sequence[PendingApproval],
                     held: Sequence[ToolResultMessage]) -> None:
        check_session_id(session_id)
        rows = [("pending", p.tool_call_id, pending_to_json(p)) for p in pending]
        rows += [("held", m.tool_call_id, encode_message(m)) for m in held]
        sid = to_column(session_id)

        def write(cur: Any) -> None:
            since = self._reserve(cur, session_id, 0)  # the row lock; results from here on
            cur.execute(self._sql("DELETE FROM {s}.approvals WHERE session_id = %s"), (sid,))
            cur.executemany(self._sql(
                "INSERT INTO {s}.approvals VALUES (%s, %s, %s, %s, %s, NULL)"),
                [(sid, i, kind, to_column(call_id), data)
                 for i, (kind, call_id, data) in enumerate(rows)]
                + [(sid, -1, "since", "", str(since))])
        self._run(write)

    def decide(self, session_id: str, tool_call_id: str, decision: ApprovalDecision,
               digest: str | None) -> bool:
        check_session_id(session_id)

        def write(cur: Any) -> bool:
            self._reserve(cur, session_id, 0)  # the row lock: one decision at a time
            rows = [r for r in self._batch(cur, session_id) if r[1] == "pending"]
            entries = [pending_from_json(data, made) for _, _, data, made in rows]
            index = check_decision(session_id, entries, tool_call_id, decision, digest)
            cur.execute(self._sql("UPDATE {s}.approvals SET decision = %s WHERE session_id = %s"
                                  " AND position = %s"),
                        (decision_to_json(decision), to_column(session_id), rows[index][0]))
            return all(e.decision is not None for i, e in enumerate(entries) if i != index)
        return self._run(write)

    def approvals(self, session_id: str) -> list[PendingApproval]:
        check_session_id(session_id)
        rows = self._run(lambda cur: self._batch(cur, session_id))
        return [pending_from_json(data, made) for _, kind, data, made in rows
                if kind == "pending"]

    def held_results(self, session_id: str) -> list[ToolResultMessage]:
        check_session_id(session_id)
        rows = self._run(lambda cur: self._batch(cur, session_id))
        return [decode_message(session_id, seq, data)  # type: ignore[misc]  # tool results
                for seq, kind, data, _ in rows if kind == "held"]

    def clear_approvals(self, session_id: str) -> None:
        check_session_id(session_id)
        self._run(lambda cur: cur.execute(
            self._sql("DELETE FROM {s}.approvals WHERE session_id = %s"),
            (to_column(session_id),)))

    def _batch(self, cur: Any, session_id: str) -> list[tuple[int, str, str, str | None]]:
        """The waiting batch's open rows, (position, kind, data, decision) in source order:
        those no tool result stored since the batch waited answers (``live_rows``; for a
        batch an older piagent stored, or one a ``replace`` renumbered, since the last
        assistant message)."""
        sid = to_column(session_id)
        cur.execute(self._sql("SELECT position, kind, tool_call_id, data, decision FROM "
                              "{s}.approvals WHERE session_id = %s ORDER BY position"), (sid,))
        rows = cur.fetchall()
        if not rows:
            return []
        since = next((int(r[3]) for r in rows if r[1] == "since"), None)
        rows = [r for r in rows if r[1] != "since"]
        if since is None:
            cur.execute(self._sql(
                "SELECT tool_call_id FROM {s}.records WHERE session_id = %s AND kind = "
                "'message' AND tool_call_id IS NOT NULL AND seq > " + _LAST_ASK +
                " ORDER BY seq"), (sid, sid))
        else:
            cur.execute(self._sql(
                "SELECT tool_call_id FROM {s}.records WHERE session_id = %s AND kind = "
                "'message' AND tool_call_id IS NOT NULL AND seq >= %s ORDER BY seq"),
                (sid, since))
        answered = [a[0] for a in cur.fetchall()]
        live = live_rows([r[2] for r in rows], answered)
        return [(int(rows[i][0]), rows[i][1], rows[i][3], rows[i][4]) for i in live]

    # --- budgets (piagent.policy.BudgetStore) -----------------------------------------------

    def charge_budget(self, key: str, *, cost: float = 0.0, tokens: int = 0,
                      requests: int = 0) -> BudgetSpend:
        """Add to what has been spent under ``key`` and return the new totals, atomically
        (every process sees the other's charges); a charge of nothing reads the totals."""
        amounts = check_charge(cost, tokens, requests)
        column = to_column(check_budget_key(key))
        create = not self._budgets_ready

        def work(cur: Any) -> tuple[Any, ...]:
            if create:
                self._create_budgets(cur)
            cur.execute(self._sql(PG_CHARGE), (column, *amounts, time.time()))
            row: tuple[Any, ...] = cur.fetchone()
            return row
        total = self._run(work)
        self._budgets_ready = True
        return BudgetSpend(float(total[0]), int(total[1]), int(total[2]))

    def _create_budgets(self, cur: Any) -> None:
        """The budgets table, under the schema's advisory lock, at its recorded version."""
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"piagent:{self.schema}",))
        cur.execute(self._sql(PG_CREATE))
        cur.execute(self._sql(PG_VERSION))
        row = cur.fetchone()
        if row is not None and row[0] != str(BUDGETS_SCHEMA_VERSION):
            msg = (f"schema {self.schema!r} holds piagent budget tables of version {row[0]}; "
                   f"this piagent reads version {BUDGETS_SCHEMA_VERSION}")
            raise RuntimeError(msg)
        cur.execute(self._sql(PG_SET_VERSION), (str(BUDGETS_SCHEMA_VERSION),))
