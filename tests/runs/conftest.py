"""What the runner tests share (``tests/runs/``). ``WAIT`` is the suite's (``tests/conftest.py``).

* ``store_fixture(*kinds)``: a ``store`` fixture over the named kinds ("memory", "sqlite",
  "postgres", ``SQLAlchemyStore`` on "sqlalchemy-sqlite", "sqlalchemy-postgresql",
  "sqlalchemy-mariadb", and ``DJANGO``: "django-sqlite", "django-postgresql",
  "django-mariadb", a ``DjangoStore`` on each database of tests/contrib/django_settings.py);
  a test file picks the stores its runner supports:
  ``store = store_fixture("sqlite", "postgres", *SQLALCHEMY, *DJANGO)``.
* ``echo``: a scripted response that answers ``echo <the last message's text>``.
* ``collect(runner, run_id)``: every event of a run up to its end (each read bounded).
* ``charge_and_look(ran)``: a ``replay="never"`` tool ``charge`` and a ``replay="safe"``
  tool ``look``; each appends its name to ``ran`` when it executes.
* ``WatchedAgent``: an ``Agent`` whose ``wait_queued(predicate)`` blocks until a steering or
  follow-up message handed to it makes ``predicate(agent)`` true (bounded; False if not).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from piagent import Agent, AgentBusyError, AgentTool, tool
from piagent.messages import AgentMessage
from piagent.runs import LocalRunner, RunEvent
from piagent.sessions import MemoryStore, PostgresStore, SessionStore, SQLiteStore
from piagent.testing import assistant_text

from ..conftest import SLOW_WAIT, WAIT, finish_child, read_child_line
from ..contrib.conftest import (
    DJANGO_ALIASES,
    clear_django_database,
    prepare_django_database,
    sqlalchemy_store,
)
from ..sessions.pg import drop_schema, postgres_dsn, unique_schema

SQLALCHEMY = ("sqlalchemy-sqlite", "sqlalchemy-postgresql", "sqlalchemy-mariadb")
DJANGO = ("django-sqlite", "django-postgresql", "django-mariadb")


def django_store(request: pytest.FixtureRequest, kind: str) -> Iterator[SessionStore]:
    """A ``DjangoStore`` on the kind's database (created and migrated once), emptied after."""
    alias = DJANGO_ALIASES[kind]
    prepare_django_database(alias)
    request.getfixturevalue("django_databases").append(alias)
    from piagent.contrib.django import DjangoStore

    clear_django_database(alias)
    yield DjangoStore(alias)
    clear_django_database(alias)


def store_fixture(*kinds: str) -> Any:
    """A ``store`` fixture, parametrised over ``kinds``; each store closed (and a PostgreSQL
    schema dropped) after its test."""

    @pytest.fixture(params=kinds)
    def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
        if request.param == "memory":
            yield MemoryStore()
        elif request.param.startswith("sqlalchemy-"):  # on a database of its own
            yield from sqlalchemy_store(request.param.removeprefix("sqlalchemy-"), tmp_path)
        elif request.param.startswith("django-"):
            yield from django_store(request, request.param.removeprefix("django-"))
        elif request.param == "postgres":
            dsn = postgres_dsn()
            schema = unique_schema()
            pg = PostgresStore(dsn, schema=schema, max_connections=8)
            yield pg
            pg.close()
            drop_schema(dsn, schema)
        else:
            with SQLiteStore(tmp_path / "runs.db") as sqlite:
                yield sqlite

    return store


def echo(context: Any, options: Any) -> Any:
    """A scripted response: ``echo <text of the last message>``."""
    return assistant_text(f"echo {getattr(context.messages[-1], 'text', '')}")


def collect(runner: Any, run_id: str, after: str | None = None) -> list[RunEvent]:
    """The run's events (after ``after``) until it ends; fails if it goes idle for ``WAIT``."""
    out = []
    for item in runner.events(run_id, after=after, timeout=WAIT):
        assert item is not None, "the run went idle for the whole bound"
        out.append(item)
    return out


def charge_and_look(ran: list[str]) -> tuple[AgentTool, AgentTool]:
    """``charge`` (never repeated) and ``look`` (safe to repeat), recording runs in ``ran``."""

    @tool(replay="never")
    def charge() -> str:
        """Charge a card."""
        ran.append("charge")
        return "charged"

    @tool(replay="safe")
    def look() -> str:
        """Look something up."""
        ran.append("look")
        return "looked"

    return charge, look


class WatchedAgent(Agent):
    """An ``Agent`` that wakes ``wait_queued`` each time a steering or follow-up message is
    queued on it (as a runner hands them over from its inbox)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._queued = threading.Condition()  # notified after each steer / follow_up

    def steer(self, message: str | AgentMessage) -> None:
        super().steer(message)
        with self._queued:
            self._queued.notify_all()

    def follow_up(self, message: str | AgentMessage) -> None:
        super().follow_up(message)
        with self._queued:
            self._queued.notify_all()

    def wait_queued(self, predicate: Callable[[Agent], bool], timeout: float = WAIT) -> bool:
        """Block until ``predicate(self)`` holds (True), or ``timeout`` seconds (False)."""
        with self._queued:
            return self._queued.wait_for(lambda: predicate(self), timeout)


def steered_and_aborted_elsewhere(store: SessionStore, db: str,
                                  spawn: Callable[..., Any], run_worker: Callable[..., None]
                                  ) -> tuple[LocalRunner, str, list[RunEvent]]:
    """``tests/runs/_worker.py`` starts a run of ``s1`` in a child process on ``db`` (its
    name of the store); this process streams it by id while other children steer it, then
    abort it. Checks what every store must show; the runner, the run's id and its events."""
    proc = spawn("start", db, "s1", "30", "steer_abort")
    try:
        run_id = read_child_line(proc)
        runner = LocalRunner(store, lambda sid: Agent())
        with pytest.raises(AgentBusyError):  # the child holds the session
            runner.start("s1", "me too")
        events = []
        for item in runner.events(run_id, timeout=SLOW_WAIT):
            assert item is not None, f"no event for {SLOW_WAIT} s after {events[-1:]}"
            events.append(item)
            if item.type == "tool_execution_start" and item.event["toolName"] == "wait_for_steer":
                run_worker("steer", db, "s1", "steer from afar")
            if item.type == "tool_execution_start" and item.event["toolName"] == "wait_for_abort":
                run_worker("abort", db, run_id, "stop from afar")
        out, err = finish_child(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.splitlines()[-1] == "aborted", err
    assert events[0].type == "agent_start" and events[-1].type == "agent_end"
    assert [e.id for e in events] == [f"{i:010d}" for i in range(len(events))]
    assert runner.wait(run_id, SLOW_WAIT)
    info = runner.status(run_id)
    assert info.state == "aborted" and info.session_id == "s1"
    users = [m.text for m in store.load("s1") if m.role == "user"]  # type: ignore[union-attr]
    assert users == ["go", "steer from afar"]
    ends = [e.event["result"]["content"][0]["text"] for e in events
            if e.type == "tool_execution_end"]
    assert ends == ["steered", "aborted"]
    # reconnecting mid-run: everything after an id, the same events
    assert list(runner.events(run_id, after=events[5].id)) == events[6:]
    return runner, run_id, events
