"""``SQLiteStore``'s public hook for tables beside the transcripts: ``ensure_schema``,
``connection``, ``write`` and ``open`` (what ``piagent.runs`` builds its SQLite backend on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from piagent.messages import UserMessage
from piagent.sessions import SQLiteStore

NOTES = "CREATE TABLE IF NOT EXISTS notes (k TEXT PRIMARY KEY, v TEXT);" \
        "CREATE INDEX IF NOT EXISTS notes_v ON notes (v)"


def test_ensure_schema_records_the_component_once_and_refuses_a_newer_file(
        tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as store:
        store.ensure_schema("notes", 1, NOTES)
        store.ensure_schema("notes", 1, NOTES)  # idempotent
        with store.connection() as conn:
            rows = conn.execute("SELECT component, version FROM piagent_schema "
                                "ORDER BY component").fetchall()
            assert rows == [("notes", 1), ("sessions", 1)]
            conn.execute("UPDATE piagent_schema SET version = 2 WHERE component = 'notes'")
        with pytest.raises(RuntimeError, match=r"holds notes schema version 2; this piagent "
                                               r"reads version 1\. Upgrade piagent\."):
            store.ensure_schema("notes", 1, NOTES)


def test_write_commits_and_rolls_back_and_connections_are_the_stores(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db", busy_timeout_s=7.0) as store:
        store.ensure_schema("notes", 1, NOTES)
        with store.write() as conn:
            assert conn.in_transaction
            conn.execute("INSERT INTO notes VALUES ('a', '1')")
        with pytest.raises(ZeroDivisionError), store.write() as conn:
            conn.execute("INSERT INTO notes VALUES ('b', '2')")
            _ = 1 / 0
        own = store.open()
        try:
            assert own.execute("SELECT k FROM notes").fetchall() == [("a",)]
            assert own.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            assert own.execute("PRAGMA busy_timeout").fetchone() == (7000,)
        finally:
            own.close()
        store.append("s", [UserMessage("hi")])  # the sessions' tables share the file
        assert [m.role for m in store.load("s")] == ["user"]


def test_a_closed_store_refuses_the_hook(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    store.close()
    for call in (store.open, lambda: store.ensure_schema("notes", 1, NOTES)):
        with pytest.raises(RuntimeError, match="is closed"):
            call()
    with pytest.raises(RuntimeError, match="is closed"), store.write():
        pass
