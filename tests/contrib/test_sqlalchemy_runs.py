"""The runs of a ``SQLAlchemyStore`` (``SQLAlchemyRunBackend``) on SQLite, PostgreSQL and
MariaDB, each test in a database of its own (``conftest.py``).

The runners' own tests run on these stores too (``tests/runs``: the store kinds
``sqlalchemy-*``: LocalRunner, QueuedRunner, approvals, the end race). Here: the backend's
promises its runners lean on (one live run per session under races, a lapsed lease,
``take_run`` and ``claim_lapsed`` between executors, ``finish`` with the last events,
``purge`` in batches, readers woken in this process and by polling), and real processes:
a run started in a child is read, steered and aborted from others; a child killed with
SIGKILL loses its run and the next start here recovers the transcript; steers sent from
another process reach the run at their poll point (``tests/runs/test_steer_at_poll_point.py``'s
run of three batches).
"""

from __future__ import annotations

import os
import signal as signals
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import func, insert, select

from piagent import Agent, AgentBusyError, AssistantMessage, ToolResultMessage
from piagent.contrib.sqlalchemy import SQLAlchemyRunBackend, SQLAlchemyStore, metadata
from piagent.runs import LocalRunner
from piagent.runs.backend import RECOVERING, SessionBusy, backend_for
from piagent.testing import ScriptedStreamFn, assistant_text

from ..conftest import SLOW_WAIT, WAIT, finish_child, read_child_line
from ..runs._worker import build_tools
from ..runs.test_steer_at_poll_point import SenderProcess, ThreeBatches, expected_transcript
from .conftest import DATABASES, Database, open_database

WORKER = Path(__file__).with_name("_sqlalchemy_runs_worker.py")
REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
RUNS, EVENTS, CONTROL = (metadata.tables[name] for name in (
    "piagent_runs", "piagent_run_events", "piagent_run_control"))


@pytest.fixture
def stores(database: Database) -> Iterator[list[SQLAlchemyStore]]:
    """Three stores on one database, each on an engine of its own: nothing one writes wakes
    another's readers in this process, so they meet as separate processes do."""
    engines = [sqlalchemy.create_engine(database.url) for _ in range(3)]
    yield [SQLAlchemyStore(engine) for engine in engines]
    for engine in engines:
        engine.dispose()


def backends(stores: list[SQLAlchemyStore]) -> list[SQLAlchemyRunBackend]:
    found = [backend_for(store) for store in stores]
    assert all(isinstance(b, SQLAlchemyRunBackend) for b in found)
    return found  # type: ignore[return-value]


def race(racers: list[SQLAlchemyRunBackend], session: str) -> tuple[list[str], list[str]]:
    """Each backend creates a run of ``session`` at once, on a thread of its own: the runs
    created, and the live run each refused one was shown."""
    barrier = threading.Barrier(len(racers))
    won: list[str] = []
    refused: list[str] = []

    def start(backend: SQLAlchemyRunBackend, run_id: str) -> None:
        barrier.wait(WAIT)
        try:
            backend.create_run(run_id, session, run_id, 60.0)
            won.append(run_id)
        except SessionBusy as exc:
            refused.append(exc.run_id)

    threads = [threading.Thread(target=start, args=(b, f"{session}-{i}"))
               for i, b in enumerate(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SLOW_WAIT)
    return won, refused


def test_the_runs_tables_are_in_the_metadata_and_made_with_the_store(
        stores: list[SQLAlchemyStore]) -> None:
    names = set(sqlalchemy.inspect(stores[0].engine).get_table_names())
    assert {"piagent_runs", "piagent_run_events", "piagent_run_control"} <= names


def test_one_live_run_per_session_a_lapsed_one_is_lost(stores: list[SQLAlchemyStore]) -> None:
    a, b, _ = backends(stores)
    a.create_run("r1", "s", "o1", 60.0)
    with pytest.raises(SessionBusy) as busy:
        b.create_run("r2", "s", "o2", 60.0)
    assert busy.value.run_id == "r1" and isinstance(busy.value, AgentBusyError)
    assert b.info("r2") is None

    a.create_run("r3", "t", "o3", -1.0)  # a lease that ran out a second ago
    a.set_running("r3", "o3")
    b.send_control("t", "r3", "abort", "late")
    b.send_control("t", None, "steer", '{"role":"user"}')
    assert [c.kind for c in a.claim_controls("t", "r3")] == ["abort", "steer"]
    b.send_control("t", "r3", "abort", "later")
    info = b.info("r3")
    assert info is not None and info.state == "lost" and info.ended_at is None  # reads lost
    b.create_run("r4", "t", "o4", 60.0)
    lost, new = b.info("r3"), b.info("r4")
    assert lost is not None and lost.state == "lost" and lost.ended_at is not None
    assert new is not None and new.state == "queued"
    assert b.claim_controls("t", "r4") == []  # what r3 took or was sent died with it
    assert not a.renew("r3", "o3", 60.0)
    assert not a.renew("r4", "o3", 60.0) and b.renew("r4", "o4", 60.0)


def test_of_starters_racing_on_many_engines_exactly_one_gets_the_session(
        stores: list[SQLAlchemyStore], database: Database) -> None:
    engines = [sqlalchemy.create_engine(database.url) for _ in range(3)]
    racers = backends(stores) + backends([SQLAlchemyStore(e) for e in engines])
    for round_ in range(3):
        won, refused = race(racers, f"race-{round_}")
        assert len(won) == 1 and refused == won * (len(racers) - 1), (won, refused)
    for engine in engines:
        engine.dispose()


def test_finish_stores_the_last_events_with_the_state_or_neither(
        stores: list[SQLAlchemyStore]) -> None:
    a, b, _ = backends(stores)
    a.create_run("r1", "s", "me", 60.0)
    a.set_running("r1", "me")
    a.append_events("r1", 0, ['{"type":"agent_start"}'])
    a.finish("r1", "someone else", "done", None, (1, ['{"type":"agent_end"}']))
    with b.watch("r1") as watch:
        assert watch.info().state == "running" and len(watch.read(-1)) == 1
    a.finish("r1", "me", "error", "it broke", (1, ['{"type":"agent_end"}']))
    with b.watch("r1") as watch:
        info = watch.info()
        assert (info.state, info.error_message) == ("error", "it broke")
        assert watch.read(-1) == [(0, '{"type":"agent_start"}'), (1, '{"type":"agent_end"}')]
        assert watch.read(1) == []


def test_take_run_between_executors_and_claim_lapsed_hands_each_run_to_one(
        stores: list[SQLAlchemyStore]) -> None:
    a, b, c = backends(stores)
    a.create_run("q", "s0", "queued:web", 60.0)
    assert a.take_run("q", "e1", 60.0).kind == "fresh"
    a.set_running("q", "e1")
    held = b.take_run("q", "e2", 60.0)
    assert held.kind == "held" and 50.0 < held.wait_s <= 60.0
    a.finish("q", "e1", "done", None)
    assert b.take_run("q", "e2", 60.0).kind == "final"
    assert b.take_run("no such run", "e2", 60.0).kind == "final"

    a.create_run("late", "s1", "queued:web", -1.0)  # nobody took it in time
    assert b.take_run("late", "e2", 60.0).kind == "final"
    late = a.info("late")
    assert late is not None and late.state == "lost" and "queue lease" in str(late.error_message)

    # executors that died: their runs' leases ran out
    lapsed = [f"lapsed-{i}" for i in range(6)]
    for i, run_id in enumerate(lapsed):
        a.create_run(run_id, f"s-{i + 2}", "queued:web", 60.0)
        assert a.take_run(run_id, "dead", -1.0).kind == "fresh"
        a.set_running(run_id, "dead")
        a.append_events(run_id, 0, ['{"type":"agent_start"}', '{"type":"turn_start"}'])
    results: list[list[tuple[str, str]]] = []
    barrier = threading.Barrier(2)

    def check(backend: SQLAlchemyRunBackend, name: str) -> None:
        barrier.wait(WAIT)
        results.append(backend.claim_lapsed(f"{RECOVERING}{name}", 60.0))

    threads = [threading.Thread(target=check, args=(backend, name))
               for backend, name in ((b, "b"), (c, "c"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SLOW_WAIT)
    claimed = sorted(run_id for result in results for run_id, _ in result)
    assert claimed == lapsed, results  # each once
    assert {session for result in results for _, session in result} == {
        f"s-{i + 2}" for i in range(6)}
    assert b.claim_lapsed(f"{RECOVERING}b", 60.0) == []  # held by the checkers now
    # a recovery's executor takes a run a checker holds at once, after its stored events
    take = a.take_run(lapsed[0], "e3", 60.0)
    assert (take.kind, take.next_seq) == ("recover", 2)
    assert b.take_run(lapsed[0], "e4", 60.0).kind == "held"


def test_purge_deletes_finished_runs_in_batches_never_a_live_one(
        stores: list[SQLAlchemyStore]) -> None:
    a, b, _ = backends(stores)
    ids = [f"old-{i:04d}" for i in range(1001)]  # three batches of 500
    with stores[0].engine.begin() as conn:
        conn.execute(insert(RUNS), [
            {"run_id": run_id, "session_id": f"s-{run_id}", "state": "done", "owner": "x",
             "lease_expires_at": 1.0, "created_at": 1.0, "ended_at": 2.0} for run_id in ids])
        conn.execute(insert(EVENTS), [{"run_id": run_id, "seq": 0, "data": "{}"}
                                      for run_id in ids])
        conn.execute(insert(CONTROL), [{"session_id": f"s-{run_id}", "run_id": run_id,
                                        "kind": "abort", "created_at": 1.0}
                                       for run_id in ids])
    a.create_run("live", "s-live", "me", 60.0)
    a.create_run("lapsed", "s-lapsed", "me", -1.0)  # reads lost, but has no end: kept
    a.create_run("recent", "s-recent", "me", 60.0)
    a.finish("recent", "me", "done", None)
    assert sorted(b.purge(3600.0)) == ids
    assert b.purge(3600.0) == []
    with stores[0].engine.connect() as conn:
        left = conn.execute(select(RUNS.c.run_id).order_by(RUNS.c.run_id)).scalars().all()
        assert left == ["lapsed", "live", "recent"]
        assert conn.execute(select(func.count()).select_from(EVENTS)).scalar() == 0
        assert conn.execute(select(func.count()).select_from(CONTROL)).scalar() == 0
    assert b.purge(0) == ["recent"]


def test_a_reader_wakes_at_once_in_this_process_and_by_polling_from_another(
        stores: list[SQLAlchemyStore]) -> None:
    a, b, _ = backends(stores)
    same = SQLAlchemyRunBackend(stores[0])  # another store object's backend, one engine
    a.create_run("r", "s", "me", 60.0)
    for reader in (a, same, b):
        with reader.watch("r") as watch:
            after = len(watch.read(-1)) - 1
            watch.info()
            assert watch.wait(0.05) is False  # nothing changed
            thread = threading.Thread(target=a.append_events,
                                      args=("r", after + 1, ['{"type":"turn_start"}']))
            thread.start()
            assert watch.wait(WAIT)
            thread.join(WAIT)
            assert [seq for seq, _ in watch.read(after)] == [after + 1]
    with b.watch("r") as watch:
        watch.info()
        a.finish("r", "me", "aborted", None)
        assert watch.wait(WAIT) and watch.info().state == "aborted"


def test_inbox_entries_in_order_claimed_once_and_given_back(
        stores: list[SQLAlchemyStore]) -> None:
    a, b, _ = backends(stores)
    woken = threading.Event()
    a.add_waker("s", woken.set)
    a.create_run("r", "s", "me", 60.0)
    b.send_control("s", None, "steer", "one")
    assert not woken.is_set()  # another engine: the run finds it by polling
    a.send_control("s", "r", "abort", None)
    assert woken.is_set()  # this one: at once
    a.remove_waker("s", woken.set)
    b.send_control("s", "other-run", "abort", "not for r")
    b.send_control("s", None, "follow_up", "two")
    got = a.claim_controls("s", "r")
    assert [(c.kind, c.payload) for c in got] == [("steer", "one"), ("abort", None),
                                                  ("follow_up", "two")]
    assert b.claim_controls("s", "r") == []
    b.release_controls([got[0].id])
    assert [c.payload for c in b.claim_controls("s", "r")] == ["one"]


# --- real processes ---------------------------------------------------------------------------

def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)


def run_worker(*args: str) -> None:
    done = subprocess.run([sys.executable, str(WORKER), *args], capture_output=True, env=ENV,
                          timeout=SLOW_WAIT, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")
def test_a_run_in_another_process_is_streamed_and_steered_here_and_aborted_from_a_third(
        database: Database, stores: list[SQLAlchemyStore]) -> None:
    session = f"s-{uuid.uuid4().hex[:8]}"
    proc = spawn("start", database.url, session, "30", "steer_abort")
    try:
        run_id = read_child_line(proc)
        runner = LocalRunner(stores[0], lambda sid: Agent())
        with pytest.raises(AgentBusyError):  # the child holds the session
            runner.start(session, "me too")
        events = []
        for item in runner.events(run_id, timeout=SLOW_WAIT):
            assert item is not None, f"no event for {SLOW_WAIT} s after {events[-1:]}"
            events.append(item)
            if item.type == "tool_execution_start" and item.event["toolName"] == "wait_for_steer":
                runner.steer(session, "steer from afar")
            if item.type == "tool_execution_start" and item.event["toolName"] == "wait_for_abort":
                run_worker("abort", database.url, run_id, "stop from afar")
        out, err = finish_child(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.splitlines()[-1] == "aborted", err
    assert events[0].type == "agent_start" and events[-1].type == "agent_end"
    assert [e.id for e in events] == [f"{i:010d}" for i in range(len(events))]
    info = runner.status(run_id)
    assert info.state == "aborted" and info.session_id == session
    users = [m.text for m in stores[1].load(session) if m.role == "user"]  # type: ignore[union-attr]
    assert users == ["go", "steer from afar"]
    ends = [e.event["result"]["content"][0]["text"] for e in events
            if e.type == "tool_execution_end"]
    assert ends == ["steered", "aborted"]
    assert list(runner.events(run_id, after=events[5].id)) == events[6:]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and SIGKILL")
def test_a_killed_process_loses_its_run_and_the_next_start_here_recovers_it(
        database: Database, stores: list[SQLAlchemyStore]) -> None:
    proc = spawn("start", database.url, "s1", "1", "hang")
    try:
        # the tool says "executing" on its own thread, maybe before start() returned and the
        # main thread said the run id: the two lines come in either order
        said = {read_child_line(proc), read_child_line(proc)}
        assert "executing" in said and len(said) == 2, said
        run_id = (said - {"executing"}).pop()
        watcher = LocalRunner(stores[1], lambda sid: Agent())
        for item in watcher.events(run_id, timeout=SLOW_WAIT):  # its tool's start is stored
            assert item is not None
            if item.type == "tool_execution_start":
                break
        os.kill(proc.pid, signals.SIGKILL)
        assert proc.wait(SLOW_WAIT) == -signals.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        finish_child(proc)

    scripted = ScriptedStreamFn([assistant_text("recovered"), assistant_text("and answered")])
    store = stores[0]
    runner = LocalRunner(store, lambda sid: Agent(model=scripted.model, stream_fn=scripted,
                                                  system_prompt="worker",
                                                  tools=build_tools([])))
    assert runner.wait(run_id, SLOW_WAIT), "the run never lost its lease"
    assert runner.status(run_id).state == "lost"
    stored = [e for e in runner.events(run_id, timeout=SLOW_WAIT)]
    assert None not in stored
    types = [e.type for e in stored if e is not None]
    assert types[0] == "agent_start" and "agent_end" not in types

    again = runner.start("s1", "are you there?")
    assert runner.wait(again, SLOW_WAIT) and runner.status(again).state == "done"
    lost = runner.status(run_id)
    assert lost.state == "lost" and lost.ended_at is not None
    messages = store.load("s1")
    assert [m.role for m in messages] == ["system", "user", "assistant", "toolResult",
                                          "assistant", "user", "assistant"]
    result = messages[3]
    assert isinstance(result, ToolResultMessage) and result.is_error
    assert isinstance(messages[4], AssistantMessage) and messages[4].text == "recovered"
    assert sorted(runner.purge(0)) == sorted([run_id, again])


@pytest.fixture(scope="module", params=DATABASES)
def steered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[SQLAlchemyStore, SenderProcess]]:
    for database in open_database(request.param, tmp_path_factory.mktemp("steer")):
        engine = sqlalchemy.create_engine(database.url)
        store = SQLAlchemyStore(engine)
        sender = SenderProcess(database.url, worker=WORKER)
        try:
            yield store, sender
        finally:
            sender.close()
            engine.dispose()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")
@pytest.mark.parametrize("attempt", range(10))
def test_steers_from_another_process_reach_their_poll_point(
        steered: tuple[SQLAlchemyStore, SenderProcess], attempt: int) -> None:
    store, sender = steered
    assert ThreeBatches(store).run(f"s{attempt}", sender.send) == expected_transcript()
