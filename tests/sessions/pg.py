"""PostgreSQL for the tests: the server from ``PIAGENT_TEST_POSTGRES`` and a private schema.

``PIAGENT_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``) names the
server; a test that needs it skips with the reason when it is unreachable or psycopg is not
installed. Every store gets a schema of its own (``piagent_t_<pid>_<random>``), dropped after
the test, so parallel runs do not meet.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_dsn() -> str:
    """The test server's DSN, or skip saying why it cannot be used."""
    dsn = os.environ.get("PIAGENT_TEST_POSTGRES", DEFAULT_DSN)
    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'piagent[postgres]')")
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL at {dsn} (PIAGENT_TEST_POSTGRES) is unreachable: {exc}")
    return dsn


def unique_schema() -> str:
    return f"piagent_t_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def execute(dsn: str, statement: Any, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on a connection of its own; its rows (``[]`` for none)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []
