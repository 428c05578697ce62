"""``PostgresStore`` keeps the store contract, across processes, and fails clearly when the
server is gone (needs PostgreSQL: ``PIAGENT_TEST_POSTGRES``, see ``pg.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from piagent.messages import UserMessage
from piagent.sessions import PostgresStore, SessionCorruptError, SessionStore

from ..conftest import WAIT
from .conformance import SessionStoreConformance, a_user
from .pg import drop_schema, execute, postgres_dsn, unique_schema

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dsn() -> str:
    return postgres_dsn()


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    name = unique_schema()
    yield name
    drop_schema(dsn, name)


class TestPostgresStore(SessionStoreConformance):
    @pytest.fixture(autouse=True)
    def _server(self, dsn: str, schema: str) -> Iterator[None]:
        self.dsn, self.schema = dsn, schema
        self.opened: list[PostgresStore] = []
        yield
        for store in self.opened:
            store.close()

    def make_store(self, tmp_path: Path) -> SessionStore:
        store = PostgresStore(self.dsn, schema=self.schema)
        self.opened.append(store)
        return store

    def reopen(self, store: SessionStore, tmp_path: Path) -> SessionStore:
        return self.make_store(tmp_path)


def test_sequence_numbers_count_every_record(dsn: str, schema: str) -> None:
    with PostgresStore(dsn, schema=schema) as store:
        store.append("s", [a_user("a"), a_user("b")])
        store.mark_started("s", "c1")
        store.append("s", [a_user("c")])
        rows = execute(dsn, f'SELECT seq, kind FROM "{schema}".records ORDER BY seq')
        assert rows == [(0, "message"), (1, "message"), (2, "started"), (3, "message")]
        store.replace("s", [a_user("x")])
        assert execute(dsn, f'SELECT seq FROM "{schema}".records') == [(0,)]


def test_an_undecodable_record_names_session_and_sequence(dsn: str, schema: str) -> None:
    with PostgresStore(dsn, schema=schema) as store:
        store.append("s", [a_user("fine"), a_user("soon broken")])
        execute(dsn, f"UPDATE \"{schema}\".records SET body = '{{\"role\": \"alien\"}}' "
                     "WHERE seq = 1")
        with pytest.raises(SessionCorruptError, match="'s': record 1") as caught:
            store.load("s")
        assert (caught.value.session_id, caught.value.seq) == ("s", 1)


WRITER = textwrap.dedent("""
    import sys
    from piagent.messages import TextContent, UserMessage
    from piagent.sessions import PostgresStore
    dsn, schema, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with PostgresStore(dsn, schema=schema) as store:
        store.load("shared")  # connected and the schema is there
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(count):
            batch = [UserMessage([TextContent(f"{name}:{i}:{j}")]) for j in range(1 + i % 3)]
            store.append("shared", batch)
    print("done", flush=True)
""")


def test_processes_append_concurrently(dsn: str, schema: str) -> None:
    """Four processes append batches to one session: nothing lost, no batch split, each
    writer's batches in its order, sequence numbers dense."""
    with PostgresStore(dsn, schema=schema) as store:
        store.append("shared", [a_user("first")])
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        writers = [subprocess.Popen([sys.executable, "-c", WRITER, dsn, schema, f"w{n}", "30"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    env=env) for n in range(4)]
        try:
            for w in writers:
                assert w.stdout is not None and w.stdout.readline().strip() == "ready"
            for w in writers:  # as close to together as processes get
                assert w.stdin is not None
                w.stdin.write("go\n")
                w.stdin.flush()
            for w in writers:
                out, _ = w.communicate(timeout=WAIT * 12)
                assert out.strip() == "done" and w.returncode == 0
        finally:
            for w in writers:
                if w.poll() is None:
                    w.kill()
                    w.wait(WAIT)
        texts = [m.content[0].text for m in store.load("shared")  # type: ignore[union-attr]
                 if isinstance(m, UserMessage)]
        assert texts[0] == "first"
        expected = {f"w{n}": [f"w{n}:{i}:{j}" for i in range(30) for j in range(1 + i % 3)]
                    for n in range(4)}
        assert len(texts) == 1 + sum(len(v) for v in expected.values())
        for name, mine in expected.items():
            assert [t for t in texts if t.startswith(f"{name}:")] == mine
        # a batch is contiguous: j == 0 starts it, and its other messages follow at once
        for k, text in enumerate(texts[1:], start=1):
            _, i, j = text.split(":")
            if int(j) > 0:
                assert texts[k - 1] == text.rsplit(":", 1)[0] + f":{int(j) - 1}"
        seqs = execute(dsn, f'SELECT seq FROM "{schema}".records ORDER BY seq')
        assert [s for (s,) in seqs] == list(range(len(texts)))


def test_a_server_that_is_not_there_fails_clearly(schema: str) -> None:
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/test", schema=schema, timeout=1.0)
    try:
        with pytest.raises(ConnectionError, match=r"PostgreSQL at .*127\.0\.0\.1:1.* unavailable"):
            store.load("s")
    finally:
        store.close()


def test_a_dropped_connection_is_replaced(dsn: str, schema: str) -> None:
    """The server ending an idle pooled connection (a restart, pg_terminate_backend) costs
    the next call nothing."""
    with PostgresStore(dsn, schema=schema, max_connections=1) as store:
        store.append("s", [a_user("before")])
        pid = store.run(lambda cur: cur.execute("SELECT pg_backend_pid()").fetchone()[0])
        assert execute(dsn, "SELECT pg_terminate_backend(%s)", (pid,)) == [(True,)]
        store.append("s", [a_user("after")])
        assert [m.content[0].text for m in store.load("s")] == [  # type: ignore[union-attr]
            "before", "after"]


def test_wrong_arguments_are_refused(dsn: str) -> None:
    with pytest.raises(ValueError, match="schema must be lower-case"):
        PostgresStore(dsn, schema="Bad-Name")
    with pytest.raises(ValueError, match="dsn must be a non-empty"):
        PostgresStore("")
