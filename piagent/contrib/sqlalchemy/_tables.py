"""The tables of ``SQLAlchemyStore``, in one ``MetaData`` (``metadata``) an application adds
to its own migrations (Alembic's ``target_metadata``) or creates with ``create_all``.

Every key (session id, tool-call id, budget key) is kept as its UTF-8 bytes (``Key``): a
binary column compares and sorts byte for byte on every database, so ``"a"`` and ``"A"``,
``"x"`` and ``"x "`` stay apart under MariaDB's default collations, and NUL needs no escape
(PostgreSQL's ``text`` refuses it). Byte order of UTF-8 is code-point order, as Python's
``sorted``. A message is kept as its pi-JSON text (``LONGTEXT`` on MariaDB/MySQL, whose
``TEXT`` stops at 64 KiB).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = ["APPROVALS", "BUDGETS", "RECORDS", "RUNS", "RUN_CONTROL", "RUN_EVENTS",
           "RUN_TRACES", "SCHEMA", "SCHEMA_VERSION", "SESSIONS", "Key", "metadata"]

MYSQL = ("mysql", "mariadb")
_KEY_BYTES = 800  # 200 characters (the longest session id or budget key) of 4 bytes each


class Key(TypeDecorator[str]):
    """A ``str`` kept as its UTF-8 bytes: ``VARBINARY(n)`` on MariaDB/MySQL (``BLOB`` without
    a length), ``bytea`` on PostgreSQL, ``BLOB`` on SQLite."""

    impl = LargeBinary
    cache_ok = True

    def __init__(self, length: int | None = None) -> None:
        super().__init__()
        self.length = length

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name in MYSQL:
            kind = mysql.VARBINARY(self.length) if self.length else mysql.LONGBLOB()
            return dialect.type_descriptor(kind)
        return dialect.type_descriptor(LargeBinary())

    def process_bind_param(self, value: str | None, dialect: Dialect) -> bytes | None:
        return None if value is None else value.encode("utf-8", "surrogatepass")

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else bytes(value).decode("utf-8", "surrogatepass")


_JSON = Text().with_variant(mysql.LONGTEXT(), *MYSQL)
_TABLE_OPTIONS: dict[str, Any] = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}

SCHEMA_VERSION = 1

metadata = MetaData()
"""The store's tables (schema version 1): ``piagent_store_sessions``, ``_records``,
``_approvals``, ``_budgets`` and ``_schema``; the runs' (``piagent_runs``, ``_run_events``,
``_run_control``, ``_run_traces``: ``_runs.py``)."""

SCHEMA = Table(
    "piagent_store_schema", metadata,
    # the version of the tables ('sessions': SCHEMA_VERSION), written by create_tables
    Column("component", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
    **_TABLE_OPTIONS,
)

SESSIONS = Table(
    "piagent_store_sessions", metadata,
    # one row per session: every write first updates it, which takes its row lock until the
    # transaction ends (writers of one session queue, of others not); next_seq numbers records
    Column("session_id", Key(_KEY_BYTES), primary_key=True),
    Column("next_seq", BigInteger, nullable=False),
    **_TABLE_OPTIONS,
)
RECORDS = Table(
    "piagent_store_records", metadata,
    Column("session_id", Key(_KEY_BYTES), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),  # per session, from 0
    # 'message', 'assistant' (an assistant message: it asks for a new batch of calls) or
    # 'started' (a start mark: tool_call_id is the mark, data NULL)
    Column("kind", String(16), nullable=False),
    Column("tool_call_id", Key()),  # a tool result's toolCallId, a mark; else NULL
    Column("data", _JSON),  # a message's pi-JSON
    Column("created_at", Double, nullable=False),  # epoch seconds
    **_TABLE_OPTIONS,
)
APPROVALS = Table(
    "piagent_store_approvals", metadata,
    # the session's batch waiting for approval: 'pending' (data: the call's JSON, decision
    # once made), 'held' (data: a result's pi-JSON), 'since' (position -1, data: the seq
    # from which stored tool results answer the batch's calls)
    Column("session_id", Key(_KEY_BYTES), primary_key=True),
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("kind", String(16), nullable=False),
    Column("tool_call_id", Key(), nullable=False),
    Column("data", _JSON, nullable=False),
    Column("decision", Text),
    **_TABLE_OPTIONS,
)
BUDGETS = Table(
    "piagent_store_budgets", metadata,
    Column("budget_key", Key(_KEY_BYTES), primary_key=True),
    Column("cost", Double, nullable=False),  # USD
    Column("tokens", BigInteger, nullable=False),
    Column("requests", BigInteger, nullable=False),
    Column("updated_at", Double, nullable=False),  # epoch seconds of the last charge
    **_TABLE_OPTIONS,
)

# --- the runs (runs backend: _runs.py) -------------------------------------------------------

RUNS = Table(
    "piagent_runs", metadata,
    Column("run_id", Key(_KEY_BYTES), primary_key=True),
    Column("session_id", Key(_KEY_BYTES), nullable=False),
    Column("state", String(16), nullable=False),  # queued running done error aborted lost waiting
    Column("error_message", _JSON),
    Column("owner", Key(), nullable=False),  # host:pid:runner of the process executing it
    # epoch seconds by the database's clock (SQLite: the machine's); a live run past it is lost
    Column("lease_expires_at", Double, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("started_at", Double),
    Column("ended_at", Double),
    # no partial unique index (MariaDB has none): create_run holds the session's row lock
    # in piagent_store_sessions while it looks for a live run
    Index("piagent_runs_session", "session_id", "state"),
    Index("piagent_runs_state", "state", "lease_expires_at"),  # claim_lapsed
    Index("piagent_runs_ended", "ended_at"),  # purge
    **_TABLE_OPTIONS,
)
RUN_EVENTS = Table(
    "piagent_run_events", metadata,
    Column("run_id", Key(_KEY_BYTES), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),  # from 0
    Column("data", _JSON, nullable=False),  # the event's pi-JSON
    **_TABLE_OPTIONS,
)
RUN_CONTROL = Table(
    "piagent_run_control", metadata,
    # orders a session's entries (SQLite: its rowid, which INTEGER PRIMARY KEY must name)
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True,
           autoincrement=True),
    Column("session_id", Key(_KEY_BYTES), nullable=False),
    Column("run_id", Key(_KEY_BYTES)),  # the run an abort is for, NULL for steer, follow_up
    Column("kind", String(16), nullable=False),  # steer follow_up abort
    Column("payload", _JSON),  # a message's pi-JSON, or the abort reason
    Column("claimed_by", Key(_KEY_BYTES)),  # the run that took it, NULL while it waits
    Column("created_at", Double, nullable=False),
    Index("piagent_run_control_session", "session_id", "id"),
    # what dies with a run (finish, a lost run, purge): found by index, so InnoDB locks
    # those rows only, not every row it would scan
    Index("piagent_run_control_run", "run_id"),
    Index("piagent_run_control_claimed", "claimed_by"),
    **_TABLE_OPTIONS,
)
RUN_TRACES = Table(
    "piagent_run_traces", metadata,
    # a queued run's starting request's trace context (piagent/runs/_traces.py), JSON
    Column("run_id", Key(_KEY_BYTES), primary_key=True),
    Column("carrier", Text, nullable=False),
    **_TABLE_OPTIONS,
)
