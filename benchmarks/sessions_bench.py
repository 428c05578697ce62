"""What keeping the transcript in a session store costs a run.

Run: ``python benchmarks/sessions_bench.py [--reps N] [--quick]``. An ``Agent`` on
``piagent.testing.ScriptedStreamFn`` (zero model latency) runs R rounds × T instant tools,
without a store and with ``SQLiteStore`` (WAL, ``synchronous=NORMAL``, a file in a temporary
directory) and ``MemoryStore``, alternating repetition by repetition in one process; each
repetition uses a new session, so every run stores the same number of messages. Figures
are medians. *added ms/message* = (store run − no-store run of the same repetition) /
messages stored (each tool call also writes one start mark, counted in the cost, not in the
messages).

``--stores pg,sa-sqlite,sa-pg,sa-maria,dj-sqlite,dj-pg,dj-maria`` adds ``SQLAlchemyStore`` and
``DjangoStore`` (``piagent.contrib``; ``pg`` is ``PostgresStore``, for comparison) on SQLite (a file), PostgreSQL (a schema of
``PIAGENT_TEST_POSTGRES``) and MariaDB (a database on ``PIAGENT_TEST_MARIADB``, the user of
``.ci/mariadb-setup.sh``), beside ``SQLiteStore`` in the first scenario; the schema and the
database are dropped at the end.

Budget: SQLite adds ≤ 0.3 ms per message, and nothing per streamed delta: the second
scenario streams long answers (hundreds of deltas per message); its added cost per message
must be the same as with short answers, and the store receives one append per message.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from piagent import Agent, AgentTool, AgentToolResult, TextContent
from piagent.sessions import MemoryStore, SessionStore, SQLiteStore
from piagent.testing import ScriptedStreamFn, assistant_text, assistant_tool_calls

BUDGET_MS = 0.3


def _instant(call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
    return AgentToolResult(content=[TextContent("ok")])


TOOL = AgentTool(name="noop", description="Returns at once.",
                 parameters={"type": "object", "properties": {}}, execute=_instant)


def _script(rounds: int, tools: int, words: int) -> list[Any]:
    text = " ".join(["word"] * words)
    turns: list[Any] = [assistant_tool_calls(*[("noop", {})] * tools, text=text)
                        for _ in range(rounds)]
    return [*turns, assistant_text(text)]


def _run(rounds: int, tools: int, words: int, store: SessionStore | None,
         session_id: str) -> tuple[float, float, int, int]:
    """One run: (wall s, CPU s, messages the run added, message_update events)."""
    fn = ScriptedStreamFn(_script(rounds, tools, words))
    kwargs: dict[str, Any] = {}
    if store is not None:
        kwargs = {"store": store, "session_id": session_id}
    agent = Agent(model=fn.model, stream_fn=fn, system_prompt="Be brief.", tools=[TOOL],
                  **kwargs)
    deltas = [0]

    def listener(event: Any, signal: Any) -> None:
        if event.type == "message_update":
            deltas[0] += 1

    agent.subscribe(listener)
    before = len(agent.state.messages)
    wall, cpu = time.perf_counter(), time.process_time()
    agent.prompt("go")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if agent.state.error_message:
        raise RuntimeError(agent.state.error_message)
    if store is not None and len(store.load(session_id)) != len(agent.state.messages):
        raise RuntimeError("the store does not hold the whole transcript")
    return wall, cpu, len(agent.state.messages) - before, deltas[0]


class _CountingStore(SQLiteStore):
    """Counts appends, to show the store is written once per message, never per delta."""

    appends = 0

    def append(self, session_id: str, messages: Any) -> None:
        type(self).appends += 1
        super().append(session_id, messages)


def _scenario(label: str, rounds: int, tools: int, words: int, reps: int,
              stores: dict[str, Callable[[], SessionStore]]) -> dict[str, float]:
    made = {name: make() for name, make in stores.items()}
    _run(rounds, tools, words, None, "warm")
    for name, store in made.items():
        _run(rounds, tools, words, store, f"warm-{name}")
    walls: dict[str, list[float]] = {"none": [], **{name: [] for name in made}}
    cpus: dict[str, list[float]] = {"none": [], **{name: [] for name in made}}
    messages = deltas = 0
    for rep in range(reps):
        wall, cpu, messages, deltas = _run(rounds, tools, words, None, "")
        walls["none"].append(wall)
        cpus["none"].append(cpu)
        for name, store in made.items():
            wall, cpu, _, _ = _run(rounds, tools, words, store, f"rep-{rep}")
            walls[name].append(wall)
            cpus[name].append(cpu)
    print(f"\n{label}: {rounds} rounds x {tools} tools, {messages} messages stored per run, "
          f"{deltas} streamed deltas ({deltas / messages:.0f} per message), {reps} reps")
    print(f"  {'store':<10} {'wall ms':>9} {'CPU ms':>9} {'added ms/msg':>13} "
          f"{'added CPU ms/msg':>17}")
    added: dict[str, float] = {}
    for name in walls:
        wall_ms = statistics.median(walls[name]) * 1e3
        cpu_ms = statistics.median(cpus[name]) * 1e3
        if name == "none":
            print(f"  {name:<10} {wall_ms:9.2f} {cpu_ms:9.2f}")
            continue
        per = statistics.median((s - n) / messages * 1e3
                                for s, n in zip(walls[name], walls["none"], strict=True))
        per_cpu = statistics.median((s - n) / messages * 1e3
                                    for s, n in zip(cpus[name], cpus["none"], strict=True))
        added[name] = per
        print(f"  {name:<10} {wall_ms:9.2f} {cpu_ms:9.2f} {per:13.3f} {per_cpu:17.3f}")
    for store in made.values():
        if hasattr(store, "close"):
            store.close()
    return added


CONTRIB = ("pg", "sa-sqlite", "sa-pg", "sa-maria", "dj-sqlite", "dj-pg", "dj-maria")
_PG = os.environ.get("PIAGENT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
_MARIA = os.environ.get("PIAGENT_TEST_MARIADB", "piagent:piagent@127.0.0.1:3306")


def _wal(dbapi_connection: Any, record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


@contextmanager
def _contrib_stores(names: list[str], tmp: str) -> Iterator[dict[str, Callable[[], Any]]]:
    """The named contrib stores, each on a database of its own, dropped afterwards."""
    if not names:
        yield {}
        return
    import psycopg
    import pymysql

    name = f"piagent_bench_{os.getpid()}"
    (user, _, password), (host, _, port) = (part.partition(":")
                                            for part in _MARIA.rsplit("@", 1))
    pg = urlsplit(_PG)
    with psycopg.connect(_PG, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {name}")
    with pymysql.connect(host=host, port=int(port), user=user, password=password) as conn:
        conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {name} CHARACTER SET utf8mb4")
    made: dict[str, Callable[[], Any]] = {}
    engines: list[Any] = []
    try:
        if "pg" in names:  # PostgresStore, for comparison
            from piagent.sessions import PostgresStore

            made["pg"] = functools.partial(PostgresStore, _PG, schema=f"{name}_pg")
        if any(n.startswith("sa-") for n in names):
            import sqlalchemy

            from piagent.contrib.sqlalchemy import SQLAlchemyStore

            urls = {"sa-sqlite": f"sqlite:///{tmp}/sa.db",
                    "sa-pg": f"postgresql+psycopg://{pg.netloc}{pg.path}"
                             f"?options=-csearch_path%3D{name}",
                    "sa-maria": f"mysql+pymysql://{user}:{password}@{host}:{port}/{name}"
                                "?charset=utf8mb4"}
            for n in names:
                if n in urls:
                    engines.append(sqlalchemy.create_engine(urls[n]))
                    if n == "sa-sqlite":  # as SQLiteStore: WAL, synchronous=NORMAL
                        sqlalchemy.event.listen(engines[-1], "connect", _wal)
                    made[n] = functools.partial(SQLAlchemyStore, engines[-1])
        if any(n.startswith("dj-") for n in names):
            import django
            from django.conf import settings
            from django.core.management import call_command

            pymysql.install_as_MySQLdb()
            settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth",
                                               "piagent.contrib.django"], DATABASES={
                "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": f"{tmp}/dj.db",
                            "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;"
                                                        "PRAGMA synchronous=NORMAL"}},
                "dj-pg": {"ENGINE": "django.db.backends.postgresql",
                          "NAME": pg.path.lstrip("/"), "USER": pg.username or "",
                          "HOST": pg.hostname or "", "PORT": str(pg.port or ""),
                          "PASSWORD": pg.password or "",
                          "OPTIONS": {"options": f"-c search_path={name}"}},
                "dj-maria": {"ENGINE": "django.db.backends.mysql", "NAME": name, "USER": user,
                             "PASSWORD": password, "HOST": host, "PORT": port,
                             "OPTIONS": {"charset": "utf8mb4"}}})
            django.setup()
            from piagent.contrib.django import DjangoStore

            for n in names:
                if n.startswith("dj-"):
                    alias = "default" if n == "dj-sqlite" else n
                    call_command("migrate", "piagent", database=alias, verbosity=0)
                    made[n] = functools.partial(DjangoStore, alias)
        yield made
    finally:
        for engine in engines:
            engine.dispose()
        if any(n.startswith("dj-") for n in names):
            from django.db import connections

            connections.close_all()
        with psycopg.connect(_PG, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
            conn.execute(f"DROP SCHEMA IF EXISTS {name}_pg CASCADE")
        with pymysql.connect(host=host, port=int(port), user=user, password=password) as conn:
            conn.cursor().execute(f"DROP DATABASE IF EXISTS {name}")


def main() -> None:
    """Print the numbers and the verdict against the budget."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="3 repetitions, small runs")
    parser.add_argument("--stores", default="", help=f"also: a comma list of {CONTRIB}")
    args = parser.parse_args()
    extra = [n for n in args.stores.split(",") if n]
    if any(n not in CONTRIB for n in extra):
        parser.error(f"--stores takes names among {', '.join(CONTRIB)}; got {args.stores!r}")
    reps = 3 if args.quick else args.reps
    rounds = 5 if args.quick else 20
    with tempfile.TemporaryDirectory() as tmp, _contrib_stores(extra, tmp) as contrib:
        stores: dict[str, Callable[[], SessionStore]] = {
            "sqlite": lambda: SQLiteStore(Path(tmp) / "bench.db"),
            "memory": MemoryStore,
            **contrib,
        }
        short = _scenario("short answers", rounds, 4, 5, reps, stores)
        counting = {"sqlite": lambda: _CountingStore(Path(tmp) / "count.db")}
        long = _scenario("long streamed answers", rounds, 1, 400, reps, counting)
        runs = 1 + reps  # the warm-up run, then the repetitions
        messages_per_run = 1 + rounds * 2 + 1
        print(f"\n  appends to the store: {_CountingStore.appends} for {runs} runs of "
              f"{messages_per_run} messages ({_CountingStore.appends / runs:.1f} per run)")
    verdict = "within" if short["sqlite"] <= BUDGET_MS else "OVER"
    print(f"\nSQLite: {short['sqlite']:.3f} ms/message with short answers, "
          f"{long['sqlite']:.3f} ms/message with long streamed ones; budget "
          f"{BUDGET_MS} ms: {verdict}")


if __name__ == "__main__":
    main()
