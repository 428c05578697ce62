"""``SQLAlchemyStore`` keeps the store contract (``tests/sessions/conformance.py``), the
approvals' (``tests/sessions/test_approval_store.py``) and the budgets'
(``tests/test_policy.py``) on SQLite, PostgreSQL and MariaDB, each test in a database of its
own (``conftest.py``); and what MariaDB's defaults would otherwise get wrong."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from piagent.contrib.sqlalchemy import SQLAlchemyStore, metadata
from piagent.messages import ImageContent, TextContent, UserMessage
from piagent.sessions import SessionCorruptError, SessionStore

from ..conftest import SLOW_WAIT, WAIT
from ..sessions.conformance import SessionStoreConformance, a_user, same

# the approvals' and budgets' contracts, run here on this module's ``store`` fixture
from ..sessions.test_approval_store import (  # noqa: F401
    test_a_decision_needs_an_approval_decision,
    test_a_repeated_call_id_waits_again,
    test_a_waiting_batch_its_decisions_and_held_results,
    test_every_durable_store_keeps_approvals,
    test_marking_again_replaces_and_clear_forgets,
    test_of_two_deciders_racing_exactly_one_completes_the_batch,
)
from ..test_policy import test_each_store_charges_in_its_own_method_and_no_charge_is_lost  # noqa: F401
from .conftest import Database, run_agent_twice


@pytest.fixture
def engine(database: Database) -> Iterator[sqlalchemy.Engine]:
    engine = sqlalchemy.create_engine(database.url)
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: sqlalchemy.Engine) -> SQLAlchemyStore:
    return SQLAlchemyStore(engine)


class TestSQLAlchemyStore(SessionStoreConformance):
    @pytest.fixture(autouse=True)
    def _database(self, database: Database) -> Iterator[None]:
        self.engines: list[sqlalchemy.Engine] = []
        self.url = database.url
        yield
        for engine in self.engines:
            engine.dispose()

    def make_store(self, tmp_path: Path) -> SessionStore:
        engine = sqlalchemy.create_engine(self.url)
        self.engines.append(engine)
        return SQLAlchemyStore(engine)

    def reopen(self, store: SessionStore, tmp_path: Path) -> SessionStore:
        return self.make_store(tmp_path)


def test_ids_differing_in_case_or_trailing_spaces_are_other_sessions(
        store: SQLAlchemyStore) -> None:
    # MariaDB's default collations fold case and ignore trailing spaces; keys are bytes
    names = ["chat", "Chat", "chat ", "chät"]
    for name in names:
        store.append(name, [a_user(name)])
    for name in names:
        assert same(store.load(name), [a_user(name)])
    assert store.session_ids() == sorted(names)
    store.charge_budget("k", requests=1)
    assert store.charge_budget("K", requests=1).requests == 1


def test_a_large_message_and_any_character_round_trip(store: SQLAlchemyStore) -> None:
    # MariaDB's TEXT stops at 64 KiB and its utf8 at three bytes a character
    big = UserMessage([TextContent("🦜 é \x00 " * 30_000),
                       ImageContent("A" * 300_000, "image/png")], timestamp=1)
    store.append("big", [big])
    assert same(store.load("big"), [big])


def test_an_undecodable_record_names_session_and_sequence(store: SQLAlchemyStore,
                                                          engine: sqlalchemy.Engine) -> None:
    store.append("s", [a_user("fine"), a_user("soon broken")])
    records = metadata.tables["piagent_store_records"]
    with engine.begin() as conn:
        conn.execute(records.update().where(records.c.seq == 1).values(data='{"role":"x"}'))
    with pytest.raises(SessionCorruptError, match="'s': record 1") as caught:
        store.load("s")
    assert (caught.value.session_id, caught.value.seq) == ("s", 1)


def test_stores_on_two_engines_append_to_one_session(database: Database) -> None:
    """Two engines (two processes' pools) writing one session at once: nothing lost, each
    writer's messages in its order, sequence numbers dense."""
    engines = [sqlalchemy.create_engine(database.url) for _ in range(2)]
    try:
        stores = [SQLAlchemyStore(e) for e in engines]
        start = threading.Barrier(4, timeout=WAIT)
        failures: list[BaseException] = []

        def write(n: int) -> None:
            try:
                start.wait()
                for i in range(20):
                    stores[n % 2].append("shared", [a_user(f"{n}:{i}"), a_user(f"{n}:{i}b")])
                    if i % 5 == 0:
                        stores[n % 2].mark_started("shared", f"call-{n}-{i}")
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT * 6)
        assert failures == []
        texts = [m.content[0].text for m in stores[0].load("shared")]  # type: ignore[union-attr]
        for n in range(4):
            mine = [t for t in texts if t.startswith(f"{n}:")]
            assert mine == [f"{n}:{i}{b}" for i in range(20) for b in ("", "b")]
        for k, text in enumerate(texts):  # a batch is never split
            if text.endswith("b"):
                assert texts[k - 1] == text[:-1]
        records = metadata.tables["piagent_store_records"]
        with engines[0].connect() as conn:
            seqs = conn.execute(sqlalchemy.select(records.c.seq).order_by(records.c.seq)
                                ).scalars().all()
        assert list(seqs) == list(range(160 + 16))
        assert len(stores[1].started("shared")) == 16
    finally:
        for engine in engines:
            engine.dispose()


def _create_tables_at_once(url: str, start: Any, outcomes: Any) -> None:
    """One process of the test below: make a store (which creates the tables) once released."""
    engine = sqlalchemy.create_engine(url)
    try:
        start.wait()
        SQLAlchemyStore(engine).append("s", [a_user("x")])
        outcomes.put("ok")
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        outcomes.put(f"{type(exc).__name__}: {exc}")
    finally:
        engine.dispose()


def test_processes_booting_at_once_all_create_the_tables(database: Database) -> None:
    """Six processes (gunicorn's workers booting) make a store on one empty database at the
    same moment: each one starts, none fails on a table another one had just made (MariaDB's
    ``CREATE TABLE`` is not transactional; the lock of ``create_tables`` queues them)."""
    context = multiprocessing.get_context("spawn")
    start, outcomes = context.Barrier(6, timeout=SLOW_WAIT), context.Queue()
    processes = [context.Process(target=_create_tables_at_once,
                                 args=(database.url, start, outcomes)) for _ in range(6)]
    for process in processes:
        process.start()
    try:
        assert sorted(outcomes.get(timeout=SLOW_WAIT) for _ in processes) == ["ok"] * 6
    finally:
        for process in processes:
            process.join(WAIT)
            if process.is_alive():
                process.kill()
    engine = sqlalchemy.create_engine(database.url)
    try:
        assert len(SQLAlchemyStore(engine).load("s")) == 6
    finally:
        engine.dispose()


def test_tables_can_be_left_to_migrations(database: Database) -> None:
    engine = sqlalchemy.create_engine(database.url)
    try:
        store = SQLAlchemyStore(engine, create_tables=False)
        with pytest.raises(sqlalchemy.exc.DatabaseError):  # no table yet
            store.load("s")
        metadata.create_all(engine)  # what an Alembic migration of `metadata` makes
        store.append("s", [a_user("x")])
        assert same(store.load("s"), [a_user("x")])
    finally:
        engine.dispose()


def test_wrong_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"needs a sqlalchemy.engine.Engine .* got str"):
        SQLAlchemyStore("sqlite:///x.db")  # type: ignore[arg-type]
    for url in ("sqlite://", "sqlite:///:memory:"):
        with pytest.raises(ValueError, match="needs a SQLite file .* MemoryStore"):
            SQLAlchemyStore(sqlalchemy.create_engine(url))
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 's.db'}")
    with pytest.raises(TypeError, match="tool_call_id must be a str"):
        SQLAlchemyStore(engine).mark_started("s", 3)  # type: ignore[arg-type]
    engine.dispose()


@pytest.mark.parametrize(("module", "extra"), [("sqlalchemy", "sqlalchemy"),
                                              ("django", "django")])
def test_a_missing_extra_is_named(module: str, extra: str) -> None:
    import subprocess
    import sys

    code = (f"import sys; sys.modules[{module!r}] = None\n"
            f"import piagent.contrib.{module}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=WAIT * 6)
    assert out.returncode == 1
    assert f"pip install 'piagent[{extra}]'" in out.stderr


def test_not_imported_by_piagent() -> None:
    import subprocess
    import sys

    code = ("import sys, piagent, piagent.sessions; "
            "print(any(m.startswith(('sqlalchemy', 'piagent.contrib')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=WAIT * 6, check=True)
    assert out.stdout.strip() == "False"



def test_an_agent_keeps_its_conversation(engine: sqlalchemy.Engine) -> None:
    run_agent_twice(lambda: SQLAlchemyStore(engine))


def test_a_newer_schema_is_refused(store: SQLAlchemyStore, engine: sqlalchemy.Engine) -> None:
    schema = metadata.tables["piagent_store_schema"]
    with engine.begin() as conn:
        assert conn.execute(sqlalchemy.select(schema.c.component, schema.c.version)).all() == [
            ("sessions", 1)]
        conn.execute(schema.update().values(version=99))
    with pytest.raises(RuntimeError, match="tables of version 99; this piagent reads version 1"):
        SQLAlchemyStore(engine)
