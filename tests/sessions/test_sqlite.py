"""``SQLiteStore``: the store contract, its file, corruption, and several processes at once."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path

import pytest

from piagent.messages import TextContent, UserMessage
from piagent.sessions import SessionCorruptError, SessionStore, SQLiteStore

from ..conftest import WAIT
from .conformance import SessionStoreConformance, a_user


class TestSQLiteStore(SessionStoreConformance):
    def make_store(self, tmp_path: Path) -> SessionStore:
        return SQLiteStore(tmp_path / "sessions.db")

    def reopen(self, store: SessionStore, tmp_path: Path) -> SessionStore:
        return SQLiteStore(tmp_path / "sessions.db")


def test_file_is_in_wal_mode_with_a_schema_version(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.append("a", [a_user("x")])
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT component, version FROM piagent_schema").fetchall() == [
        ("sessions", 1)]
    conn.close()
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.load("a")


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "s.db").append("a", [a_user("x")])
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("UPDATE piagent_schema SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(RuntimeError, match="schema version 99"):
        SQLiteStore(tmp_path / "s.db").load("a")


def test_wrong_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="MemoryStore"):
        SQLiteStore(":memory:")
    with pytest.raises(TypeError, match="file path"):
        SQLiteStore(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(tmp_path / "s.db", synchronous="OFF")  # type: ignore[arg-type]


def test_an_undecodable_record_names_session_and_sequence(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.append("chat", [a_user("one"), a_user("two"), a_user("three")])
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("UPDATE piagent_records SET data = '{\"role\": \"nobody\"}' WHERE seq = 1")
    conn.commit()
    with pytest.raises(SessionCorruptError, match=r"Session 'chat': record 1 .*nobody") as info:
        store.load("chat")
    assert (info.value.session_id, info.value.seq) == ("chat", 1)
    assert isinstance(info.value, ValueError)
    conn.execute("UPDATE piagent_records SET data = 'not json' WHERE seq = 2")
    conn.commit()
    conn.close()
    with pytest.raises(SessionCorruptError, match="record 1"):
        store.load("chat")


def test_last_activity(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    assert store.last_activity("none") is None
    store.append("a", [a_user("x")])
    assert store.last_activity("a") is not None


def test_connections_are_reused_not_per_thread(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    for n in range(20):  # twenty short-lived threads, like twenty runs
        t = threading.Thread(target=store.append, args=("a", [a_user(str(n))]))
        t.start()
        t.join(WAIT)
    assert len(store._idle) == 1  # one connection served them all, in turn
    assert len(store.load("a")) == 20


# --- two processes -------------------------------------------------------------------------

WRITES = 150


def _writer(path: str, name: str, start: multiprocessing.synchronize.Event) -> None:
    store = SQLiteStore(path)
    start.wait(WAIT)
    for i in range(WRITES):
        store.append("shared", [UserMessage([TextContent(f"{name}:{i}")], timestamp=i)])
        if i % 10 == 0:
            store.mark_started("shared", f"{name}-call-{i}")


def test_two_processes_append_to_one_session(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    path = str(tmp_path / "shared.db")
    SQLiteStore(path).append("shared", [a_user("first")])  # schema exists before the race
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(path, name, start)) for name in ("p", "q")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(WAIT * 12)
        assert p.exitcode == 0
    store = SQLiteStore(path)
    texts = [m.content[0].text for m in store.load("shared")[1:]]  # type: ignore[union-attr]
    assert len(texts) == 2 * WRITES
    for name in ("p", "q"):
        assert [t for t in texts if t.startswith(name + ":")] == [
            f"{name}:{i}" for i in range(WRITES)]
    assert len(store.started("shared")) == 2 * (WRITES // 10)
    conn = sqlite3.connect(path)
    seqs = [r[0] for r in conn.execute(
        "SELECT seq FROM piagent_records WHERE session_id = 'shared' ORDER BY seq")]
    conn.close()
    assert seqs == list(range(len(seqs)))  # no gap, no duplicate


# --- a new file opened by several processes at once ----------------------------------------

OPENERS = 8
FRESH_FILES = 6


def _opener(path: str, go: int, results: multiprocessing.queues.Queue[str], n: int) -> None:
    import os

    os.read(go, 1)  # the barrier: the parent releases every opener with one write
    try:
        store = SQLiteStore(path)
        store.append(f"s{n}", [a_user(f"m{n}")])
        results.put(f"ok {len(store.load(f's{n}'))}")
        store.close()
    except Exception as exc:  # reported to the parent, which fails the test with it
        results.put(f"{type(exc).__name__}: {exc}")


def test_processes_that_open_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Switching a new file to WAL and creating the schema from several processes at the
    same moment can make SQLite answer "database is locked" at once (no busy wait)."""
    import os

    ctx = multiprocessing.get_context("fork")
    outcomes: list[str] = []
    for trial in range(FRESH_FILES):
        path = str(tmp_path / f"new-{trial}.db")
        read_end, write_end = os.pipe()
        results = ctx.Queue()
        procs = [ctx.Process(target=_opener, args=(path, read_end, results, n))
                 for n in range(OPENERS)]
        for p in procs:
            p.start()
        os.write(write_end, b"x" * OPENERS)
        outcomes += [results.get(timeout=WAIT * 6) for _ in procs]
        for p in procs:
            p.join(WAIT)
            assert p.exitcode == 0
        os.close(read_end)
        os.close(write_end)
        store = SQLiteStore(path)
        assert store.session_ids() == sorted(f"s{n}" for n in range(OPENERS))
        store.close()
    assert [o for o in outcomes if o != "ok 1"] == []
